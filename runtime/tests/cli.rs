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
