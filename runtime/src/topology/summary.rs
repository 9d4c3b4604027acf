//! What `tlc topology` prints: counts, memories, engines, every link class
//! with bandwidth and latency, and the peak numbers a user compares
//! measured bandwidth and time against.

use super::{SipTopology, Topology};
use serde_json::json;

fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, name) in UNITS {
        if n >= u && n % (u / 1024).max(1) == 0 {
            let v = n as f64 / u as f64;
            return if v.fract() == 0.0 {
                format!("{v:.0} {name}")
            } else {
                format!("{v:.2} {name}")
            };
        }
    }
    format!("{n} B")
}

/// One row per link class the machine has, named as a run's summary
/// and `tlc probe` name them (`sim::LINK_CLASSES`): (name, bandwidth
/// GB/s, latency ns, what). A machine of one cube has no UCIe, one of one
/// SIP no SIP links.
fn link_classes(t: &Topology) -> Vec<(&'static str, f64, f64, String)> {
    let s = &t.spec;
    let c = &s.pe.hbm_controller;
    let mut rows = vec![
        (
            "pe<->router",
            s.cube.router.link_bandwidth_bytes_per_ns.0,
            s.cube.router.hop_latency_ns.0,
            "each PE to its router".into(),
        ),
        (
            "router mesh",
            s.cube.router.link_bandwidth_bytes_per_ns.0,
            s.cube.router.hop_latency_ns.0,
            "between routers inside a cube (XY)".into(),
        ),
        (
            "ucie",
            t.ucie_bandwidth_bytes_per_ns(),
            s.sip.ucie.latency_ns.0,
            format!(
                "cube to cube, {} connections × {} GB/s",
                s.sip.ucie.connections.0, s.sip.ucie.bandwidth_bytes_per_ns_per_connection.0
            ),
        ),
        (
            "sip link",
            s.system.sip_link.bandwidth_bytes_per_ns.0,
            s.system.sip_link.latency_ns.0,
            format!("SIP to SIP ({})", yaml_name(&s.system.sip_topology)),
        ),
        (
            "hbm channel",
            c.channel_bandwidth_bytes_per_ns.0 * c.efficiency.0,
            c.latency_ns.0,
            format!(
                "{} GB/s × {} efficiency; {} per PE slice, {:.1} GB/s together",
                c.channel_bandwidth_bytes_per_ns.0,
                c.efficiency.0,
                c.pseudo_channels.0,
                t.hbm_bandwidth_bytes_per_ns()
            ),
        ),
        (
            "sram port",
            s.cube.sram.bandwidth_bytes_per_ns.0,
            s.cube.sram.latency_ns.0,
            "per cube, shared".into(),
        ),
        (
            "tcm read",
            s.pe.tcm.read_bandwidth_bytes_per_ns.0,
            s.pe.tcm.latency_ns.0,
            "per PE".into(),
        ),
        (
            "tcm write",
            s.pe.tcm.write_bandwidth_bytes_per_ns.0,
            s.pe.tcm.latency_ns.0,
            "per PE".into(),
        ),
        (
            "pcie",
            s.host.pcie.bandwidth_bytes_per_ns.0,
            s.host.pcie.latency_ns.0,
            format!("host to IO chiplet at cube {}", s.sip.io_chiplet_cube),
        ),
    ];
    rows.retain(|(name, ..)| match *name {
        "ucie" => t.cubes_per_sip() > 1,
        "sip link" => t.sips() > 1,
        _ => true,
    });
    rows
}

/// A bandwidth in GB/s, or TB/s from 1000 GB/s up.
fn bandwidth(gbps: f64) -> String {
    if gbps >= 1000.0 {
        format!("{:.1} TB/s", gbps / 1000.0)
    } else {
        format!("{gbps:.1} GB/s")
    }
}

