//! `ccl.yaml`: the registry of collective algorithms. `defaults` picks the
//! algorithm of each collective (under `defaults.small`, the one for
//! buffers below a size, and under its own `small` for smaller ones still;
//! under `defaults.from_ranks` and `defaults.across_sips`, other choices
//! for large communicators and for ones that span SIPs) and the IPCQ
//! settings collectives run with;
//! `algorithms` maps a name to a `.tl` module (relative to the yaml file),
//! a kernel, a topology class (which decides the rank order of the PEs it
//! runs on), optional IPCQ overrides, constexprs, and an optional world
//! size. A user registry is merged over the stdlib's: its defaults
//! replace the stdlib's key by key, its algorithms are added (or replace
//! ones of the same name).
//!
//! Every entry is checked before use: its module must exist and compile,
//! its kernel must exist with the parameters its collective passes, and
//! its constexprs must be ones the kernel declares. A wrong entry is an
//! error naming the file, line and key path (`algorithms.my_ring.kernel`).

use super::{Collective, TopologyClass};
use crate::topology::schema::{Bytes, Count, IntervalNs, Ipcq};
use crate::topology::{key_line, Backpressure, PeCoord, Space, Topology};
use kernbench_compiler::sema::{self, DType, Elem, Konst};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A registry that could not be used.
pub type RegistryError = crate::yaml::YamlError;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultsFile {
    all_reduce: Option<String>,
    all_gather: Option<String>,
    reduce_scatter: Option<String>,
    broadcast: Option<String>,
    buffer_space: Option<Space>,
    backpressure: Option<Backpressure>,
    n_slots: Option<Count>,
    n_slots_across_sips: Option<Count>,
    slot_size_bytes: Option<Bytes>,
    packet_bytes: Option<Bytes>,
    poll_interval_ns: Option<IntervalNs>,
    small: Option<SmallFile>,
    #[serde(default)]
    from_ranks: BTreeMap<u32, ChoiceFile>,
    across_sips: Option<AcrossFile>,
}

/// `defaults.across_sips`: a level with levels by ranks of its own (what
/// wins across a SIP link depends on the ranks even more).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AcrossFile {
    all_reduce: Option<String>,
    all_gather: Option<String>,
    reduce_scatter: Option<String>,
    broadcast: Option<String>,
    small: Option<SmallFile>,
    #[serde(default)]
    from_ranks: BTreeMap<u32, ChoiceFile>,
}

/// `defaults.from_ranks.N` and `defaults.across_sips.from_ranks.N`:
/// algorithms that replace the plain defaults' for some communicators.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChoiceFile {
    all_reduce: Option<String>,
    all_gather: Option<String>,
    reduce_scatter: Option<String>,
    broadcast: Option<String>,
    small: Option<SmallFile>,
}

/// `defaults.small`: algorithms for buffers below a size, and inside that
/// band, optionally, a `small` of its own for smaller buffers still.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SmallFile {
    below_bytes: Bytes,
    all_reduce: Option<String>,
    all_gather: Option<String>,
    reduce_scatter: Option<String>,
    broadcast: Option<String>,
    small: Option<Box<SmallFile>>,
}

