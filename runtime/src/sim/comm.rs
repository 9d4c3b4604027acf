//! Communicators: which PEs a launch runs on, in which rank order, and
//! the 2-D layout `tl.NORTH`/`SOUTH`/`EAST`/`WEST` and `tl.mesh_id` see.
//!
//! **Rank order follows the physical layout**, so that `tl.NEXT` is a
//! near neighbour: inside a cube the PEs go round the corner routers
//! (corners 0, 1, 3, 2, both PEs of a corner in turn); the cubes of a SIP
//! follow a Hamiltonian cycle of the cube mesh that starts at the IO
//! chiplet's cube (when the mesh has an even side; otherwise a snake); the
//! SIPs follow their arrangement (a snake over the SIP grid). The
//! communicator's 2-D layout is `rows × cols` with `rows ≤ cols` as square
//! as the world size allows, rank `r` at row `r / cols`, column
//! `r % cols`; every row and column wraps around.

use crate::topology::{PeCoord, Topology};
use kernbench_compiler::sema::types::Direction;

#[derive(Clone, Debug)]
pub struct Communicator {
    /// PEs in rank order.
    pub pes: Vec<PeCoord>,
    /// Rows × columns of the 2-D layout.
    pub mesh: [u32; 2],
}

impl Communicator {
    pub fn new(pes: Vec<PeCoord>) -> Communicator {
        let mesh = mesh_dims(pes.len() as u32);
        Communicator { pes, mesh }
    }

    pub fn world(&self) -> u32 {
        self.pes.len() as u32
    }

    /// (row, column) of a rank in the 2-D layout.
    pub fn mesh_pos(&self, rank: u32) -> (u32, u32) {
        let cols = self.mesh[1].max(1);
        (rank / cols, rank % cols)
    }

    /// The rank a direction leads to from `rank`.
    pub fn peer(&self, rank: u32, dir: Direction) -> u32 {
        let world = self.world().max(1);
        let [rows, cols] = self.mesh;
        let (row, col) = self.mesh_pos(rank);
        match dir {
            Direction::Next => (rank + 1) % world,
            Direction::Prev => (rank + world - 1) % world,
            Direction::East => row * cols + (col + 1) % cols,
            Direction::West => row * cols + (col + cols - 1) % cols,
            Direction::South => ((row + 1) % rows) * cols + col,
            Direction::North => ((row + rows - 1) % rows) * cols + col,
        }
    }
}

/// Rows × columns (rows ≤ columns, as square as `world` allows).
pub fn mesh_dims(world: u32) -> [u32; 2] {
    let mut rows = (world.max(1) as f64).sqrt() as u32;
    while rows > 1 && world % rows != 0 {
        rows -= 1;
    }
    let rows = rows.max(1);
    [rows, world.max(1) / rows]
}

/// A cycle (or, when no cycle exists, a snake) over a `w × h` grid,
/// starting at (0, 0); each element is `y * w + x`.
fn grid_cycle(w: u32, h: u32) -> Vec<u32> {
    let at = |x: u32, y: u32| y * w + x;
    let mut out = Vec::with_capacity((w * h) as usize);
    if w == 1 || h == 1 {
        for y in 0..h {
            for x in 0..w {
                out.push(at(x, y));
            }
        }
    } else if h % 2 == 0 {
        // Along row 0, snake back over columns 1.. of the other rows, then
        // up column 0.
        for x in 0..w {
            out.push(at(x, 0));
        }
        for y in 1..h {
            if y % 2 == 1 {
                for x in (1..w).rev() {
                    out.push(at(x, y));
                }
            } else {
                for x in 1..w {
                    out.push(at(x, y));
                }
            }
        }
        for y in (1..h).rev() {
            out.push(at(0, y));
        }
    } else if w % 2 == 0 {
        // The same with rows and columns swapped.
        for c in grid_cycle(h, w) {
            let (x, y) = (c / h, c % h);
            out.push(at(x, y));
        }
    } else {
        for y in 0..h {
            if y % 2 == 0 {
                for x in 0..w {
                    out.push(at(x, y));
                }
            } else {
                for x in (0..w).rev() {
                    out.push(at(x, y));
                }
            }
        }
    }
    out
}

