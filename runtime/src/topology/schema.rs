//! The `topology.yaml` schema: typed structs mirroring the file, with the
//! unit of every number in its key name. Deserialization rejects unknown
//! keys, missing keys (a missing dimension is an error, never a guess) and
//! out-of-range values, reporting the key path and line.

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// A strictly positive integer (counts, sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Positive(pub u64);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i128::deserialize(d)?;
        if v <= 0 || v > u64::MAX as i128 {
            return Err(serde::de::Error::custom(format!(
                "expected a positive integer, got {v}"
            )));
        }
        Ok(Positive(v as u64))
    }
}

/// A non-negative number (latencies, which may be 0).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct NonNegative(pub f64);

impl<'de> Deserialize<'de> for NonNegative {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v >= 0.0 && v.is_finite()) {
            return Err(serde::de::Error::custom(format!(
                "expected a non-negative number, got {v}"
            )));
        }
        Ok(NonNegative(v))
    }
}

/// A strictly positive number (bandwidths, clock).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct PositiveF(pub f64);

impl<'de> Deserialize<'de> for PositiveF {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v > 0.0 && v.is_finite()) {
            return Err(serde::de::Error::custom(format!("expected a positive number, got {v}")));
        }
        Ok(PositiveF(v))
    }
}

/// A fraction in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Fraction(pub f64);

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v > 0.0 && v <= 1.0) {
            return Err(serde::de::Error::custom(format!(
                "expected a fraction in (0, 1], got {v}"
            )));
        }
        Ok(Fraction(v))
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SipTopology {
    Ring,
    #[serde(rename = "torus_2d")]
    Torus2d,
    #[serde(rename = "mesh_2d")]
    Mesh2d,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Space {
    Tcm,
    Sram,
    Hbm,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Backpressure {
    Sleep,
    Poll,
}

/// A link class: bandwidth and latency.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub bandwidth_bytes_per_ns: PositiveF,
    pub latency_ns: NonNegative,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub name: String,
    pub clock_ghz: PositiveF,
    pub system: System,
    pub host: Host,
    pub sip: Sip,
    pub cube: Cube,
    pub pe: Pe,
    pub fabric: Fabric,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct System {
    pub sips: Positive,
    pub sip_topology: SipTopology,
    /// Width × height of the SIP arrangement; `w * h` must equal `sips`.
    pub sip_grid: [Positive; 2],
    pub sip_link: LinkSpec,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub pcie: LinkSpec,
    pub io_cpu_latency_ns: NonNegative,
    pub launch_overhead_ns: NonNegative,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sip {
    /// Width × height of the cube mesh.
    pub cube_grid: [Positive; 2],
    /// The cube the IO chiplet (host path) attaches to.
    pub io_chiplet_cube: u64,
    pub ucie: Ucie,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ucie {
    pub connections: Positive,
    pub bandwidth_bytes_per_ns_per_connection: PositiveF,
    pub latency_ns: NonNegative,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cube {
    pub pe_layout: PeLayout,
    pub router: Router,
    pub hbm_capacity_bytes: Positive,
    pub sram: Memory,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeLayout {
    pub corners: Positive,
    pub pe_per_corner: Positive,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Router {
    pub hop_latency_ns: NonNegative,
    pub link_bandwidth_bytes_per_ns: PositiveF,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub capacity_bytes: Positive,
    pub bandwidth_bytes_per_ns: PositiveF,
    pub latency_ns: NonNegative,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pe {
    pub dispatch_cycles: Positive,
    pub queue_depth: Positive,
    pub tcm: Tcm,
    pub hbm_controller: HbmController,
    pub dma: Dma,
    pub gemm: Gemm,
    pub math: Math,
    pub ipcq: Ipcq,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tcm {
    pub capacity_bytes: Positive,
    pub read_bandwidth_bytes_per_ns: PositiveF,
    pub write_bandwidth_bytes_per_ns: PositiveF,
    pub latency_ns: NonNegative,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HbmController {
    pub pseudo_channels: Positive,
    pub channel_bandwidth_bytes_per_ns: PositiveF,
    pub efficiency: Fraction,
    pub latency_ns: NonNegative,
    /// Bytes per pseudo-channel before the address moves to the next.
    pub interleave_bytes: Positive,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dma {
    pub setup_cycles: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gemm {
    pub tile_m: Positive,
    pub tile_n: Positive,
    pub tile_k: Positive,
    /// Cycles per tile, by operand dtype (`f16`, `bf16`, `f32`, `i8`).
    pub cycles_per_tile: BTreeMap<String, Positive>,
    pub pipeline_latency_cycles: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Math {
    pub lanes: Positive,
    /// Cycles per `lanes` elements, by operation class; `default` applies
    /// to every class not listed.
    pub op_cycles: BTreeMap<String, Positive>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ipcq {
    pub n_slots: Positive,
    pub slot_size_bytes: Positive,
    pub buffer_space: Space,
    pub backpressure: Backpressure,
    pub poll_interval_ns: PositiveF,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    pub packet_bytes: Positive,
}
