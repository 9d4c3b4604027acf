//! YAML configuration files (`topology.yaml`, `ccl.yaml`): deserialization
//! into typed structs with errors that name the file, the line and the key
//! path (`topology.yaml:12: cube.pe_layout.pe_per_corner: expected a
//! positive integer of at most 65536, got -1`).

use serde::de::DeserializeOwned;
use std::fmt;

/// A configuration file that could not be used.
#[derive(Clone, Debug, PartialEq)]
pub struct YamlError {
    pub file: String,
    pub line: Option<usize>,
    /// Dotted key path (`cube.pe_layout.pe_per_corner`), empty for the file.
    pub path: String,
    pub message: String,
    /// The file could not be read at all (bad usage, rather than a bad file).
    pub unreadable: bool,
}

impl YamlError {
    /// An error about key `path` of `text` (its line found by indentation).
    pub fn at(file: &str, text: &str, path: &str, message: String) -> YamlError {
        YamlError {
            file: file.to_string(),
            line: key_or_parent_line(text, path),
            path: path.to_string(),
            message,
            unreadable: false,
        }
    }

    /// The file could not be read.
    pub fn unreadable(file: &str, message: String) -> YamlError {
        YamlError {
            file: file.to_string(),
            line: None,
            path: String::new(),
            message,
            unreadable: true,
        }
    }
}

