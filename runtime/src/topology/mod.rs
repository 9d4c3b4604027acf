//! The machine description: `topology.yaml` parsed (serde_yaml) into typed
//! structs, validated with errors that name the file, line and key path
//! (`topology.yaml:12: cube.pe_layout.pe_per_corner: expected a positive
//! integer of at most 65536, got -1`), the embedded default and the presets, and the
//! human summary `tlc topology` prints.

pub mod schema;
mod summary;

pub use schema::{Backpressure, SipTopology, Space};
pub use summary::{summary_json, summary_text};

use std::fmt;
use std::path::Path;

/// The default topology, embedded in the binary.
pub const DEFAULT_YAML: &str = include_str!("../../../stdlib/topologies/default.yaml");
const TINY_YAML: &str = include_str!("../../../stdlib/topologies/tiny.yaml");
const LARGE_YAML: &str = include_str!("../../../stdlib/topologies/large.yaml");

/// The presets by name.
pub const PRESETS: &[(&str, &str)] = &[("default", DEFAULT_YAML), ("tiny", TINY_YAML), ("large", LARGE_YAML)];

/// A topology file that could not be used.
pub type TopologyError = crate::yaml::YamlError;

/// The most PEs a topology may have: the simulator keeps state for each,
/// and PE counts are `u32` (with room for products of two of them).
pub const MAX_PES: u64 = 1 << 20;

/// A PE's structural coordinates (DESIGN §2): there is no flat global
/// PE index; a flat rank exists only inside a communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeCoord {
    pub sip: u32,
    pub cube: u32,
    pub pe: u32,
}

impl fmt::Display for PeCoord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(sip {}, cube {}, pe {})", self.sip, self.cube, self.pe)
    }
}

/// A validated topology with its derived quantities.
#[derive(Clone, Debug)]
pub struct Topology {
    pub spec: schema::File,
    /// Picoseconds per clock cycle (integer: time arithmetic never uses
    /// floating point).
    pub cycle_ps: u64,
}

