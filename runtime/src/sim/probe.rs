//! `tlc probe`: the predecessor's traffic probes on the fabric model.
//! Each case is a set of DMA transfers started together on an idle
//! machine; the report gives their makespan and mean latency, one path's
//! latency broken down by link class, and the effective bandwidth as a
//! share of one path's peak and of the aggregate peak of all the flows.
//!
//! The transfers go through the same [`Fabric`] reservations the simulator
//! times loads and stores with (plus the DMA engine's setup), so what a
//! probe shows is what a kernel sees.

use super::fabric::{Endpoint, Fabric, PathCost, LINK_CLASSES};
use crate::topology::{PeCoord, Topology};
use serde_json::json;
use std::collections::HashMap;

/// One transfer of a probe: data flows from `from` to `to`.
#[derive(Clone, Copy, Debug)]
pub struct Flow {
    pub from: Endpoint,
    pub to: Endpoint,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub name: &'static str,
    pub what: String,
    pub flows: Vec<Flow>,
}

#[derive(Clone, Debug)]
pub struct ProbeResult {
    pub name: &'static str,
    pub what: String,
    pub flows: usize,
    pub bytes_per_flow: u64,
    /// From the common start to the last byte of the last transfer.
    pub makespan_ps: u64,
    pub mean_latency_ps: u64,
    /// The first flow's path on an idle machine.
    pub path: PathCost,
    pub setup_ps: u64,
    /// Link classes the first flow's path crosses (the path `path` and
    /// the latency breakdown describe).
    pub classes: Vec<&'static str>,
    /// Link classes any flow crosses, in [`LINK_CLASSES`]'s order.
    pub all_classes: Vec<&'static str>,
    /// GB/s: all bytes over the makespan.
    pub effective_gbps: f64,
    /// One path's bottleneck bandwidth, GB/s.
    pub path_peak_gbps: f64,
    /// The flows' aggregate peak, GB/s (each link's bandwidth shared by
    /// the flows that cross it).
    pub aggregate_peak_gbps: f64,
}

fn pe(sip: u32, cube: u32, pe: u32) -> PeCoord {
    PeCoord { sip, cube, pe }
}

/// Every case [`cases`] may give, in its order, with what a topology needs
/// to have it (`None`: every topology has it). A case a topology lacks is
/// left out of `cases`; the CLI says which and why.
pub const CASE_NEEDS: [(&str, Option<&str>); 13] = [
    ("same-pe", None),
    ("same-cube-best", Some("more than one PE per cube")),
    ("same-cube-worst", Some("more than one PE per cube")),
    ("remote-cube-best", Some("more than one cube per SIP")),
    ("remote-cube-worst", Some("more than one cube per SIP")),
    ("remote-sip", Some("more than one SIP")),
    ("hbm-1-issuer", Some("at least 2 PEs per cube")),
    ("hbm-2-issuers", Some("at least 3 PEs per cube")),
    ("hbm-3-issuers", Some("at least 4 PEs per cube")),
    ("ucie-east", Some("a cube grid more than one cube wide")),
    ("hotspot", None),
    ("sip-own-slices", None),
    ("sip-one-slice", None),
];

/// What a topology needs to have case `name`: `Some(None)` for every
/// topology, `None` for no such case.
pub fn case_needs(name: &str) -> Option<Option<&'static str>> {
    CASE_NEEDS.iter().find(|(n, _)| *n == name).map(|(_, why)| *why)
}