/// Reads configuration file `path` (named `file` in errors) as text. An
/// unreadable file is bad usage; one that is not UTF-8 is too, but named
/// at the line of its first bad byte. `hint` follows an I/O error's
/// message (the presets a topology could have been).
pub fn read(path: &std::path::Path, file: &str, hint: &str) -> Result<String, YamlError> {
    use kernbench_compiler::text::{read_text, ReadError};
    read_text(path).map_err(|e| match e {
        ReadError::Io(e) => YamlError::unreadable(file, format!("cannot read: {e}{hint}")),
        ReadError::NotUtf8 { byte, line, column } => YamlError {
            line: Some(line),
            ..YamlError::unreadable(file, format!("not UTF-8 text: byte {byte:#04x} at column {column}"))
        },
    })
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for YamlError {}

/// The deepest nesting of flow collections (`[`, `{`) a file may have:
/// serde_yaml refuses to deserialize deeper than 128 levels, but its
/// parser takes time quadratic in the depth first (100,000 `[` took 20 s).
const MAX_FLOW_DEPTH: usize = 128;

/// The line where `text` opens its `MAX_FLOW_DEPTH + 1`-th nested flow
/// collection, if it does. A linear scan that skips quoted scalars and
/// comments; brackets inside plain scalars (`a[1]`) count too, which only
/// matters to a file with more than a hundred of them unclosed.
fn too_deep(text: &str) -> Option<usize> {
    let (mut depth, mut line) = (0usize, 1);
    let mut quote: Option<char> = None;
    let mut prev = '\n';
    let (mut comment, mut escaped) = (false, false);
    for c in text.chars() {
        if c == '\n' {
            line += 1;
            comment = false;
        }
        match quote {
            _ if comment => {}
            // `\"` inside double quotes; `''` inside single quotes closes
            // and reopens, which comes to the same.
            Some(q) => {
                if c == q && !escaped {
                    quote = None;
                }
                escaped = q == '"' && c == '\\' && !escaped;
            }
            None => match c {
                '#' if prev.is_whitespace() => comment = true,
                '\'' | '"' if matches!(prev, ' ' | '\t' | '\n' | '[' | '{' | ',' | ':') => quote = Some(c),
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Some(line);
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = c;
    }
    None
}

/// Any YAML document whose mappings have no key twice: a first pass
/// before the typed one, since serde_yaml keeps the last of two equal
/// keys silently in a map (`op_cycles`, `cycles_per_tile`) and reports
/// one in a struct at the enclosing mapping, without the key's path.
struct NoDuplicateKeys;

/// The message a duplicate key fails [`NoDuplicateKeys`] with; the key
/// follows it (for [`parse`] to find the key's path and line).
const DUPLICATE: &str = "given twice: ";

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    // Integers past 64 bits: the typed pass says what range a key takes.
    fn visit_i128<E>(self, _: i128) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u128<E>(self, _: u128) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_none<E>(self) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
    fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<Self, A::Error> {
        // A tagged value (`!tag x`): its content is checked like any.
        use serde::de::VariantAccess;
        let (_, v): (serde::de::IgnoredAny, _) = data.variant()?;
        v.newtype_variant::<NoDuplicateKeys>()
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(self)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen: Vec<serde_yaml::Value> = Vec::new();
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            if seen.contains(&key) {
                let name = match &key {
                    serde_yaml::Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
                };
                return Err(serde::de::Error::custom(format!("{DUPLICATE}{name}")));
            }
            map.next_value::<NoDuplicateKeys>()?;
            seen.push(key);
        }
        Ok(self)
    }
}

/// A line's indentation and its text after it; `None` for a blank or
/// comment line (which belongs to no mapping).
fn content(line: &str) -> Option<(i64, &str)> {
    let trimmed = line.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    Some(((line.len() - trimmed.len()) as i64, trimmed))
}

/// The line of the second `key` directly under the mapping at `parent`
/// (a dotted path, empty for the top level): a block mapping's key at the
/// indentation of the mapping's first key; in a flow mapping (`{a: 1,
/// a: 2}`) the line that holds it.
fn second_key_line(text: &str, parent: &str, key: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let (start, parent_indent) = if parent.is_empty() {
        (0, -1i64)
    } else {
        let l = key_line(text, parent)? - 1;
        let line = lines[l];
        if line.contains('{') {
            return Some(l + 1);
        }
        (l + 1, (line.len() - line.trim_start().len()) as i64)
    };
    let mut child_indent = None;
    let mut seen = 0;
    for (i, line) in lines.iter().enumerate().skip(start) {
        let Some((indent, trimmed)) = content(line) else {
            continue;
        };
        if indent <= parent_indent {
            break;
        }
        if *child_indent.get_or_insert(indent) == indent && trimmed.starts_with(&format!("{key}:")) {
            seen += 1;
            if seen == 2 {
                return Some(i + 1);
            }
        }
    }
    None
}

/// Deserializes `text` (named `file` in errors).
pub fn parse<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, YamlError> {
    if let Some(line) = too_deep(text) {
        return Err(YamlError {
            file: file.to_string(),
            line: Some(line),
            path: String::new(),
            message: format!("collections nested more than {MAX_FLOW_DEPTH} deep"),
            unreadable: false,
        });
    }
    let de = serde_yaml::Deserializer::from_str(text);
    if let Err(e) = serde_path_to_error::deserialize::<_, NoDuplicateKeys>(de) {
        let message = e.inner().to_string();
        if let Some(at) = message.find(DUPLICATE) {
            let key = message[at + DUPLICATE.len()..].split(" at line ").next().unwrap_or("");
            let parent = e.path().to_string();
            let parent = if parent == "." { String::new() } else { parent };
            let path = if parent.is_empty() {
                key.to_string()
            } else {
                format!("{parent}.{key}")
            };
            return Err(YamlError {
                file: file.to_string(),
                line: second_key_line(text, &parent, key).or_else(|| e.inner().location().map(|l| l.line())),
                path,
                message: "given twice (the second one is here)".to_string(),
                unreadable: false,
            });
        }
        // The untyped pass takes any value, so what else fails it is the
        // file's syntax (a flow sequence cut short at the end of the file)
        // or its nesting: the typed pass might trip over a value it
        // half-read first and call it a type error.
        return Err(located(file, text, e, true));
    }
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| located(file, text, e, false))
}

