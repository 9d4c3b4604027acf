//! The `topology.yaml` schema: typed structs mirroring the file, with the
//! unit of every number in its key name. Deserialization rejects unknown
//! keys, missing keys (a missing dimension is an error, never a guess) and
//! out-of-range values, reporting the key path and line.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// A strictly positive integer no larger than `MAX`. The bound is part of
/// the type so that every product the simulator forms from topology
/// numbers (PEs × cubes × SIPs, slots × slot size, cycles × picoseconds per
/// cycle) fits its integer: a value past it is an error at its key, never a
/// wrapped count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Positive<const MAX: u64>(pub u64);

/// Counts of things (SIPs, cubes along an axis, PEs per corner, slots,
/// lanes, tile sides).
pub type Count = Positive<65_536>;
/// Sizes in bytes: capacities, slot and packet sizes (at most 256 TiB).
pub type Bytes = Positive<{ 1 << 48 }>;
/// A cost in cycles (at most 10⁹, a second at 1 GHz).
pub type Cycles = Positive<MAX_CYCLES>;
/// A cost in cycles that may be 0.
pub type CyclesOrZero = AtMost<MAX_CYCLES>;

const MAX_CYCLES: u64 = 1_000_000_000;

impl<const MAX: u64> Positive<MAX> {
    /// `v` when it is in range.
    pub fn new(v: u64) -> Option<Self> {
        (v > 0 && v <= MAX).then_some(Positive(v))
    }
}

impl<'de, const MAX: u64> Deserialize<'de> for Positive<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i128::deserialize(d)?;
        if v <= 0 || v > MAX as i128 {
            return Err(serde::de::Error::custom(format!(
                "expected a positive integer of at most {MAX}, got {v}"
            )));
        }
        Ok(Positive(v as u64))
    }
}

/// A non-negative integer no larger than `MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AtMost<const MAX: u64>(pub u64);

impl<'de, const MAX: u64> Deserialize<'de> for AtMost<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i128::deserialize(d)?;
        if v < 0 || v > MAX as i128 {
            return Err(serde::de::Error::custom(format!(
                "expected an integer from 0 to {MAX}, got {v}"
            )));
        }
        Ok(AtMost(v as u64))
    }
}

/// A finite number from `MIN_MILLI / 1000` to `MAX`. Time is integer
/// picoseconds and bandwidth integer bytes per microsecond, so the bounds
/// keep a conversion from rounding to 0 or overflowing: the smallest
/// bandwidth is 1 byte/µs, the smallest interval 1 ps, and every latency
/// and cost fits u64 picoseconds many times over.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Ranged<const MIN_MILLI: u64, const MAX: u64>(pub f64);

/// A latency (may be 0; at most a second).
pub type LatencyNs = Ranged<0, 1_000_000_000>;
/// A bandwidth, from 0.001 bytes/ns (1 MB/s; the simulator's resolution is
/// 1 byte/µs, to which a value is rounded) to 10⁶ bytes/ns (1 PB/s).
pub type BandwidthBytesPerNs = Ranged<1, 1_000_000>;
/// An interval of time, from 1 ps to a second.
pub type IntervalNs = Ranged<1, 1_000_000_000>;
/// A clock, from 1 MHz to 1 THz (a cycle of 1 ps).
pub type ClockGhz = Ranged<1, 1000>;

impl<'de, const MIN_MILLI: u64, const MAX: u64> Deserialize<'de> for Ranged<MIN_MILLI, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = number(d)?;
        let min = MIN_MILLI as f64 / 1000.0;
        if !(v >= min && v <= MAX as f64) {
            return Err(serde::de::Error::custom(format!(
                "expected a number from {min} to {MAX}, got {}",
                shown_number(v)
            )));
        }
        Ok(Ranged(v))
    }
}

/// A number as YAML writes one: a float, or an integer in any of YAML's
/// forms (`16`, `0x10`, `0o20`). serde_yaml's `f64` takes only decimal
/// integers and calls a hexadecimal one an integer that is not a number.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct Number;
    impl serde::de::Visitor<'_> for Number {
        type Value = f64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number")
        }
        fn visit_f64<E>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_i128<E>(self, v: i128) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u128<E>(self, v: u128) -> Result<f64, E> {
            Ok(v as f64)
        }
    }
    d.deserialize_any(Number)
}