/// Every probe case the topology has room for.
pub fn cases(topo: &Topology) -> Vec<Case> {
    let per_corner = topo.spec.cube.pe_layout.pe_per_corner.0 as u32;
    let pes = topo.pes_per_cube();
    let (w, h) = topo.cube_grid();
    let last_cube = w * h - 1;
    let corner_pe = |c: u32| (c * per_corner).min(pes - 1);
    let read = |from: PeCoord, by: PeCoord| Flow {
        from: Endpoint::Hbm(from),
        to: Endpoint::Core(by),
    };
    let me = pe(0, 0, 0);
    let mut v = vec![Case {
        name: "same-pe",
        what: "a PE reads its own HBM slice".into(),
        flows: vec![read(me, me)],
    }];
    if pes > 1 {
        // The nearest other PE: on the same corner router, or with one PE
        // per corner, on the next corner.
        let (best, what) = if per_corner > 1 {
            (1, "a PE reads the slice of a PE on its corner router")
        } else {
            (
                corner_pe(1),
                "a PE reads the slice of the PE on the next corner (one PE per corner)",
            )
        };
        v.push(Case {
            name: "same-cube-best",
            what: what.into(),
            flows: vec![read(pe(0, 0, best), me)],
        });
        v.push(Case {
            name: "same-cube-worst",
            what: "a PE reads the slice of a PE on the opposite corner".into(),
            flows: vec![read(pe(0, 0, corner_pe(3)), me)],
        });
    }
    if w * h > 1 {
        // East neighbour: leave cube 0 by corner 1, enter cube 1 at corner 0.
        let (next, by) = if w > 1 {
            (1, pe(0, 0, corner_pe(1)))
        } else {
            (w, pe(0, 0, corner_pe(2)))
        };
        v.push(Case {
            name: "remote-cube-best",
            what: format!("a PE reads the slice of a PE in the neighbouring cube {next}, next to the UCIe port"),
            flows: vec![read(pe(0, next, 0), by)],
        });
        v.push(Case {
            name: "remote-cube-worst",
            what: format!("a PE reads the slice of a PE in the farthest cube {last_cube}, opposite corner"),
            flows: vec![read(pe(0, last_cube, corner_pe(3)), me)],
        });
    }
    if topo.sips() > 1 {
        v.push(Case {
            name: "remote-sip",
            what: "a PE puts data into the HBM slice of the same PE of SIP 1".into(),
            flows: vec![Flow {
                from: Endpoint::Core(me),
                to: Endpoint::Hbm(pe(1, 0, 0)),
            }],
        });
    }
    for k in 1..=3u32.min(pes.saturating_sub(1)) {
        v.push(Case {
            name: ["hbm-1-issuer", "hbm-2-issuers", "hbm-3-issuers"][k as usize - 1],
            what: format!(
                "{k} PE{} of the cube read{} one PE's HBM slice",
                if k == 1 { "" } else { "s" },
                if k == 1 { "s" } else { "" }
            ),
            flows: (1..=k).map(|i| read(me, pe(0, 0, i))).collect(),
        });
    }
    if w > 1 {
        v.push(Case {
            name: "ucie-east",
            what: format!("all {pes} PEs of cube 0 write into the slices of cube 1 (east, one UCIe port)"),
            flows: (0..pes)
                .map(|i| Flow {
                    from: Endpoint::Core(pe(0, 0, i)),
                    to: Endpoint::Hbm(pe(0, 1, i)),
                })
                .collect(),
        });
    }
    v.push(Case {
        name: "hotspot",
        what: format!("all {pes} PEs of the cube read one PE's slice"),
        flows: (0..pes).map(|i| read(me, pe(0, 0, i))).collect(),
    });
    let sip0: Vec<PeCoord> = topo.all_pes().into_iter().filter(|p| p.sip == 0).collect();
    v.push(Case {
        name: "sip-own-slices",
        what: format!("every PE of SIP 0 ({}) reads its own slice", sip0.len()),
        flows: sip0.iter().map(|p| read(*p, *p)).collect(),
    });
    v.push(Case {
        name: "sip-one-slice",
        what: format!("every PE of SIP 0 ({}) reads PE (0,0,0)'s slice", sip0.len()),
        flows: sip0.iter().map(|p| read(me, *p)).collect(),
    });
    v
}

/// The most link crossings (flows × links on each one's route) a case may
/// have: its routes are held in memory together, a few dozen bytes per
/// crossing. The presets' largest case has about 10⁵; a SIP of a
/// 65536-cube line would have 10¹⁰.
pub const MAX_LINK_CROSSINGS: u64 = 20_000_000;

/// An upper bound of `case`'s link crossings, from the cube distance of
/// each flow (a few links per cube crossed, plus those inside the end
/// cubes), without routing it.
pub fn link_crossings_bound(topo: &Topology, case: &Case) -> u64 {
    let (w, _) = topo.cube_grid();
    let cube_of = |e: Endpoint| match e {
        Endpoint::Core(p) | Endpoint::Tcm(p) | Endpoint::Hbm(p) => (p.sip, p.cube),
        Endpoint::Sram { sip, cube } => (sip, cube),
    };
    case.flows
        .iter()
        .map(|f| {
            let ((s0, c0), (s1, c1)) = (cube_of(f.from), cube_of(f.to));
            let cubes = u64::from((c0 % w).abs_diff(c1 % w) + (c0 / w).abs_diff(c1 / w));
            // Another SIP: across it to its IO cube and back, at worst.
            let sips = if s0 == s1 {
                0
            } else {
                u64::from(topo.cubes_per_sip()) * 2 + u64::from(topo.sips())
            };
            4 * (cubes + sips) + 16
        })
        .fold(0u64, u64::saturating_add)
}