/// A deserialization error of `text` as a [`YamlError`]: at its key path,
/// in a reader's words, on its key's line where the path names a key and
/// the error is the value's, or where the parser stopped for a `syntax`
/// error.
fn located(file: &str, text: &str, e: serde_path_to_error::Error<serde_yaml::Error>, syntax: bool) -> YamlError {
    let path = e.path().to_string();
    // "." is the document; "?" where a syntax error left no key.
    let path = if path == "." || path == "?" {
        String::new()
    } else {
        path
    };
    let inner = e.inner();
    let mut message = inner.to_string();
    // serde_yaml appends " at line L column C" and may prefix the path:
    // both are reported separately.
    if let Some(i) = message.find(" at line ") {
        message.truncate(i);
    }
    // A leading key path (serde_yaml's own) repeats ours.
    if let Some((head, rest)) = message.split_once(": ") {
        if !head.is_empty() && !head.contains(' ') && path.starts_with(head) {
            message = rest.to_string();
        }
    }
    let mut message = plain_types(&shorten_quoted(&message));
    // Block nesting (indentation) past serde_yaml's limit, which is ours
    // for flow nesting too: said as `too_deep` says it.
    if message == "recursion limit exceeded" {
        message = format!("collections nested more than {MAX_FLOW_DEPTH} deep");
    }
    // Aliases that expand past serde_yaml's limit (a "billion laughs"
    // file): said in YAML's terms.
    if message == "repetition limit exceeded" {
        message = "aliases (`*name`) expand to too many values".to_string();
    }
    // YAML reads a number past f64's range (`1e400`) as a string.
    if let Some((quoted, expected)) = message
        .strip_prefix("got the string \"")
        .and_then(|m| m.split_once("\", "))
    {
        // Digits: `inf` and `infinity` parse as f64 too, but are words.
        if quoted.bytes().any(|b| b.is_ascii_digit()) && quoted.parse::<f64>().is_ok_and(f64::is_infinite) {
            message = format!("got {quoted}, a number too large to hold, {expected}");
        }
    }
    // A tab in the indentation stops the parser with the previous key's
    // path, which is not where the tab is: the line says it, and what to
    // write instead.
    let path = if syntax && message.contains("tab character") {
        message.push_str(" (YAML indents with spaces, not tabs)");
        String::new()
    } else {
        path
    };
    // A key indented as the mapping's sibling instead of its child.
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|m| m.strip_suffix('`'))
    {
        if let Some(l) = misplaced_key_line(text, &path, field) {
            let owner = path.rsplit('.').next().unwrap_or(&path);
            message = format!(
                "{message}; the `{field}:` on line {l} is indented as a sibling of `{owner}`, not as one of its keys"
            );
        }
    }
    // serde_yaml locates value errors at the enclosing mapping; the
    // key's own line is more useful when the path names a key.
    // serde_yaml puts a missing key at the end of the input, the line
    // after the last one: the file's last line is where a reader looks
    // (a syntax error keeps the parser's place, where the file stopped).
    let last_line = text.lines().count().max(1);
    // A second document: serde_yaml gives no place; its `---` is it.
    let second_document = message
        .contains("more than one document")
        .then(|| second_document_line(text))
        .flatten();
    let line = match key_line(text, &path) {
        _ if second_document.is_some() => second_document,
        Some(l) if !syntax && !message.starts_with("unknown field") => Some(l),
        _ if syntax => inner.location().map(|l| l.line()),
        _ => inner.location().map(|l| l.line().min(last_line)),
    }
    // Where serde_yaml gives no place (the alias limit), the line of the
    // path's last key (`f` of `f[0][3]`), or of its nearest ancestor.
    .or_else(|| key_or_parent_line(text, path.split('[').next().unwrap_or("")).filter(|_| !path.is_empty()));
    YamlError {
        file: file.to_string(),
        line,
        path,
        message,
        unreadable: false,
    }
}

/// The line (1-based) of the `---` that starts `text`'s second YAML
/// document: the first one when content precedes it, else the second.
fn second_document_line(text: &str) -> Option<usize> {
    let mut started = false;
    for (i, line) in text.lines().enumerate() {
        let marker = line == "---" || line.starts_with("--- ");
        if marker {
            if started {
                return Some(i + 1);
            }
            started = true;
        } else if content(line).is_some() && !line.starts_with('%') {
            started = true;
        }
    }
    None
}

/// `message` with Rust's type names (serde's "expected f64") in the
/// words of a YAML file's reader: a number, an integer.
fn plain_types(message: &str) -> String {
    const NAMES: [(&str, &str); 12] = [
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected i128", "expected an integer"),
        ("expected u128", "expected a non-negative integer"),
        ("expected i64", "expected an integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected i32", "expected an integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u8", "expected a non-negative integer"),
        ("invalid type: string", "got the string"),
    ];
    let mut out = message.to_string();
    // "expected struct File": a mapping of keys is what the file lacks.
    if let Some(at) = out.find("expected struct ") {
        let name_end = out[at + 16..]
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .map_or(out.len(), |k| at + 16 + k);
        out.replace_range(at..name_end, "expected a mapping of keys");
    }
    for (rust, plain) in NAMES {
        if let Some(at) = out.find(rust) {
            // Whole words only: `expected u8` is not `expected u8x`.
            let end = at + rust.len();
            if !out[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                out.replace_range(at..end, plain);
            }
        }
    }
    out
}