impl SmallFile {
    /// The first band (from the outermost in) whose `below_bytes` is not
    /// below its enclosing one's: its key path under `at` (a level's path)
    /// and the two sizes.
    fn misnested(&self, at: &str) -> Option<(String, u64, u64)> {
        let mut path = format!("{at}.small");
        let mut band = self;
        while let Some(inner) = &band.small {
            path.push_str(".small");
            if inner.below_bytes.0 >= band.below_bytes.0 {
                return Some((format!("{path}.below_bytes"), inner.below_bytes.0, band.below_bytes.0));
            }
            band = inner;
        }
        None
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlgorithmFile {
    collective: Collective,
    module: String,
    kernel: String,
    topology: TopologyClass,
    buffer_space: Option<Space>,
    backpressure: Option<Backpressure>,
    n_slots: Option<Count>,
    n_slots_across_sips: Option<Count>,
    slot_size_bytes: Option<Bytes>,
    packet_bytes: Option<Bytes>,
    poll_interval_ns: Option<IntervalNs>,
    #[serde(default)]
    constexprs: BTreeMap<String, serde_yaml::Value>,
    world_size: Option<Count>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    defaults: DefaultsFile,
    #[serde(default)]
    algorithms: BTreeMap<String, AlgorithmFile>,
}

/// One registered algorithm.
#[derive(Clone, Debug)]
pub struct Algorithm {
    pub name: String,
    pub collective: Collective,
    /// The `.tl` file.
    pub module: PathBuf,
    pub kernel: String,
    pub topology: TopologyClass,
    /// This algorithm's IPCQ and packet settings, over the registry's
    /// defaults (see [`Registry::ipcq`], [`Registry::packet_bytes`]).
    pub buffer_space: Option<Space>,
    pub backpressure: Option<Backpressure>,
    pub n_slots: Option<Count>,
    pub n_slots_across_sips: Option<Count>,
    pub slot_size_bytes: Option<Bytes>,
    pub packet_bytes: Option<Bytes>,
    pub poll_interval_ns: Option<IntervalNs>,
    pub constexprs: BTreeMap<String, Konst>,
    /// The line of each constexpr's key in `origin`'s file (for errors).
    constexpr_lines: BTreeMap<String, Option<usize>>,
    /// The lines of the `module` and `kernel` keys (for errors).
    module_line: Option<usize>,
    kernel_line: Option<usize>,
    /// The IPCQ and packet keys this entry sets, as written and where.
    settings: BTreeMap<&'static str, Written>,
    /// Run on this many PEs (the first of the PE set) instead of all.
    pub world_size: Option<u32>,
    /// Where the entry is defined (for errors).
    pub origin: (String, Option<usize>),
}

impl Algorithm {
    /// `file:line: algorithms.NAME.constexprs.KEY`, where constexpr `key`
    /// is bound (for errors about its value).
    fn constexpr_at(&self, key: &str) -> String {
        let line = self.constexpr_lines.get(key).copied().flatten();
        self.key_at(&format!("constexprs.{key}"), line)
    }

    /// `file:line: algorithms.NAME.PATH`, at `line` (or the entry's).
    fn key_at(&self, path: &str, line: Option<usize>) -> String {
        format!(
            "{}{}: algorithms.{}.{path}",
            self.origin.0,
            line.or(self.origin.1).map(|l| format!(":{l}")).unwrap_or_default(),
            self.name
        )
    }

    /// `file:line: algorithm `name``, the start of an error about it.
    pub(crate) fn entry(&self) -> String {
        format!(
            "{}{}: algorithm `{}`",
            self.origin.0,
            self.origin.1.map(|l| format!(":{l}")).unwrap_or_default(),
            self.name
        )
    }
}

/// An IPCQ or packet setting of the registry as its file has it: the
/// value, and `file:line: key.path` (what a run-time failure of an
/// algorithm points the user to).
#[derive(Clone, Debug)]
struct Written {
    value: String,
    at: String,
}

/// The IPCQ and packet keys a `defaults` or an `algorithms` entry may set,
/// in the order the files document them.
const SETTING_KEYS: [&str; 7] = [
    "buffer_space",
    "backpressure",
    "n_slots",
    "n_slots_across_sips",
    "slot_size_bytes",
    "poll_interval_ns",
    "packet_bytes",
];

/// The settings `$level` (a `DefaultsFile` or an `AlgorithmFile`, which
/// name them alike) gives, as written, in the order of [`SETTING_KEYS`].
macro_rules! settings_of {
    ($level:expr) => {{
        fn shown<T: serde::Serialize>(v: &T) -> String {
            serde_yaml::to_string(v)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        }
        let l = &$level;
        [
            l.buffer_space.as_ref().map(shown),
            l.backpressure.as_ref().map(shown),
            l.n_slots.as_ref().map(shown),
            l.n_slots_across_sips.as_ref().map(shown),
            l.slot_size_bytes.as_ref().map(shown),
            l.poll_interval_ns.as_ref().map(shown),
            l.packet_bytes.as_ref().map(shown),
        ]
    }};
}

/// Where each setting of `values` (in the order of [`SETTING_KEYS`]) is
/// written: in `file`, under `at`.
fn written(file: &str, text: &str, at: &str, values: [Option<String>; 7]) -> BTreeMap<&'static str, Written> {
    (SETTING_KEYS.into_iter().zip(values))
        .filter_map(|(key, value)| {
            let value = value?;
            let path = format!("{at}.{key}");
            let line = crate::yaml::key_or_parent_line(text, &path);
            let at = format!("{file}{}: {path}", line.map(|l| format!(":{l}")).unwrap_or_default());
            Some((key, Written { value, at }))
        })
        .collect()
}

/// One level of `defaults`: an algorithm per collective, and others for
/// buffers (bytes per rank) below the sizes of its `small` bands (NCCL
/// picks its algorithm by size the same way).
#[derive(Clone, Debug, Default)]
pub struct Choice {
    pub algorithm: BTreeMap<Collective, String>,
    /// Narrowest first: for a size, the first band it is below that names
    /// the collective decides.
    pub small: Vec<Band>,
}

/// A `small` band of a level: algorithms for buffers below `below_bytes`.
#[derive(Clone, Debug)]
pub struct Band {
    pub below_bytes: u64,
    pub algorithm: BTreeMap<Collective, String>,
    /// How deep in its file's `small` nesting the band was (0: the level's
    /// own `small`), for its key path in errors.
    depth: usize,
}

impl From<ChoiceFile> for Choice {
    /// What one file's level names.
    fn from(c: ChoiceFile) -> Choice {
        let mut level = Choice::default();
        choose(
            &mut level.algorithm,
            [c.all_reduce, c.all_gather, c.reduce_scatter, c.broadcast],
        );
        let mut next = c.small;
        while let Some(small) = next {
            let mut band = Band {
                below_bytes: small.below_bytes.0,
                algorithm: BTreeMap::new(),
                depth: level.small.len(),
            };
            choose(
                &mut band.algorithm,
                [
                    small.all_reduce,
                    small.all_gather,
                    small.reduce_scatter,
                    small.broadcast,
                ],
            );
            level.small.push(band);
            next = small.small.map(|b| *b);
        }
        level.small.sort_by_key(|b| b.below_bytes);
        level
    }
}

impl Choice {
    /// Merges a later file's level over this one, key by key: a collective
    /// the later level's `small` bands name has those bands here, and no
    /// earlier ones.
    fn merge(&mut self, later: Choice) {
        self.algorithm.extend(later.algorithm);
        let named: Vec<Collective> = later.small.iter().flat_map(|b| b.algorithm.keys().copied()).collect();
        self.forget_small(&named);
        self.small.extend(later.small);
        self.small.sort_by_key(|b| b.below_bytes);
    }

