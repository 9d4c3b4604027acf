//! The stable text form of the IR, as `tlc emit-ir` prints it and the
//! golden tests in `tests/ir/` compare: one instruction per line, the
//! engine class as a prefix, result types, and the source location.

use super::*;
use crate::diag::SourceMap;
use std::fmt::Write;

pub fn print_function(func: &Function, sources: &SourceMap) -> String {
    let mut out = String::new();
    let params: Vec<String> = func.params.iter().map(|p| format!("{}: {}", p.value, p.ty)).collect();
    let names: Vec<String> = func
        .params
        .iter()
        .map(|p| format!("{} = {}", p.value, p.name))
        .collect();
    let _ = writeln!(out, "kernel @{}({}) {{", func.name, params.join(", "));
    if !names.is_empty() {
        let _ = writeln!(out, "  // params: {}", names.join(", "));
    }
    if !func.constexprs.is_empty() {
        let cs: Vec<String> = func.constexprs.iter().map(|(n, k)| format!("{n}={k}")).collect();
        let _ = writeln!(out, "  // constexprs: {}", cs.join(", "));
    }
    print_insts(func, sources, func.body, 1, &mut out);
    out.push_str("}\n");
    out
}

fn print_insts(func: &Function, sources: &SourceMap, r: Region, depth: usize, out: &mut String) {
    for &i in &func.regions[r].insts {
        print_inst(func, sources, i, depth, out);
    }
}

fn attrs(func: &Function, d: &InstData) -> String {
    match &d.op {
        Op::Const(ConstVal::Int(v)) => format!(" {v}"),
        Op::Const(ConstVal::Float(v)) => {
            if v.is_nan() {
                " nan".into()
            } else if v.is_infinite() {
                if *v > 0.0 {
                    " inf".into()
                } else {
                    " -inf".into()
                }
            } else {
                format!(" {v:?}")
            }
        }
        Op::ProgramId(a) | Op::NumPrograms(a) | Op::MeshId(a) | Op::MeshSize(a) => format!(" {a}"),
        Op::Arange { start, end } => format!(" {start}, {end}"),
        Op::Trans { perm } => format!(" perm={perm:?}"),
        Op::Reduce { axis, keep_dims, .. } => {
            let ax = axis.map_or("all".to_string(), |a| a.to_string());
            format!(" axis={ax}{}", if *keep_dims { " keep_dims" } else { "" })
        }
        Op::Send(Peer::Dir(d)) | Op::Recv { peer: Peer::Dir(d), .. } => format!(" {}", d.name()),
        Op::Gemm { a_in, b_in } => format!(" a_in={} b_in={}", a_in.name(), b_in.name()),
        Op::Assert { message } => format!(" {message:?}"),
        Op::Print { prefix } => format!(" {prefix:?}"),
        _ => {
            let _ = func;
            String::new()
        }
    }
}

fn print_inst(func: &Function, sources: &SourceMap, i: Inst, depth: usize, out: &mut String) {
    let d = &func.insts[i];
    let pad = "  ".repeat(depth);
    let mut line = pad.clone();
    if !d.results.is_empty() {
        let rs: Vec<String> = d.results.iter().map(|r| r.to_string()).collect();
        let _ = write!(line, "{} = ", rs.join(", "));
    }
    let _ = write!(line, "{}.{}{}", d.engine.name(), d.op.mnemonic(), attrs(func, d));
    let args: Vec<String> = d.args.iter().map(|a| a.to_string()).collect();
    if !args.is_empty() {
        let sep = if attrs(func, d).is_empty() { " " } else { ", " };
        let _ = write!(line, "{sep}{}", args.join(", "));
    }
    if !d.results.is_empty() {
        let tys: Vec<String> = d.results.iter().map(|r| func.values[*r].ty.to_string()).collect();
        let _ = write!(line, " : {}", tys.join(", "));
    }
    if !d.regions.is_empty() {
        line.push_str(" {");
    }
    let _ = writeln!(out, "{line}  // {}", sources.at_short(d.loc));
    for (k, &r) in d.regions.iter().enumerate() {
        if k > 0 {
            let _ = writeln!(out, "{pad}}} {{");
        }
        let params = &func.regions[r].params;
        if !params.is_empty() {
            let ps: Vec<String> = params.iter().map(|p| format!("{p}: {}", func.values[*p].ty)).collect();
            let _ = writeln!(out, "{pad}^({}):", ps.join(", "));
        }
        print_insts(func, sources, r, depth + 1, out);
    }
    if !d.regions.is_empty() {
        let _ = writeln!(out, "{pad}}}");
    }
}