/// `v` as a reader wrote it: Rust prints `1e300` with all its 301
/// digits, so a very large or very small number is shown in exponent form.
fn shown_number(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-6..1e15).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// A fraction in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Fraction(pub f64);

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = number(d)?;
        if !(v > 0.0 && v <= 1.0) {
            return Err(serde::de::Error::custom(format!(
                "expected a fraction in (0, 1], got {}",
                shown_number(v)
            )));
        }
        Ok(Fraction(v))
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SipTopology {
    Ring,
    #[serde(rename = "torus_2d")]
    Torus2d,
    #[serde(rename = "mesh_2d")]
    Mesh2d,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Space {
    Tcm,
    Sram,
    Hbm,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Backpressure {
    Sleep,
    Poll,
}

/// A link class: bandwidth and latency.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub bandwidth_bytes_per_ns: BandwidthBytesPerNs,
    pub latency_ns: LatencyNs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub name: String,
    pub clock_ghz: ClockGhz,
    pub system: System,
    pub host: Host,
    pub sip: Sip,
    pub cube: Cube,
    pub pe: Pe,
    pub fabric: Fabric,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct System {
    pub sips: Count,
    pub sip_topology: SipTopology,
    /// Width × height of the SIP arrangement; `w * h` must equal `sips`.
    pub sip_grid: [Count; 2],
    pub sip_link: LinkSpec,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub pcie: LinkSpec,
    pub io_cpu_latency_ns: LatencyNs,
    pub launch_overhead_ns: LatencyNs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Sip {
    /// Width × height of the cube mesh.
    pub cube_grid: [Count; 2],
    /// The cube the IO chiplet (host path) attaches to.
    pub io_chiplet_cube: u64,
    pub ucie: Ucie,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ucie {
    pub connections: Count,
    pub bandwidth_bytes_per_ns_per_connection: BandwidthBytesPerNs,
    pub latency_ns: LatencyNs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Cube {
    pub pe_layout: PeLayout,
    pub router: Router,
    pub hbm_capacity_bytes: Bytes,
    pub sram: Memory,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeLayout {
    pub corners: Count,
    pub pe_per_corner: Count,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Router {
    pub hop_latency_ns: LatencyNs,
    pub link_bandwidth_bytes_per_ns: BandwidthBytesPerNs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub capacity_bytes: Bytes,
    pub bandwidth_bytes_per_ns: BandwidthBytesPerNs,
    pub latency_ns: LatencyNs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Pe {
    pub dispatch_cycles: Cycles,
    pub queue_depth: Count,
    pub tcm: Tcm,
    pub hbm_controller: HbmController,
    pub dma: Dma,
    pub gemm: Gemm,
    pub math: Math,
    pub ipcq: Ipcq,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tcm {
    pub capacity_bytes: Bytes,
    pub read_bandwidth_bytes_per_ns: BandwidthBytesPerNs,
    pub write_bandwidth_bytes_per_ns: BandwidthBytesPerNs,
    pub latency_ns: LatencyNs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HbmController {
    pub pseudo_channels: Count,
    pub channel_bandwidth_bytes_per_ns: BandwidthBytesPerNs,
    pub efficiency: Fraction,
    pub latency_ns: LatencyNs,
    /// Bytes per pseudo-channel before the address moves to the next.
    pub interleave_bytes: Bytes,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Dma {
    pub setup_cycles: CyclesOrZero,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Gemm {
    pub tile_m: Count,
    pub tile_n: Count,
    pub tile_k: Count,
    /// Cycles per tile, by operand dtype (`f16`, `bf16`, `f32`, `i8`).
    pub cycles_per_tile: BTreeMap<String, Cycles>,
    pub pipeline_latency_cycles: CyclesOrZero,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Math {
    pub lanes: Count,
    /// Cycles per `lanes` elements, by operation class; `default` applies
    /// to every class not listed.
    pub op_cycles: BTreeMap<String, Cycles>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ipcq {
    pub n_slots: Count,
    /// The slots of a queue whose sender and receiver are on different
    /// SIPs, when not `n_slots`: its credits take a SIP link's round trip
    /// (about 1 µs) to come back, so it needs more slots in flight to
    /// keep the link busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_slots_across_sips: Option<Count>,
    pub slot_size_bytes: Bytes,
    pub buffer_space: Space,
    pub backpressure: Backpressure,
    pub poll_interval_ns: IntervalNs,
}

impl Ipcq {
    /// The slots of a queue from one PE to another, `across_sips` when
    /// they are on different SIPs.
    pub fn slots(&self, across_sips: bool) -> u64 {
        match self.n_slots_across_sips {
            Some(n) if across_sips => n.0,
            _ => self.n_slots.0,
        }
    }

    /// The most slots any queue has (what one queue may take).
    pub fn max_slots(&self) -> u64 {
        self.slots(true).max(self.slots(false))
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    pub packet_bytes: Bytes,
}