/// The PEs of one cube in ring order round its corners.
fn cube_ring(topo: &Topology, sip: u32, cube: u32) -> Vec<PeCoord> {
    let per = topo.spec.cube.pe_layout.pe_per_corner.0 as u32;
    let mut out = Vec::new();
    // Round the 2×2 router grid (a cube has 4 corners: the topology checks).
    for c in [0, 1, 3, 2] {
        for k in 0..per {
            out.push(PeCoord {
                sip,
                cube,
                pe: c * per + k,
            });
        }
    }
    out
}

/// The cubes of a SIP in ring order, starting at the IO chiplet's cube.
fn sip_cubes(topo: &Topology) -> Vec<u32> {
    let (w, h) = topo.cube_grid();
    let cycle = grid_cycle(w, h);
    let io = topo.spec.sip.io_chiplet_cube as u32;
    let start = cycle.iter().position(|c| *c == io).unwrap_or(0);
    cycle[start..].iter().chain(&cycle[..start]).copied().collect()
}

/// Every PE of the machine in ring order.
pub fn ring_order(topo: &Topology) -> Vec<PeCoord> {
    let [gw, gh] = topo.spec.system.sip_grid;
    let sips = grid_cycle(gw.0 as u32, gh.0 as u32);
    let cubes = sip_cubes(topo);
    let mut out = Vec::with_capacity(topo.total_pes() as usize);
    for sip in sips {
        for &cube in &cubes {
            out.extend(cube_ring(topo, sip, cube));
        }
    }
    out
}