/// Runs one case with `bytes` per flow on an idle machine.
pub fn run_case(topo: &Topology, case: &Case, bytes: u64) -> ProbeResult {
    let mut f = Fabric::new(topo);
    let setup = topo.cycles_to_ps(topo.spec.pe.dma.setup_cycles.0);
    let channels = f.channels() as usize;
    // Every flow moves `bytes` contiguous bytes from an aligned address.
    let mut split = vec![0u64; channels];
    f.split_contiguous(0, bytes, &mut split);
    let routes: Vec<_> = case.flows.iter().map(|fl| f.route(fl.from, fl.to)).collect();
    let path = f.idle_cost(&routes[0], bytes, &split);
    let classes: Vec<&'static str> = {
        let mut c: Vec<&'static str> = f.route_links(&routes[0]).iter().map(|l| l.class_name()).collect();
        c.dedup();
        c
    };
    // How many flows cross each link, for the aggregate peak.
    let mut crossing: HashMap<super::LinkId, u64> = HashMap::new();
    let mut crossed = [false; LINK_CLASSES.len()];
    for r in &routes {
        let mut links = f.route_links(r);
        links.sort();
        links.dedup();
        for l in links {
            crossed[l.class()] = true;
            *crossing.entry(l).or_insert(0) += 1;
        }
    }
    let all_classes = (LINK_CLASSES.iter().zip(crossed))
        .filter(|(_, c)| *c)
        .map(|(name, _)| *name)
        .collect();
    let n = case.flows.len() as f64;
    let path_peak = path.bottleneck_bytes_per_us as f64 / 1000.0;
    // The aggregate peak: all flows at one rate r, no link over its
    // bandwidth. A link crossed by k flows, each putting a fraction of its
    // bytes on it (a pseudo-channel carries its share of the address
    // range), limits r to bw / (k × fraction).
    let mut rate = f64::INFINITY;
    for (l, k) in &crossing {
        let frac = match l {
            super::LinkId::HbmChannel { channel, .. } => split[*channel as usize] as f64 / bytes.max(1) as f64,
            _ => 1.0,
        };
        if frac == 0.0 {
            continue;
        }
        let bw = f
            .link_index_of(*l)
            .map_or(0.0, |i| f.links[i as usize].bw_bytes_per_us as f64 / 1000.0);
        rate = rate.min(bw / (*k as f64 * frac));
    }
    let aggregate = n * rate;
    let mut makespan = 0;
    let mut total_latency = 0;
    for r in &routes {
        let t = f.reserve(r, bytes, &split, setup);
        makespan = makespan.max(t.end_ps);
        total_latency += t.end_ps;
    }
    ProbeResult {
        name: case.name,
        what: case.what.clone(),
        flows: case.flows.len(),
        bytes_per_flow: bytes,
        makespan_ps: makespan,
        mean_latency_ps: total_latency / case.flows.len().max(1) as u64,
        path,
        setup_ps: setup,
        classes,
        all_classes,
        effective_gbps: n * bytes as f64 * 1000.0 / makespan.max(1) as f64,
        path_peak_gbps: path_peak,
        aggregate_peak_gbps: aggregate,
    }
}

fn ns(ps: u64) -> f64 {
    ps as f64 / 1000.0
}

/// The latency breakdown of a path as `class ns` pairs.
fn breakdown(r: &ProbeResult) -> Vec<(String, f64)> {
    let mut out = vec![("dma setup".to_string(), ns(r.setup_ps))];
    for (k, lat) in r.path.latency_by_class_ps.iter().enumerate() {
        if *lat > 0 {
            out.push((LINK_CLASSES[k].to_string(), ns(*lat)));
        }
    }
    out.push(("head packet".into(), ns(r.path.head_ps)));
    out.push(("streaming".into(), ns(r.path.stream_ps)));
    out
}