/// The longest quoted value an error message repeats whole, in
/// characters: serde_yaml quotes the offending value, which for a file
/// that is not YAML of the expected shape (a text file, a log) is the
/// whole file on one line.
const QUOTED_CHARS: usize = 60;

/// `message` with each quoted value (`"…"`, with `\"` escapes inside)
/// longer than [`QUOTED_CHARS`] cut to its first characters and its length.
fn shorten_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(256));
    let mut rest = message;
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..=open]);
        let body = &rest[open + 1..];
        // The closing quote: the first one not escaped by a backslash.
        let mut escaped = false;
        let close = body.char_indices().find_map(|(i, c)| {
            let end = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            end.then_some(i)
        });
        let Some(close) = close else {
            out.push_str(body);
            return out;
        };
        let value = &body[..close];
        let chars = value.chars().count();
        if chars > QUOTED_CHARS {
            out.extend(value.chars().take(QUOTED_CHARS));
            out.push_str(&format!("…\" ({chars} characters)"));
        } else {
            out.push_str(value);
            out.push('"');
        }
        rest = &body[close + 1..];
    }
    out.push_str(rest);
    out
}

/// [`key_line`] of `path`, or else of its nearest ancestor that has one: a
/// key inside a flow mapping (`constexprs: {T: i32}`) shares its parent's
/// line, which indentation alone does not find.
pub(crate) fn key_or_parent_line(text: &str, path: &str) -> Option<usize> {
    let mut p = path;
    loop {
        if let Some(l) = key_line(text, p) {
            return Some(l);
        }
        p = &p[..p.rfind('.')?];
    }
}

/// The line (1-based) of key `field` when it is the first line after
/// mapping `path`'s block, at the mapping's indentation or less: a key
/// meant for the mapping but indented too little.
fn misplaced_key_line(text: &str, path: &str, field: &str) -> Option<usize> {
    if path.is_empty() {
        return None;
    }
    let start = key_line(text, path)?;
    let lines: Vec<&str> = text.lines().collect();
    let (base, _) = content(lines.get(start - 1)?)?;
    for (i, line) in lines.iter().enumerate().skip(start) {
        let Some((indent, trimmed)) = content(line) else {
            continue;
        };
        if indent <= base {
            return trimmed.starts_with(&format!("{field}:")).then_some(i + 1);
        }
    }
    None
}

/// The 1-based line where a dotted key path is defined, by following the
/// YAML's indentation (for errors found after parsing). A key may have
/// dots of its own (`algorithms.my.ring.kernel` for the key `my.ring`,
/// plain or quoted): at each level the longest run of the path's
/// segments that is a key there and leads to the rest of the path wins.
pub fn key_line(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let segs: Vec<&str> = path.split('.').collect();
    let mut memo = std::collections::HashMap::new();
    key_line_from(&lines, &segs, 0, (0, -1), &mut memo).map(|i| i + 1)
}

/// The 0-based line of the path's segments from `k` on, in the block from
/// line `from` on below a mapping indented `parent_indent`. Memoized by
/// `(k, from)` (`from` is one past the parent key's line, so it fixes the
/// indentation): a file of keys that are each other's dotted prefixes
/// would otherwise take time exponential in the path's length.
fn key_line_from(
    lines: &[&str],
    segs: &[&str],
    k: usize,
    (from, parent_indent): (usize, i64),
    memo: &mut std::collections::HashMap<(usize, usize), Option<usize>>,
) -> Option<usize> {
    if let Some(known) = memo.get(&(k, from)) {
        return *known;
    }
    let found = (k + 1..=segs.len()).rev().find_map(|end| {
        let (i, indent) = key_under(lines, from, parent_indent, &segs[k..end].join("."))?;
        match end == segs.len() {
            true => Some(i),
            false => key_line_from(lines, segs, end, (i + 1, indent), memo),
        }
    });
    memo.insert((k, from), found);
    found
}