    /// Drops collectives `cs` from every band (and bands left empty).
    fn forget_small(&mut self, cs: &[Collective]) {
        for band in &mut self.small {
            band.algorithm.retain(|c, _| !cs.contains(c));
        }
        self.small.retain(|b| !b.algorithm.is_empty());
    }

    /// What this level picks for `c` on `bytes` per rank, if anything.
    fn pick(&self, c: Collective, bytes: u64) -> Option<&str> {
        (self.small.iter())
            .filter(|b| bytes < b.below_bytes)
            .find_map(|b| b.algorithm.get(&c))
            .or_else(|| self.algorithm.get(&c))
            .map(String::as_str)
    }

    /// Every name this level gives, with its key path under `at`.
    fn named<'a>(&'a self, at: &'a str) -> impl Iterator<Item = (String, Collective, &'a String)> + 'a {
        let plain = self
            .algorithm
            .iter()
            .map(move |(c, a)| (format!("{at}.{}", c.key()), *c, a));
        let small = self.small.iter().flat_map(move |b| {
            let path = format!("{at}{}", ".small".repeat(b.depth + 1));
            (b.algorithm.iter()).map(move |(c, a)| (format!("{path}.{}", c.key()), *c, a))
        });
        plain.chain(small)
    }
}

/// What decides a communicator's default algorithms besides the size:
/// how many ranks it has, and over how many SIPs they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct World {
    pub ranks: u32,
    pub sips: u32,
}

impl World {
    /// The communicator of the PEs `pes`.
    pub fn of(pes: &[PeCoord]) -> World {
        let sips: std::collections::BTreeSet<u32> = pes.iter().map(|p| p.sip).collect();
        World {
            ranks: pes.len() as u32,
            sips: sips.len() as u32,
        }
    }
}

/// The algorithms and IPCQ settings collectives run with by default.
#[derive(Clone, Debug, Default)]
pub struct Defaults {
    /// The plain defaults (the top level of `defaults`).
    pub plain: Choice,
    /// `from_ranks.N`: communicators of at least N ranks; the largest N a
    /// communicator reaches comes first, then smaller ones, then `plain`.
    pub from_ranks: BTreeMap<u32, Choice>,
    /// Communicators over more than one SIP: before every other level
    /// (a SIP link's latency changes what wins most), after its own
    /// `from_ranks` (`across_sips_from_ranks`).
    pub across_sips: Choice,
    pub across_sips_from_ranks: BTreeMap<u32, Choice>,
    pub buffer_space: Option<Space>,
    pub backpressure: Option<Backpressure>,
    pub n_slots: Option<Count>,
    pub n_slots_across_sips: Option<Count>,
    pub slot_size_bytes: Option<Bytes>,
    pub packet_bytes: Option<Bytes>,
    pub poll_interval_ns: Option<IntervalNs>,
    /// Where the settings above are written (the latest file's).
    settings: BTreeMap<&'static str, Written>,
}

#[derive(Clone, Debug, Default)]
pub struct Registry {
    pub defaults: Defaults,
    pub algorithms: BTreeMap<String, Algorithm>,
    /// Where `from reduce_ops import …` finds the stdlib's modules.
    pub stdlib_root: Option<PathBuf>,
}

/// Records the algorithm a file names for each collective, given in the
/// order all_reduce, all_gather, reduce_scatter, broadcast.
fn choose(into: &mut BTreeMap<Collective, String>, names: [Option<String>; 4]) {
    let collectives = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
    ];
    for (c, a) in collectives.into_iter().zip(names) {
        if let Some(a) = a {
            into.insert(c, a);
        }
    }
}

/// The keys of `defaults.from_ranks` and `defaults.across_sips.from_ranks`
/// are numbers of ranks, at least 1: the error about one that is not, at
/// its own key.
fn bad_rank_key(file: &str, text: &str, at: &str, shown: &str) -> RegistryError {
    RegistryError::at(
        file,
        text,
        &format!("{at}.{shown}"),
        format!(
            "a level's key is a number of ranks, at least 1 (communicators of at least that many ranks), not `{shown}`"
        ),
    )
}

