//! Front-end throughput: lex + parse + check of a generated 10,000-line
//! `.tl` file (target: under 100 ms in release on the 2-core CI machine).
//!
//! The generated file is also written to `target/frontend-bench-10k.tl` so
//! `tlc check` can be timed on it end to end.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kernbench_compiler::sema::{check_source, Options};

/// One kernel plus one helper per unit: tiled loads, a K loop with `dot`,
/// masks, reductions, a static_range and communication, like real kernels.
fn unit(i: usize) -> String {
    format!(
        r#"
def scale_{i}(x, factor):
    y = x * factor
    return y


@kernel
def kernel_{i}(a: ptr[f16], b: ptr[f16], c: ptr[f32], M: i32, N: i32, K: i32, BLOCK_M: constexpr = 32, BLOCK_N: constexpr = 32, BLOCK_K: constexpr = 16):
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BLOCK_N)
    pid_n = pid % tl.cdiv(N, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=f32)
    for k in range(0, K, BLOCK_K):
        a_mask = (offs_m[:, None] < M) & (k + offs_k[None, :] < K)
        b_mask = (k + offs_k[:, None] < K) & (offs_n[None, :] < N)
        a_tile = tl.load(a + offs_m[:, None] * K + k + offs_k[None, :], mask=a_mask, other=0.0)
        b_tile = tl.load(b + (k + offs_k[:, None]) * N + offs_n[None, :], mask=b_mask, other=0.0)
        acc = tl.dot(a_tile, b_tile, acc)
    for s in tl.static_range(2):
        acc = scale_{i}(acc, 0.5 + s)
    row_max = tl.max(acc, axis=1)
    acc = acc - row_max[:, None]
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c + offs_m[:, None] * N + offs_n[None, :], acc, mask=c_mask)
    if tl.rank() == 0:
        tl.send(tl.NEXT, row_max)
    else:
        got = tl.recv(tl.PREV, [BLOCK_M], f32)
        tl.store(c + offs_m, got, mask=offs_m < M)
"#
    )
}

pub fn generated_source(min_lines: usize) -> String {
    let mut src = String::from("# generated front-end benchmark input\n");
    let mut i = 0;
    while src.lines().count() < min_lines {
        src.push_str(&unit(i));
        i += 1;
    }
    src
}

fn bench(c: &mut Criterion) {
    let src = generated_source(10_000);
    let lines = src.lines().count();
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/frontend-bench-10k.tl");
    let _ = std::fs::write(&target, &src);
    let options = Options::default();
    // The input must be valid, or the benchmark measures error paths.
    let out = check_source("bench.tl", &src, &options);
    assert!(
        out.diagnostics.is_empty(),
        "generated input does not check clean: {:?}",
        out.diagnostics.first()
    );
    let mut group = c.benchmark_group("frontend");
    group.throughput(Throughput::Elements(lines as u64));
    group.sample_size(20);
    group.bench_function(format!("check_{lines}_lines"), |b| {
        b.iter(|| check_source("bench.tl", &src, &options))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