impl Topology {
    /// Parses and validates `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Topology, TopologyError> {
        let spec: schema::File = crate::yaml::parse(file, text)?;
        let topo = Topology {
            cycle_ps: (1000.0 / spec.clock_ghz.0).round().max(1.0) as u64,
            spec,
        };
        topo.validate(file, text)?;
        Ok(topo)
    }

    /// Reads a topology file, or a preset name (`tiny`, `default`, `large`).
    pub fn load(path_or_preset: &str) -> Result<Topology, TopologyError> {
        if let Some((_, text)) = PRESETS.iter().find(|(n, _)| *n == path_or_preset) {
            return Topology::parse(&format!("<preset {path_or_preset}>"), text);
        }
        let presets = PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ");
        let text = crate::yaml::read(
            Path::new(path_or_preset),
            path_or_preset,
            &format!(" (presets: {presets})"),
        )?;
        Topology::parse(path_or_preset, &text)
    }

    /// The embedded default.
    pub fn default_machine() -> Topology {
        // The embedded default is checked by a test; failing here would be a
        // build defect, not a user error.
        Topology::parse("<default>", DEFAULT_YAML).expect("the embedded default topology is valid")
    }

    fn validate(&self, file: &str, text: &str) -> Result<(), TopologyError> {
        let s = &self.spec;
        let err = |path: &str, message: String| TopologyError::at(file, text, path, message);
        // First, so that every count below fits its integer.
        let [cw, ch] = s.sip.cube_grid;
        let factors = [
            ("system.sips", s.system.sips.0 as u128),
            ("sip.cube_grid", cw.0 as u128 * ch.0 as u128),
            (
                "cube.pe_layout.pe_per_corner",
                s.cube.pe_layout.corners.0 as u128 * s.cube.pe_layout.pe_per_corner.0 as u128,
            ),
        ];
        let pes: u128 = factors.iter().map(|f| f.1).product();
        if pes > MAX_PES as u128 {
            // The largest factor is the one to shrink.
            let path = factors.iter().max_by_key(|f| f.1).map_or("system.sips", |f| f.0);
            return Err(err(
                path,
                format!(
                    "the machine would have {pes} PEs (SIPs × cubes × PEs per cube); the simulator models at most {MAX_PES}"
                ),
            ));
        }
        let [w, h] = s.system.sip_grid;
        if w.0 * h.0 != s.system.sips.0 {
            return Err(err(
                "system.sip_grid",
                format!("{} × {} SIPs does not match `sips: {}`", w.0, h.0, s.system.sips.0),
            ));
        }
        if s.system.sip_topology == SipTopology::Ring && w.0 != 1 && h.0 != 1 {
            return Err(err(
                "system.sip_grid",
                "a ring of SIPs is a single row or column: use [n, 1]".into(),
            ));
        }
        // The fabric builds one router per corner on a 2×2 grid
        // (`fabric.rs`); another count would leave PEs on routers that do
        // not exist.
        if s.cube.pe_layout.corners.0 != 4 {
            return Err(err(
                "cube.pe_layout.corners",
                format!(
                    "a cube has 4 corners (its router mesh is 2×2), not {}; change `pe_per_corner` for more or fewer PEs",
                    s.cube.pe_layout.corners.0
                ),
            ));
        }
        if s.sip.io_chiplet_cube >= self.cubes_per_sip() as u64 {
            return Err(err(
                "sip.io_chiplet_cube",
                format!(
                    "cube {} does not exist (the SIP has {} cubes)",
                    s.sip.io_chiplet_cube,
                    self.cubes_per_sip()
                ),
            ));
        }
        // An unknown key first: a misspelt `defualt` is that, not a
        // missing `default`. Each is reported at its own key.
        const GEMM_DTYPES: [&str; 4] = ["f16", "bf16", "f32", "i8"];
        if let Some(k) =
            s.pe.gemm
                .cycles_per_tile
                .keys()
                .find(|k| !GEMM_DTYPES.contains(&k.as_str()))
        {
            return Err(err(
                &format!("pe.gemm.cycles_per_tile.{k}"),
                format!("`{k}` is not a GEMM operand dtype ({})", GEMM_DTYPES.join(", ")),
            ));
        }
        if let Some(dt) = GEMM_DTYPES
            .iter()
            .find(|dt| !s.pe.gemm.cycles_per_tile.contains_key(**dt))
        {
            return Err(err("pe.gemm.cycles_per_tile", format!("missing the cycles for `{dt}`")));
        }
        if let Some(k) = s.pe.math.op_cycles.keys().find(|k| !MATH_CLASSES.contains(&k.as_str())) {
            return Err(err(
                &format!("pe.math.op_cycles.{k}"),
                format!("`{k}` is not an operation class ({})", MATH_CLASSES.join(", ")),
            ));
        }
        if !s.pe.math.op_cycles.contains_key("default") {
            return Err(err(
                "pe.math.op_cycles",
                "missing `default` (the cycles of every operation not listed)".into(),
            ));
        }
        let q = &s.pe.ipcq;
        // The largest queue: across SIPs when that has more slots.
        let slots_bytes = q.slot_size_bytes.0 as u128 * q.max_slots() as u128;
        // One queue's slots in the memory they live in (a PE's TCM, its
        // cube's SRAM, its HBM slice).
        let (space_name, space_bytes) = match q.buffer_space {
            Space::Tcm => ("the TCM", s.pe.tcm.capacity_bytes.0),
            Space::Sram => ("the cube's SRAM", s.cube.sram.capacity_bytes.0),
            Space::Hbm => ("a PE's HBM slice", self.hbm_slice_bytes()),
        };
        if slots_bytes > space_bytes as u128 {
            return Err(err(
                "pe.ipcq",
                format!(
                    "the IPCQ slots ({} × {} bytes) do not fit in {space_name} ({space_bytes} bytes)",
                    q.max_slots(),
                    q.slot_size_bytes.0
                ),
            ));
        }
        // The bandwidth a channel is simulated at is the product: it has
        // the same floor as any bandwidth (1 byte/µs), or it would be
        // raised to it silently.
        let c = &s.pe.hbm_controller;
        let effective = c.channel_bandwidth_bytes_per_ns.0 * c.efficiency.0;
        if effective < 0.001 {
            return Err(err(
                "pe.hbm_controller.efficiency",
                format!(
                    "a channel of {} bytes/ns at this efficiency streams {effective:.3e} bytes/ns, below the \
                     simulator's 0.001 (1 byte/us)",
                    c.channel_bandwidth_bytes_per_ns.0
                ),
            ));
        }
        // Each PE owns an equal slice: a remainder would be HBM no address
        // reaches.
        let (hbm, pes) = (s.cube.hbm_capacity_bytes.0, self.pes_per_cube() as u64);
        if hbm < pes || hbm % pes != 0 {
            return Err(err(
                "cube.hbm_capacity_bytes",
                format!(
                    "{hbm} bytes do not split into {pes} equal PE slices (a multiple of {pes} bytes, at least {pes})"
                ),
            ));
        }
        // A slice interleaves over its controller's pseudo-channels: one
        // smaller than a round of them leaves channels no address maps to,
        // and the controller's bandwidth could never be reached.
        let round = c.interleave_bytes.0 as u128 * c.pseudo_channels.0 as u128;
        if ((hbm / pes) as u128) < round {
            return Err(err(
                "pe.hbm_controller.interleave_bytes",
                format!(
                    "a PE's HBM slice ({} bytes) is smaller than one interleave round ({} pseudo-channels × {} bytes)",
                    hbm / pes,
                    c.pseudo_channels.0,
                    c.interleave_bytes.0
                ),
            ));
        }
        Ok(())
    }

    pub fn sips(&self) -> u32 {
        self.spec.system.sips.0 as u32
    }

    pub fn cube_grid(&self) -> (u32, u32) {
        let [w, h] = self.spec.sip.cube_grid;
        (w.0 as u32, h.0 as u32)
    }

    pub fn cubes_per_sip(&self) -> u32 {
        let (w, h) = self.cube_grid();
        w * h
    }

    pub fn pes_per_cube(&self) -> u32 {
        (self.spec.cube.pe_layout.corners.0 * self.spec.cube.pe_layout.pe_per_corner.0) as u32
    }

    pub fn total_pes(&self) -> u64 {
        self.sips() as u64 * self.cubes_per_sip() as u64 * self.pes_per_cube() as u64
    }

    /// Every PE, in structural order (sip, cube, pe).
    pub fn all_pes(&self) -> Vec<PeCoord> {
        let mut v = Vec::with_capacity(self.total_pes() as usize);
        for sip in 0..self.sips() {
            for cube in 0..self.cubes_per_sip() {
                for pe in 0..self.pes_per_cube() {
                    v.push(PeCoord { sip, cube, pe });
                }
            }
        }
        v
    }

    /// The HBM each PE owns: its cube's capacity over the cube's PEs.
    pub fn hbm_slice_bytes(&self) -> u64 {
        self.spec.cube.hbm_capacity_bytes.0 / self.pes_per_cube() as u64
    }

    /// Converts nanoseconds to integer picoseconds.
    pub fn ns_to_ps(ns: f64) -> u64 {
        (ns * 1000.0).round() as u64
    }

    pub fn cycles_to_ps(&self, cycles: u64) -> u64 {
        cycles.saturating_mul(self.cycle_ps)
    }

    /// One PE's HBM slice bandwidth (pseudo-channels × bandwidth × efficiency).
    pub fn hbm_bandwidth_bytes_per_ns(&self) -> f64 {
        let c = &self.spec.pe.hbm_controller;
        c.pseudo_channels.0 as f64 * c.channel_bandwidth_bytes_per_ns.0 * c.efficiency.0
    }

    pub fn ucie_bandwidth_bytes_per_ns(&self) -> f64 {
        let u = &self.spec.sip.ucie;
        u.connections.0 as f64 * u.bandwidth_bytes_per_ns_per_connection.0
    }

    /// Peak GEMM flops per PE per ns for an operand dtype, at the cycle
    /// the simulator times with (`cycle_ps`, whole picoseconds), not the
    /// nominal `clock_ghz`: the peak a run can reach.
    pub fn gemm_flops_per_ns(&self, dtype: &str) -> f64 {
        let g = &self.spec.pe.gemm;
        let cycles = g.cycles_per_tile.get(dtype).map_or(1, |c| c.0) as f64;
        2.0 * (g.tile_m.0 * g.tile_n.0 * g.tile_k.0) as f64 * 1000.0 / (cycles * self.cycle_ps as f64)
    }

    /// The clock the simulator runs at: `1000 / cycle_ps` GHz, which
    /// differs from `clock_ghz` when 1000 / clock_ghz is not a whole
    /// number of picoseconds.
    pub fn effective_clock_ghz(&self) -> f64 {
        1000.0 / self.cycle_ps as f64
    }
}

