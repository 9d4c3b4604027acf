//! Reading a source or configuration file as text. A file that is not
//! UTF-8 is named at its first bad byte (line and column), as any other
//! error in a file is, rather than with the standard library's "stream did
//! not contain valid UTF-8".

use std::fmt;
use std::path::Path;

/// Why a file could not be read as text.
#[derive(Debug)]
pub enum ReadError {
    /// The file system refused (no such file, a folder, no permission).
    Io(std::io::Error),
    /// The bytes are not UTF-8: the first bad one, and where it is
    /// (1-based line, and column in characters of that line).
    NotUtf8 { byte: u8, line: usize, column: usize },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotUtf8 { byte, line, column } => {
                write!(f, "not UTF-8 text: byte {byte:#04x} at line {line}, column {column}")
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// The contents of `path` as text.
pub fn read_text(path: &Path) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(ReadError::Io)?;
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let bad = e.utf8_error().valid_up_to();
        // Everything before the bad byte is valid: its lines and characters
        // are counted on the text.
        let before = std::str::from_utf8(&bytes[..bad]).unwrap_or("");
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        ReadError::NotUtf8 {
            byte: bytes[bad],
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bad_byte_is_located_in_characters() {
        let dir = std::env::temp_dir().join(format!("kernbench-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("latin.tl");
        // Line 2, after "é = " (4 characters, 5 bytes): the Latin-1 0xe9.
        std::fs::write(&f, b"ok\n\xc3\xa9 = \xe9\n").unwrap();
        let e = read_text(&f).unwrap_err();
        assert_eq!(e.to_string(), "not UTF-8 text: byte 0xe9 at line 2, column 5");
        std::fs::write(&f, "fine ✓\n").unwrap();
        assert_eq!(read_text(&f).unwrap(), "fine ✓\n");
        assert!(matches!(read_text(&dir.join("missing")), Err(ReadError::Io(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
