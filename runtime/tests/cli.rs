//! The `tlc` command as a user runs it: exit codes, output formats, folder
//! walking, `-D` parsing. (Diagnostic wording is covered by tests/ui.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tlc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tlc"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("tlc runs")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn clean_stdlib_exits_zero_and_prints_nothing() {
    let o = tlc(&["check", "stdlib"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stderr.is_empty() && o.stdout.is_empty(), "{}", stderr(&o));
}

#[test]
fn errors_exit_one_with_rendered_diagnostics() {
    let o = tlc(&["check", "--color", "never", "tests/ui/E0100-unresolved-name.tl"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("error[E0100]"), "{e}");
    assert!(e.contains("tests/ui/E0100-unresolved-name.tl:"), "{e}");
    assert!(e.contains("aborting due to 1 previous error"), "{e}");
    assert!(!e.contains('\u{1b}'), "no colour with --color never");
}

#[test]
fn warnings_only_exit_zero() {
    let o = tlc(&["check", "tests/ui/W0001-unused-variable.tl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning[W0001]"));
}

#[test]
fn color_always_emits_ansi_escapes() {
    let o = tlc(&["check", "--color", "always", "tests/ui/E0100-unresolved-name.tl"]);
    assert!(stderr(&o).contains('\u{1b}'));
}

#[test]
fn json_format_is_one_object_per_diagnostic() {
    let o = tlc(&["check", "--format", "json", "tests/ui/multi-type-errors.tl"]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    let objs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert!(objs.len() >= 5, "{text}");
    for obj in &objs {
        for key in [
            "code", "severity", "message", "file", "line", "column", "end", "labels", "help",
        ] {
            assert!(obj.get(key).is_some(), "missing {key} in {obj}");
        }
        assert!(obj["line"].as_u64().unwrap_or(0) >= 1);
        assert!(obj["labels"][0]["primary"].as_bool().unwrap_or(false));
    }
    assert_eq!(objs[0]["file"], "tests/ui/multi-type-errors.tl");
}

#[test]
fn folders_are_walked_recursively() {
    let o = tlc(&["check", "--format", "json", "tests/ui"]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("E0106"), "modules under tests/ui/modules are checked too");
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(tlc(&["check", "no/such/file.tl"]).status.code(), Some(2));
    assert_eq!(tlc(&["check"]).status.code(), Some(2));
    assert_eq!(tlc(&["check", "-D", "BLOCK", "stdlib"]).status.code(), Some(2));
    assert_eq!(tlc(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn defines_specialize_shapes() {
    // BLOCK=3 makes the static_assert in this case fail.
    let dir = std::env::temp_dir().join(format!("tlc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("k.tl");
    std::fs::write(&file, "@kernel\ndef k(x: ptr[f32], BLOCK: constexpr = 4):\n    tl.static_assert(BLOCK % 2 == 0, \"BLOCK must be even\")\n    tl.store(x, 1.0)\n").expect("write");
    let f = file.to_string_lossy().into_owned();
    assert_eq!(tlc(&["check", &f]).status.code(), Some(0));
    let o = tlc(&["check", "-D", "BLOCK=3", &f]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("BLOCK must be even"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace's slices on thread `tid` of process `pid`: start, end (µs),
/// name, and `args.why` (a stall's reason; empty for other slices).
fn slices_on(events: &[serde_json::Value], pid: u64, tid: u64) -> Vec<(f64, f64, String, String)> {
    events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == tid)
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap_or(0.0);
            let name = e["name"].as_str().unwrap_or("").to_string();
            let why = e["args"]["why"].as_str().unwrap_or("").to_string();
            (ts, ts + e["dur"].as_f64().unwrap_or(0.0), name, why)
        })
        .collect()
}

/// The events of the Chrome trace `tlc run --trace` wrote at `path`.
fn trace_events(path: impl AsRef<Path>) -> Vec<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path.as_ref()).expect("a trace")).expect("trace JSON");
    v["traceEvents"].as_array().expect("traceEvents").clone()
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tlc-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Asserts that `o` exited with `code` and said `want` on stderr.
fn assert_exit(o: &Output, code: i32, want: &str) {
    assert_eq!(o.status.code(), Some(code), "{}", stderr(o));
    assert!(stderr(o).contains(want), "{}", stderr(o));
}

/// Asserts that `o` exited with `code` and printed `want` on stdout.
fn assert_stdout(o: &Output, code: i32, want: &str) {
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(code), "{}", stderr(o));
    assert!(out.contains(want), "{out}");
}

/// Writes kernel source `src` to `dir/name` and returns the file's path.
fn write_kernel(dir: &Path, name: &str, src: &str) -> String {
    let file = dir.join(name);
    std::fs::write(&file, src).expect("kernel written");
    file.to_string_lossy().into_owned()
}

/// `add.tl` on 13 random floats in two programs of 8.
const ADD_13: [&str; 16] = [
    "run",
    "stdlib/kernels/add.tl",
    "--kernel",
    "add",
    "--grid",
    "2",
    "-D",
    "BLOCK=8",
    "--arg",
    "x=rand(13,f32,1)",
    "--arg",
    "y=rand(13,f32,2)",
    "--arg",
    "out=zeros(13,f32)",
    "--arg",
    "n=13",
];

#[test]
fn run_writes_outputs_and_reads_them_back() {
    let dir = temp_dir("run");
    let out = dir.to_string_lossy().into_owned();
    for backend in ["jit", "interp"] {
        let mut a = ADD_13.to_vec();
        a.extend(["--out", &out]);
        a.extend(["--backend", backend]);
        let o = tlc(&a);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("with the {backend} backend")),
            "{}",
            stderr(&o)
        );
    }
    for name in ["x", "y", "out"] {
        assert!(dir.join(format!("{name}.npy")).is_file(), "{name}.npy written");
    }
    // Feed the written files back in: out = x + x must read x.npy as f32.
    let x = dir.join("x.npy").to_string_lossy().into_owned();
    let o = tlc(&[
        "run",
        "stdlib/kernels/add.tl",
        "--kernel",
        "add",
        "--grid",
        "1",
        "-D",
        "BLOCK=16",
        "--arg",
        &format!("x=@{x}"),
        "--arg",
        &format!("y=@{x}"),
        "--arg",
        "out=zeros(13,f32)",
        "--arg",
        "n=13",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The printed summary of an output counts its NaN; min and max are the
/// other values'.
#[test]
fn run_summaries_count_nan() {
    let dir = temp_dir("nan");
    let path = write_kernel(
        &dir,
        "nan.tl",
        "@kernel\ndef nan(x: ptr[f32]):\n    offs = tl.arange(0, 4)\n    v = tl.load(x + offs)\n    \
         tl.store(x + offs, tl.where(offs < 2, v * 0.0 / 0.0, v + offs))\n",
    );
    let o = tlc(&["run", &path, "--functional", "--arg", "x=zeros(4,f32)"]);
    assert_stdout(&o, 0, "  x: f32[4]  sum NaN  min 2.000000  max 3.000000  2 NaN");
    // Every value NaN: no min or max, and the line says so.
    let all = write_kernel(
        &dir,
        "all_nan.tl",
        "@kernel\ndef all_nan(x: ptr[f32]):\n    offs = tl.arange(0, 4)\n    \
         tl.store(x + offs, tl.load(x + offs) * 0.0 / 0.0)\n",
    );
    let o = tlc(&["run", &all, "--functional", "--arg", "x=zeros(4,f32)"]);
    assert_stdout(&o, 0, "  x: f32[4]  sum NaN  all 4 NaN");
    // In JSON, infinities and NaN are strings (JSON has neither; null
    // would read as no data).
    let inf = write_kernel(
        &dir,
        "inf.tl",
        "@kernel\ndef inf(x: ptr[f32]):\n    offs = tl.arange(0, 4)\n    \
         tl.store(x + offs, tl.where(offs < 1, 1.0 / tl.load(x + offs), -1.0 / (tl.load(x + offs) + 0.0)))\n",
    );
    let o = tlc(&["run", &inf, "--arg", "x=zeros(4,f32)", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let x = &v["outputs"][0];
    assert_eq!(
        (&x["min"], &x["max"], &x["sum"]),
        (&"-inf".into(), &"inf".into(), &"nan".into()),
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--kernel` may be left out when the file has one `@kernel` (the run
/// below); with none or several it is a usage error that lists them.
#[test]
fn run_needs_kernel_only_when_the_file_has_several_and_it_must_exist() {
    for (file, want) in [
        (
            "stdlib/ccl/p2p.tl",
            "error: `stdlib/ccl/p2p.tl` defines 2 kernels (p2p, barrier): name one with --kernel",
        ),
        (
            "stdlib/ccl/reduce_ops.tl",
            "error: `stdlib/ccl/reduce_ops.tl` defines no `@kernel`",
        ),
    ] {
        assert_exit(&tlc(&["run", file]), 2, want);
    }
    // A kernel the file does not define is a bad argument too.
    let want = "error: `stdlib/ccl/p2p.tl` defines no kernel `nope` (its kernels: p2p, barrier)";
    assert_exit(&tlc(&["run", "stdlib/ccl/p2p.tl", "--kernel", "nope"]), 2, want);
    assert_exit(&tlc(&["emit-ir", "stdlib/ccl/p2p.tl", "--kernel", "nope"]), 2, want);
}

/// What a run leaves that its user may not expect is a warning: copies of
/// a replicated tensor that the ranks wrote differently (the output is
/// rank 0's), and messages no rank received (at their send). Copies every
/// rank wrote alike are not.
#[test]
fn run_warns_of_diverging_copies_and_unreceived_messages() {
    let dir = temp_dir("warn");
    let path = write_kernel(
        &dir,
        "mark.tl",
        "@kernel\ndef mark(same: ptr[i32], tag: ptr[i32]):\n    offs = tl.arange(0, 4)\n    \
         tl.store(same + offs, tl.load(same + offs) + 1)\n    tl.store(tag + offs, offs * tl.rank())\n    \
         if tl.rank() == 0:\n        tl.send(1, offs)\n",
    );
    let out = dir.to_string_lossy().into_owned();
    let o = tlc(&[
        "run",
        &path,
        "--pes",
        "3",
        "--color",
        "never",
        "--arg",
        "same=zeros(4,i32):replicate",
        "--arg",
        "tag=zeros(4,i32):replicate",
        "--out",
        &out,
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains(
            "warning: the ranks' copies of replicated `tag` differ after the run (rank 1's element 1 is not \
             rank 0's); the output is rank 0's copy"
        ) && !e.contains("`same` differ"),
        "{e}"
    );
    assert!(
        e.contains("warning: `mark` ended with 1 message sent and never received")
            && e.contains("mark.tl:7:9")
            && e.contains("rank 0 (sip 0, cube 0, pe 0) sent rank 1 (sip 0, cube 0, pe 1) 1 message (16 bytes)"),
        "{e}"
    );
    // The JSON summary says both as well.
    let o = tlc(&[
        "run",
        &path,
        "--pes",
        "3",
        "--format",
        "json",
        "--arg",
        "same=zeros(4,i32):replicate",
        "--arg",
        "tag=zeros(4,i32):replicate",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON summary");
    assert_eq!(
        j["diverging_replicas"],
        serde_json::json!([{"tensor": "tag", "rank": 1, "element": 1}])
    );
    assert_eq!(
        j["unreceived"],
        serde_json::json!([{"from_rank": 0, "to_rank": 1, "messages": 1, "bytes": 16}])
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_errors_point_at_the_source() {
    let o = tlc(&[
        "run",
        "stdlib/kernels/add.tl",
        "--kernel",
        "add",
        "--grid",
        "2",
        "-D",
        "BLOCK=8",
        "--color",
        "never",
        "--arg",
        "x=rand(13,f32)",
        "--arg",
        "y=rand(13,f32)",
        "--arg",
        "out=zeros(13,f32)",
        "--arg",
        "n=14",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("outside every allocation") && e.contains("kernel `add`") && e.contains("add.tl:9:9"),
        "{e}"
    );
    // Element 13 of the 13-element `x`: the note names the tensor.
    assert!(
        e.contains("= note: the access starts 0 bytes past the end of `x` (52 bytes at 0x"),
        "{e}"
    );
}

/// Found by an adversarial audit: inputs that hung, took gigabytes, or
/// clobbered an output. Each is now a usage error (exit 2) at once.
#[test]
fn run_refuses_what_would_hang_exhaust_or_overwrite() {
    // `add` with `x` as given, small `y` and `out`, and `extra`.
    let add = |x: &str, extra: &[&str]| {
        let mut a = vec![
            "run",
            "stdlib/kernels/add.tl",
            "--kernel",
            "add",
            "--arg",
            "n=4",
            "--arg",
            x,
        ];
        a.extend_from_slice(&["--arg", "y=zeros(4,f32)", "--arg", "out=zeros(4,f32)"]);
        a.extend_from_slice(extra);
        tlc(&a)
    };
    // A made tensor larger than its PE's HBM slice: refused before the host
    // makes its 4 GiB (this took 25 s and 8 GB of host memory).
    let o = add("x=rand(1073741824,f32)", &[]);
    let want = "`x` (4294967296 bytes) does not fit in the HBM slice of (sip 0, cube 0, pe 0)";
    assert_exit(&o, 2, want);
    // With `:shard` each rank's part is checked: 32 MiB over the 8 PEs of
    // a cube is 4 MiB per PE, more than a TCM holds.
    let o = add("x=zeros(8388608,f32):shard:tcm", &["--pes", "cube"]);
    assert_exit(
        &o,
        2,
        "`x` (4194304 bytes) does not fit in the TCM of (sip 0, cube 0, pe 0)",
    );
    // The trace where --out writes an output.
    let dir = temp_dir("trace-clash");
    let out = dir.to_string_lossy().into_owned();
    let trace = dir.join("out.npy").to_string_lossy().into_owned();
    let o = add("x=zeros(4,f32)", &["--out", &out, "--trace", &trace]);
    assert_exit(&o, 2, "is where --out writes `out`: give the trace another path");
    assert!(!dir.join("out.npy").exists(), "nothing written");
    // A functional time limit below one cycle allows no instruction.
    let o = add("x=zeros(4,f32)", &["--functional", "--time-limit", "1ps"]);
    assert_exit(&o, 2, "--time-limit: with --functional the limit counts instructions");
}

/// A folder walk takes regular `.tl` files only: a FIFO named `x.tl` would
/// block the read forever.
#[cfg(unix)]
#[test]
fn check_skips_a_fifo_in_a_folder() {
    let dir = temp_dir("fifo");
    std::fs::copy(repo().join("stdlib/kernels/add.tl"), dir.join("add.tl")).expect("copied");
    let fifo = dir.join("x.tl");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo here: nothing to test
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_tlc"))
        .args(["check", &dir.to_string_lossy()])
        .spawn()
        .expect("tlc runs");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waits") {
            break Some(s);
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.and_then(|s| s.code()), Some(0), "tlc check blocked on the FIFO");
}

#[test]
fn run_usage_errors_exit_two() {
    let base = ["run", "stdlib/kernels/add.tl", "--kernel", "add"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        tlc(&a).status.code()
    };
    // Missing arguments, a scalar given a tensor, bad grid, unknown name.
    assert_eq!(with(&["--arg", "x=rand(4,f32)"]), Some(2));
    assert_eq!(
        with(&[
            "--arg",
            "x=rand(4,f32)",
            "--arg",
            "y=rand(4,f32)",
            "--arg",
            "out=zeros(4,f32)",
            "--arg",
            "n=zeros(4,i32)"
        ]),
        Some(2)
    );
    let all_args = [
        "--arg",
        "x=rand(4,f32)",
        "--arg",
        "y=rand(4,f32)",
        "--arg",
        "out=zeros(4,f32)",
        "--arg",
        "n=4",
    ];
    for grid in ["0", "2147483648", "1,1,1,1", "x"] {
        let mut a = base.to_vec();
        a.extend(["--grid", grid]);
        a.extend(all_args);
        let o = tlc(&a);
        assert_eq!(o.status.code(), Some(2), "--grid {grid}");
        assert!(
            stderr(&o).contains(&format!(
                "invalid --grid `{grid}`: expected 1 to 3 integers from 1 to 2147483647"
            )),
            "{}",
            stderr(&o)
        );
    }
    assert_eq!(with(&["--arg", "nope=1"]), Some(2));
    // Options that would be ignored, a repeated -D, and an --out that is
    // a file are errors before anything runs (they were after the run, or
    // never).
    let usage = |extra: &[&str], says: &str| {
        let mut a = base.to_vec();
        a.extend(all_args);
        a.extend_from_slice(extra);
        assert_exit(&tlc(&a), 2, says);
    };
    usage(
        &["--functional", "--pes", "cube"],
        "the argument '--functional' cannot be used with '--pes <PES>'",
    );
    usage(
        &["--functional", "--trace", "t.json"],
        "the argument '--functional' cannot be used with '--trace <FILE.json>'",
    );
    usage(
        &["--functional", "--trace-links", "3"],
        "the argument '--functional' cannot be used with '--trace-links <N>'",
    );
    usage(&["-D", "BLOCK=8", "-D", "BLOCK=4"], "-D BLOCK=… is given twice");
    usage(
        &["-D", "T=tl.float64"],
        "invalid -D `T=tl.float64`: `tl.float64` is not a tl dtype (the dtypes: bool, i8, i32, i64, u8, u32, f16, \
         bf16, f32)",
    );
    for layout in [":shard", ":tcm"] {
        let mut a = base.to_vec();
        a.extend(&all_args[..6]);
        let n = format!("n=4{layout}");
        a.extend(["--arg", &n]);
        assert_exit(
            &tlc(&a),
            2,
            "`--arg n=…`: `n` is the scalar `i32`, which takes no layout (`:shard`, `:tcm`, …)",
        );
    }
    let o = tlc(&["run", "stdlib/kernels/add.tl", "--grid", "65536,65536", "--arg", "n=1"]);
    assert_exit(
        &o,
        2,
        "invalid --grid `65536,65536`: 4294967296 programs, more than a launch holds (2^32 - 1)",
    );
    let file = std::env::temp_dir().join(format!("tlc-cli-out-file-{}", std::process::id()));
    std::fs::write(&file, "").expect("a file");
    usage(
        &["--out", &file.to_string_lossy()],
        &format!("--out `{}` is not a directory", file.display()),
    );
    let under = file.join("out");
    usage(
        &["--out", &under.to_string_lossy()],
        &format!(
            "cannot create --out `{}`: `{}` is not a directory",
            under.display(),
            file.display()
        ),
    );
    let _ = std::fs::remove_file(&file);
    // A run that fails creates no --out directory.
    let dir = std::env::temp_dir().join(format!("tlc-cli-out-failed-{}", std::process::id()));
    let dir_arg = dir.to_string_lossy().into_owned();
    let mut failing = base.to_vec();
    // n = 14 reads past 13-element tensors.
    failing.extend([
        "--arg",
        "x=rand(13,f32)",
        "--arg",
        "y=rand(13,f32)",
        "--arg",
        "out=zeros(13,f32)",
    ]);
    failing.extend(["--arg", "n=14", "--out", &dir_arg]);
    let o = tlc(&failing);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!dir.exists(), "{} was created", dir.display());
    assert_eq!(
        with(&[
            "--arg",
            "x=rand(4,i32)",
            "--arg",
            "y=rand(4,f32)",
            "--arg",
            "out=zeros(4,f32)",
            "--arg",
            "n=4"
        ]),
        Some(2)
    );
    for (layout, says) in [
        (":shard:shard", "`:shard` is given twice"),
        (":shard:replicate", "`:shard` and `:replicate` are both a distribution"),
        (":shard:tcm:sram", "`:tcm` and `:sram` are both a memory"),
        (
            ":shard:dram",
            "`:dram` is not a layout (shard, replicate, hbm, sram, tcm)",
        ),
    ] {
        let x = format!("x=rand(4,f32){layout}");
        let o = tlc(&[
            "run",
            "stdlib/kernels/add.tl",
            "--kernel",
            "add",
            "--pes",
            "2",
            "--arg",
            &x,
            "--arg",
            "y=rand(4,f32)",
            "--arg",
            "out=zeros(4,f32)",
            "--arg",
            "n=4",
        ]);
        assert_eq!(o.status.code(), Some(2), "{layout}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("`--arg {x}`: {says}")), "{}", stderr(&o));
    }
    let o = tlc(&["run", "stdlib/kernels/add.tl", "--kernel", "nope", "--arg", "n=1"]);
    assert_exit(
        &o,
        2,
        "`stdlib/kernels/add.tl` defines no kernel `nope` (its kernels: add)",
    );
}

#[test]
fn emit_ir_prints_the_kernel() {
    let o = tlc(&["emit-ir", "stdlib/kernels/add.tl", "-D", "BLOCK=64"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("kernel @add(") && text.contains("math.arange 0, 64") && text.contains("dma.store"),
        "{text}"
    );
}

/// The JSON form is the kernels' IR, structured (tests/ir.rs checks it
/// says what the text form says, for every golden and stdlib kernel).
#[test]
fn emit_ir_json_lists_every_kernel() {
    let o = tlc(&["emit-ir", "stdlib/ccl/broadcast.tl", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    let kernels = j["kernels"].as_array().expect("a kernel list");
    let names: Vec<&str> = kernels.iter().filter_map(|k| k["name"].as_str()).collect();
    let text = String::from_utf8_lossy(&tlc(&["emit-ir", "stdlib/ccl/broadcast.tl"]).stdout).to_string();
    let text_names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("kernel @")?.split('(').next())
        .collect();
    assert!(!names.is_empty());
    assert_eq!(names, text_names);
    let first = &kernels[0]["body"]["insts"][0];
    assert!(
        first["loc"]["file"] == "stdlib/ccl/broadcast.tl" && first["loc"]["line"].as_u64() > Some(0),
        "{first}"
    );
    assert!(first["results"][0]["type"]["kind"].is_string(), "{first}");
    // A kernel with errors: the diagnostics on stderr, and on stdout as
    // one `compile` record.
    let o = tlc(&["emit-ir", "tests/ui/E0101-unknown-tl-builtin.tl", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0101"), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON record");
    assert_eq!(
        (&j["error"]["kind"], &j["error"]["diagnostics"][0]["code"]),
        (&serde_json::json!("compile"), &serde_json::json!("E0101")),
        "{j}"
    );
}

#[test]
fn topology_summarizes_presets_and_reports_bad_files() {
    let o = tlc(&["topology"]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("= 256 PEs") && text.contains("ucie") && text.contains("peaks"),
        "{text}"
    );
    // Link classes as a run names them; the one-cube, one-SIP machine
    // has no UCIe and no SIP link, and peaks below 1 TB/s are in GB/s.
    for class in ["router mesh ", "hbm channel ", "sip link ", "tcm read "] {
        assert!(text.contains(class), "{class}: {text}");
    }
    let o = tlc(&["topology", "tiny"]);
    let tiny = String::from_utf8_lossy(&o.stdout);
    assert!(!tiny.contains("ucie") && !tiny.contains("sip link"), "{tiny}");
    assert!(
        tiny.contains("× 1 cube (1×1 mesh)") && tiny.contains("hbm        819.2 GB/s machine-wide"),
        "{tiny}"
    );
    let o = tlc(&["topology", "large", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(v["total_pes"].as_u64().unwrap_or(0) >= 4096);
    // `--topology FILE`, as every other command takes it, says the same;
    // with FILE as well it is a usage error.
    let o = tlc(&["topology", "--topology", "tiny"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), tiny);
    assert_eq!(tlc(&["topology", "tiny", "--topology", "large"]).status.code(), Some(2));
    let dir = temp_dir("topo");
    let bad = dir.join("topology.yaml");
    let text = std::fs::read_to_string(repo().join("stdlib/topologies/default.yaml"))
        .expect("default")
        .replace("pe_per_corner: 2", "pe_per_corner: -1");
    std::fs::write(&bad, text).expect("write");
    let o = tlc(&["topology", &bad.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "topology.yaml:33: cube.pe_layout.pe_per_corner: expected a positive integer of at most 65536, got -1"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(tlc(&["topology", "no-such-file.yaml"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads an `.npy` file of i32 (little-endian) without NumPy.
fn read_i32_npy(path: &Path) -> Vec<i32> {
    let b = std::fs::read(path).expect("npy file");
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + header_len..]
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A blocking receive whose message (and that of every receive queued
/// ahead of it) is already in its slots when the issue unit reaches it
/// stalls only while the receive engine copies it out, and the trace says
/// so; one that waits for a message still on its way, its own or an
/// earlier receive's, is a wait for the message.
#[test]
fn a_receive_s_stall_says_whether_its_message_is_in() {
    let dir = temp_dir("copy-out");
    let kernel = dir.join("k.tl");
    // Rank 1 reaches its receive only after a chain of MATH work on a
    // loaded block (its `if` needs the sum): rank 0's message is in by
    // then. Rank 0 reaches its receive from rank 2 after a shorter chain:
    // rank 2's message is in, but an asynchronous receive of rank 1's
    // reply, which comes after rank 1's longer chain, is ahead of it.
    std::fs::write(
        &kernel,
        r#"@kernel
def k(x: ptr[i32]):
    offs = tl.arange(0, 1024)
    o8 = tl.arange(0, 8)
    if tl.rank() == 0:
        tl.send(1, tl.load(x + offs, mask=offs < 1024))
        reply = tl.recv_async(1, [8], i32)
        s = tl.sum(tl.load(x + o8, mask=o8 < 8))
        for i in range(3):
            s = tl.sum(tl.load(x + o8, mask=o8 < 8) + s)
        if s > -1:
            early = tl.recv(2, [8], i32)
            tl.store(x + o8, tl.wait(reply) + early, mask=o8 < 8)
    elif tl.rank() == 1:
        big = tl.load(x + offs, mask=offs < 1024)
        s = tl.sum(big)
        for i in range(10):
            big = big + s
            s = tl.sum(big)
        if s > -1:
            got = tl.recv(0, [1024], i32)
            tl.store(x + offs, got + big, mask=offs < 1024)
            tl.send(0, tl.load(x + o8, mask=o8 < 8))
    else:
        tl.send(0, tl.load(x + o8, mask=o8 < 8))
"#,
    )
    .expect("write the kernel");
    let trace = dir.join("t.json");
    let o = tlc(&[
        "run",
        &kernel.to_string_lossy(),
        "--pes",
        "3",
        "--arg",
        "x=zeros((3,1024),i32):shard",
        "--trace",
        &trace.to_string_lossy(),
        "--out",
        &dir.join("out").to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let events = trace_events(&trace);
    let recv_stalls = |pid: u64| -> Vec<(f64, f64, String, String)> {
        slices_on(&events, pid, 6)
            .into_iter()
            .filter(|s| s.2.starts_with("recv k.tl:"))
            .collect()
    };
    let [(ts, end, _, why)] = &recv_stalls(1)[..] else {
        panic!("one receive stall on rank 1: {:?}", recv_stalls(1))
    };
    assert_eq!(why, "waits for its receive to copy the message out of its slot");
    // 4 KiB from the TCM's slots: a few ns, against the ~0.5 us rank 1
    // spent getting there.
    assert!(end - ts < 0.02 && *ts > 0.3, "{ts}..{end}");
    // Rank 0's receive from rank 2 waits behind the one of rank 1's
    // reply: until that has come (then, at most, for its own copy-out).
    let stalls = recv_stalls(0);
    let Some(((ts, end, name, why), copy_out)) = stalls.split_first() else {
        panic!("no receive stall on rank 0")
    };
    assert!(name.starts_with("recv k.tl:12:"), "{name}");
    assert_eq!(why, "waits for the message it receives");
    assert!(end - ts > 0.1, "{ts}..{end}");
    for (ts, end, name, why) in copy_out {
        assert!(name.starts_with("recv k.tl:12:"), "{name}");
        assert_eq!(why, "waits for its receive to copy the message out of its slot");
        assert!(end - ts < 0.02, "{ts}..{end}");
    }
}

#[test]
fn run_on_many_pes_shards_gathers_and_reports_time() {
    let dir = temp_dir("sim");
    let out = dir.to_string_lossy().into_owned();
    let trace = dir.join("trace.json").to_string_lossy().into_owned();
    // The ring all-reduce of 100 i32 on 4 PEs.
    let ring = [
        "run",
        "stdlib/ccl/ring_allreduce.tl",
        "--kernel",
        "ring_allreduce",
        "-D",
        "T=i32",
        "--pes",
        "4",
        "--arg",
        "buf=rand((4,100),i32,5):shard",
        "--arg",
        "n_elem=100",
    ];
    let o = tlc(&[&ring[..], &["--format", "json", "--trace", &trace, "--out", &out]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The JSON summary on stdout.
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json summary");
    assert_eq!(v["pes"], 4);
    assert!(v["time_ps"].as_u64().unwrap_or(0) > 0);
    assert!(v["engines"]
        .as_array()
        .is_some_and(|e| e.iter().any(|x| x["engine"] == "ipcq send")));
    assert!(v["link_classes"].as_array().is_some_and(|c| !c.is_empty()));
    // Every rank's shard holds the same sums.
    let got = read_i32_npy(&dir.join("buf.npy"));
    assert_eq!(got.len(), 400);
    for r in 1..4 {
        assert_eq!(got[r * 100..(r + 1) * 100], got[..100], "rank {r} agrees with rank 0");
    }
    // A Chrome trace with one process per PE and named slices.
    let events = &trace_events(&trace);
    assert!(events.iter().any(|e| e["ph"] == "X"
        && e["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("send ring_allreduce.tl:"))));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["args"]["name"].as_str().is_some_and(|n| n.starts_with("rank 3 "))));
    // The issue unit's stalls, a thread of their own: each fills a gap
    // between its busy spans, from where one ends to where the next
    // starts, named by the instruction it could not go past; every gap
    // has one. In this ring that is a blocking receive, and at the end
    // the return, where it waits for its engines to drain.
    let on = |pid: u64, tid: u64| slices_on(events, pid, tid);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let (mut stalls, mut waits_for_message) = (0, 0);
    for pid in 0..4 {
        let spans = on(pid, 5);
        let gaps: Vec<(f64, f64)> = spans
            .windows(2)
            .map(|w| (w[0].1, w[1].0))
            .filter(|g| g.1 > g.0 + 1e-9)
            .collect();
        let st = on(pid, 6);
        let (last, rest) = st.split_last().expect("stalls");
        assert_eq!(rest.len(), gaps.len(), "one stall per gap on rank {pid}: {st:?}");
        for ((ts, end, name, why), gap) in rest.iter().zip(&gaps) {
            assert!(name.starts_with("recv ring_allreduce.tl:"), "{name}");
            // Its message still on its way, or in and being copied out
            // (a message of at most 64 bytes: a few ns).
            match why.as_str() {
                "waits for the message it receives" => waits_for_message += 1,
                "waits for its receive to copy the message out of its slot" => {
                    assert!(end - ts < 0.02, "a copy-out of {} us", end - ts)
                }
                other => panic!("a receive's stall: {other}"),
            }
            assert!(close(*ts, gap.0) && close(*end, gap.1), "{ts}..{end} fills {gap:?}");
        }
        assert!(last.2.starts_with("return ring_allreduce.tl:"), "{last:?}");
        assert_eq!(last.3, "waits for its engines to drain");
        assert!(
            close(last.0, spans.last().map_or(0.0, |s| s.1)) && last.1 > last.0,
            "{last:?}"
        );
        stalls += st.len();
    }
    assert!(
        stalls >= 4 && waits_for_message >= 4,
        "{stalls} stalls, {waits_for_message} for a message"
    );
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["tid"] == 6 && e["args"]["name"] == "issue stalls"));
    // A counter track for every link that carried data, and with
    // `--trace-links` for that many.
    let tracks = |events: &[serde_json::Value]| {
        events
            .iter()
            .filter(|e| e["ph"] == "C")
            .filter_map(|e| e["name"].as_str().map(str::to_string))
            .collect::<std::collections::BTreeSet<String>>()
            .len()
    };
    let busy_links: u64 = v["link_classes"]
        .as_array()
        .map_or(0, |cs| cs.iter().filter_map(|c| c["links"].as_u64()).sum());
    assert!(busy_links > 3, "{busy_links} busy links");
    assert_eq!(tracks(events) as u64, busy_links, "one counter track per busy link");
    let o = tlc(&[&ring[..], &["--trace", &trace, "--trace-links", "3"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(tracks(&trace_events(&trace)), 3, "--trace-links 3");
    // The human summary.
    let o = tlc(&[
        "run",
        "stdlib/kernels/add.tl",
        "--kernel",
        "add",
        "--pes",
        "cube",
        "--arg",
        "x=rand(8192,f32)",
        "--arg",
        "y=rand(8192,f32)",
        "--arg",
        "out=zeros(8192,f32)",
        "--arg",
        "n=8192",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("on 8 PEs") && text.contains("engine busy %") && text.contains("most contended links"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tlc run` with a tensor read from a NumPy file and sharded over an
/// explicit `--pes` list: rank r is the r-th PE of the list (the order
/// given, not the ring order or a sorted one), shard r (rows r·R … of axis
/// 0) is placed in rank r's PE's own HBM slice, and `--out DIR` writes the
/// gathered tensors to DIR/NAME.npy with shard r back at rows r·R ….
#[test]
fn run_shards_an_npy_argument_over_an_explicit_pe_list() {
    use ndarray::Array2;
    let dir = temp_dir("npy-shard");
    let kernel = dir.join("shift.tl");
    std::fs::write(
        &kernel,
        "@kernel\ndef shift(x: ptr[i32], out: ptr[i32], N: constexpr = 16):\n    offs = tl.arange(0, N)\n    \
         v = tl.load(x + offs, mask=offs < N)\n    \
         tl.store(out + offs, v * 10 + tl.rank() * 1000 + tl.world_size(), mask=offs < N)\n",
    )
    .expect("write the kernel");
    // Three ranks on two SIPs, listed neither in ring order nor sorted.
    let list = [(0u32, 5u32, 3u32), (0, 0, 6), (1, 2, 0)];
    let world = list.len();
    let n = 16;
    let input = Array2::from_shape_fn((world, n), |(r, k)| 100 * r as i32 + 3 * k as i32 - 37);
    let x_path = dir.join("x.npy");
    ndarray_npy::write_npy(&x_path, &input).expect("write x.npy");
    let out_dir = dir.join("out");
    let trace = dir.join("trace.json");
    let pes = list
        .iter()
        .map(|(s, c, p)| format!("{s}.{c}.{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let o = tlc(&[
        "run",
        &kernel.to_string_lossy(),
        "--kernel",
        "shift",
        "--pes",
        &pes,
        "--arg",
        &format!("x=@{}:shard", x_path.display()),
        "--arg",
        &format!("out=zeros(({world},{n}),i32):shard"),
        "--out",
        &out_dir.to_string_lossy(),
        "--trace",
        &trace.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The gathered output, element by element: rank r computed row r
    // from row r of the file.
    let got: Array2<i32> = ndarray_npy::read_npy(out_dir.join("out.npy")).expect("out.npy");
    assert_eq!(got.dim(), (world, n));
    for r in 0..world {
        for k in 0..n {
            let want = input[[r, k]] * 10 + 1000 * r as i32 + world as i32;
            assert_eq!(got[[r, k]], want, "out[{r}, {k}]");
        }
    }
    let x_back: Array2<i32> = ndarray_npy::read_npy(out_dir.join("x.npy")).expect("x.npy");
    assert_eq!(x_back, input, "the input is gathered back unchanged");
    // Rank r is the r-th PE of the list.
    let events = &trace_events(&trace);
    let coord = |(s, c, p): (u32, u32, u32)| format!("(sip {s}, cube {c}, pe {p})");
    for (r, at) in list.iter().enumerate() {
        let want = format!("rank {r} {}", coord(*at));
        assert!(
            events
                .iter()
                .any(|e| e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == want.as_str()),
            "no process `{want}` in the trace"
        );
    }
    // Each shard is in its rank's own HBM slice: the only links that
    // carried data are pseudo-channels of the listed PEs (a shard anywhere
    // else would be read over the routers), and each listed PE's were used.
    let busy: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "C")
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(!busy.is_empty());
    for link in &busy {
        assert!(
            link.starts_with("HBM pseudo-channel ")
                && list.iter().any(|at| link.ends_with(&format!(" of {}", coord(*at)))),
            "link `{link}` carried data: {busy:?}"
        );
    }
    for at in &list {
        assert!(
            busy.iter().any(|l| l.ends_with(&format!(" of {}", coord(*at)))),
            "{} used no channel of its slice: {busy:?}",
            coord(*at)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_reports_deadlocks_and_bad_machine_arguments() {
    let dir = temp_dir("deadlock");
    let f = write_kernel(
        &dir,
        "wrong.tl",
        "@kernel\ndef wrong(buf: ptr[i32]):\n    got = tl.recv(tl.PREV, [64], i32)\n    tl.send(tl.NEXT, got)\n",
    );
    let o = tlc(&[
        "run",
        &f,
        "--kernel",
        "wrong",
        "--pes",
        "3",
        "--color",
        "never",
        "--arg",
        "buf=zeros(3,i32)",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("deadlock in `wrong`") && e.contains("waiting for data from rank 2") && e.contains("wrong.tl:3:11"),
        "{e}"
    );
    // A grid smaller than the PE set leaves ranks without a program: said
    // before the run, since a deadlock follows when they are talked to.
    for (grid, says) in [("2", "ranks 2 to 3 run no program"), ("3", "rank 3 runs no program")] {
        let o = tlc(&[
            "run",
            &f,
            "--kernel",
            "wrong",
            "--pes",
            "4",
            "--grid",
            grid,
            "--arg",
            "buf=zeros(4,i32)",
        ]);
        assert_eq!(o.status.code(), Some(1));
        assert!(
            stderr(&o).contains(&format!(
                "warning: --grid {grid} gives {grid} programs to 4 PEs: {says}"
            )),
            "{}",
            stderr(&o)
        );
    }
    let base = [
        "run",
        "stdlib/kernels/add.tl",
        "--kernel",
        "add",
        "--arg",
        "x=rand(4,f32)",
        "--arg",
        "y=rand(4,f32)",
        "--arg",
        "out=zeros(4,f32)",
        "--arg",
        "n=4",
    ];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        tlc(&a)
    };
    assert_eq!(with(&["--pes", "9999"]).status.code(), Some(2));
    assert_eq!(with(&["--pes", "0.0.99"]).status.code(), Some(2));
    assert_eq!(with(&["--topology", "nope.yaml"]).status.code(), Some(2));
    assert_eq!(
        with(&["--arg", "x=rand(4,f32)"]).status.code(),
        Some(2),
        "an argument given twice"
    );
    let o = tlc(&[
        "run",
        "stdlib/kernels/add.tl",
        "--kernel",
        "add",
        "--pes",
        "3",
        "--arg",
        "x=rand(4,f32):shard",
        "--arg",
        "y=rand(4,f32)",
        "--arg",
        "out=zeros(4,f32)",
        "--arg",
        "n=4",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("do not split into 3 equal shards"),
        "{}",
        stderr(&o)
    );
    // A 0-d array has no axis 0 to shard; an empty one has nothing to place.
    let npy = dir.join("x.npy");
    for (shape, says) in [
        (
            &[][..],
            "`x` is 0-d (one element): it has no axis 0 to split into 3 shards",
        ),
        (
            &[0][..],
            "holds no elements (shape [0]); a tensor argument needs at least one",
        ),
    ] {
        let a = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(shape));
        ndarray_npy::write_npy(&npy, &a).expect("npy written");
        let x = format!("x=@{}:shard", npy.display());
        let o = tlc(&[
            "run",
            "stdlib/kernels/add.tl",
            "--pes",
            "3",
            "--arg",
            &x,
            "--arg",
            "y=rand(4,f32)",
            "--arg",
            "out=zeros(4,f32)",
            "--arg",
            "n=4",
        ]);
        assert_exit(&o, 2, says);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A probe case whose routes would not fit in memory (every PE of a SIP
/// of 65536 cubes in a line reading one slice) is refused up front.
#[test]
fn probe_refuses_a_case_past_its_memory_budget() {
    let dir = temp_dir("probe-line");
    let yaml = std::fs::read_to_string(repo().join("stdlib/topologies/default.yaml"))
        .expect("default")
        .replacen("cube_grid: [4, 4]", "cube_grid: [65536, 1]", 1)
        .replacen("pe_per_corner: 2", "pe_per_corner: 1", 1);
    let file = dir.join("line.yaml");
    std::fs::write(&file, yaml).expect("write");
    let o = tlc(&[
        "probe",
        "--topology",
        &file.to_string_lossy(),
        "--case",
        "sip-one-slice",
    ]);
    assert_exit(
        &o,
        1,
        "error: probe case `sip-one-slice` crosses up to 34363408384 links (262144 flows), past the 20000000",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn probe_lists_cases_with_breakdowns() {
    let o = tlc(&["probe"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for case in [
        "same-pe",
        "remote-cube-worst",
        "remote-sip",
        "hbm-3-issuers",
        "ucie-east",
        "hotspot",
        "sip-one-slice",
    ] {
        assert!(text.contains(case), "{case} in {text}");
    }
    assert!(text.contains("hbm channel 100.0") && text.contains("%aggr"), "{text}");
    let o = tlc(&["probe", "--case", "hotspot", "--bytes", "1M", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v[0]["flows"], 8);
    assert_eq!(v[0]["bytes_per_flow"], 1 << 20);
    assert!(v[0]["pct_of_aggregate_peak"].as_f64().unwrap_or(0.0) > 90.0);
    assert_eq!(tlc(&["probe", "--case", "nope"]).status.code(), Some(2));
    // A case the topology has no room for says what it needs, and a run
    // of every case says which it left out.
    let o = tlc(&["probe", "--topology", "tiny", "--case", "remote-sip"]);
    assert_exit(
        &o,
        2,
        "probe case `remote-sip` needs more than one SIP; `tiny` has 1 SIP of 1 cube (1 x 1) of 4 PEs",
    );
    let o = tlc(&["probe", "--topology", "tiny"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("these cases are left out: remote-cube-best (needs more than one cube per SIP)")
            && stderr(&o).contains("remote-sip (needs more than one SIP), ucie-east"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&tlc(&["probe"])).contains("left out"));
    assert_eq!(tlc(&["probe", "--bytes", "0"]).status.code(), Some(2));
}

#[test]
fn bench_ccl_prints_the_nccl_tests_table() {
    let o = tlc(&[
        "bench",
        "ccl",
        "--algo",
        "ring_allreduce",
        "--sizes",
        "1K:64K",
        "--pes",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("#        size         count      type   redop     time(us)   algbw(GB/s)   busbw(GB/s)  #wrong"),
        "{text}"
    );
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 7, "1K … 64K: {text}");
    for r in &rows {
        let cols: Vec<&str> = r.split_whitespace().collect();
        assert_eq!(cols.len(), 8, "{r}");
        assert_eq!(cols[2], "float");
        assert_eq!(cols[7], "0", "no wrong elements: {r}");
        assert!(cols[4].parse::<f64>().unwrap() > 0.0);
    }
    assert!(text.contains("# Avg bus bandwidth    :"), "{text}");
    // JSON, another collective and dtype.
    let o = tlc(&[
        "bench",
        "ccl",
        "--op",
        "all_gather",
        "--sizes",
        "4K,64K",
        "--dtype",
        "bf16",
        "--pes",
        "5",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let t = &v[0];
    assert_eq!(t["op"], "all_gather");
    assert_eq!(t["ranks"], 5);
    assert_eq!(t["rows"].as_array().map(Vec::len), Some(2));
    assert_eq!(t["wrong"], 0);
    // A user's algorithm through a user registry.
    let o = tlc(&[
        "bench",
        "ccl",
        "--config",
        "examples/custom_ccl/ccl.yaml",
        "--algo",
        "direct_allreduce",
        "--sizes",
        "8K",
        "--pes",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("direct_allreduce"));
    // Bad usage and a bad registry.
    assert_eq!(tlc(&["bench", "ccl", "--op", "all_to_all"]).status.code(), Some(2));
    assert_eq!(tlc(&["bench", "ccl", "--algo", "nope"]).status.code(), Some(2));
    assert_exit(
        &tlc(&["bench", "ccl", "--config", "no/such/ccl.yaml"]),
        2,
        "error: no/such/ccl.yaml: cannot read:",
    );
    assert_exit(
        &tlc(&["bench", "ccl", "--pes", "0"]),
        2,
        "--pes 0: a launch takes 1 to 256 PEs on this machine",
    );
    assert_eq!(tlc(&["bench", "ccl", "--sizes", "64K:1K"]).status.code(), Some(2));
    let dir = temp_dir("badccl");
    let cfg = dir.join("ccl.yaml");
    std::fs::write(
        &cfg,
        "algorithms:\n  x:\n    collective: all_reduce\n    kernel: x\n    topology: ring\n",
    )
    .expect("write");
    let o = tlc(&["bench", "ccl", "--config", &cfg.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("ccl.yaml:2: algorithms.x: missing field `module`"),
        "{}",
        stderr(&o)
    );
    // An algorithm whose blocks do not fit in TCM fails with a sentence,
    // and the other algorithms are still reported.
    let ring = repo().join("stdlib/ccl/ring_allreduce.tl");
    std::fs::write(
        &cfg,
        format!(
            "algorithms:\n  big_ring:\n    collective: all_reduce\n    module: {}\n    kernel: ring_allreduce\n    \
             topology: ring\n    slot_size_bytes: 262144\n    constexprs: {{CHUNK: 65536}}\n",
            ring.display()
        ),
    )
    .expect("write");
    let o = tlc(&[
        "bench",
        "ccl",
        "--config",
        &cfg.to_string_lossy(),
        "--sizes",
        "1M",
        "--pes",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("error: algorithm `big_ring` at 1048576 bytes: failed on 2 PEs:")
            && err.contains("bytes of TCM on (sip 0, cube 0, pe 0)")
            && !err.contains("TcmCapacity"),
        "{err}"
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("ring_allreduce_hbm"),
        "the others still run"
    );
    // The failed algorithm's table says so (it said `0 OK`).
    let out = String::from_utf8_lossy(&o.stdout);
    let table = out
        .split("# all_reduce with `big_ring`")
        .nth(1)
        .expect("big_ring's table");
    assert!(
        table.contains("# Failed sizes         : 1048576 (bytes; errors above)\n# Out of bounds values : 0 FAILED"),
        "{table}"
    );
    // A user all-reduce `name` (kernel source `src`, in `name.tl`) run on
    // 1 KiB over `pes` PEs with `extra` options.
    let run_user = |name: &str, src: &str, pes: &str, extra: &[&str]| {
        write_kernel(&dir, &format!("{name}.tl"), src);
        std::fs::write(
            &cfg,
            format!(
                "algorithms:\n  {name}:\n    collective: all_reduce\n    module: {name}.tl\n    kernel: {name}\n    \
                 topology: ring\n"
            ),
        )
        .expect("write");
        let config = cfg.to_string_lossy();
        let mut args = vec![
            "bench", "ccl", "--config", &config, "--algo", name, "--sizes", "1K", "--pes", pes,
        ];
        args.extend_from_slice(extra);
        tlc(&args)
    };
    // An algorithm that never ends stops at the time limit, as a failed
    // size.
    let o = run_user(
        "spin",
        "@kernel\ndef spin(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0):\n    i = 0\n    \
         while i < n_elem:\n        i = i + 0\n",
        "2",
        &["--time-limit", "2us"],
    );
    assert_exit(
        &o,
        1,
        "`spin` did not finish within its time limit of 2.000 us: 2 ranks still running",
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("# Failed sizes         : 1024"));
    assert_eq!(tlc(&["bench", "ccl", "--time-limit", "soon"]).status.code(), Some(2));
    // An access past the buffer names the buffer it missed, as `tlc run`
    // does.
    let o = run_user(
        "overrun",
        "@kernel\ndef overrun(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0):\n    \
         x = tl.load(buf + n_elem)\n    tl.store(buf, x)\n",
        "2",
        &[],
    );
    assert_exit(&o, 1, "= note: the access starts 0 bytes past the end of `input[0]`");
    // A deadlock names every blocked rank and why, as `tlc run` does.
    let o = run_user(
        "recv_first",
        "@kernel\ndef recv_first(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0):\n    \
         got = tl.recv(tl.PREV, [16], T)\n    tl.send(tl.NEXT, got)\n",
        "3",
        &[],
    );
    assert_exit(&o, 1, "3 ranks blocked and nothing left to happen");
    assert_exit(
        &o,
        1,
        "= rank 0 (sip 0, cube 0, pe 0) is blocked in a receive: waiting for data from rank 2",
    );
    // `--algo default` runs what ccl.yaml's defaults pick, and says so:
    // each size with the algorithm picked for it, and an algorithm no
    // size picks not at all.
    let o = tlc(&["bench", "ccl", "--algo", "default", "--sizes", "1K,16K", "--pes", "2"]);
    assert_stdout(
        &o,
        0,
        "# the defaults for all_reduce on 2 PEs: `rd_allreduce` below 16384 bytes per rank, `ring_allreduce` from 16384 on",
    );
    // On both SIPs the defaults' `across_sips` level decides.
    let whole = tlc(&["bench", "ccl", "--algo", "default", "--sizes", "4K", "--pes", "all"]);
    assert_stdout(
        &whole,
        0,
        "# the defaults for all_reduce on 256 PEs: `tree_allreduce` below 4194304 bytes per rank, \
         `ring_allreduce` from 4194304 on",
    );
    assert_stdout(&whole, 0, "# all_reduce with `tree_allreduce`");
    let text = String::from_utf8_lossy(&o.stdout);
    let table = |name: &str| -> Vec<u64> {
        let head = format!("# all_reduce with `{name}`");
        let Some(at) = text.find(&head) else { return Vec::new() };
        text[at..]
            .lines()
            .skip(1)
            .take_while(|l| !l.starts_with("# Out of bounds"))
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    };
    assert_eq!(
        (table("rd_allreduce"), table("ring_allreduce")),
        (vec![1024], vec![16384]),
        "{text}"
    );
    let o = tlc(&["bench", "ccl", "--algo", "default", "--sizes", "1K", "--pes", "2"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("with `ring_allreduce`"), "{text}");
    // An all-gather's count is a rank's elements, as nccl-tests prints it,
    // and it has no reduction, in the JSON as in the table.
    let o = tlc(&[
        "bench",
        "ccl",
        "--op",
        "all_gather",
        "--sizes",
        "1K",
        "--pes",
        "8",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let row = &v[0]["rows"][0];
    assert_eq!(
        (row["size"].as_u64(), row["count"].as_u64()),
        (Some(1024), Some(32)),
        "{v}"
    );
    assert_eq!(v[0]["redop"], "none", "{v}");
    // Only a broadcast has a root, and only a reducing collective a
    // reduction; one outside the communicator is a usage error, said once
    // before anything runs.
    assert_eq!(tlc(&["bench", "ccl", "--root", "1"]).status.code(), Some(2));
    assert_exit(
        &tlc(&["bench", "ccl", "--op", "all_gather", "--redop", "max"]),
        2,
        "--redop: all_gather reduces nothing",
    );
    let o = tlc(&[
        "bench",
        "ccl",
        "--op",
        "broadcast",
        "--algo",
        "broadcast",
        "--root",
        "9",
        "--sizes",
        "1K:4K",
        "--pes",
        "4",
    ]);
    assert_exit(&o, 2, "--root 9: past the last rank (3) of the 4 PEs given");
    assert_eq!(stderr(&o).matches("--root 9").count(), 1, "{}", stderr(&o));
    // Slots that cannot fit are an error naming the keys that set them,
    // before anything runs.
    std::fs::write(
        &cfg,
        format!(
            "defaults:\n  n_slots: 8\nalgorithms:\n  big_slots:\n    collective: all_reduce\n    module: {}\n    \
             kernel: ring_allreduce\n    topology: ring\n    slot_size_bytes: 262144\n",
            ring.display()
        ),
    )
    .expect("write");
    let o = tlc(&[
        "bench",
        "ccl",
        "--config",
        &cfg.to_string_lossy(),
        "--algo",
        "big_slots",
        "--sizes",
        "1K",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "ccl.yaml:4: algorithm `big_slots`: its IPCQ slots (8 × 262144 bytes: defaults.n_slots, \
             algorithms.big_slots.slot_size_bytes) do not fit in a PE's TCM (1048576 bytes on `default`)"
        ),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_sim_reports_the_simulators_speed() {
    let run = || {
        let o = tlc(&[
            "bench", "sim", "--pes", "16", "--bytes", "4K", "--runs", "3", "--format", "json",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("json")
    };
    let v = run();
    assert_eq!(v["algorithm"], "ring_allreduce");
    assert_eq!(v["ranks"], 16);
    assert_eq!(v["bytes_per_rank"], 4096);
    assert_eq!(v["requested_bytes_per_rank"], 4096);
    assert_eq!(v["wrong"], 0);
    assert_eq!(v["wall_s"]["runs"], 3);
    let events = v["events"].as_f64().expect("events");
    let f = |k: &str| v["wall_s"][k].as_f64().expect("a wall time");
    let (min, median, max) = (f("min"), f("median"), f("max"));
    assert!(events > 0.0 && min > 0.0 && min <= median && median <= max, "{v}");
    // The rates are the events over those wall times.
    let best = v["events_per_s"]["best"].as_f64().expect("rate");
    let med = v["events_per_s"]["median"].as_f64().expect("rate");
    assert!((best - events / min).abs() <= 1e-6 * best, "{v}");
    assert!((med - events / median).abs() <= 1e-6 * med, "{v}");
    // Another process simulates the same events and time.
    let w = run();
    assert_eq!((&v["events"], &v["simulated_us"]), (&w["events"], &w["simulated_us"]));
    // The human form.
    let o = tlc(&["bench", "sim", "--pes", "4", "--bytes", "1K", "--runs", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("on 4 PEs of `default`, one thread")
            && text.contains("#wrong 0 OK")
            && text.contains("events/s (M)"),
        "{text}"
    );
    // Threads beyond the launch's shards are not used, and it says so: 4
    // PEs of one SIP are one shard.
    let two_threads = [
        "bench",
        "sim",
        "--pes",
        "4",
        "--bytes",
        "1K",
        "--runs",
        "1",
        "--threads",
        "2",
    ];
    let o = tlc(&two_threads);
    assert_stdout(&o, 0, "on 4 PEs of `default`, one thread (of 2 allowed: one shard)");
    let o = tlc(&[&two_threads[..], &["--format", "json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        (&v["threads"], &v["threads_used"]),
        (&serde_json::json!(2), &serde_json::json!(1)),
        "{v}"
    );
    // A size that is not whole elements is rounded, and says so.
    let o = tlc(&["bench", "sim", "--pes", "4", "--bytes", "1001", "--runs", "1"]);
    assert_stdout(
        &o,
        0,
        "1000 bytes of int32 per rank (--bytes 1001 rounded to whole int32 elements)",
    );
    // Bad usage.
    assert_eq!(tlc(&["bench", "sim", "--runs", "0"]).status.code(), Some(2));
    assert_eq!(tlc(&["bench", "sim", "--algo", "all_gather"]).status.code(), Some(2));
    assert_eq!(tlc(&["bench", "sim", "--bytes", "lots"]).status.code(), Some(2));
    assert_eq!(tlc(&["bench", "sim", "--time-limit", "soon"]).status.code(), Some(2));
    // A run past its time limit is an error, as in `bench ccl`.
    let o = tlc(&[
        "bench",
        "sim",
        "--pes",
        "4",
        "--bytes",
        "1K",
        "--runs",
        "1",
        "--time-limit",
        "10ns",
    ]);
    assert_exit(
        &o,
        1,
        "`ring_allreduce` did not finish within its time limit of 10 ns: 4 ranks still running",
    );
}

/// docs/hardware-model.md §8 walks through a trace of one launch; its
/// figures are the simulator's. The command is read from the document and
/// run, and the figures the walk-through leans on are checked against the
/// run, so a change to the ring kernel or the model that moves them fails
/// here until the document is re-read.
#[test]
fn the_worked_trace_example_in_the_docs_is_current() {
    let doc = std::fs::read_to_string(repo().join("docs/hardware-model.md")).expect("the hardware model doc");
    let section = doc
        .split("## 8. Reading a trace")
        .nth(1)
        .expect("section 8 of docs/hardware-model.md");
    let command: String = section
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("tlc run"))
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().trim_end_matches('\\'))
        .collect::<Vec<_>>()
        .join(" ");
    let mut args: Vec<String> = command
        .split_whitespace()
        .skip(1)
        .map(|a| a.trim_matches('\'').to_string())
        .collect();
    let dir = temp_dir("worked-example");
    let trace_at = args
        .iter()
        .position(|a| a == "--trace")
        .expect("the command writes a trace")
        + 1;
    args[trace_at] = dir.join("ring.json").to_string_lossy().into_owned();
    args.extend(["--format".to_string(), "json".to_string()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = tlc(&argv);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json summary");
    let us = v["time_ps"].as_u64().unwrap_or(0) as f64 / 1e6;
    let stated = format!("{us:.3} µs in all");
    assert!(
        section.contains(&stated),
        "the run took {us:.3} µs; §8 should say `{stated}`"
    );
    let busy = |engine: &str| {
        v["engines"]
            .as_array()
            .and_then(|es| es.iter().find(|e| e["engine"] == engine))
            .and_then(|e| e["busy_pct_mean"].as_f64())
            .unwrap_or(-1.0)
    };
    for (engine, phrase) in [("dma", "`dma` is the busiest ("), ("issue", "then `issue` (")] {
        let stated = format!("{phrase}{:.1} %", busy(engine));
        assert!(section.contains(&stated), "§8 should say `{stated}`");
    }
    // The slice named in the text is in the trace, under that name.
    let trace = std::fs::read_to_string(dir.join("ring.json")).expect("the trace");
    let named = section
        .split("(`send ring_allreduce.tl:")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .map(|line_col| format!("send ring_allreduce.tl:{line_col}"))
        .expect("§8 names a send slice");
    assert!(
        trace.contains(&format!("\"{named}\"")),
        "no slice `{named}` in the trace"
    );
}

/// `tlc run --threads N` over both SIPs of the default machine (three PEs
/// on each): the same JSON summary, data and trace on one thread and on
/// two, and the two threads named in the run line.
#[test]
fn run_threads_give_the_same_results() {
    let dir = temp_dir("threads");
    let run = |threads: &str| {
        let out = dir.join(threads);
        let trace = dir.join(format!("{threads}.json"));
        let o = tlc(&[
            "run",
            "stdlib/ccl/ring_allreduce.tl",
            "--kernel",
            "ring_allreduce",
            "-D",
            "T=i32",
            "--pes",
            "0.0.0,0.0.2,0.3.1,1.0.0,1.2.1,1.3.3",
            "--threads",
            threads,
            "--arg",
            "buf=rand((6,1000),i32,7):shard",
            "--arg",
            "n_elem=1000",
            "--format",
            "json",
            "--out",
            &out.to_string_lossy(),
            "--trace",
            &trace.to_string_lossy(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let data = std::fs::read(out.join("buf.npy")).expect("buf.npy");
        let trace = std::fs::read(&trace).expect("trace");
        let err = stderr(&o);
        (o.stdout, data, trace, err)
    };
    let (one, two) = (run("1"), run("2"));
    // The same summary but for where each run wrote its outputs.
    let summary = |stdout: &[u8]| {
        let mut v: serde_json::Value = serde_json::from_slice(stdout).expect("JSON");
        for o in v["outputs"].as_array_mut().expect("outputs") {
            o["file"] = serde_json::Value::Null;
        }
        v
    };
    assert_eq!(summary(&one.0), summary(&two.0), "the JSON summary");
    assert_eq!(one.1, two.1, "the data");
    assert!(one.2 == two.2, "the trace");
    assert!(
        two.3.contains("backend on 2 threads") && !one.3.contains("backend on"),
        "{}\n{}",
        one.3,
        two.3
    );
    let _ = std::fs::remove_dir_all(&dir);
    // No threads is a usage error, on every command that takes them.
    for cmd in [
        &["run", "stdlib/ccl/ring_allreduce.tl", "--kernel", "ring_allreduce"][..],
        &["bench", "ccl"],
        &["bench", "sim"],
    ] {
        let o = tlc(&[cmd, &["--threads", "0"]].concat());
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("invalid value '0' for '--threads <"),
            "{cmd:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn run_survives_a_reader_that_closed_its_streams() {
    // `tlc run ... 2>&1 | head -1`: the reader goes away before tlc writes
    // its summary. The run must still finish, write its outputs and exit 0
    // (it aborted with 134 when printing panicked on the closed pipe).
    let dir = temp_dir("closed-streams");
    let out = dir.to_string_lossy().into_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tlc"))
        .args(ADD_13.iter().copied().chain(["--out", out.as_str()]))
        .current_dir(repo())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tlc runs");
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().expect("tlc exits");
    assert_eq!(status.code(), Some(0));
    assert!(dir.join("out.npy").is_file(), "out.npy written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sizes_past_a_pes_hbm_slice_are_errors_before_any_work() {
    // The default's slice is 16 GiB / 8 PEs = 2 GiB. These once ran (the
    // probe reported a 16 GiB read "from its own slice" at > 100 % of peak)
    // or built 17 GB of host data before the simulator said no.
    let o = tlc(&["probe", "--case", "same-pe", "--bytes", "16G"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("--bytes: 17179869184 bytes do not fit in a PE's HBM slice (2147483648 bytes on `default`)"),
        "{}",
        stderr(&o)
    );
    let o = tlc(&["probe", "--case", "same-pe", "--bytes", "2G"]);
    assert_eq!(o.status.code(), Some(0), "the whole slice is fine: {}", stderr(&o));

    let o = tlc(&["bench", "sim", "--pes", "2", "--bytes", "3G", "--runs", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "algorithm `ring_allreduce` at 3221225472 bytes: each rank needs 3221225472 bytes of HBM for its input buffer, and a PE's HBM slice on `default` holds 2147483648"
        ),
        "{}",
        stderr(&o)
    );
    // An all-gather's output is the world's inputs: 2 × 1 GiB + 1 GiB.
    let o = tlc(&[
        "bench",
        "ccl",
        "--op",
        "all_gather",
        "--pes",
        "2",
        "--sizes",
        "2G",
        "--dtype",
        "i32",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("at 2147483648 bytes: each rank needs 3221225472 bytes of HBM for its input and output buffer"),
        "{}",
        stderr(&o)
    );
    // 1 GiB fits each slice of `large`, but 4,096 ranks of it (8 TiB with
    // the host's copies) fit no host: an error, not the out-of-memory
    // killer minutes later. (Where the host's free memory is known.)
    if std::path::Path::new("/proc/meminfo").exists() {
        assert_exit(
            &tlc(&["bench", "sim", "--topology", "large", "--bytes", "1G", "--runs", "1"]),
            1,
            "4096 ranks need about 8192.0 GiB of host memory for their data, and this machine has",
        );
    }
}

/// A fused elementwise chain's trace slice is named after the operation
/// that makes its result (whose span is the whole expression), not after
/// its first member (a `splat` of a constant); loads and stores keep
/// their own names. The issue unit's busy spans are a thread of their own.
#[test]
fn a_fused_chain_is_named_after_the_operation_making_its_result() {
    let dir = temp_dir("fused-name");
    let kernel = write_kernel(
        &dir,
        "scale.tl",
        "@tl.kernel\n\
         def scale(x: ptr[f32], y: ptr[f32], n: i32, BLOCK: constexpr = 256):\n\
         \x20   offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n\
         \x20   mask = offs < n\n\
         \x20   v = tl.load(x + offs, mask=mask)\n\
         \x20   w = v * 2.0 + 1.0\n\
         \x20   tl.store(y + offs, w, mask=mask)\n",
    );
    let trace = dir.join("t.json");
    let o = tlc(&[
        "run",
        kernel.as_str(),
        "--arg",
        "x=rand(256,f32)",
        "--arg",
        "y=zeros(256,f32)",
        "--arg",
        "n=256",
        "--trace",
        &trace.to_string_lossy(),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json summary");
    let events = &trace_events(&trace);
    // The issue unit has a thread of its own, whose slices add up to the
    // busy share the summary gives it.
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["tid"] == 5 && e["args"]["name"] == "issue"));
    let issue_us: f64 = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"] == 5)
        .map(|e| {
            assert_eq!(e["name"], "issue");
            e["dur"].as_f64().unwrap_or(0.0)
        })
        .sum();
    let issue_pct = v["engines"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["engine"] == "issue"))
        .and_then(|e| e["busy_pct_mean"].as_f64())
        .expect("the issue unit's busy share");
    let elapsed_us = v["time_ps"].as_u64().expect("time") as f64 / 1e6;
    assert!(issue_us > 0.0);
    assert!(
        (issue_us - issue_pct / 100.0 * elapsed_us).abs() < 1e-9 * elapsed_us.max(1.0),
        "issue slices {issue_us} us, summary {issue_pct} % of {elapsed_us} us"
    );
    let mut names: Vec<(u64, String, String)> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"].as_u64().is_some_and(|t| t < 5))
        .map(|e| {
            (
                e["tid"].as_u64().unwrap_or(99),
                e["name"].as_str().unwrap_or("").to_string(),
                e["args"]["source"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            (
                0,
                "load scale.tl:5:9".to_string(),
                "tl.load(x + offs, mask=mask)".to_string()
            ),
            (
                0,
                "store scale.tl:7:5".to_string(),
                "tl.store(y + offs, w, mask=mask)".to_string()
            ),
            (2, "add scale.tl:6:9".to_string(), "v * 2.0 + 1.0".to_string()),
        ]
    );
    // A chain fused across lines (the softmax's `exp` into the next
    // line's `sum`) is named by what it computes and both lines, and
    // lists its members; one on a single line keeps its plain name.
    let softmax = write_kernel(
        &dir,
        "sm.tl",
        "@tl.kernel\n\
         def sm(x: ptr[f32], y: ptr[f32], BLOCK: constexpr = 256):\n\
         \x20   offs = tl.arange(0, BLOCK)\n\
         \x20   v = tl.load(x + offs)\n\
         \x20   e = tl.exp(v - tl.max(v, axis=0))\n\
         \x20   s = tl.sum(e, axis=0)\n\
         \x20   tl.store(y + offs, e / s)\n",
    );
    // The slices of thread `tid` in the trace of `kernel` run on 256 f32.
    let slices = |kernel: &str, tid: u64| -> Vec<serde_json::Value> {
        let o = tlc(&[
            "run",
            kernel,
            "--arg",
            "x=rand(256,f32)",
            "--arg",
            "y=zeros(256,f32)",
            "--trace",
            &trace.to_string_lossy(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let events = &trace_events(&trace);
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == tid)
            .cloned()
            .collect()
    };
    let math: Vec<(String, serde_json::Value)> = slices(&softmax, 2)
        .iter()
        .map(|e| (e["name"].as_str().unwrap_or("").to_string(), e["args"]["fused"].clone()))
        .collect();
    let fused = serde_json::json!([
        "splat sm.tl:5:20",
        "sub sm.tl:5:16",
        "exp sm.tl:5:9",
        "reduce_sum sm.tl:6:9"
    ]);
    assert_eq!(
        math,
        [
            ("reduce_max sm.tl:5:20".to_string(), serde_json::Value::Null),
            ("sub+exp+reduce_sum sm.tl:5-6".to_string(), fused),
            ("div sm.tl:7:24".to_string(), serde_json::Value::Null),
        ]
    );
    // Eight rounds of it fill the MATH queue (8 deep): the issue unit
    // stalls at each of the three groups in turn, and a stall at the chain
    // carries the chain's name, as its MATH slice does.
    let rounds = write_kernel(
        &dir,
        "sm8.tl",
        "@tl.kernel\n\
         def sm8(x: ptr[f32], y: ptr[f32], BLOCK: constexpr = 256):\n\
         \x20   offs = tl.arange(0, BLOCK)\n\
         \x20   v = tl.load(x + offs, mask=offs < BLOCK)\n\
         \x20   for _r in range(8):\n\
         \x20       e = tl.exp(v - tl.max(v, axis=0))\n\
         \x20       v = e / tl.sum(e, axis=0)\n\
         \x20   tl.store(y + offs, v, mask=offs < BLOCK)\n",
    );
    let stalls: std::collections::BTreeSet<(String, String)> = slices(&rounds, 6)
        .iter()
        .map(|e| {
            let why = e["args"]["why"].as_str().unwrap_or("");
            (e["name"].as_str().unwrap_or("").to_string(), why.to_string())
        })
        .collect();
    let full = "the MATH queue is full".to_string();
    assert!(
        stalls.contains(&("sub+exp+reduce_sum sm8.tl:6-7".to_string(), full.clone()))
            && stalls.contains(&("reduce_max sm8.tl:6:24".to_string(), full.clone()))
            && stalls.contains(&("div sm8.tl:7:13".to_string(), full)),
        "{stalls:?}"
    );
    assert!(!stalls.iter().any(|(n, _)| n.starts_with("reduce_sum")), "{stalls:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_stops_at_its_time_limit_and_checks_the_trace_path_first() {
    let dir = temp_dir("time-limit");
    let kernel = write_kernel(
        &dir,
        "spin.tl",
        "@kernel\ndef spin(x: ptr[i32]):\n    i = 0\n    while i >= 0:\n        i = i + 1 - 1\n    tl.store(x + tl.arange(0, 8), tl.zeros([8], i32), mask=tl.arange(0, 8) < 8)\n",
    );
    let run = |extra: &[&str]| {
        let mut a = vec![
            "run",
            kernel.as_str(),
            "--kernel",
            "spin",
            "--pes",
            "2",
            "--arg",
            "x=zeros(8,i32)",
        ];
        a.extend_from_slice(extra);
        tlc(&a)
    };
    let o = run(&["--time-limit", "10us"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("error: `spin` did not finish within its time limit of 10.000 us: 2 ranks still running"),
        "{}",
        stderr(&o)
    );
    // In JSON, the PEs the limit stopped are running, as the diagnostic
    // says, not waiting.
    let o = run(&["--time-limit", "10us", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON error record");
    assert_eq!(v["error"]["kind"], "time_limit", "{v}");
    assert_eq!(v["error"]["limit_ps"], 10_000_000, "{v}");
    for r in v["error"]["ranks"].as_array().expect("ranks") {
        assert_eq!(r["reason"]["kind"], "running", "{v}");
        assert!(r["note"].as_str().is_some_and(|n| n.ends_with("was running")), "{v}");
    }
    for bad in ["5", "0us", "-1ms", "1 week", "2e7s"] {
        let o = run(&[&format!("--time-limit={bad}")]);
        assert_eq!(o.status.code(), Some(2), "--time-limit {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--time-limit"), "{}", stderr(&o));
    }
    // A trace that cannot be written stops the run before it starts.
    let o = run(&["--time-limit", "10us", "--trace", "/nonexistent-dir/t.json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("error: cannot write `/nonexistent-dir/t.json`") && !stderr(&o).contains("time limit"),
        "{}",
        stderr(&o)
    );
    // A run the time limit or a deadlock stopped writes the trace up to
    // there: here the spinning PEs' (which have no engine slices), and
    // the deadlocked ring's loads, which ran before both ranks waited.
    let trace = dir.join("t.json");
    let o = run(&["--time-limit", "10us", "--trace", &trace.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("the run until it stopped"), "{}", stderr(&o));
    let processes = |events: &[serde_json::Value]| events.iter().filter(|e| e["name"] == "process_name").count();
    assert!(processes(&trace_events(&trace)) >= 2);
    let dead = write_kernel(
        &dir,
        "dead.tl",
        "@kernel\ndef dead(x: ptr[i32]):\n    v = tl.load(x + tl.arange(0, 8))\n    \
         w = tl.recv(tl.PREV, [8], i32)\n    tl.send(tl.NEXT, v + w)\n",
    );
    let run_dead = |extra: &[&str]| {
        let mut a = vec!["run", dead.as_str(), "--pes", "2", "--arg", "x=zeros(16,i32):shard"];
        a.extend_from_slice(extra);
        tlc(&a)
    };
    let dead_trace = dir.join("dead.json");
    let o = run_dead(&["--trace", &dead_trace.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("deadlock"), "{}", stderr(&o));
    let events = trace_events(&dead_trace);
    let loads = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.starts_with("load ")))
        .count();
    let sends = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.starts_with("send ")))
        .count();
    assert_eq!((loads, sends), (2, 0), "{events:?}");
    // Each rank's trace ends in the stall it was stuck in, the receive,
    // until the deadlock stopped the run.
    for pid in 0..2 {
        let stalls: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == 6)
            .collect();
        let last = stalls.last().expect("the stall it was stuck in");
        assert!(last["name"].as_str().is_some_and(|n| n.starts_with("recv ")), "{last}");
        assert_eq!(last["args"]["why"], "waits for the message it receives", "{last}");
        assert!(last["dur"].as_f64().unwrap_or(0.0) > 0.0, "{last}");
    }
    // With --format json, a failed run prints the error as JSON on stdout
    // (the diagnostic stays on stderr): each blocked rank, where and why,
    // and the summary of what ran until then.
    let o = run_dead(&["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON error record");
    let error = &v["error"];
    assert_eq!(error["kind"], "deadlock", "{v}");
    // Every record has a one-line message, the diagnostic's headline.
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("deadlock in `dead`") && !m.contains('\n')),
        "{v}"
    );
    let ranks = error["ranks"].as_array().expect("blocked ranks");
    assert_eq!(ranks.len(), 2, "{v}");
    for (r, blocked) in ranks.iter().enumerate() {
        assert_eq!(blocked["rank"], r as u64, "{v}");
        // The file as the diagnostic names it (two files of one name
        // stay apart).
        assert_eq!(blocked["at"], format!("{dead}:4:9"), "{v}");
        assert_eq!(blocked["op"], "recv", "{v}");
        assert_eq!(blocked["reason"]["kind"], "no_data", "{v}");
        assert_eq!(blocked["reason"]["from_rank"], (r as u64 + 1) % 2, "{v}");
    }
    assert!(
        error["diagnostic"]
            .as_str()
            .is_some_and(|d| d.starts_with("error: deadlock in `dead`") && !d.contains('\x1b')),
        "{v}"
    );
    assert_eq!(v["partial"]["pes"], 2, "{v}");
    assert!(v["partial"]["time_ps"].as_u64().is_some_and(|t| t > 0), "{v}");
    assert!(stderr(&o).contains("deadlock in `dead`"), "{}", stderr(&o));
    // A kernel whose blocks overflow the TCM: where they peak, in JSON.
    let big = write_kernel(
        &dir,
        "big.tl",
        "@kernel\ndef big(x: ptr[f32]):\n    offs = tl.arange(0, 524288)\n    \
         tl.store(x + offs, tl.load(x + offs) * 2.0)\n",
    );
    let o = tlc(&["run", big.as_str(), "--arg", "x=zeros(524288,f32)", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON error record");
    let error = &v["error"];
    assert_eq!(error["kind"], "tcm_capacity", "{v}");
    // At the multiply: its operands and result, 2 MiB each (the pointer
    // blocks are address generation's and take no TCM).
    assert_eq!(error["at"], format!("{big}:4:24"), "{v}");
    assert_eq!(
        (error["live_bytes"].as_u64(), error["queues"].as_u64()),
        (Some(6_291_456), Some(1)),
        "{v}"
    );
    assert_eq!(error["have_bytes"], 1_048_576, "{v}");
    assert!(v.get("partial").is_none(), "nothing ran: {v}");
    // A run that fails otherwise leaves no trace file behind.
    let oob = write_kernel(
        &dir,
        "oob.tl",
        "@kernel\ndef oob(x: ptr[i32]):\n    tl.store(x + 100 + tl.arange(0, 8), tl.zeros([8], i32))\n",
    );
    let trace = dir.join("oob.json");
    let o = tlc(&[
        "run",
        oob.as_str(),
        "--arg",
        "x=zeros(8,i32)",
        "--trace",
        &trace.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!trace.exists(), "no trace of a failed run");
    // Nor the --out directories it made (made before the run, so that one
    // that cannot be made stops it before it starts).
    let out = dir.join("new").join("deeper");
    let o = run(&["--time-limit", "10us", "--out", &out.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("time limit") && !dir.join("new").exists(),
        "{}",
        stderr(&o)
    );
    let o = run(&["--out", &out.to_string_lossy(), "--trace", "/nonexistent-dir/t.json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        !dir.join("new").exists(),
        "a trace that cannot be written takes --out away again"
    );
    let o = run(&["--time-limit", "10us", "--out", "/proc/kernbench-nope"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("error: cannot create `/proc/kernbench-nope`") && !stderr(&o).contains("time limit"),
        "{}",
        stderr(&o)
    );
    // The untimed executor has no clock: the limit bounds its
    // instructions, one per cycle (10 us: 10,000 at 1 GHz), and names
    // where the program was.
    let o = tlc(&[
        "run",
        kernel.as_str(),
        "--functional",
        "--arg",
        "x=zeros(8,i32)",
        "--time-limit",
        "10us",
    ]);
    assert_exit(
        &o,
        1,
        "error: stopped after 10000 steps without finishing (`--time-limit` worth of them, one per cycle): a loop \
         that never ends? (kernel `spin`, program (0, 0, 0))",
    );
    assert!(stderr(&o).contains("spin.tl:4:11"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_tp_times_and_checks_every_layer_at_every_size() {
    let o = tlc(&[
        "bench", "tp", "--tokens", "64", "--hidden", "128", "--ffn", "256", "--pes", "2", "--format", "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = v["rows"].as_array().expect("rows");
    // Three layers at tensor-parallel sizes 1 and 2 (the default machine's
    // two SIPs).
    let got: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["layer"].as_str().unwrap_or("").to_string(),
                r["tp"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = ["column", "row", "mlp"]
        .iter()
        .flat_map(|l| [1, 2].map(|tp| (l.to_string(), tp)))
        .collect();
    assert_eq!(got, want);
    for r in rows {
        assert_eq!(r["ok"], true, "{r}");
        let (total, gemm, comm) = (
            r["total_ps"].as_u64().unwrap_or(0),
            r["gemm_ps"].as_u64().unwrap_or(0),
            r["comm_ps"].as_u64().unwrap_or(0),
        );
        assert!(gemm > 0 && gemm + comm <= total, "{r}");
        // One rank has nothing to communicate; two always do.
        assert_eq!(comm == 0, r["tp"] == 1, "{r}");
    }
    // Two ranks halve each rank's GEMM work: rank 0's GEMMs take less.
    let gemm = |k: usize| rows[k]["gemm_ps"].as_u64().unwrap_or(0);
    assert!(gemm(1) < gemm(0) && gemm(3) < gemm(2) && gemm(5) < gemm(4), "{v}");
    // The async-TP kernels at two ranks, each against the same work
    // unfused, which contains the GEMM.
    let fused = v["async"].as_array().expect("async");
    let ops: Vec<(&str, u64)> = fused
        .iter()
        .map(|r| (r["op"].as_str().unwrap_or(""), r["tp"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(ops, [("ag+gemm", 2), ("gemm+rs", 2)]);
    for r in fused {
        assert_eq!(r["ok"], true, "{r}");
        let ps = |k: &str| r[k].as_u64().unwrap_or(0);
        assert!(
            ps("fused_ps") > 0 && ps("unfused_ps") > ps("gemm_ps") && ps("gemm_ps") > 0,
            "{r}"
        );
    }
    // Ring attention, full then causal, at one and two ranks, right. (At
    // 64 positions two ranks take longer than one: the SIP link's 500 ns
    // per step outweighs half a block of work; tests/attention.rs checks
    // the speedup at a size where it shows.)
    let att = v["attention"].as_array().expect("attention");
    let runs: Vec<(bool, u64)> = att
        .iter()
        .map(|r| (r["causal"].as_bool().unwrap_or(false), r["tp"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(runs, [(false, 1), (false, 2), (true, 1), (true, 2)]);
    let time = |k: usize| att[k]["time_ps"].as_u64().unwrap_or(0);
    assert!(att.iter().all(|r| r["ok"] == true), "{v}");
    assert!((0..4).all(|k| time(k) > 0), "{v}");
    let text =
        String::from_utf8_lossy(&tlc(&["bench", "tp", "--tokens", "32", "--hidden", "64", "--ffn", "128"]).stdout)
            .to_string();
    assert!(
        text.contains("  layer  tp   total(us)    gemm(us)    comm(us)   other(us)   TFLOP/s  err/bound  check"),
        "{text}"
    );
    assert!(
        text.contains("     op  tp   fused(us)  unfused(us)    gemm(us)   saved  err/bound  check"),
        "{text}"
    );
    assert!(
        text.contains("   attn  tp    time(us)   TFLOP/s  speedup  err/bound  check"),
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| l.ends_with("  OK")).count(), 12, "{text}");
    assert_eq!(
        tlc(&["bench", "tp", "--pes", "3", "--tokens", "64"]).status.code(),
        Some(2)
    );
    assert_eq!(tlc(&["bench", "tp", "--hidden", "0"]).status.code(), Some(2));
}

#[test]
fn emit_ir_binds_the_layout_constexprs_to_the_topology() {
    // hierarchical_allreduce declares CUBE_PES and SIP_CUBES (defaults: the
    // default machine's 8 and 16); --topology binds the machine's own, as
    // the runtime does for registered collectives, and -D still wins.
    // (`tlc run` binds them with the same helper, `bind_layout`.)
    let hierarchical = "stdlib/ccl/hierarchical_allreduce.tl";
    let constexprs = |file: &str, extra: &[&str]| {
        let mut args = vec!["emit-ir", file];
        args.extend(extra);
        let o = tlc(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        text.lines()
            .find(|l| l.contains("// constexprs:"))
            .map(|l| l.trim().to_string())
            .unwrap_or(text)
    };
    assert_eq!(
        constexprs(hierarchical, &[]),
        "// constexprs: T=f32, OP=0, CUBE_PES=8, SIP_CUBES=16, CHUNK=4096, WINDOW=3"
    );
    assert_eq!(
        constexprs(hierarchical, &["--topology", "tiny"]),
        "// constexprs: T=f32, OP=0, CUBE_PES=4, SIP_CUBES=1, CHUNK=4096, WINDOW=3"
    );
    assert_eq!(
        constexprs(hierarchical, &["--topology", "tiny", "-D", "CUBE_PES=2"]),
        "// constexprs: T=f32, OP=0, CUBE_PES=2, SIP_CUBES=1, CHUNK=4096, WINDOW=3"
    );
    // A kernel without them is unaffected (no "-D matches nothing" error).
    assert_eq!(
        constexprs("stdlib/kernels/add.tl", &["--topology", "tiny"]),
        "// constexprs: BLOCK=1024"
    );
}

#[test]
fn check_binds_the_layout_constexprs_to_the_topology() {
    // A kernel written for cubes of 8 PEs: `tlc check` checks it as it
    // would run on the machine (default: the default machine's 8), and
    // --topology tiny (4 PEs per cube) makes its assertion fail; -D wins
    // over the topology, and files without layout constexprs are unaffected.
    let dir = temp_dir("check_layout");
    let file = write_kernel(
        &dir,
        "eight.tl",
        "@kernel\ndef k(x: ptr[f32], CUBE_PES: constexpr = 8):\n    \
         tl.static_assert(CUBE_PES == 8, \"written for cubes of 8 PEs\")\n    \
         tl.store(x + tl.arange(0, CUBE_PES), tl.zeros([CUBE_PES], f32))\n",
    );
    let check = |extra: &[&str]| {
        let mut args = vec!["check", &file, "--color", "never"];
        args.extend(extra);
        tlc(&args)
    };
    assert_exit(&check(&[]), 0, "");
    assert_exit(&check(&["--topology", "tiny"]), 1, "written for cubes of 8 PEs");
    assert_exit(&check(&["--topology", "tiny", "-D", "CUBE_PES=8"]), 0, "");
    assert_exit(&tlc(&["check", "stdlib/kernels/add.tl", "--topology", "tiny"]), 0, "");
    assert_exit(&check(&["--topology", "nope.yaml"]), 2, "nope.yaml");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a user found: outputs are results (stdout, and in the JSON), a
/// trace may go into `--out`'s directory, one unreadable file does not
/// hide the others' diagnostics, a negative value reaches its option's
/// parser, and `bench ccl` says when it rounds a size and what one rank
/// means.
#[test]
fn run_and_bench_outputs_are_where_users_look() {
    let dir = temp_dir("outputs");
    let add = "stdlib/kernels/add.tl";
    let args = [
        "--arg",
        "x=rand(100,f32)",
        "--arg",
        "y=zeros(100,f32)",
        "--arg",
        "out=zeros(100,f32)",
        "--arg",
        "n=100",
    ];
    let run = |extra: &[&str]| {
        let mut v = vec!["run", add];
        v.extend(args);
        v.extend(extra);
        tlc(&v)
    };
    assert_stdout(&run(&[]), 0, "  out: f32[100]  sum ");
    let o = run(&["--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let outs = v["outputs"].as_array().expect("outputs");
    assert_eq!(outs.len(), 3, "{v}");
    assert_eq!(outs[2]["name"], "out");
    assert_eq!(outs[2]["shape"], serde_json::json!([100]));
    // out = x + 0: the same sum as x.
    assert_eq!(outs[2]["sum"], outs[0]["sum"], "{v}");
    let o_dir = dir.join("o");
    let trace = o_dir.join("t.json");
    let (o_dir, trace) = (o_dir.to_string_lossy(), trace.to_string_lossy());
    assert_exit(&run(&["--out", &o_dir, "--trace", &trace]), 0, "t.json");
    assert!(dir.join("o/out.npy").exists() && dir.join("o/t.json").exists());
    assert_exit(&run(&["--pes", "-1"]), 2, "--pes `-1`");

    let d1 = dir.join("d1");
    std::fs::create_dir_all(&d1).expect("d1");
    write_kernel(&d1, "a.tl", "@kernel\ndef k(x: ptr[f32]):\n    tl.lood(x)\n");
    std::fs::write(d1.join("zz.tl"), [0xffu8, 0xfe]).expect("binary file");
    let o = tlc(&["check", &d1.to_string_lossy(), "--color", "never"]);
    // Unreadable is bad usage (exit 2), as for emit-ir and run; the other
    // file's diagnostics are still shown, and the byte is located.
    assert_exit(&o, 2, "zz.tl` is not UTF-8 text: byte 0xff at line 1, column 1");
    assert!(
        stderr(&o).contains("`tl` has no built-in named `lood`"),
        "{}",
        stderr(&o)
    );
    // In JSON, the unreadable file is a line of the diagnostics' stream.
    let o = tlc(&["check", &d1.to_string_lossy(), "--format", "json"]);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["code"], "E0101", "{lines:?}");
    assert!(
        lines[1]["file"].as_str().is_some_and(|f| f.ends_with("zz.tl")),
        "{lines:?}"
    );
    assert!(
        lines[1]["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("is not UTF-8 text: byte 0xff at line 1, column 1")),
        "{lines:?}"
    );
    // A folder with no `.tl` file is a usage error; a folder reached again
    // through a symbolic link is walked once.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("empty");
    assert_exit(&tlc(&["check", &empty.to_string_lossy()]), 2, "no `.tl` file in folder");
    #[cfg(unix)]
    {
        let looped = dir.join("looped");
        std::fs::create_dir_all(looped.join("sub")).expect("looped");
        write_kernel(&looped, "ok.tl", "@kernel\ndef k(x: ptr[f32]):\n    tl.store(x, 1.0)\n");
        let _ = std::os::unix::fs::symlink("..", looped.join("sub/up"));
        let o = tlc(&["check", &looped.to_string_lossy(), "--format", "json"]);
        assert_eq!(
            (o.status.code(), o.stdout.is_empty()),
            (Some(0), true),
            "{}",
            stderr(&o)
        );
        let o = tlc(&["check", &looped.to_string_lossy(), &looped.to_string_lossy()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }

    let o = tlc(&[
        "bench",
        "ccl",
        "--algo",
        "ring_allreduce",
        "--pes",
        "1",
        "--sizes",
        "4K,3001",
        "--dtype",
        "f32",
    ]);
    for want in [
        "on 1 PE of `default`, float sum",
        "# reference: one rank, no ring",
        "# Rounded sizes        : 3001 → 3000 (bytes: whole float elements)",
    ] {
        assert_stdout(&o, 0, want);
    }
    // Sizes that round to one element are one row, not three alike.
    let o = tlc(&[
        "bench",
        "ccl",
        "--algo",
        "ring_allreduce",
        "--pes",
        "4",
        "--sizes",
        "1:4",
    ]);
    assert_stdout(
        &o,
        0,
        "# Rounded sizes        : 1 → 4, 2 → 4 (bytes: whole float elements)",
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("4 ")).collect();
    assert_eq!(rows.len(), 1, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tlc run --format json` prints one JSON object on stdout however it
/// ends: a failure before or after the simulation is a record of its kind
/// (usage, topology, compile, io, and for `--functional` exec), with the
/// exit code of the human form; `--functional` itself reports in JSON.
#[test]
fn run_json_reports_every_failure_as_one_record() {
    let dir = temp_dir("json-failures");
    let record = |o: &Output, code: i32, kind: &str| -> serde_json::Value {
        assert_eq!(o.status.code(), Some(code), "{}", stderr(o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(text.lines().count(), 1, "one line: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("a JSON record");
        assert_eq!(v["error"]["kind"], kind, "{v}");
        assert!(stderr(o).contains("error"), "the human form too: {}", stderr(o));
        v["error"].clone()
    };
    let add = ["run", "stdlib/kernels/add.tl", "--format", "json"];
    // A bad argument: the message the human form prints.
    let e = record(&tlc(&[&add[..], &["--pes", "0.0.+1"]].concat()), 2, "usage");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("--pes `0.0.+1`: expected"),
        "{e}"
    );
    let e = record(&tlc(&[&add[..], &["--kernel", "nope"]].concat()), 2, "usage");
    assert!(
        e["message"].as_str().unwrap_or("").contains("defines no kernel `nope`"),
        "{e}"
    );
    // A --stdlib that is no folder is bad usage, before anything looks in
    // it (here and in `bench ccl`).
    let e = record(
        &tlc(&[&add[..], &["--stdlib", "/nonexistent-kernbench"]].concat()),
        2,
        "usage",
    );
    assert_eq!(e["message"], "--stdlib `/nonexistent-kernbench`: no such folder", "{e}");
    assert_exit(
        &tlc(&["bench", "ccl", "--stdlib", "/nonexistent-kernbench", "--sizes", "1K"]),
        2,
        "--stdlib `/nonexistent-kernbench`: no such folder",
    );
    // So is a $KERNBENCH_STDLIB that is no folder.
    let o = Command::new(env!("CARGO_BIN_EXE_tlc"))
        .args(["check", "stdlib/kernels/add.tl"])
        .env("KERNBENCH_STDLIB", "/nonexistent-kernbench")
        .current_dir(repo())
        .output()
        .expect("tlc runs");
    assert_exit(&o, 2, "KERNBENCH_STDLIB `/nonexistent-kernbench`: no such folder");
    // -D reads Python's integer literals, and refuses one past 64 bits.
    assert_eq!(
        tlc(&["check", "-D", "BLOCK=0x40", "stdlib/kernels/add.tl"])
            .status
            .code(),
        Some(0)
    );
    assert_exit(
        &tlc(&["check", "-D", "BLOCK=99999999999999999999", "stdlib/kernels/add.tl"]),
        2,
        "`99999999999999999999` does not fit a 64-bit integer",
    );
    // clap's whole message (what is missing), and no panic on an argument
    // that is not UTF-8.
    let e = record(&tlc(&["run", "--format", "json"]), 2, "usage");
    assert!(e["message"].as_str().unwrap_or("").contains("<FILE>"), "{e}");
    {
        use std::os::unix::ffi::OsStrExt;
        let o = Command::new(env!("CARGO_BIN_EXE_tlc"))
            .args(["run", "--bogus", "--format", "json"])
            .arg(std::ffi::OsStr::from_bytes(b"\xff.tl"))
            .current_dir(repo())
            .output()
            .expect("tlc runs");
        record(&o, 2, "usage");
    }
    // One clap refuses, too.
    let e = record(&tlc(&[&add[..], &["--bogus"]].concat()), 2, "usage");
    assert!(e["message"].as_str().unwrap_or("").contains("'--bogus'"), "{e}");
    // A topology file with a bad key: its file, line and key path.
    let topo = dir.join("t.yaml");
    std::fs::write(&topo, "name: x\nclock_ghz: -1\n").expect("topology written");
    let topo = topo.to_string_lossy().into_owned();
    let e = record(&tlc(&[&add[..], &["--topology", &topo]].concat()), 1, "topology");
    assert_eq!(e["file"], topo.as_str(), "{e}");
    assert!(e["line"].as_u64().is_some(), "{e}");
    // A kernel with errors: the diagnostics as `tlc check --format json`
    // gives them.
    let bad = write_kernel(
        &dir,
        "bad.tl",
        "@kernel\ndef bad(x: ptr[f32]):\n    y = tl.load(x + tl.arange(0, 4)\n",
    );
    let e = record(&tlc(&["run", &bad, "--format", "json"]), 1, "compile");
    let d = &e["diagnostics"][0];
    assert_eq!(
        (d["code"].as_str(), d["line"].as_u64(), d["column"].as_u64()),
        (Some("E0012"), Some(3), Some(16)),
        "{e}"
    );
    assert_eq!(d["file"], bad.as_str(), "{e}");
    // A trace that cannot be written (a directory in its way): nothing ran.
    let e = record(
        &tlc(&[
            &add[..],
            &[
                "--arg",
                "x=zeros(8,f32)",
                "--arg",
                "y=zeros(8,f32)",
                "--arg",
                "out=zeros(8,f32)",
                "--arg",
                "n=8",
                "--trace",
                dir.to_str().unwrap_or(""),
            ],
        ]
        .concat()),
        1,
        "io",
    );
    assert!(e["message"].as_str().unwrap_or("").starts_with("cannot write"), "{e}");
    // --functional: its error and its success in JSON.
    let oob = write_kernel(
        &dir,
        "oob.tl",
        "@kernel\ndef oob(x: ptr[i32]):\n    tl.store(x + 100 + tl.arange(0, 8), tl.zeros([8], i32))\n",
    );
    let e = record(
        &tlc(&[
            "run",
            &oob,
            "--arg",
            "x=zeros(8,i32)",
            "--functional",
            "--format",
            "json",
        ]),
        1,
        "exec",
    );
    assert_eq!(e["at"], format!("{oob}:3:5"), "{e}");
    assert_eq!(e["program"], serde_json::json!([0, 0, 0]), "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("outside every allocation")),
        "{e}"
    );
    let ok = write_kernel(
        &dir,
        "ok.tl",
        "@kernel\ndef ok(x: ptr[i32]):\n    tl.store(x + tl.arange(0, 8), tl.full([8], 3, i32))\n",
    );
    let o = tlc(&[
        "run",
        &ok,
        "--arg",
        "x=zeros(8,i32)",
        "--functional",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON summary");
    assert_eq!(
        (v["functional"].as_bool(), v["programs"].as_u64()),
        (Some(true), Some(1)),
        "{v}"
    );
    assert_eq!(
        (v["outputs"][0]["name"].as_str(), v["outputs"][0]["sum"].as_f64()),
        (Some("x"), Some(24.0)),
        "{v}"
    );
    // Integer outputs are summed exactly and shown as integers, in the
    // JSON and on the summary line.
    assert!(
        v["outputs"][0]["sum"].is_i64() && v["outputs"][0]["max"].is_i64(),
        "{v}"
    );
    let o = tlc(&["run", &ok, "--arg", "x=zeros(8,i32)"]);
    assert_stdout(&o, 0, "  x: i32[8]  sum 24  min 3  max 3\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_json_command_reports_a_failure_as_one_record() {
    let dir = temp_dir("json-failures-all");
    let record = |args: &[&str], code: i32, kind: &str| -> serde_json::Value {
        let o = tlc(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(text.lines().count(), 1, "{args:?}: one line: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("a JSON record");
        assert_eq!(v["error"]["kind"], kind, "{args:?}: {v}");
        assert!(stderr(&o).contains("error"), "the human form too: {}", stderr(&o));
        v["error"].clone()
    };
    // The message is the first line of the human form's error.
    let message = |e: &serde_json::Value| e["message"].as_str().unwrap_or("").to_string();
    let e = record(&["check", "/nonexistent-kernbench.tl", "--format", "json"], 2, "usage");
    assert_eq!(message(&e), "no such file or folder: `/nonexistent-kernbench.tl`");
    let e = record(&["check", "stdlib", "--format", "json", "--bogus"], 2, "usage");
    assert!(message(&e).contains("'--bogus'"), "{e}");
    let e = record(
        &["emit-ir", "/nonexistent-kernbench.tl", "--format", "json"],
        2,
        "usage",
    );
    assert!(
        message(&e).starts_with("cannot read `/nonexistent-kernbench.tl`"),
        "{e}"
    );
    let e = record(
        &["topology", "/nonexistent-kernbench.yaml", "--format", "json"],
        2,
        "usage",
    );
    assert!(message(&e).contains("cannot read"), "{e}");
    let e = record(&["bench", "sim", "--bytes", "7Q", "--format", "json"], 2, "usage");
    assert!(message(&e).starts_with("--bytes: `7Q` is not a size"), "{e}");
    let e = record(
        &["bench", "ccl", "--sizes", "1K", "--pes", "99999", "--format", "json"],
        2,
        "usage",
    );
    assert!(message(&e).starts_with("--pes 99999"), "{e}");
    let e = record(&["bench", "tp", "--tokens", "0", "--format", "json"], 2, "usage");
    assert_eq!(message(&e), "--tokens: expected at least 1");
    let e = record(&["probe", "--case", "nope", "--format", "json"], 2, "usage");
    assert!(message(&e).starts_with("no probe case `nope`"), "{e}");
    // A topology that does not validate is not bad usage: its record
    // says where, as `tlc run`'s does, in every command that loads one.
    let topo = dir.join("t.yaml");
    std::fs::write(&topo, "name: x\nclock_ghz: -1\n").expect("topology written");
    let topo = topo.to_string_lossy().into_owned();
    for args in [
        &["topology", &topo, "--format", "json"][..],
        &["probe", "--topology", &topo, "--format", "json"],
        &["bench", "sim", "--topology", &topo, "--format", "json"],
    ] {
        let e = record(args, 1, "topology");
        assert!(message(&e).contains("clock_ghz"), "{e}");
        assert_eq!(
            (e["file"].as_str(), e["line"].as_u64()),
            (Some(topo.as_str()), Some(2)),
            "{e}"
        );
    }
    // `emit-ir` on a kernel with errors: its diagnostics, as `tlc run`
    // gives them.
    let bad = write_kernel(
        &dir,
        "bad.tl",
        "@kernel\ndef bad(x: ptr[f32]):\n    y = tl.load(x + tl.arange(0, 4)\n",
    );
    let e = record(&["emit-ir", &bad, "--format", "json"], 1, "compile");
    assert_eq!(e["diagnostics"][0]["code"], "E0012", "{e}");
    // A file that is not UTF-8 has no diagnostics, only the error.
    let latin = dir.join("latin.tl");
    std::fs::write(&latin, b"\xff\xfe").expect("file written");
    let e = record(&["check", &latin.to_string_lossy(), "--format", "json"], 2, "usage");
    assert!(message(&e).contains("latin.tl"), "{e}");
    let e = record(&["emit-ir", &latin.to_string_lossy(), "--format", "json"], 2, "usage");
    assert!(
        message(&e).contains("latin.tl` is not UTF-8 text: byte 0xff at line 1"),
        "{e}"
    );
    // A syntax error that hides every kernel: its diagnostics, not an
    // empty list.
    let hidden = write_kernel(&dir, "hidden.tl", "x = = 1\n");
    let e = record(&["emit-ir", &hidden, "--format", "json"], 1, "compile");
    assert_eq!(e["diagnostics"][0]["code"], "E0010", "{e}");
    // An algorithm that does not compile is in `bench ccl`'s JSON.
    let broken = write_kernel(
        &dir,
        "broken.tl",
        "@kernel\ndef broken(buf: ptr[f32], n_elem: i32):\n    tl.store(buf, nope)\n",
    );
    let cfg = dir.join("ccl.yaml");
    std::fs::write(
        &cfg,
        format!(
            "algorithms:\n  broken:\n    collective: all_reduce\n    module: {broken}\n    kernel: broken\n    \
             topology: ring\n"
        ),
    )
    .expect("config written");
    let o = tlc(&[
        "bench",
        "ccl",
        "--config",
        &cfg.to_string_lossy(),
        "--algo",
        "broken",
        "--sizes",
        "1K",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON array");
    assert_eq!(
        (&v[0]["algorithm"], &v[0]["ok"], v[0]["error"].as_str().is_some()),
        (&serde_json::json!("broken"), &serde_json::json!(false), true),
        "{v}"
    );
    // A kernel's prints go to stderr when stdout is JSON.
    let prints = write_kernel(
        &dir,
        "prints.tl",
        "@kernel\ndef prints(x: ptr[i32]):\n    tl.device_print(\"n\", tl.program_id(0) + 4)\n",
    );
    for mode in [&["--functional"][..], &[]] {
        let o = tlc(&[
            &["run", prints.as_str(), "--arg", "x=zeros(8,i32)", "--format", "json"][..],
            mode,
        ]
        .concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            serde_json::from_slice::<serde_json::Value>(&o.stdout).is_ok(),
            "{mode:?}"
        );
        assert!(stderr(&o).contains("pid (0, 0, 0) n 4"), "{mode:?}: {}", stderr(&o));
        let o = tlc(&[&["run", prints.as_str(), "--arg", "x=zeros(8,i32)"][..], mode].concat());
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("pid (0, 0, 0) n 4\n"),
            "{mode:?}"
        );
    }
    // Without --format json, stdout stays empty.
    let o = tlc(&["probe", "--case", "nope"]);
    assert_eq!((o.status.code(), o.stdout.len()), (Some(2), 0), "{}", stderr(&o));
    // A failure that prints its own result keeps it: `check` gives the
    // diagnostics, one per line, and nothing else.
    let o = tlc(&["check", &bad, "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v.get("error").is_none())),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tensor `--out` cannot write (a directory in its way) loses no other
/// file and not the summary: the others are written, the human summary is
/// shown, and the run fails naming the file.
#[test]
fn an_output_that_cannot_be_written_loses_no_other() {
    let dir = temp_dir("out-partial");
    std::fs::create_dir_all(dir.join("y.npy")).expect("a directory in y.npy's way");
    let out = dir.to_string_lossy().into_owned();
    let o = tlc(&[
        "run",
        "stdlib/kernels/add.tl",
        "--kernel",
        "add",
        "-D",
        "BLOCK=4",
        "--arg",
        "x=rand(10,f32,1)",
        "--arg",
        "y=rand(10,f32,2)",
        "--arg",
        "out=zeros(10,f32)",
        "--arg",
        "n=10",
        "--out",
        &out,
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("y.npy"), "{e}");
    assert!(dir.join("x.npy").is_file() && dir.join("out.npy").is_file(), "{e}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("simulated time"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Address generation whose operand is still being computed (here `k`,
/// the end of a reduction on the MATH engine) does not stall the issue
/// unit (DESIGN §2: issue stalls only for a scalar it reads, a blocking
/// receive or wait, or a full queue): it dispatches and goes on, the load
/// after it starts at once, and the store that takes the addresses starts
/// once the reduction has ended.
#[test]
fn an_address_operand_wait_delays_the_access_not_the_issue_unit() {
    let dir = temp_dir("address-wait");
    let kernel = write_kernel(
        &dir,
        "st2.tl",
        "@kernel\ndef st2(y: ptr[i32], o: ptr[i32], BLOCK: constexpr = 8192):\n    offs = tl.arange(0, BLOCK)\n    \
         k = tl.sum(tl.zeros((BLOCK,), tl.int32) + 1)\n    v = tl.load(y + offs)\n    \
         tl.store(o + (offs + k), v + 1)\n",
    );
    let trace = dir.join("t.json");
    let run = |extra: &[&str]| {
        let mut a = vec![
            "run",
            &kernel,
            "--arg",
            "y=zeros(8192,i32)",
            "--arg",
            "o=zeros(16384,i32)",
        ];
        a.extend(extra);
        tlc(&a)
    };
    let o = run(&["--trace", &trace.to_string_lossy()]);
    // o[8192..] = y + 1 (k = 8192), the rest untouched.
    assert_stdout(&o, 0, "  o: i32[16384]  sum 8192  min 0  max 1\n");
    // The issue unit's busy spans (thread 5) follow one another with no
    // gap, which would be a stall (thread 6).
    let never_waits = |events: &[serde_json::Value]| {
        let (busy, stalls) = (slices_on(events, 0, 5), slices_on(events, 0, 6));
        assert!(
            busy.windows(2).all(|w| w[1].0 <= w[0].1 + 1e-9),
            "the issue unit waited: {busy:?} {stalls:?}"
        );
        stalls
    };
    let events = &trace_events(&trace);
    let stalls = never_waits(events);
    let on = |tid: u64| slices_on(events, 0, tid);
    let (dma, math) = (on(0), on(2));
    assert!(
        stalls.iter().all(|s| s.3 != "waits for a value not produced yet"),
        "{stalls:?}"
    );
    let reduce = math
        .iter()
        .find(|m| m.2.starts_with("reduce_sum"))
        .expect("the reduction");
    assert_eq!(dma.len(), 2, "{dma:?}");
    assert!(dma[0].1 < reduce.1, "the load needs no `k`: {dma:?} {math:?}");
    assert!(dma[1].0 >= reduce.1 - 1e-9, "the store waits for `k`: {dma:?} {math:?}");
    // An `arange` for addresses beside an unrelated chain (`zeros`) of
    // one iteration space: its own group, ready when issued, so the
    // issue unit never waits (it waited 125 ns for the chain when the
    // two were fused).
    let beside = write_kernel(
        &dir,
        "beside.tl",
        "@kernel\ndef beside(y: ptr[f32], BLOCK: constexpr = 8192):\n    offs = tl.arange(0, BLOCK)\n    \
         z = tl.zeros((BLOCK,), tl.float32)\n    tl.store(y + offs, z)\n    s = y + BLOCK\n    tl.store(s + offs, z)\n",
    );
    let o = tlc(&[
        "run",
        &beside,
        "--arg",
        "y=zeros(16384,f32)",
        "--trace",
        &trace.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    never_waits(&trace_events(&trace));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A deadlock across SIPs is dated by the arrival of the last message (its
/// last byte lands in the receiver's slots after the event that took it
/// over from the other SIP): the same time the partial summary ends at.
#[test]
fn a_deadlock_across_sips_is_dated_by_its_last_arrival() {
    let dir = temp_dir("deadlock-sips");
    let kernel = write_kernel(
        &dir,
        "full20.tl",
        "@kernel\ndef full20(buf: ptr[i32]):\n    r = tl.rank()\n    lanes = tl.arange(0, 1024)\n    \
         for i in range(20):\n        tl.send(1 - r, lanes + i)\n    acc = lanes * 0\n    for i in range(20):\n        \
         acc = acc + tl.recv(1 - r, [1024], i32)\n    tl.store(buf + lanes, acc)\n",
    );
    let o = tlc(&[
        "run",
        &kernel,
        "--pes",
        "0.0.0,1.0.0",
        "--arg",
        "buf=zeros((2,1024),i32):shard",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON error record");
    assert_eq!(v["error"]["kind"], "deadlock", "{v}");
    let (at, end) = (v["error"]["at_ps"].as_u64(), v["partial"]["end_ps"].as_u64());
    assert!(
        at.is_some() && at == end,
        "deadlock at {at:?}, run ends at {end:?}: {v}"
    );
    for r in v["error"]["ranks"].as_array().expect("ranks") {
        assert_eq!(r["reason"]["kind"], "queue_full", "{v}");
        assert_eq!(r["reason"]["peer_finished"], false, "{v}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