pub fn report_text(topo: &Topology, results: &[ProbeResult]) -> String {
    let mut o = format!(
        "probes on `{}` ({} bytes per transfer, packets of {} bytes, all transfers start together)\n\n",
        topo.spec.name,
        results.first().map_or(0, |r| r.bytes_per_flow),
        topo.spec.fabric.packet_bytes.0
    );
    o.push_str(&format!(
        "{:<18} {:>6} {:>13} {:>13} {:>9} {:>7} {:>7}\n",
        "case", "flows", "makespan ns", "latency ns", "GB/s", "%path", "%aggr"
    ));
    for r in results {
        o.push_str(&format!(
            "{:<18} {:>6} {:>13.1} {:>13.1} {:>9.1} {:>6.1}% {:>6.1}%\n",
            r.name,
            r.flows,
            ns(r.makespan_ps),
            ns(r.mean_latency_ps),
            r.effective_gbps,
            100.0 * r.effective_gbps / r.path_peak_gbps / r.flows as f64,
            100.0 * r.effective_gbps / r.aggregate_peak_gbps
        ));
    }
    o.push_str("\none path of each case, idle (ns)\n");
    for r in results {
        let parts: Vec<String> = breakdown(r).iter().map(|(c, v)| format!("{c} {v:.1}")).collect();
        o.push_str(&format!("  {:<18} {}\n", r.name, parts.join(", ")));
        o.push_str(&format!(
            "  {:<18} {}; path peak {:.1} GB/s, aggregate peak {:.1} GB/s\n",
            "", r.what, r.path_peak_gbps, r.aggregate_peak_gbps
        ));
    }
    o.push_str("\n%path: GB/s per flow as a share of one path's bottleneck; %aggr: all flows' GB/s as a share of their aggregate peak.\n");
    o
}