pub fn summary_text(t: &Topology) -> String {
    let s = &t.spec;
    let (w, h) = t.cube_grid();
    let mut o = String::new();
    let topo = match s.system.sip_topology {
        SipTopology::Ring => "ring",
        SipTopology::Torus2d => "2-D torus",
        SipTopology::Mesh2d => "2-D mesh",
    };
    o.push_str(&format!(
        "topology `{}` at {} GHz (1 cycle = {} ps)\n",
        s.name, s.clock_ghz.0, t.cycle_ps
    ));
    // Time is whole picoseconds: say so when the cycle is rounded enough
    // to move the peaks below (they use the cycle, as the simulator does).
    let effective = t.effective_clock_ghz();
    if (effective - s.clock_ghz.0).abs() > 1e-3 * s.clock_ghz.0 {
        o.push_str(&format!(
            "           (the simulator times whole picoseconds: it runs at {effective:.3} GHz, and the GEMM peaks below are at that clock)\n"
        ));
    }
    o.push('\n');
    o.push_str(&format!(
        "machine    {} SIP{} ({topo}, {}×{}) × {} cube{} ({w}×{h} mesh) × {} PEs ({} corners × {}) = {} PEs\n",
        t.sips(),
        if t.sips() == 1 { "" } else { "s" },
        s.system.sip_grid[0].0,
        s.system.sip_grid[1].0,
        t.cubes_per_sip(),
        if t.cubes_per_sip() == 1 { "" } else { "s" },
        t.pes_per_cube(),
        s.cube.pe_layout.corners.0,
        s.cube.pe_layout.pe_per_corner.0,
        t.total_pes()
    ));
    o.push_str("\nmemories\n");
    o.push_str(&format!(
        "  hbm   {} per cube ({} per PE slice), {:.1} GB/s per PE controller, {} ns; {} pseudo-channels, addresses interleaved every {}\n",
        bytes(s.cube.hbm_capacity_bytes.0),
        bytes(t.hbm_slice_bytes()),
        t.hbm_bandwidth_bytes_per_ns(),
        s.pe.hbm_controller.latency_ns.0,
        s.pe.hbm_controller.pseudo_channels.0,
        bytes(s.pe.hbm_controller.interleave_bytes.0)
    ));
    o.push_str(&format!(
        "  sram  {} per cube, {} GB/s, {} ns\n",
        bytes(s.cube.sram.capacity_bytes.0),
        s.cube.sram.bandwidth_bytes_per_ns.0,
        s.cube.sram.latency_ns.0
    ));
    o.push_str(&format!(
        "  tcm   {} per PE, {} GB/s read + {} GB/s write, {} ns\n",
        bytes(s.pe.tcm.capacity_bytes.0),
        s.pe.tcm.read_bandwidth_bytes_per_ns.0,
        s.pe.tcm.write_bandwidth_bytes_per_ns.0,
        s.pe.tcm.latency_ns.0
    ));
    o.push_str("\nengines (per PE)\n");
    let g = &s.pe.gemm;
    let per_dtype: Vec<String> = ["f16", "bf16", "f32", "i8"]
        .iter()
        .map(|d| {
            format!(
                "{d} {} cyc/tile = {:.0} GFLOP/s",
                g.cycles_per_tile.get(*d).map_or(0, |c| c.0),
                t.gemm_flops_per_ns(d)
            )
        })
        .collect();
    o.push_str(&format!(
        "  gemm  tile {}×{}×{}: {}\n",
        g.tile_m.0,
        g.tile_n.0,
        g.tile_k.0,
        per_dtype.join(", ")
    ));
    let ops: Vec<String> =
        s.pe.math
            .op_cycles
            .iter()
            .map(|(k, v)| format!("{k} {}", v.0))
            .collect();
    o.push_str(&format!(
        "  math  {} lanes; cycles per {} elements: {}\n",
        s.pe.math.lanes.0,
        s.pe.math.lanes.0,
        ops.join(", ")
    ));
    o.push_str(&format!(
        "  dma   {} setup cycles per transfer\n",
        s.pe.dma.setup_cycles.0
    ));
    o.push_str(&format!(
        "  issue {} dispatch cycle(s) per operation, engine queues {} deep\n",
        s.pe.dispatch_cycles.0, s.pe.queue_depth.0
    ));
    let q = &s.pe.ipcq;
    o.push_str(&format!(
        "  ipcq  {} slots{} × {} in {}, backpressure {}{}\n",
        q.n_slots.0,
        match q.n_slots_across_sips {
            Some(n) => format!(" ({} across SIPs)", n.0),
            None => String::new(),
        },
        bytes(q.slot_size_bytes.0),
        yaml_name(&q.buffer_space),
        yaml_name(&q.backpressure),
        match q.backpressure {
            crate::topology::schema::Backpressure::Poll => format!(" (every {} ns)", q.poll_interval_ns.0),
            crate::topology::schema::Backpressure::Sleep => String::new(),
        }
    ));
    o.push_str(&format!(
        "\nhost       a launch starts on all its PEs at once, PCIe {} ns + IO CPU {} ns + launch overhead {} ns + the NoC to its farthest PE after the host issues it; a copy pays the IO CPU's {} ns, then its route\n",
        s.host.pcie.latency_ns.0, s.host.io_cpu_latency_ns.0, s.host.launch_overhead_ns.0, s.host.io_cpu_latency_ns.0
    ));
    o.push_str(&format!("\nlinks (packets of {} bytes)\n", s.fabric.packet_bytes.0));
    o.push_str(&format!(
        "  {:<16} {:>10} {:>10}  {}\n",
        "class", "GB/s", "latency", "what"
    ));
    for (name, bw, lat, what) in link_classes(t) {
        o.push_str(&format!("  {name:<16} {bw:>10.1} {:>8} ns  {what}\n", lat));
    }
    let pes = t.total_pes() as f64;
    o.push_str("\npeaks\n");
    o.push_str(&format!(
        "  gemm f16   {:.1} TFLOP/s machine-wide ({:.0} GFLOP/s per PE)\n",
        t.gemm_flops_per_ns("f16") * pes / 1000.0,
        t.gemm_flops_per_ns("f16")
    ));
    o.push_str(&format!(
        "  hbm        {} machine-wide ({:.1} GB/s per PE)\n",
        bandwidth(t.hbm_bandwidth_bytes_per_ns() * pes),
        t.hbm_bandwidth_bytes_per_ns()
    ));
    if t.cubes_per_sip() > 1 {
        o.push_str(&format!(
            "  ucie       {} GB/s per cube-to-cube port\n",
            gbps(t.ucie_bandwidth_bytes_per_ns())
        ));
    }
    if t.sips() > 1 {
        o.push_str(&format!(
            "  sip link   {} GB/s per link\n",
            gbps(s.system.sip_link.bandwidth_bytes_per_ns.0)
        ));
    }
    o
}