/// The PEs of `--pes`: `1`, a count `N` (the first N in ring order),
/// `cube` (the first cube in ring order: the IO chiplet's cube of SIP 0),
/// `sip` (SIP 0), `all`, or a list
/// `SIP.CUBE.PE,…` in the order given.
pub fn select_pes(topo: &Topology, spec: &str) -> Result<Vec<PeCoord>, String> {
    let all = ring_order(topo);
    let spec = spec.trim();
    match spec {
        "all" => return Ok(all),
        "sip" => return Ok(all.into_iter().filter(|p| p.sip == 0).collect()),
        "cube" => {
            let first = all.first().copied().ok_or("the machine has no PEs")?;
            return Ok(cube_ring(topo, first.sip, first.cube));
        }
        _ => {}
    }
    // A count: digits only (one past u64 is still a count, and too many).
    if !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()) {
        return match spec.parse::<u64>() {
            Ok(n) if n >= 1 && n <= all.len() as u64 => Ok(all[..n as usize].to_vec()),
            _ => Err(format!(
                "--pes {spec}: a launch takes 1 to {} PEs on this machine",
                all.len()
            )),
        };
    }
    let mut out = Vec::new();
    for item in spec.split(',') {
        // Each coordinate is digits only (no sign, no space inside the
        // item); one too large for the machine, however large, is a PE
        // that does not exist.
        let coord = |part: &str| -> Option<u64> {
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u64>().unwrap_or(u64::MAX))
        };
        let nums: Option<Vec<u64>> = item.trim().split('.').map(coord).collect();
        let Some([sip, cube, pe]) = nums.as_deref().and_then(|n| <[u64; 3]>::try_from(n).ok()) else {
            return Err(format!(
                "--pes `{spec}`: expected 1, N, cube, sip, all or a list of SIP.CUBE.PE (e.g. 0.0.0,0.0.1)"
            ));
        };
        let (sips, cubes, pes) = (topo.sips(), topo.cubes_per_sip(), topo.pes_per_cube());
        if sip >= u64::from(sips) || cube >= u64::from(cubes) || pe >= u64::from(pes) {
            return Err(format!(
                "--pes: PE {} does not exist (the machine has {sips} SIPs × {cubes} cubes × {pes} PEs)",
                item.trim()
            ));
        }
        // In range of the machine's u32 counts, checked just above.
        let (sip, cube, pe) = (sip as u32, cube as u32, pe as u32);
        let c = PeCoord { sip, cube, pe };
        if out.contains(&c) {
            return Err(format!("--pes: PE {sip}.{cube}.{pe} is listed twice"));
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_cycles_visit_every_cell_with_neighbour_steps() {
        for (w, h) in [(4, 4), (2, 3), (3, 2), (4, 1), (1, 3), (3, 3), (6, 4)] {
            let c = grid_cycle(w, h);
            let mut seen = c.clone();
            seen.sort();
            assert_eq!(seen, (0..w * h).collect::<Vec<_>>(), "{w}x{h}");
            let dist = |a: u32, b: u32| (a % w).abs_diff(b % w) + (a / w).abs_diff(b / w);
            for p in c.windows(2) {
                assert_eq!(dist(p[0], p[1]), 1, "{w}x{h}: {c:?}");
            }
            if (w % 2 == 0 || h % 2 == 0) && w > 1 && h > 1 {
                assert_eq!(dist(c[0], *c.last().unwrap()), 1, "{w}x{h} closes");
            }
        }
    }

    #[test]
    fn default_ring_order_has_every_pe_once() {
        let topo = Topology::default_machine();
        let all = ring_order(&topo);
        assert_eq!(all.len(), 256);
        let mut s = all.clone();
        s.sort();
        s.dedup();
        assert_eq!(s.len(), 256);
        assert_eq!(all[0], PeCoord { sip: 0, cube: 0, pe: 0 });
        assert_eq!(select_pes(&topo, "cube").unwrap().len(), 8);
        assert_eq!(select_pes(&topo, "sip").unwrap().len(), 128);
        assert_eq!(select_pes(&topo, "7").unwrap().len(), 7);
        assert!(select_pes(&topo, "0.0.9").is_err());
        assert!(select_pes(&topo, "x").is_err());
        // Counts past the machine, even past u64, say how many it takes.
        for n in ["0", "257", "99999999999999999999"] {
            let e = select_pes(&topo, n).unwrap_err();
            assert_eq!(e, format!("--pes {n}: a launch takes 1 to 256 PEs on this machine"));
        }
        // Spaces around the items of a list are allowed.
        assert_eq!(select_pes(&topo, " 0.0.1, 0.0.0 ").unwrap().len(), 2);
        // Inside an item, digits only: no sign, no space.
        let usage = "expected 1, N, cube, sip, all or a list of SIP.CUBE.PE";
        for list in ["0.0.+1", "0 .0.0", "0.0.0 ,0. 0.1", "0.0.-1", "0..0", "0.0.0.0", "0.0"] {
            let e = select_pes(&topo, list).unwrap_err();
            assert!(e.contains(usage), "{list}: {e}");
        }
        // A coordinate past u32 (or u64) is a PE that does not exist.
        for (list, pe) in [
            ("0.0.4294967297", "4294967297"),
            ("0.0.99999999999999999999", "99999999999999999999"),
        ] {
            assert_eq!(
                select_pes(&topo, list).unwrap_err(),
                format!("--pes: PE 0.0.{pe} does not exist (the machine has 2 SIPs × 16 cubes × 8 PEs)")
            );
        }
    }

    #[test]
    fn directions() {
        let c = Communicator::new((0..6).map(|pe| PeCoord { sip: 0, cube: 0, pe }).collect());
        assert_eq!(c.mesh, [2, 3]);
        assert_eq!(c.peer(2, Direction::East), 0);
        assert_eq!(c.peer(0, Direction::West), 2);
        assert_eq!(c.peer(1, Direction::South), 4);
        assert_eq!(c.peer(4, Direction::South), 1);
        assert_eq!(c.peer(5, Direction::Next), 0);
        assert_eq!(c.peer(0, Direction::Prev), 5);
    }
}
