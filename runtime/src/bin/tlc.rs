fn main() {
    use kernbench_compiler::{diag::*, syntax};
    let mut sm = SourceMap::new();
    let mut all = vec![];
    for p in std::env::args().skip(1) {
        let src = std::fs::read_to_string(&p).unwrap();
        let id = sm.add(p.clone(), src.clone());
        let (m, d) = syntax::parse(&src, id);
        if std::env::var("DUMP").is_ok() { println!("{:#?}", m); }
        all.extend(d);
    }
    eprint!("{}", render_human(&all, &sm, ColorMode::Never));
}