/// The first `from_ranks` key of `text` that is not a number of ranks.
/// For the error path of the typed parse only, which cannot name a key it
/// could not read (`defaults.from_ranks.?`): the text has passed that
/// parse's guards (nesting depth) by then, and is read again only here.
fn first_bad_rank_key(file: &str, text: &str) -> Option<RegistryError> {
    let doc = serde_yaml::from_str::<serde_yaml::Value>(text).ok()?;
    let defaults = doc.get("defaults");
    let levels = [
        ("defaults.from_ranks", defaults.and_then(|d| d.get("from_ranks"))),
        (
            "defaults.across_sips.from_ranks",
            defaults
                .and_then(|d| d.get("across_sips"))
                .and_then(|a| a.get("from_ranks")),
        ),
    ];
    for (at, level) in levels {
        let Some(serde_yaml::Value::Mapping(m)) = level else {
            continue;
        };
        for key in m.keys() {
            if !key.as_u64().is_some_and(|n| (1..=u64::from(u32::MAX)).contains(&n)) {
                let shown = match key {
                    serde_yaml::Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
                };
                return Some(bad_rank_key(file, text, at, &shown));
            }
        }
    }
    None
}

/// What kind of value a constexpr holds, for messages.
fn kind_of(k: &Konst) -> &'static str {
    match k {
        Konst::Int(_) => "an integer",
        Konst::Float(_) => "a float",
        Konst::Bool(_) => "a boolean",
        Konst::DType(_) => "a dtype",
        Konst::Str(_) => "a string",
        Konst::None => "None",
        Konst::Tuple(_) => "a tuple",
        Konst::Direction(_) => "a direction",
    }
}

/// Whether `value` may replace a constexpr whose default is `default`: the
/// same kind, or an integer for a float.
fn same_kind(value: &Konst, default: &Konst) -> bool {
    matches!((value, default), (Konst::Int(_), Konst::Float(_)))
        || std::mem::discriminant(value) == std::mem::discriminant(default)
}

fn konst_of(v: &serde_yaml::Value) -> Option<Konst> {
    Some(match v {
        serde_yaml::Value::Bool(b) => Konst::Bool(*b),
        serde_yaml::Value::Number(n) => match n.as_i64() {
            Some(i) => Konst::Int(i),
            None => Konst::Float(n.as_f64()?),
        },
        serde_yaml::Value::String(s) => Konst::parse_define(s),
        _ => return None,
    })
}

impl Registry {
    /// The stdlib's registry (`STDLIB/ccl/ccl.yaml`).
    pub fn stdlib(stdlib_root: &Path) -> Result<Registry, RegistryError> {
        let mut r = Registry {
            stdlib_root: Some(stdlib_root.to_path_buf()),
            ..Registry::default()
        };
        r.merge_file(&stdlib_root.join("ccl").join("ccl.yaml"))?;
        Ok(r)
    }

    /// Reads `path` and merges it over this registry.
    pub fn merge_file(&mut self, path: &Path) -> Result<(), RegistryError> {
        let name = path.display().to_string();
        let text = crate::yaml::read(path, &name, "")?;
        self.merge_text(&name, path.parent().unwrap_or(Path::new(".")), &text)
    }