/// MATH operation classes a topology may give costs for.
pub const MATH_CLASSES: &[&str] = &[
    "default", "div", "sqrt", "exp", "log", "sin", "cos", "reduce", "convert",
];

pub use crate::yaml::key_line;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_sized() {
        let d = Topology::default_machine();
        assert_eq!(
            (d.sips(), d.cubes_per_sip(), d.pes_per_cube(), d.total_pes()),
            (2, 16, 8, 256)
        );
        assert_eq!(d.cycle_ps, 1000);
        assert!((d.hbm_bandwidth_bytes_per_ns() - 204.8).abs() < 1e-9);
        let t = Topology::load("tiny").expect("tiny");
        assert_eq!(t.total_pes(), 4);
        let l = Topology::load("large").expect("large");
        assert!(l.total_pes() >= 4096);
    }

    #[test]
    fn errors_name_the_line_and_key_path() {
        let bad = DEFAULT_YAML.replace("pe_per_corner: 2", "pe_per_corner: -1");
        let e = Topology::parse("topology.yaml", &bad).expect_err("negative count");
        assert_eq!(e.path, "cube.pe_layout.pe_per_corner");
        assert_eq!(e.line, key_line(&bad, "cube.pe_layout.pe_per_corner"));
        assert!(
            e.message
                .contains("expected a positive integer of at most 65536, got -1"),
            "{e}"
        );
        assert!(e.to_string().starts_with("topology.yaml:"), "{e}");
        // An error at the end of the input is on the file's last line.
        let e = Topology::parse("c.yaml", "# only a comment\n").expect_err("empty");
        assert_eq!((e.line, e.message.as_str()), (Some(1), "missing field `name`"), "{e}");

        let missing = DEFAULT_YAML.replace(
            "  sip_grid: [2, 1]            # width × height of the SIP arrangement\n",
            "",
        );
        let e = Topology::parse("t.yaml", &missing).expect_err("missing dimension");
        assert!(e.message.contains("sip_grid"), "{e}");

        let mismatch = DEFAULT_YAML.replace("sip_grid: [2, 1]", "sip_grid: [3, 2]");
        let e = Topology::parse("t.yaml", &mismatch).expect_err("grid mismatch");
        assert_eq!(e.path, "system.sip_grid");
        let line = mismatch
            .lines()
            .position(|l| l.trim_start().starts_with("sip_grid:"))
            .map(|i| i + 1);
        assert_eq!(e.line, line);

        let corners = DEFAULT_YAML.replace("corners: 4", "corners: 8");
        let e = Topology::parse("t.yaml", &corners).expect_err("no router for corners 4-7");
        assert_eq!(e.path, "cube.pe_layout.corners");
        assert_eq!(e.line, key_line(&corners, "cube.pe_layout.corners"));
        assert!(e.message.contains("not 8"), "{e}");

        let unknown = DEFAULT_YAML.replace("  packet_bytes: 256", "  packet_bytes: 256\n  pakcet_bytes: 1");
        let e = Topology::parse("t.yaml", &unknown).expect_err("unknown key");
        assert!(e.message.contains("pakcet_bytes"), "{e}");
    }

    /// Numbers so large or small that a count, a product of counts or a
    /// time would overflow or round to nothing are errors at their key
    /// (they wrapped: 2³² PEs per cube became 0, a 10⁻¹⁷ GHz clock ran as
    /// fast as a 1 THz one).
    #[test]
    fn out_of_range_numbers_are_errors_at_their_key() {
        let cases = [
            (
                "pe_per_corner: 2",
                "pe_per_corner: 1073741824",
                "cube.pe_layout.pe_per_corner",
                "at most 65536",
            ),
            (
                "cube_grid: [4, 4]",
                "cube_grid: [100000, 100000]",
                "sip.cube_grid[0]",
                "at most 65536",
            ),
            (
                "cube_grid: [4, 4]",
                "cube_grid: [4096, 4096]",
                "sip.cube_grid",
                "at most 1048576",
            ),
            ("sips: 2", "sips: 4294967297", "system.sips", "at most 65536"),
            ("clock_ghz: 1.0", "clock_ghz: 1e-17", "clock_ghz", "from 0.001 to 1000, got 1e-17"),
            // Shown as written, not with its 301 digits.
            ("clock_ghz: 1.0", "clock_ghz: 1e300", "clock_ghz", "from 0.001 to 1000, got 1e300"),
            ("clock_ghz: 1.0", "clock_ghz: 5000", "clock_ghz", "from 0.001 to 1000"),
            (
                "hop_latency_ns: 2",
                "hop_latency_ns: 1e18",
                "cube.router.hop_latency_ns",
                "from 0 to 1000000000",
            ),
            (
                "dispatch_cycles: 1",
                "dispatch_cycles: 18446744073709551615",
                "pe.dispatch_cycles",
                "at most 1000000000",
            ),
            (
                "setup_cycles: 10",
                "setup_cycles: 18446744073709551615",
                "pe.dma.setup_cycles",
                "from 0 to 1000000000",
            ),
            (
                "channel_bandwidth_bytes_per_ns: 32",
                "channel_bandwidth_bytes_per_ns: 1e-9",
                "pe.hbm_controller.channel_bandwidth_bytes_per_ns",
                "from 0.001",
            ),
            (
                "slot_size_bytes: 4096",
                "slot_size_bytes: 281474976710656",
                "pe.ipcq",
                "do not fit in the TCM",
            ),
            (
                "hbm_capacity_bytes: 17179869184",
                "hbm_capacity_bytes: 17179869185",
                "cube.hbm_capacity_bytes",
                "17179869185 bytes do not split into 8 equal PE slices",
            ),
            (
                "interleave_bytes: 256",
                "interleave_bytes: 536870912",
                "pe.hbm_controller.interleave_bytes",
                "a PE's HBM slice (2147483648 bytes) is smaller than one interleave round (8 pseudo-channels × 536870912 bytes)",
            ),
            (
                "slot_size_bytes: 4096\n    buffer_space: tcm",
                "slot_size_bytes: 67108864\n    buffer_space: sram",
                "pe.ipcq",
                "the IPCQ slots (4 × 67108864 bytes) do not fit in the cube's SRAM (67108864 bytes)",
            ),
            (
                "efficiency: 0.8",
                "efficiency: 0.000000001",
                "pe.hbm_controller.efficiency",
                "streams 3.200e-8 bytes/ns, below the simulator's 0.001",
            ),
            (
                "hbm_capacity_bytes: 17179869184",
                "hbm_capacity_bytes: 2",
                "cube.hbm_capacity_bytes",
                "(a multiple of 8 bytes, at least 8)",
            ),
        ];
        for (from, to, path, says) in cases {
            let text = DEFAULT_YAML.replacen(from, to, 1);
            assert_ne!(text, DEFAULT_YAML, "`{from}` is in the default");
            let e = Topology::parse("t.yaml", &text).expect_err(to);
            assert_eq!(e.path, path, "{to}: {e}");
            assert!(e.message.contains(says), "{to}: {e}");
            let key = path.split('[').next().unwrap_or(path);
            assert_eq!(e.line, key_line(&text, key), "{to}: {e}");
        }
        // A misspelt key of a flow mapping is unknown, not the one it
        // misses; reported at its own path, on its mapping's line.
        for (from, to, path, says) in [
            (
                "{default: 1,",
                "{defualt: 1,",
                "pe.math.op_cycles.defualt",
                "`defualt` is not an operation class (default, div,",
            ),
            (
                "{f16: 32,",
                "{fp16: 32,",
                "pe.gemm.cycles_per_tile.fp16",
                "`fp16` is not a GEMM operand dtype (f16, bf16, f32, i8)",
            ),
        ] {
            let text = DEFAULT_YAML.replacen(from, to, 1);
            assert_ne!(text, DEFAULT_YAML, "`{from}` is in the default");
            let e = Topology::parse("t.yaml", &text).expect_err(to);
            assert_eq!((e.path.as_str(), e.message.contains(says)), (path, true), "{e}");
            let parent = &path[..path.rfind('.').unwrap_or(0)];
            assert_eq!(e.line, key_line(&text, parent), "{e}");
        }
        let text = DEFAULT_YAML.replacen("{default: 1, ", "{", 1);
        let e = Topology::parse("t.yaml", &text).expect_err("no default");
        assert_eq!(e.path, "pe.math.op_cycles", "{e}");
        assert!(e.message.starts_with("missing `default`"), "{e}");
        // At the bounds, the machine is valid and its times are exact.
        let slow = DEFAULT_YAML.replacen("clock_ghz: 1.0", "clock_ghz: 0.001", 1);
        assert_eq!(Topology::parse("t.yaml", &slow).expect("1 MHz").cycle_ps, 1_000_000);
        let fast = DEFAULT_YAML.replacen("clock_ghz: 1.0", "clock_ghz: 1000", 1);
        assert_eq!(Topology::parse("t.yaml", &fast).expect("1 THz").cycle_ps, 1);
    }

    /// The GEMM peak is at the clock the simulator times with: 700 GHz
    /// rounds to a 1 ps cycle, so the peak is that of 1000 GHz, not 43 %
    /// below it; the summary says so. 1 GHz is exact and says nothing.
    #[test]
    fn peaks_use_the_rounded_cycle() {
        let d = Topology::load("default").expect("default");
        let g = &d.spec.pe.gemm;
        let cycles = g.cycles_per_tile.get("f16").map_or(1, |c| c.0) as f64;
        let at_1ghz = 2.0 * (g.tile_m.0 * g.tile_n.0 * g.tile_k.0) as f64 / cycles;
        assert_eq!(d.gemm_flops_per_ns("f16"), at_1ghz);
        assert!(!super::summary_text(&d).contains("whole picoseconds"));
        let yaml = DEFAULT_YAML.replacen("clock_ghz: 1.0", "clock_ghz: 700", 1);
        let fast = Topology::parse("t.yaml", &yaml).expect("700 GHz");
        assert_eq!(fast.cycle_ps, 1);
        assert_eq!(fast.effective_clock_ghz(), 1000.0);
        assert_eq!(fast.gemm_flops_per_ns("f16"), at_1ghz * 1000.0);
        assert!(super::summary_text(&fast).contains("it runs at 1000.000 GHz"));
    }
}
