//! Every diagnostic code the front end emits, with a one-line summary.
//!
//! One code per kind of mistake (rustc's habit): a code is never reused for a
//! different meaning, and `docs/diagnostics.md` explains each one with a
//! minimal failing example. The `tests` crate checks that every code listed
//! here is documented there and exercised by a `tests/ui` case.

macro_rules! codes {
    ($($variant:ident = $text:literal, $summary:literal;)*) => {
        /// A diagnostic code: `E…` for errors, `W…` for warnings.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $($variant,)*
        }

        impl Code {
            /// Every code, in numeric order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The code as printed: `E0100`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $text,)*
                }
            }

            /// What the code means, in a few words.
            pub fn summary(self) -> &'static str {
                match self {
                    $(Code::$variant => $summary,)*
                }
            }
        }
    };
}

codes! {
    // Lexical errors.
    E0001 = "E0001", "invalid character";
    E0002 = "E0002", "tab in indentation";
    E0003 = "E0003", "unindent does not match an outer indentation level";
    E0004 = "E0004", "unterminated string literal";
    E0005 = "E0005", "invalid number literal";
    // Syntax errors.
    E0010 = "E0010", "unexpected token";
    E0011 = "E0011", "unexpected end of file";
    E0012 = "E0012", "unclosed delimiter";
    E0013 = "E0013", "unexpected indent";
    E0014 = "E0014", "chained comparison";
    E0015 = "E0015", "invalid assignment target";
    E0016 = "E0016", "positional argument after keyword argument";
    E0017 = "E0017", "Python syntax that tl does not support";
    E0018 = "E0018", "statement too complex to check";
    // Names, items, modules.
    E0100 = "E0100", "unresolved name";
    E0101 = "E0101", "unknown `tl` built-in";
    E0102 = "E0102", "module not found";
    E0103 = "E0103", "name not found in module";
    E0104 = "E0104", "duplicate definition";
    E0105 = "E0105", "duplicate parameter";
    E0106 = "E0106", "import cycle";
    E0107 = "E0107", "statement not allowed here";
    E0108 = "E0108", "unknown decorator";
    E0109 = "E0109", "recursive helper, or helper calls nested too deep";
    // Calls and signatures.
    E0200 = "E0200", "too many positional arguments";
    E0201 = "E0201", "unknown keyword argument";
    E0202 = "E0202", "argument given more than once";
    E0203 = "E0203", "missing argument";
    E0204 = "E0204", "value is not callable";
    E0205 = "E0205", "kernel called from a kernel";
    E0206 = "E0206", "kernel returns a value";
    E0207 = "E0207", "kernel parameter without annotation";
    E0208 = "E0208", "invalid type annotation";
    E0209 = "E0209", "value must be a compile-time constant";
    E0210 = "E0210", "return is not the last statement of a helper";
    E0211 = "E0211", "no constexpr parameter of that name";
    E0212 = "E0212", "default value on a run-time kernel parameter";
    E0213 = "E0213", "parameter without a default after one with a default";
    E0214 = "E0214", "kernel compiled with an unbound constexpr";
    // Types and shapes.
    E0300 = "E0300", "mismatched operand types";
    E0301 = "E0301", "incompatible shapes";
    E0302 = "E0302", "shape is not a compile-time constant";
    E0303 = "E0303", "`and`/`or`/`not` on a block";
    E0304 = "E0304", "condition is not a scalar";
    E0305 = "E0305", "`dot` inner dimensions differ";
    E0306 = "E0306", "mask is not boolean";
    E0307 = "E0307", "expected a pointer";
    E0308 = "E0308", "invalid conversion";
    E0309 = "E0309", "axis out of range";
    E0310 = "E0310", "bitwise operation on floating-point values";
    E0311 = "E0311", "variable has different types on different paths";
    E0312 = "E0312", "variable possibly undefined";
    E0313 = "E0313", "wrong number of values to unpack";
    E0314 = "E0314", "reshape changes the number of elements";
    E0315 = "E0315", "constant evaluation failed";
    E0316 = "E0316", "static assertion failed";
    E0317 = "E0317", "empty or invalid range";
    E0318 = "E0318", "no such attribute";
    E0319 = "E0319", "expected a dtype";
    E0320 = "E0320", "expected an integer";
    E0321 = "E0321", "invalid communication peer";
    E0322 = "E0322", "wrong block rank";
    E0323 = "E0323", "block too large";
    E0324 = "E0324", "`for` over something other than a range";
    E0325 = "E0325", "unsupported subscript";
    E0326 = "E0326", "invalid argument value";
    E0327 = "E0327", "program too large to check";
    E0328 = "E0328", "constant out of range for a comparison";
    E0329 = "E0329", "tuple of values across a run-time branch or loop";
    // Control flow.
    E0400 = "E0400", "`break` outside a loop";
    E0401 = "E0401", "`continue` outside a loop";
    E0402 = "E0402", "assignment to a constexpr";
    E0404 = "E0404", "`break`/`continue` in an unrolled loop";
    // Warnings.
    W0001 = "W0001", "unused variable";
    W0002 = "W0002", "unused import";
    W0003 = "W0003", "memory access with a computed offset has no mask";
    W0004 = "W0004", "unreachable code";
}

impl Code {
    pub fn is_warning(self) -> bool {
        self.as_str().starts_with('W')
    }
}