/// A bandwidth as the links table gives it (one decimal), without a
/// trailing `.0`: 37.5 stays 37.5, not 38.
fn gbps(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

/// A topology keyword as the YAML spells it (`torus_2d`, `tcm`, `sleep`).
fn yaml_name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// The derived figures, and under `spec` the whole topology as its file
/// says it (every key, YAML spellings).
pub fn summary_json(t: &Topology) -> serde_json::Value {
    let s = &t.spec;
    let links: Vec<serde_json::Value> = link_classes(t)
        .into_iter()
        .map(|(n, bw, lat, what)| json!({"class": n, "bandwidth_bytes_per_ns": bw, "latency_ns": lat, "what": what}))
        .collect();
    json!({
        "name": s.name,
        "clock_ghz": s.clock_ghz.0,
        "cycle_ps": t.cycle_ps,
        "effective_clock_ghz": t.effective_clock_ghz(),
        "sips": t.sips(),
        "cubes_per_sip": t.cubes_per_sip(),
        "pes_per_cube": t.pes_per_cube(),
        "total_pes": t.total_pes(),
        "hbm_capacity_bytes_per_cube": s.cube.hbm_capacity_bytes.0,
        "sram_capacity_bytes_per_cube": s.cube.sram.capacity_bytes.0,
        "tcm_capacity_bytes_per_pe": s.pe.tcm.capacity_bytes.0,
        "gemm_flops_per_ns_per_pe": { "f16": t.gemm_flops_per_ns("f16"), "bf16": t.gemm_flops_per_ns("bf16"), "f32": t.gemm_flops_per_ns("f32"), "i8": t.gemm_flops_per_ns("i8") },
        "hbm_bytes_per_ns_per_pe": t.hbm_bandwidth_bytes_per_ns(),
        "links": links,
        "spec": serde_json::to_value(s).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON's `spec` is the whole file: read back (JSON is YAML) it
    /// is the same machine, key for key; and the text spells keywords
    /// as the YAML does.
    #[test]
    fn the_json_spec_is_the_whole_topology() {
        for (name, _) in crate::topology::PRESETS {
            let t = Topology::load(name).expect("preset");
            let spec = summary_json(&t)["spec"].to_string();
            let back = Topology::parse("spec.json", &spec).expect("the spec reads back");
            assert_eq!(summary_text(&back), summary_text(&t), "{name}");
            assert_eq!(summary_json(&back), summary_json(&t), "{name}");
        }
        let large = Topology::load("large").expect("large");
        let text = summary_text(&large);
        assert!(
            text.contains("SIP to SIP (torus_2d)") && text.contains("in tcm, backpressure sleep"),
            "{text}"
        );
        let v = summary_json(&large);
        assert_eq!(v["spec"]["system"]["sip_topology"], "torus_2d");
        assert_eq!(v["spec"]["pe"]["ipcq"]["poll_interval_ns"], 50.0);
    }

    /// Every key that sets a time or a rate appears in the text: the
    /// launch path, the HBM interleave, a polling interval; a bandwidth
    /// keeps its decimal in the peaks, as in the links table.
    #[test]
    fn the_text_names_the_host_path_and_keeps_decimals() {
        let y = crate::topology::DEFAULT_YAML
            .replace("backpressure: sleep", "backpressure: poll")
            .replacen("bandwidth_bytes_per_ns: 100\n", "bandwidth_bytes_per_ns: 37.5\n", 1);
        let t = Topology::parse("t.yaml", &y).expect("valid");
        let text = summary_text(&t);
        let s = &t.spec;
        for want in [
            format!(
                "IO CPU {} ns + launch overhead {} ns",
                s.host.io_cpu_latency_ns.0, s.host.launch_overhead_ns.0
            ),
            format!(
                "addresses interleaved every {}",
                bytes(s.pe.hbm_controller.interleave_bytes.0)
            ),
            format!("backpressure poll (every {} ns)", s.pe.ipcq.poll_interval_ns.0),
            "sip link   37.5 GB/s per link".to_string(),
        ] {
            assert!(text.contains(&want), "`{want}` missing from:\n{text}");
        }
        assert_eq!(gbps(100.0), "100");
        assert_eq!(gbps(37.5), "37.5");
    }
}
