//! Generates the LALR parser from `src/syntax/grammar.lalrpop` into OUT_DIR.
fn main() {
    lalrpop::Configuration::new()
        .use_cargo_dir_conventions()
        .emit_rerun_directives(true)
        .process()
        .expect("grammar.lalrpop failed to generate; see lalrpop's message above");
}