/// The 0-based line and indentation of `key` in the block from line
/// `from` on, indented past `parent_indent` (the block ends at a line
/// indented no more than that).
fn key_under(lines: &[&str], from: usize, parent_indent: i64, key: &str) -> Option<(usize, i64)> {
    let forms = [format!("{key}:"), format!("\"{key}\":"), format!("'{key}':")];
    for (i, line) in lines.iter().enumerate().skip(from) {
        let Some((indent, trimmed)) = content(line) else {
            continue;
        };
        if i > from && indent <= parent_indent {
            return None;
        }
        if indent > parent_indent && forms.iter().any(|f| trimmed.starts_with(f.as_str())) {
            return Some((i, indent));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key with dots of its own is found as a whole, plain or quoted,
    /// and a path through it goes on below it.
    #[test]
    fn a_key_with_dots_is_found_at_its_own_line() {
        let text = "algorithms:\n  my:\n    kernel: a\n  my.ring:\n    kernel: b\n  \"v1.2\":\n    kernel: c\n";
        assert_eq!(key_line(text, "algorithms.my.kernel"), Some(3));
        assert_eq!(key_line(text, "algorithms.my.ring"), Some(4));
        assert_eq!(key_line(text, "algorithms.my.ring.kernel"), Some(5));
        assert_eq!(key_line(text, "algorithms.v1.2.kernel"), Some(7));
        assert_eq!(key_line(text, "algorithms.my.ring.module"), None);
        // `my.ring` and `my` with a `ring` under it: the path that goes on.
        let both = "a:\n  my.ring:\n    x: 1\n  my:\n    ring:\n      y: 2\n";
        assert_eq!(key_line(both, "a.my.ring.x"), Some(3));
        assert_eq!(key_line(both, "a.my.ring.y"), Some(6));
    }

    /// A missing key that sits just after its mapping, indented as the
    /// mapping's sibling, is pointed at; one elsewhere is not.
    #[test]
    fn a_key_indented_too_little_is_pointed_at() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Entry {
            module: String,
            kernel: String,
        }
        let parse_entries = |t: &str| {
            parse::<std::collections::BTreeMap<String, std::collections::BTreeMap<String, Entry>>>("c.yaml", t)
                .expect_err("missing kernel")
                .to_string()
        };
        let e = parse_entries("algorithms:\n  mine:\n    module: m.tl\n\n  # note\n  kernel: k\n");
        assert_eq!(
            e,
            "c.yaml:2: algorithms.mine: missing field `kernel`; the `kernel:` on line 6 is indented as a \
             sibling of `mine`, not as one of its keys"
        );
        let e = parse_entries("algorithms:\n  mine:\n    module: m.tl\n  other:\n    module: m.tl\n    kernel: k\n");
        assert_eq!(e, "c.yaml:2: algorithms.mine: missing field `kernel`");
    }

    /// A flow sequence cut short by the end of the file is a syntax
    /// error where the parser stopped, not a type error of the value the
    /// typed pass half-read; a type error stays one, and an integer past
    /// 64 bits is the typed pass's to judge (an error for a `u32`, a
    /// number for an `f64`).
    #[test]
    fn a_cut_short_file_is_a_syntax_error() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct System {
            sips: u32,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct File {
            system: System,
        }
        let e = parse::<File>("t.yaml", "system: {sips: [1,2\n").expect_err("cut short");
        let text = e.to_string();
        assert!(text.starts_with("t.yaml:") && !text.contains("invalid type"), "{text}");
        assert!(
            text.contains("did not find expected") || text.contains("while parsing"),
            "{text}"
        );
        // Where the parser stopped: the end of the file, line 2.
        assert!(text.starts_with("t.yaml:2: system.sips: "), "{text}");
        let e = parse::<File>("t.yaml", "system: {sips: [1, 2]}\n").expect_err("a sequence");
        assert_eq!(
            e.to_string(),
            "t.yaml:1: system.sips: invalid type: sequence, expected a non-negative integer"
        );
        let huge = "system: {sips: 18446744073709551616}\n";
        let e = parse::<File>("t.yaml", huge).expect_err("past u32");
        assert!(!e.to_string().contains("any YAML value"), "{e}");
        #[derive(serde::Deserialize, Debug)]
        struct Loose {
            x: f64,
        }
        let v = parse::<Loose>("t.yaml", "x: 18446744073709551616\n").expect("a number");
        assert_eq!(v.x, 18446744073709551616.0);
        // A tab in the indentation: its line, no other key's path, and
        // what YAML wants instead.
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Nested {
            a: std::collections::BTreeMap<String, u32>,
        }
        let e = parse::<Nested>("t.yaml", "a:\n  b: 1\n\tc: 2\n").expect_err("a tab");
        assert_eq!((e.line, e.path.as_str()), (Some(3), ""), "{e}");
        assert!(e.message.ends_with("(YAML indents with spaces, not tabs)"), "{e}");
        // A number too large for a float is read as a string: said so.
        let e = parse::<Loose>("t.yaml", "x: 1e400\n").expect_err("past f64");
        assert_eq!(
            e.message, "got 1e400, a number too large to hold, expected a number",
            "{e}"
        );
        // A word Rust would read as infinity is still a word.
        let e = parse::<Loose>("t.yaml", "x: inf\n").expect_err("a word");
        assert_eq!(e.message, "got the string \"inf\", expected a number", "{e}");
    }

    /// A key in a flow mapping is found at its parent's line.
    #[test]
    fn a_flow_mapping_key_has_its_parent_line() {
        let t = "a:\n  b: 1\n  c: {d: 2}\n";
        assert_eq!(key_line(t, "a.c.d"), None);
        assert_eq!(key_or_parent_line(t, "a.c.d"), Some(3));
        assert_eq!(key_or_parent_line(t, "a.b"), Some(2));
        assert_eq!(key_or_parent_line(t, "x.y"), None);
    }

    /// Deep flow nesting is refused before the parser's quadratic time,
    /// at its line; brackets in quotes and comments do not count, and the
    /// deepest nesting allowed still parses.
    #[test]
    fn deep_nesting_is_an_error_at_its_line() {
        let deep = format!("a: 1\nb: {}", "[".repeat(100_000));
        let e = parse::<serde_yaml::Value>("t.yaml", &deep).expect_err("too deep");
        assert_eq!(e.to_string(), "t.yaml:2: collections nested more than 128 deep");
        let ok = format!("b: {}{}", "[".repeat(128), "]".repeat(128));
        assert!(too_deep(&ok).is_none());
        let quoted = format!("a: \"\\\"{0}\"\nb: '{0}' # {0}\n", "[".repeat(200));
        assert!(too_deep(&quoted).is_none());
        assert!(parse::<serde_yaml::Value>("t.yaml", &quoted).is_ok());
        // Block nesting: the parser's own limit, in the same words, at the
        // deepest key it reached.
        let block: String = (0..200).map(|i| format!("{}k{i}:\n", "  ".repeat(i))).collect();
        let e = parse::<serde_yaml::Value>("t.yaml", &block).expect_err("too deep");
        let shown = e.to_string();
        assert!(shown.starts_with("t.yaml:129: k0.k1."), "{shown}");
        assert!(
            shown.ends_with(".k127: collections nested more than 128 deep"),
            "{shown}"
        );
    }

    /// A key given twice is an error at the second one, with its path,
    /// in a struct, in a map and in a flow mapping (serde_yaml kept the
    /// last of a map's silently and put a struct's at the mapping).
    #[test]
    fn duplicate_keys_are_errors_at_the_second() {
        let text = crate::topology::DEFAULT_YAML;
        let block = text.replacen(
            "    op_cycles: {default: 1, div: 4,",
            "    op_cycles:\n      default: 1\n      div: 4\n      div: 40\n    more: {",
            1,
        );
        let flow = text.replacen("f16: ", "f16: 4, f16: ", 1);
        let top = format!("{text}\nfabric:\n  packet_bytes: 256\n");
        for (t, path) in [
            (&block, "pe.math.op_cycles.div"),
            (&flow, "pe.gemm.cycles_per_tile.f16"),
            (&top, "fabric"),
        ] {
            assert_ne!(t.as_str(), text);
            let e = parse::<crate::topology::schema::File>("t.yaml", t).expect_err(path);
            assert_eq!(e.path, path, "{e}");
            assert_eq!(e.message, "given twice (the second one is here)");
            let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
            let line = e.line.expect("a line");
            let shown = t.lines().nth(line - 1).unwrap_or("");
            assert!(shown.contains(&format!("{key}:")), "{e}: line {line} is `{shown}`");
            if t != &flow {
                assert!(key_line(t, path).is_some_and(|first| first < line), "{e}: {parent}");
            }
        }
    }

    /// Errors name YAML's kinds of values, not Rust's types, and a
    /// syntax error has no "?" for a key path.
    #[test]
    fn type_errors_are_in_the_files_words() {
        let text = crate::topology::DEFAULT_YAML;
        let unit = text.replacen("latency_ns: 500", "latency_ns: 500ns", 1);
        let e = parse::<crate::topology::schema::File>("t.yaml", &unit).expect_err("a string");
        assert_eq!(e.path, "system.sip_link.latency_ns");
        assert_eq!(e.message, "got the string \"500ns\", expected a number", "{e}");
        // A number in any of YAML's integer forms is one.
        for (written, ns) in [("0x1f4", 500.0), ("0o764", 500.0), ("5e2", 500.0), ("+500", 500.0)] {
            let t = text.replacen("latency_ns: 500", &format!("latency_ns: {written}"), 1);
            let f = parse::<crate::topology::schema::File>("t.yaml", &t).expect(written);
            assert_eq!(f.system.sip_link.latency_ns.0, ns, "{written}");
        }
        let float = text.replacen("capacity_bytes: 67108864", "capacity_bytes: 1.5e6", 1);
        let e = parse::<crate::topology::schema::File>("t.yaml", &float).expect_err("a float");
        assert!(e.message.ends_with("expected an integer"), "{e}");
        let syntax = text.replacen("name: default", "name: default: x", 1);
        let e = parse::<crate::topology::schema::File>("t.yaml", &syntax).expect_err("syntax");
        assert_eq!(e.path, "", "{e}");
        assert_eq!(plain_types("expected u8x"), "expected u8x");
    }

    /// A second document is an error at its `---`.
    #[test]
    fn a_second_document_is_pointed_at() {
        for (text, line) in [("a: 1\n---\nb: 2\n", 2), ("---\na: 1\n# note\n---\nb: 2\n", 4)] {
            let e = parse::<serde_yaml::Value>("t.yaml", text).expect_err("two documents");
            assert_eq!(e.line, Some(line), "{e}");
            assert!(e.message.contains("more than one document"), "{e}");
        }
    }

    #[test]
    fn long_quoted_values_are_cut_short_ones_kept() {
        let long = "ab\\\"c".repeat(30); // 150 characters, escaped quotes inside
        let msg = format!("invalid type: string \"{long}\", expected struct File");
        let want = format!(
            "invalid type: string \"{}…\" (150 characters), expected struct File",
            &long[..QUOTED_CHARS]
        );
        assert_eq!(shorten_quoted(&msg), want);
        let short = "unknown variant `x`, expected \"sleep\" or \"poll\"";
        assert_eq!(shorten_quoted(short), short);
        assert_eq!(shorten_quoted("a lone \" quote"), "a lone \" quote");
    }

    /// A text file given as a topology: the error names the file and
    /// quotes the start of it, not all of it.
    #[test]
    fn a_text_file_is_reported_in_a_line() {
        let text = (0..40)
            .map(|k| format!("line {k} of some notes"))
            .collect::<Vec<_>>()
            .join("\n");
        let e = parse::<crate::topology::schema::File>("notes.txt", &text).expect_err("not a topology");
        let shown = e.to_string();
        assert!(
            shown.starts_with("notes.txt:1: got the string \"line 0 of some notes line 1"),
            "{shown}"
        );
        assert!(shown.ends_with("characters), expected a mapping of keys"), "{shown}");
        assert!(shown.len() < 160, "{} characters: {shown}", shown.len());
    }

    /// Aliases that expand past the limit ("billion laughs") are refused
    /// at the key whose value expands, in YAML's terms; a file that is not
    /// UTF-8 at the line of its first bad byte.
    #[test]
    fn alias_bombs_and_bad_bytes_have_a_line() {
        let mut text = String::from(
            "name: x
a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n",
        );
        let mut prev = 'a';
        for k in 'b'..='i' {
            text.push_str(&format!("{k}: &{k} [{}]\n", vec![format!("*{prev}"); 9].join(", ")));
            prev = k;
        }
        let e = parse::<serde_yaml::Value>("t.yaml", &text).expect_err("too many values");
        assert_eq!(e.message, "aliases (`*name`) expand to too many values", "{e}");
        let line = e.line.expect("a line");
        let key = text.lines().nth(line - 1).unwrap_or("");
        assert!(
            e.path.starts_with(&key[..1]) && key[1..].starts_with(": &"),
            "{e}: line {line} is `{key}`"
        );

        let dir = std::env::temp_dir().join(format!("kernbench-yaml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let f = dir.join("t.yaml");
        std::fs::write(&f, b"name: x\nsips: \xff\n").expect("written");
        let e = read(&f, "t.yaml", "").expect_err("not UTF-8");
        assert_eq!(e.to_string(), "t.yaml:2: not UTF-8 text: byte 0xff at column 7");
        assert!(e.unreadable);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