pub fn report_json(results: &[ProbeResult]) -> serde_json::Value {
    serde_json::Value::Array(
        results
            .iter()
            .map(|r| {
                let b: serde_json::Map<String, serde_json::Value> =
                    breakdown(r).into_iter().map(|(c, v)| (c, json!(v))).collect();
                json!({
                    "case": r.name, "what": r.what, "flows": r.flows, "bytes_per_flow": r.bytes_per_flow,
                    "makespan_ns": ns(r.makespan_ps), "mean_latency_ns": ns(r.mean_latency_ps),
                    "effective_gbps": r.effective_gbps, "path_peak_gbps": r.path_peak_gbps,
                    "aggregate_peak_gbps": r.aggregate_peak_gbps,
                    "pct_of_path_peak": 100.0 * r.effective_gbps / r.path_peak_gbps / r.flows as f64,
                    "pct_of_aggregate_peak": 100.0 * r.effective_gbps / r.aggregate_peak_gbps,
                    "link_classes": r.classes, "link_classes_all_flows": r.all_classes,
                    "breakdown_ns": b,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(topo: &Topology, name: &str, bytes: u64) -> ProbeResult {
        let c = cases(topo)
            .into_iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("case {name}"));
        run_case(topo, &c, bytes)
    }

    /// `CASE_NEEDS` lists the cases in `cases`' order: the default
    /// topology has every one, `tiny` (1 SIP, 1 cube, 4 PEs, one per
    /// corner) exactly those needing no more than it has.
    #[test]
    fn case_needs_names_every_case_in_order() {
        let names = |preset: &str| -> Vec<&'static str> {
            cases(&Topology::load(preset).expect("preset"))
                .iter()
                .map(|c| c.name)
                .collect()
        };
        let all: Vec<&str> = CASE_NEEDS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names("default"), all);
        let tiny_lacks = ["remote-cube-best", "remote-cube-worst", "remote-sip", "ucie-east"];
        let tiny: Vec<&str> = all.iter().copied().filter(|n| !tiny_lacks.contains(n)).collect();
        assert_eq!(names("tiny"), tiny);
        assert_eq!(case_needs("remote-sip"), Some(Some("more than one SIP")));
        assert_eq!(case_needs("hotspot"), Some(None));
        assert_eq!(case_needs("nowhere"), None);
    }

    /// One flow's path peak is its bottleneck link's bandwidth, which is
    /// also the aggregate peak, at any size (the peak is not derived from
    /// the serialization time, rounded to the picosecond). And
    /// `same-cube-best` reads the nearest other PE: on the same corner, or
    /// with one PE per corner (`tiny`), on the next one.
    #[test]
    fn one_flow_peaks_agree_and_cases_say_what_they_read() {
        for preset in ["default", "tiny"] {
            let t = Topology::load(preset).expect("preset");
            for c in cases(&t).into_iter().filter(|c| c.flows.len() == 1) {
                for bytes in [1, 3, 64, 1 << 20] {
                    let r = run_case(&t, &c, bytes);
                    assert!(
                        (r.path_peak_gbps - r.aggregate_peak_gbps).abs() < 1e-9 * r.path_peak_gbps,
                        "{preset} {} {bytes} B: path {} aggregate {}",
                        c.name,
                        r.path_peak_gbps,
                        r.aggregate_peak_gbps
                    );
                }
            }
        }
        let tiny = Topology::load("tiny").expect("tiny");
        let best = cases(&tiny)
            .into_iter()
            .find(|c| c.name == "same-cube-best")
            .expect("case");
        assert!(best.what.contains("next corner"), "{}", best.what);
        assert!(matches!(best.flows[0].from, Endpoint::Hbm(PeCoord { pe: 1, .. })));
        let default = cases(&Topology::default_machine());
        let best = default.iter().find(|c| c.name == "same-cube-best").expect("case");
        assert!(best.what.contains("its corner router"), "{}", best.what);
    }

    /// The crossing bound holds for every case of the presets (it is an
    /// upper bound) and stays far under the budget there; a SIP of a
    /// 65536-cube line is far past it, and is known without routing.
    #[test]
    fn the_crossing_bound_bounds_and_refuses_huge_cases() {
        for preset in ["default", "tiny", "large"] {
            let t = Topology::load(preset).expect("preset");
            let mut f = Fabric::new(&t);
            for c in cases(&t) {
                let bound = link_crossings_bound(&t, &c);
                let real: u64 = c
                    .flows
                    .iter()
                    .map(|fl| {
                        let r = f.route(fl.from, fl.to);
                        f.route_links(&r).len() as u64
                    })
                    .sum();
                assert!(real <= bound, "{preset} {}: {real} > {bound}", c.name);
                assert!(bound <= MAX_LINK_CROSSINGS / 10, "{preset} {}: {bound}", c.name);
            }
        }
        let line = crate::topology::DEFAULT_YAML
            .replacen("cube_grid: [4, 4]", "cube_grid: [65536, 1]", 1)
            .replacen("pe_per_corner: 2", "pe_per_corner: 1", 1);
        let t = Topology::parse("line.yaml", &line).expect("a valid machine");
        let one = cases(&t).into_iter().find(|c| c.name == "sip-one-slice").expect("case");
        assert!(link_crossings_bound(&t, &one) > MAX_LINK_CROSSINGS);
    }

    #[test]
    fn latency_grows_with_distance() {
        let t = Topology::default_machine();
        let order = [
            "same-pe",
            "same-cube-best",
            "same-cube-worst",
            "remote-cube-best",
            "remote-cube-worst",
            "remote-sip",
        ];
        let lat: Vec<u64> = order.iter().map(|n| result(&t, n, 64).makespan_ps).collect();
        for k in 1..lat.len() {
            assert!(
                lat[k] > lat[k - 1],
                "{} ({}) must be slower than {} ({})",
                order[k],
                lat[k],
                order[k - 1],
                lat[k - 1]
            );
        }
    }

    #[test]
    fn only_remote_paths_use_ucie_and_sip_links() {
        let t = Topology::default_machine();
        for n in [
            "same-pe",
            "same-cube-best",
            "same-cube-worst",
            "hbm-3-issuers",
            "hotspot",
        ] {
            assert!(!result(&t, n, 4096).all_classes.contains(&"ucie"), "{n}");
        }
        // Every flow's links count: the second reader of one slice
        // crosses the router mesh, which the first (its owner) does not.
        let two = result(&t, "hbm-2-issuers", 4096);
        assert!(!two.classes.contains(&"router mesh"), "{:?}", two.classes);
        assert!(two.all_classes.contains(&"router mesh"), "{:?}", two.all_classes);
        for n in ["remote-cube-best", "remote-cube-worst"] {
            let c = result(&t, n, 4096).classes;
            assert!(c.contains(&"ucie") && !c.contains(&"sip link"), "{n}: {c:?}");
        }
        assert!(result(&t, "remote-sip", 4096).classes.contains(&"sip link"));
    }

    #[test]
    fn congestion_grows_with_issuers() {
        let t = Topology::default_machine();
        let b = 1 << 16;
        let m: Vec<u64> = ["hbm-1-issuer", "hbm-2-issuers", "hbm-3-issuers", "hotspot"]
            .iter()
            .map(|n| result(&t, n, b).makespan_ps)
            .collect();
        assert!(m.windows(2).all(|w| w[1] > w[0]), "{m:?}");
        // Eight PEs on one slice cost more than three.
        assert!(m[3] as f64 > 2.0 * m[2] as f64, "{m:?}");
        // Every PE on its own slice runs in parallel; on one slice they queue.
        let own = result(&t, "sip-own-slices", b);
        let one = result(&t, "sip-one-slice", b);
        assert!(
            one.makespan_ps > 50 * own.makespan_ps / 2,
            "{} vs {}",
            one.makespan_ps,
            own.makespan_ps
        );
        assert!(own.effective_gbps / own.aggregate_peak_gbps > 0.5);
    }

    /// The streaming term of a lone transfer is `(flits − 1) · flit_bytes /
    /// bottleneck_bw` within 5 %, with the bottleneck taken here from the
    /// topology's link bandwidths along the route the case takes (§3 of
    /// docs/hardware-model.md), not from the fabric's `PathCost`:
    /// - `remote-cube-worst`: (0,0,0) reads the slice of PE 6 (corner 3)
    ///   of cube 15: that slice's pseudo-channels, router hops in the cubes
    ///   on the way, six UCIe ports (cube 15 → 12 west, then → 0 north) and
    ///   router→PE;
    /// - `same-cube-worst`: the slice of PE 6 of cube 0: its channels, two
    ///   router hops (corner 3 → 2 → 0) and router→PE;
    /// - `remote-sip`: (0,0,0) writes into the slice of (1,0,0): PE→router
    ///   (corner 0 of cube 0 is where the IO chiplet attaches, so no hop),
    ///   the SIP link 0→1, and that slice's channels (SIP 1's IO chiplet is
    ///   at its cube 0, corner 0).
    ///
    /// A slice streams at `pseudo_channels × channel_bw × efficiency` (the
    /// transfers are aligned and at least `interleave × channels` bytes,
    /// so every channel carries an equal share), a router link at
    /// `router.link_bandwidth`, a UCIe port at `connections ×
    /// per_connection`. On the default machine the slice is the bottleneck
    /// of the first two and the SIP link of the third; the variants make a
    /// UCIe port, the router links and the slice the bottleneck instead.
    #[test]
    fn a_lone_transfers_streaming_term_matches_the_flit_model() {
        let default = crate::topology::DEFAULT_YAML;
        let variant = |from: &str, to: &str| {
            assert_eq!(
                default.matches(from).count(),
                1,
                "`{from}` once in the default topology"
            );
            Topology::parse("variant.yaml", &default.replacen(from, to, 1)).expect("a valid variant")
        };
        let topologies = [
            Topology::default_machine(),
            variant("connections: 4\n", "connections: 1\n"),
            variant(
                "link_bandwidth_bytes_per_ns: 256\n",
                "link_bandwidth_bytes_per_ns: 64\n",
            ),
            variant(
                "channel_bandwidth_bytes_per_ns: 32\n",
                "channel_bandwidth_bytes_per_ns: 8\n",
            ),
        ];
        for t in &topologies {
            let s = &t.spec;
            let c = &s.pe.hbm_controller;
            let slice = c.pseudo_channels.0 as f64 * c.channel_bandwidth_bytes_per_ns.0 * c.efficiency.0;
            let router = s.cube.router.link_bandwidth_bytes_per_ns.0;
            let ucie = s.sip.ucie.connections.0 as f64 * s.sip.ucie.bandwidth_bytes_per_ns_per_connection.0;
            let sip_link = s.system.sip_link.bandwidth_bytes_per_ns.0;
            let flit = s.fabric.packet_bytes.0 as f64;
            for (case, bytes, bottleneck) in [
                ("remote-cube-worst", 1 << 20, slice.min(router).min(ucie)),
                ("same-cube-worst", 1 << 16, slice.min(router)),
                ("remote-sip", 1 << 18, router.min(sip_link).min(slice)),
            ] {
                let r = result(t, case, bytes);
                let flits = (bytes as f64 / flit).ceil();
                // Bytes over bytes per ns, in ps.
                let want = (flits - 1.0) * flit / bottleneck * 1000.0;
                let got = r.path.stream_ps as f64;
                assert!(
                    (got - want).abs() / want < 0.05,
                    "{case} ({bottleneck} B/ns bottleneck): streaming {got} ps, flit model {want} ps"
                );
            }
        }
    }
}