    /// Merges the registry `text` (named `file`, modules relative to `dir`).
    pub fn merge_text(&mut self, file: &str, dir: &Path, text: &str) -> Result<(), RegistryError> {
        let parsed: File = crate::yaml::parse(file, text).map_err(|e| match e.path.contains("from_ranks") {
            true => first_bad_rank_key(file, text).unwrap_or(e),
            false => e,
        })?;
        let err = |path: String, message: String| RegistryError::at(file, text, &path, message);
        let d = parsed.defaults;
        // Keys that parsed as u32: 0 is no number of ranks either.
        let rank_levels = [
            ("defaults.from_ranks", Some(&d.from_ranks)),
            (
                "defaults.across_sips.from_ranks",
                d.across_sips.as_ref().map(|a| &a.from_ranks),
            ),
        ];
        for (at, levels) in rank_levels {
            if levels.is_some_and(|l| l.contains_key(&0)) {
                return Err(bad_rank_key(file, text, at, "0"));
            }
        }
        let across = d.across_sips.as_ref();
        let smalls = (d.small.as_ref().map(|s| ("defaults".to_string(), s)).into_iter())
            .chain(
                (d.from_ranks.iter())
                    .filter_map(|(n, c)| Some((format!("defaults.from_ranks.{n}"), c.small.as_ref()?))),
            )
            .chain(across.and_then(|a| Some(("defaults.across_sips".to_string(), a.small.as_ref()?))))
            .chain(
                (across.into_iter().flat_map(|a| a.from_ranks.iter()))
                    .filter_map(|(n, c)| Some((format!("defaults.across_sips.from_ranks.{n}"), c.small.as_ref()?))),
            );
        for (at, small) in smalls {
            if let Some((path, inner, outer)) = small.misnested(&at) {
                return Err(err(
                    path,
                    format!("{inner} is not below the enclosing `small`'s below_bytes ({outer}): a nested band is for smaller buffers"),
                ));
            }
        }
        let f = &mut self.defaults;
        f.settings.extend(written(file, text, "defaults", settings_of!(d)));
        // A collective this file's plain defaults name is this file's to
        // decide: the earlier files' levels (the stdlib's `from_ranks`,
        // `across_sips`) no longer name it, or they would hide it on large
        // communicators; this file's own levels still may.
        let mine = Choice::from(ChoiceFile {
            all_reduce: d.all_reduce,
            all_gather: d.all_gather,
            reduce_scatter: d.reduce_scatter,
            broadcast: d.broadcast,
            small: d.small,
        });
        let earlier = (f.from_ranks.values_mut()).chain(f.across_sips_from_ranks.values_mut());
        let named: Vec<Collective> = (mine.algorithm.keys())
            .chain(mine.small.iter().flat_map(|b| b.algorithm.keys()))
            .copied()
            .collect();
        for level in earlier.chain([&mut f.across_sips]) {
            level.algorithm.retain(|c, _| !named.contains(c));
            level.forget_small(&named);
        }
        f.plain.merge(mine);
        for (n, c) in d.from_ranks {
            f.from_ranks.entry(n).or_default().merge(c.into());
        }
        if let Some(a) = d.across_sips {
            f.across_sips.merge(Choice::from(ChoiceFile {
                all_reduce: a.all_reduce,
                all_gather: a.all_gather,
                reduce_scatter: a.reduce_scatter,
                broadcast: a.broadcast,
                small: a.small,
            }));
            for (n, c) in a.from_ranks {
                f.across_sips_from_ranks.entry(n).or_default().merge(c.into());
            }
        }
        f.buffer_space = d.buffer_space.or(f.buffer_space);
        f.backpressure = d.backpressure.or(f.backpressure);
        f.n_slots = d.n_slots.or(f.n_slots);
        f.n_slots_across_sips = d.n_slots_across_sips.or(f.n_slots_across_sips);
        f.slot_size_bytes = d.slot_size_bytes.or(f.slot_size_bytes);
        f.packet_bytes = d.packet_bytes.or(f.packet_bytes);
        f.poll_interval_ns = d.poll_interval_ns.or(f.poll_interval_ns);
        for (name, a) in parsed.algorithms {
            let mut constexprs = BTreeMap::new();
            let mut constexpr_lines = BTreeMap::new();
            for (k, v) in &a.constexprs {
                // A key in a flow mapping (`constexprs: {CHUNK: 2}`) has its
                // mapping's line.
                constexpr_lines.insert(
                    k.clone(),
                    crate::yaml::key_or_parent_line(text, &format!("algorithms.{name}.constexprs.{k}")),
                );
                // These the runtime binds for every run; a value here
                // would be silently replaced.
                if super::RUNTIME_CONSTEXPRS.contains(&k.as_str()) {
                    return Err(err(
                        format!("algorithms.{name}.constexprs.{k}"),
                        format!(
                            "`{k}` is bound by the runtime for each run (T: the element type, OP: the reduction, \
                             CUBE_PES, SIP_CUBES, CUBE_W, CUBE_H, SIP_W, SIP_H: the machine's layout); remove it"
                        ),
                    ));
                }
                let Some(c) = konst_of(v) else {
                    return Err(err(
                        format!("algorithms.{name}.constexprs.{k}"),
                        "expected a number, a boolean, a dtype or a string".into(),
                    ));
                };
                constexprs.insert(k.clone(), c);
            }
            let origin = (file.to_string(), key_line(text, &format!("algorithms.{name}")));
            let line_of = |key: &str| crate::yaml::key_or_parent_line(text, &format!("algorithms.{name}.{key}"));
            let (module_line, kernel_line) = (line_of("module"), line_of("kernel"));
            let settings = written(file, text, &format!("algorithms.{name}"), settings_of!(a));
            self.algorithms.insert(
                name.clone(),
                Algorithm {
                    name,
                    collective: a.collective,
                    module: dir.join(&a.module),
                    kernel: a.kernel,
                    topology: a.topology,
                    buffer_space: a.buffer_space,
                    backpressure: a.backpressure,
                    n_slots: a.n_slots,
                    n_slots_across_sips: a.n_slots_across_sips,
                    slot_size_bytes: a.slot_size_bytes,
                    packet_bytes: a.packet_bytes,
                    poll_interval_ns: a.poll_interval_ns,
                    constexprs,
                    constexpr_lines,
                    module_line,
                    kernel_line,
                    settings,
                    world_size: a.world_size.map(|x| x.0 as u32),
                    origin,
                },
            );
        }
        let d = &self.defaults;
        let rank_paths: Vec<(String, &Choice)> = (d.from_ranks.iter())
            .map(|(n, level)| (format!("defaults.from_ranks.{n}"), level))
            .chain(
                (d.across_sips_from_ranks.iter())
                    .map(|(n, level)| (format!("defaults.across_sips.from_ranks.{n}"), level)),
            )
            .collect();
        let chosen = (d.plain.named("defaults"))
            .chain(rank_paths.iter().flat_map(|(at, level)| level.named(at)))
            .chain(d.across_sips.named("defaults.across_sips"));
        for (path, c, a) in chosen {
            match self.algorithms.get(a) {
                None => {
                    return Err(err(
                        path,
                        format!("no algorithm `{a}` is registered ({})", self.names().join(", ")),
                    ))
                }
                // Redefined by this file for another collective: its key
                // here is the mistake, not a default it may not mention.
                Some(alg) if alg.collective != c && alg.origin.0 == file => {
                    return Err(err(
                        format!("algorithms.{a}.collective"),
                        format!(
                            "`{a}` is the {} default ({path}), so it must stay an algorithm for {}, not {}",
                            c.key(),
                            c.key(),
                            alg.collective.key()
                        ),
                    ))
                }
                Some(alg) if alg.collective != c => {
                    return Err(err(
                        path,
                        format!(
                            "`{a}` is an algorithm for {}, not for {}",
                            alg.collective.key(),
                            c.key()
                        ),
                    ))
                }
                // A default runs on every rank of whatever communicator asks:
                // one pinned to its first N PEs would run on fewer ranks than
                // the collective was called on.
                Some(Algorithm {
                    world_size: Some(n), ..
                }) => {
                    return Err(err(
                        path,
                        format!("`{a}` runs on its first {n} PEs only (`world_size`), so it cannot be a default, which runs on every rank of a communicator"),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub fn names(&self) -> Vec<String> {
        self.algorithms.keys().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Result<&Algorithm, String> {
        self.algorithms
            .get(name)
            .ok_or_else(|| format!("no algorithm `{name}` is registered ({})", self.names().join(", ")))
    }

    /// The levels of `defaults` that apply to `world`, first the one that
    /// decides first.
    fn levels(&self, world: World) -> impl Iterator<Item = &Choice> {
        let d = &self.defaults;
        let reached = |levels: &BTreeMap<u32, Choice>| levels.range(..=world.ranks).count();
        let mut order: Vec<&Choice> = Vec::new();
        if world.sips > 1 {
            let n = reached(&d.across_sips_from_ranks);
            order.extend(d.across_sips_from_ranks.values().take(n).rev());
            order.push(&d.across_sips);
        }
        let n = reached(&d.from_ranks);
        order.extend(d.from_ranks.values().take(n).rev());
        order.push(&d.plain);
        order.into_iter()
    }

    /// The default algorithm of a collective on `world` with buffers of
    /// `bytes` per rank: the first level of `defaults` that names one at
    /// that size (when the world spans SIPs, `across_sips.from_ranks` from
    /// the largest count the world reaches, then `across_sips`; then
    /// `from_ranks` likewise, then the plain defaults); within a level,
    /// its `small` choice below its size.
    pub fn default_for(&self, c: Collective, bytes: u64, world: World) -> Result<&Algorithm, String> {
        let name = (self.levels(world).find_map(|level| level.pick(c, bytes)))
            .ok_or_else(|| format!("ccl.yaml names no default {} algorithm", c.key()))?;
        self.get(name)
    }

    /// What the defaults pick for `c` on `world` at every size: each
    /// algorithm with the bytes per rank it runs from, in increasing
    /// order (the first from 0).
    pub fn default_bands(&self, c: Collective, world: World) -> Result<Vec<(u64, String)>, String> {
        let mut edges: Vec<u64> = (self.levels(world))
            .flat_map(|level| level.small.iter().map(|b| b.below_bytes))
            .collect();
        edges.push(0);
        edges.sort_unstable();
        edges.dedup();
        let mut bands: Vec<(u64, String)> = Vec::new();
        for from in edges {
            let name = &self.default_for(c, from, world)?.name;
            if bands.last().is_none_or(|(_, last)| last != name) {
                bands.push((from, name.clone()));
            }
        }
        Ok(bands)
    }

    /// The IPCQ an algorithm runs with: its own settings, else the
    /// registry's defaults, else the topology's.
    pub fn ipcq(&self, a: &Algorithm, topo: &Topology) -> Ipcq {
        let mut q = topo.spec.pe.ipcq.clone();
        let d = &self.defaults;
        if let Some(s) = a.buffer_space.or(d.buffer_space) {
            q.buffer_space = s;
        }
        if let Some(b) = a.backpressure.or(d.backpressure) {
            q.backpressure = b;
        }
        if let Some(n) = a.n_slots.or(d.n_slots) {
            q.n_slots = n;
        }
        if let Some(n) = a.n_slots_across_sips.or(d.n_slots_across_sips) {
            q.n_slots_across_sips = Some(n);
        }
        if let Some(s) = a.slot_size_bytes.or(d.slot_size_bytes) {
            q.slot_size_bytes = s;
        }
        if let Some(p) = a.poll_interval_ns.or(d.poll_interval_ns) {
            q.poll_interval_ns = p;
        }
        q
    }

    /// The registry's keys that shape a run of `a` (its IPCQ and packet
    /// settings, its own or the defaults', and its constexprs), each with
    /// its value and where it is written; `None` when there are none. A
    /// failure at run time (a message too large for its slots, a TCM
    /// overflow) is reported inside the kernel, but the key to change is
    /// one of these.
    pub fn settings_note(&self, a: &Algorithm) -> Option<String> {
        let settings = (SETTING_KEYS.iter())
            .filter_map(|k| {
                a.settings
                    .get(k)
                    .or_else(|| self.defaults.settings.get(k))
                    .map(|w| (k, w))
            })
            .map(|(k, w)| format!("{k} = {} ({})", w.value, w.at));
        let constexprs = (a.constexprs.iter()).map(|(k, v)| format!("{k} = {v} ({})", a.constexpr_at(k)));
        let lines: Vec<String> = settings.chain(constexprs).collect();
        (!lines.is_empty()).then(|| {
            format!(
                "algorithm `{}` runs with these registry settings:\n      {}",
                a.name,
                lines.join("\n      ")
            )
        })
    }

    /// The fabric packet size an algorithm runs with: its own, else the
    /// registry's default; `None`: the topology's.
    pub fn packet_bytes(&self, a: &Algorithm) -> Option<u64> {
        a.packet_bytes.or(self.defaults.packet_bytes).map(|b| b.0)
    }

    /// Lowers an algorithm for a run on `topo`: [`Registry::compile`] with
    /// the machine's layout constexprs, after checking that the IPCQ it
    /// runs with fits the machine (an error names the keys that set it).
    pub fn compile_for(
        &self,
        a: &Algorithm,
        topo: &Topology,
        dtype: DType,
        op: super::ReduceOp,
    ) -> Result<(kernbench_compiler::ir::Function, kernbench_compiler::diag::SourceMap), String> {
        let q = self.ipcq(a, topo);
        // A queue within a SIP's (every launch has those); the more slots
        // of a queue across SIPs are counted when a launch opens one.
        let slots_bytes = q.n_slots.0 as u128 * q.slot_size_bytes.0 as u128;
        let tcm = topo.spec.pe.tcm.capacity_bytes.0;
        if q.buffer_space == Space::Tcm && slots_bytes > u128::from(tcm) {
            let from = |own: bool, default: bool, key: &str| match (own, default) {
                (true, _) => format!("algorithms.{}.{key}", a.name),
                (false, true) => format!("defaults.{key}"),
                (false, false) => format!("the topology's pe.ipcq.{key}"),
            };
            return Err(format!(
                "{}: its IPCQ slots ({} × {} bytes: {}, {}) do not fit in a PE's TCM ({tcm} bytes on `{}`)",
                a.entry(),
                q.n_slots.0,
                q.slot_size_bytes.0,
                from(a.n_slots.is_some(), self.defaults.n_slots.is_some(), "n_slots"),
                from(
                    a.slot_size_bytes.is_some(),
                    self.defaults.slot_size_bytes.is_some(),
                    "slot_size_bytes"
                ),
                topo.spec.name
            ));
        }
        self.compile(a, dtype, op, &super::layout_constexprs(topo))
    }

    /// Lowers an algorithm for element type `dtype` and reduction `op`
    /// (plus the layout constexprs the runtime provides); an error names
    /// the entry and what is wrong with it.
    pub fn compile(
        &self,
        a: &Algorithm,
        dtype: DType,
        op: super::ReduceOp,
        layout: &[(&str, i64)],
    ) -> Result<(kernbench_compiler::ir::Function, kernbench_compiler::diag::SourceMap), String> {
        let entry = || a.entry();
        let source = kernbench_compiler::text::read_text(&a.module).map_err(|e| {
            format!(
                "{}: cannot read `{}`: {e}",
                a.key_at("module", a.module_line),
                a.module.display()
            )
        })?;
        // What the kernel declares, to bind only what it has.
        let mut probe = sema::Session::new(sema::Options {
            defines: BTreeMap::new(),
            stdlib_root: self.stdlib_root.clone(),
        });
        probe.add_file(&a.module.display().to_string(), Some(a.module.clone()), source.clone());
        let summary = probe.finish();
        let Some(k) = summary.kernels.iter().find(|k| k.name == a.kernel) else {
            let names: Vec<&str> = summary.kernels.iter().map(|k| k.name.as_str()).collect();
            return Err(format!(
                "{}: module `{}` has no kernel `{}` (kernels: {})",
                a.key_at("kernel", a.kernel_line),
                a.module.display(),
                a.kernel,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        };
        let declared: Vec<&str> = k.constexprs.iter().map(|(n, _)| n.as_str()).collect();
        for (c, value) in &a.constexprs {
            let Some((_, default)) = k.constexprs.iter().find(|(n, _)| n == c) else {
                return Err(format!(
                    "{}: kernel `{}` has no constexpr `{c}` (it has: {})",
                    a.constexpr_at(c),
                    a.kernel,
                    declared.join(", ")
                ));
            };
            // A value of another kind than the kernel's default would fail
            // somewhere inside the kernel, far from this key.
            if let Some(default) = default {
                if !same_kind(value, default) {
                    return Err(format!(
                        "{}: `{c}` is {value}, {}, but kernel `{}` declares it with the default {default}, {}",
                        a.constexpr_at(c),
                        kind_of(value),
                        a.kernel,
                        kind_of(default)
                    ));
                }
            }
        }
        // A reduction the kernel cannot be told of would silently run as
        // whatever the kernel does (a sum).
        if a.collective.reduces() && op != super::ReduceOp::Sum && !declared.contains(&"OP") {
            return Err(format!(
                "{}: kernel `{}` declares no `OP` constexpr, so it cannot be told to {}: it can only run sum                  (declare `OP: constexpr = 0` and combine with reduce_ops.combine)",
                entry(),
                a.kernel,
                op.name()
            ));
        }
        // The runtime's bindings, then the entry's constexprs over them.
        let mut runtime = BTreeMap::new();
        runtime.insert("T".to_string(), Konst::DType(dtype));
        runtime.insert("OP".to_string(), Konst::Int(op.code()));
        for (n, v) in layout {
            runtime.insert(n.to_string(), Konst::Int(*v));
        }
        let lower = |mut defines: BTreeMap<String, Konst>| {
            defines.retain(|n, _| declared.contains(&n.as_str()));
            let mut s = sema::Session::new(sema::Options {
                defines,
                stdlib_root: self.stdlib_root.clone(),
            });
            s.add_file(&a.module.display().to_string(), Some(a.module.clone()), source.clone());
            s.lower(&a.kernel)
        };
        let mut defines = a.constexprs.clone();
        defines.extend(runtime.clone());
        let (out, ir) = lower(defines);
        let func = match ir {
            Ok(f) => f,
            Err(e) => {
                let first = out
                    .diagnostics
                    .iter()
                    .find(|d| d.is_error())
                    .map(|d| format!("{}: {}: {}", out.sources.at(d.primary.loc), d.code.as_str(), d.message))
                    .unwrap_or(e);
                let bound: Vec<String> = a.constexprs.iter().map(|(n, v)| format!("{n}={v}")).collect();
                let with = if bound.is_empty() {
                    String::new()
                } else {
                    format!(" with {}", bound.join(", "))
                };
                // The error is at the one constexpr the entry binds when
                // the kernel compiles with its own default instead (the
                // place a user edits); else at the entry.
                let mut only = a.constexprs.keys();
                let at = match (only.next(), only.next()) {
                    (Some(key), None) if lower(runtime).1.is_ok() => a.constexpr_at(key),
                    _ => entry(),
                };
                return Err(format!("{at}: kernel `{}` does not compile{with}: {first}", a.kernel));
            }
        };
        check_signature(a, &func, dtype).map_err(|m| format!("{}: {m}", entry()))?;
        Ok((func, out.sources))
    }
}

/// The parameters each collective passes (pointers of T, i32 scalars),
/// with `T` the element type it runs on (`dtype`): a pointer of another
/// element type would read the buffers as what they are not.
fn check_signature(a: &Algorithm, func: &kernbench_compiler::ir::Function, dtype: DType) -> Result<(), String> {
    let want: &[(&str, bool)] = match a.collective {
        Collective::AllReduce => &[("buf", true), ("n_elem", false)],
        Collective::AllGather | Collective::ReduceScatter => &[("src", true), ("dst", true), ("n_elem", false)],
        Collective::Broadcast => &[("buf", true), ("n_elem", false), ("root", false)],
    };
    let shape = |ws: &[(&str, bool)]| {
        ws.iter()
            .map(|(n, p)| format!("{n}: {}", if *p { "ptr[T]" } else { "i32" }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let got: Vec<String> = func.params.iter().map(|p| format!("{}: {}", p.name, p.ty)).collect();
    let ok = func.params.len() == want.len()
        && func.params.iter().zip(want).all(|(p, (_, is_ptr))| match p.ty.elem() {
            Elem::Ptr(d) => *is_ptr && d == dtype,
            Elem::Num(DType::I32) => !*is_ptr,
            _ => false,
        });
    if ok {
        Ok(())
    } else {
        let article = if a.collective.key().starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        Err(format!(
            "kernel `{}` must take ({}) for {article} {} algorithm, with T = {dtype} here, but takes ({})",
            a.kernel,
            shape(want),
            a.collective.key(),
            got.join(", ")
        ))
    }
}
