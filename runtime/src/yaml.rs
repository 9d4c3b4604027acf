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
            line: key_line(text, path),
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
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
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
        let message = shorten_quoted(&message);
        // serde_yaml locates value errors at the enclosing mapping; the
        // key's own line is more useful when the path names a key.
        let line = match key_line(text, &path) {
            Some(l) if !message.starts_with("unknown field") => Some(l),
            _ => inner.location().map(|l| l.line()),
        };
        YamlError {
            file: file.to_string(),
            line,
            path,
            message,
            unreadable: false,
        }
    })
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

/// The 1-based line where a dotted key path is defined, by following the
/// YAML's indentation (for errors found after parsing).
pub fn key_line(text: &str, path: &str) -> Option<usize> {
    let mut from = 0usize;
    let mut parent_indent: i64 = -1;
    let lines: Vec<&str> = text.lines().collect();
    let mut found = None;
    for seg in path.split('.') {
        found = None;
        for (i, line) in lines.iter().enumerate().skip(from) {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = (line.len() - trimmed.len()) as i64;
            if i > from && indent <= parent_indent {
                break;
            }
            if indent > parent_indent && trimmed.starts_with(&format!("{seg}:")) {
                found = Some(i);
                parent_indent = indent;
                from = i + 1;
                break;
            }
        }
        found?;
    }
    found.map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            shown.starts_with("notes.txt:1: invalid type: string \"line 0 of some notes line 1"),
            "{shown}"
        );
        assert!(shown.contains("characters), expected struct File"), "{shown}");
        assert!(shown.len() < 160, "{} characters: {shown}", shown.len());
    }
}
