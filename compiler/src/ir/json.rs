//! The JSON form of the IR, as `tlc emit-ir --format json` prints it for
//! tools: the same content as the text form (`print.rs`), structured.
//!
//! One object per kernel:
//! `{"name", "params": [{"name", "value", "type"}], "constexprs": [{"name",
//! "value", "text"}], "body": region}`; a region is `{"params": [{"value",
//! "type"}], "insts": [inst]}`; an instruction is `{"id", "op", "engine",
//! "attrs"?, "args", "results": [{"value", "type"}], "regions"?, "loc":
//! {"file", "line", "column"}}`, its regions nested in it as in the text
//! form. A type is `{"kind": "scalar"|"block"|"future", "elem", "shape"}`
//! (`elem` as in the text form: `f32`, `ptr[f32]`; `shape` `[]` for a
//! scalar). Values and instructions are named as in the text form (`%3`,
//! `inst7`). `op` is the text form's mnemonic; `attrs` holds, by name,
//! what the text form prints between the mnemonic and the operands, and
//! what it leaves to the operand count: which optional operands a `load`
//! (`has_mask`, `has_other`), `store`, `atomic_add` (`has_mask`) or `dot`
//! (`has_acc`) has, and `"peer": "rank"` for a send or receive whose first
//! operand is the peer's rank.

use super::*;
use crate::diag::SourceMap;
use crate::sema::Konst;
use serde_json::{json, Map, Value as Json};

/// One kernel's IR as a JSON object (see the module documentation).
pub fn function_json(func: &Function, sources: &SourceMap) -> Json {
    let params: Vec<Json> = func
        .params
        .iter()
        .map(|p| json!({"name": p.name, "value": p.value.to_string(), "type": type_json(&p.ty)}))
        .collect();
    let constexprs: Vec<Json> = func
        .constexprs
        .iter()
        .map(|(n, k)| json!({"name": n, "value": konst_json(k), "text": k.to_string()}))
        .collect();
    json!({
        "name": func.name,
        "params": params,
        "constexprs": constexprs,
        "body": region_json(func, sources, func.body),
    })
}

fn type_json(ty: &Type) -> Json {
    let kind = match ty {
        Type::Scalar(_) => "scalar",
        Type::Block(..) => "block",
        Type::Future(..) => "future",
    };
    json!({"kind": kind, "elem": ty.elem().to_string(), "shape": ty.shape()})
}

fn region_json(func: &Function, sources: &SourceMap, r: Region) -> Json {
    let data = &func.regions[r];
    json!({
        "params": data.params.iter().map(|&v| value_json(func, v)).collect::<Vec<_>>(),
        "insts": data.insts.iter().map(|&i| inst_json(func, sources, i)).collect::<Vec<_>>(),
    })
}

fn value_json(func: &Function, v: Value) -> Json {
    json!({"value": v.to_string(), "type": type_json(func.ty(v))})
}

fn inst_json(func: &Function, sources: &SourceMap, i: Inst) -> Json {
    let d = &func.insts[i];
    let (line, column) = sources.line_col(d.loc.file, d.loc.span.lo);
    let mut out = Map::new();
    out.insert("id".into(), json!(i.to_string()));
    out.insert("op".into(), json!(d.op.mnemonic()));
    out.insert("engine".into(), json!(d.engine.name()));
    let attrs = attrs_json(&d.op);
    if !attrs.is_empty() {
        out.insert("attrs".into(), Json::Object(attrs));
    }
    out.insert(
        "args".into(),
        json!(d.args.iter().map(|a| a.to_string()).collect::<Vec<_>>()),
    );
    out.insert(
        "results".into(),
        json!(d.results.iter().map(|&r| value_json(func, r)).collect::<Vec<_>>()),
    );
    if !d.regions.is_empty() {
        let regions: Vec<Json> = d.regions.iter().map(|&r| region_json(func, sources, r)).collect();
        out.insert("regions".into(), json!(regions));
    }
    out.insert(
        "loc".into(),
        json!({"file": sources.name(d.loc.file), "line": line, "column": column}),
    );
    Json::Object(out)
}

/// A float that JSON numbers cannot hold (NaN, ±infinity) as the text
/// form's word for it.
fn float_json(v: f64) -> Json {
    if v.is_nan() {
        json!("nan")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(v)
    }
}

fn konst_json(k: &Konst) -> Json {
    match k {
        Konst::Int(v) => json!(v),
        Konst::Float(v) => float_json(*v),
        Konst::Bool(b) => json!(b),
        Konst::DType(d) => json!(d.name()),
        Konst::Str(s) => json!(s),
        Konst::None => Json::Null,
        Konst::Tuple(items) => Json::Array(items.iter().map(konst_json).collect()),
        Konst::Direction(d) => json!(format!("tl.{}", d.name())),
    }
}

fn attrs_json(op: &Op) -> Map<String, Json> {
    let pairs: Vec<(&str, Json)> = match op {
        Op::Const(ConstVal::Int(v)) => vec![("value", json!(v))],
        Op::Const(ConstVal::Float(v)) => vec![("value", float_json(*v))],
        Op::ProgramId(a) | Op::NumPrograms(a) | Op::MeshId(a) | Op::MeshSize(a) => vec![("axis", json!(a))],
        Op::Arange { start, end } => vec![("start", json!(start)), ("end", json!(end))],
        Op::Trans { perm } => vec![("perm", json!(perm))],
        Op::Reduce { axis, keep_dims, .. } => vec![("axis", json!(axis)), ("keep_dims", json!(keep_dims))],
        Op::Send(Peer::Dir(d)) | Op::Recv { peer: Peer::Dir(d), .. } => vec![("peer", json!(d.name()))],
        Op::Send(Peer::Rank) | Op::Recv { peer: Peer::Rank, .. } => vec![("peer", json!("rank"))],
        Op::Load { has_mask, has_other } => vec![("has_mask", json!(has_mask)), ("has_other", json!(has_other))],
        Op::Store { has_mask } | Op::AtomicAdd { has_mask } => vec![("has_mask", json!(has_mask))],
        Op::Dot { has_acc } => vec![("has_acc", json!(has_acc))],
        Op::Gemm { a_in, b_in } => vec![("a_in", json!(a_in.name())), ("b_in", json!(b_in.name()))],
        Op::Assert { message } => vec![("message", json!(message))],
        Op::Print { prefix } => vec![("prefix", json!(prefix))],
        _ => Vec::new(),
    };
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
