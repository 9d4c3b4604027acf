//! Data-path speed (issue figures): JIT compile latency of each stdlib
//! kernel specialization; `add` over 2^24 f32 against this machine's
//! memcpy; softmax and gemm on the JIT against the reference interpreter
//! (the interpreter on a slice of the work: its time scales linearly);
//! gemm against the `matrixmultiply` crate's single-threaded SGEMM.
//!
//! `cargo bench -p kernbench-runtime --bench datapath`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kernbench_compiler::datapath::{elem, interp::Interpreter, jit::Jit, plan, DataPath, Plan, RtValue, Tensor};
use kernbench_compiler::ir::Function;
use kernbench_compiler::sema::{self, DType, Konst};
use kernbench_runtime::args::random_tensor;
use kernbench_runtime::exec::{run_grid, FlatMemory};
use std::path::Path;

fn lower(file: &str, kernel: &str, defines: &[(&str, i64)]) -> Function {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stdlib").join(file);
    let source = std::fs::read_to_string(&path).expect("stdlib source");
    let options = sema::Options {
        defines: defines.iter().map(|(n, v)| (n.to_string(), Konst::Int(*v))).collect(),
        stdlib_root: None,
    };
    let mut s = sema::Session::new(options);
    s.add_file(file, Some(path), source);
    s.lower(kernel).1.expect("stdlib kernel lowers")
}

/// A launch ready to run repeatedly: memory with the tensors, arguments.
struct Launch {
    func: Function,
    plan: Plan,
    mem: FlatMemory,
    args: Vec<RtValue>,
    grid: [u32; 3],
}

impl Launch {
    fn new(func: Function, tensors: Vec<Option<Tensor>>, scalars: &[i64], grid: u32) -> Launch {
        let mut mem = FlatMemory::new();
        let mut args = Vec::new();
        let mut s = scalars.iter();
        for (i, t) in tensors.into_iter().enumerate() {
            match t {
                Some(t) => args.push(RtValue::Scalar(mem.alloc(&format!("t{i}"), t.bytes().to_vec()))),
                None => args.push(RtValue::Scalar(elem::from_i64(DType::I32, *s.next().unwrap_or(&0)))),
            }
        }
        let plan = plan(&func, true);
        Launch {
            func,
            plan,
            mem,
            args,
            grid: [grid, 1, 1],
        }
    }

    fn run(&mut self, dp: &mut dyn DataPath) {
        run_grid(&self.func, &self.plan, dp, &mut self.mem, self.grid, &self.args, None)
            .expect("benchmark kernel runs");
    }
}

fn prepared(l: &Launch, mut dp: Box<dyn DataPath>) -> Box<dyn DataPath> {
    dp.prepare(&l.func, &l.plan).expect("compiles");
    dp
}

fn compile_latency(c: &mut Criterion) {
    // Compile latency of a specialization: `prepare` plus the first launch
    // of one program on small data, because groups that may be handed
    // affine formulas compile on first use (for the inputs they get).
    let mut g = c.benchmark_group("jit_compile");
    let f32s = |shape: &[usize], seed| Some(random_tensor(DType::F32, shape, seed));
    let f16s = |shape: &[usize], seed| Some(random_tensor(DType::F16, shape, seed));
    let mut launches = [
        (
            "add",
            Launch::new(
                lower("kernels/add.tl", "add", &[]),
                vec![f32s(&[1024], 1), f32s(&[1024], 2), f32s(&[1024], 3), None],
                &[1024],
                1,
            ),
        ),
        (
            "softmax",
            Launch::new(
                lower("kernels/softmax.tl", "softmax", &[]),
                vec![f32s(&[1, 1024], 4), f32s(&[1, 1024], 5), None, None, None],
                &[1, 1024, 1024],
                1,
            ),
        ),
        (
            "layernorm",
            Launch::new(
                lower("kernels/layernorm.tl", "layernorm", &[]),
                vec![
                    f32s(&[1, 1024], 6),
                    f32s(&[1024], 7),
                    f32s(&[1024], 8),
                    f32s(&[1, 1024], 9),
                    None,
                    None,
                    None,
                ],
                &[1, 1024, 0],
                1,
            ),
        ),
        (
            "gemm",
            Launch::new(
                lower("kernels/gemm.tl", "gemm", &[]),
                {
                    let mut t = vec![f16s(&[64, 64], 10), f16s(&[64, 64], 11), f32s(&[64, 64], 12)];
                    t.extend(std::iter::repeat_n(None, 9));
                    t
                },
                &[64, 64, 64, 64, 1, 64, 1, 64, 1],
                1,
            ),
        ),
    ];
    for (name, launch) in launches.iter_mut() {
        g.bench_function(*name, |b| {
            b.iter_batched(
                Jit::new,
                |mut jit| {
                    jit.prepare(&launch.func, &launch.plan).expect("compiles");
                    launch.run(&mut jit);
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn add_bandwidth(c: &mut Criterion) {
    let n = 1usize << 24;
    let mut g = c.benchmark_group("add_2^24_f32");
    g.sample_size(10);
    // Bytes moved: two reads and one write of n f32.
    g.throughput(Throughput::Bytes(3 * 4 * n as u64));
    let t = |seed| Some(random_tensor(DType::F32, &[n], seed));
    // The kernel's default block, and a larger one that pays the
    // executor's per-program cost an eighth as often.
    for block in [1024usize, 8192] {
        let func = lower("kernels/add.tl", "add", &[("BLOCK", block as i64)]);
        let mut launch = Launch::new(func, vec![t(1), t(2), t(3), None], &[n as i64], (n / block) as u32);
        let mut jit = prepared(&launch, Box::new(Jit::new()));
        g.bench_function(format!("jit_block_{block}"), |b| b.iter(|| launch.run(jit.as_mut())));
    }
    g.finish();
    // The machine's baseline: memcpy of the same number of bytes read,
    // counted the same way (bytes read + bytes written).
    let mut g = c.benchmark_group("memcpy_64MiB");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(2 * 4 * n as u64));
    let src = vec![1u8; 4 * n];
    let mut dst = vec![0u8; 4 * n];
    g.bench_function("copy_from_slice", |b| {
        b.iter(|| dst.copy_from_slice(std::hint::black_box(&src)))
    });
    g.finish();
}

fn softmax(c: &mut Criterion) {
    let mut g = c.benchmark_group("softmax_4096");
    g.sample_size(10);
    let cols = 4096usize;
    for (backend, rows) in [
        ("jit_4096_rows", 4096usize),
        ("jit_256_rows", 256),
        ("interp_256_rows", 256),
    ] {
        let func = lower("kernels/softmax.tl", "softmax", &[("BLOCK", cols as i64)]);
        let tensors = vec![
            Some(random_tensor(DType::F32, &[rows, cols], 4)),
            Some(Tensor::zeros(sema::Elem::Num(DType::F32), &[rows, cols])),
            None,
            None,
            None,
        ];
        let mut launch = Launch::new(func, tensors, &[rows as i64, cols as i64, cols as i64], rows as u32);
        let mut dp: Box<dyn DataPath> = if backend.starts_with("jit") {
            Box::new(Jit::new())
        } else {
            Box::new(Interpreter)
        };
        dp = prepared(&launch, dp);
        g.throughput(Throughput::Elements((rows * cols) as u64));
        g.bench_function(backend, |b| b.iter(|| launch.run(dp.as_mut())));
    }
    g.finish();
}

fn gemm(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm_f16_f32");
    g.sample_size(10);
    // The kernel's default tiles (128×128×32), and the smaller 64×64×32
    // (more, shorter dot calls per loaded byte) for comparison.
    let small: &[(&str, i64)] = &[("BLOCK_M", 64), ("BLOCK_N", 64), ("BLOCK_K", 32)];
    for (backend, n, defines) in [
        ("jit_1024", 1024usize, &[][..]),
        ("jit_1024_tiles_64x64x32", 1024, small),
        ("jit_256", 256, &[][..]),
        ("interp_256", 256, &[][..]),
    ] {
        let func = lower("kernels/gemm.tl", "gemm", defines);
        let tile = |name: &str| {
            defines
                .iter()
                .find(|(k, _)| *k == name)
                .map_or(128, |(_, v)| *v as usize)
        };
        let (block_m, block_n) = (tile("BLOCK_M"), tile("BLOCK_N"));
        let tensors = vec![
            Some(random_tensor(DType::F16, &[n, n], 5)),
            Some(random_tensor(DType::F16, &[n, n], 6)),
            Some(Tensor::zeros(sema::Elem::Num(DType::F32), &[n, n])),
        ];
        let mut all = tensors;
        all.extend(std::iter::repeat_n(None, 9));
        let ni = n as i64;
        let mut launch = Launch::new(
            func,
            all,
            &[ni, ni, ni, ni, 1, ni, 1, ni, 1],
            (n.div_ceil(block_m) * n.div_ceil(block_n)) as u32,
        );
        let mut dp: Box<dyn DataPath> = if backend.starts_with("jit") {
            Box::new(Jit::new())
        } else {
            Box::new(Interpreter)
        };
        dp = prepared(&launch, dp);
        g.throughput(Throughput::Elements(2 * (n * n * n) as u64));
        g.bench_function(backend, |b| b.iter(|| launch.run(dp.as_mut())));
    }
    // A good single-threaded SGEMM on the same 1024³ problem (f32 inputs).
    let n = 1024usize;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.25).collect();
    let b2: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let mut out = vec![0f32; n * n];
    g.throughput(Throughput::Elements(2 * (n * n * n) as u64));
    g.bench_function("matrixmultiply_sgemm_1024", |bch| {
        bch.iter(|| {
            // SAFETY: the three buffers hold n*n f32 with the given strides.
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    n,
                    n,
                    1.0,
                    a.as_ptr(),
                    n as isize,
                    1,
                    b2.as_ptr(),
                    n as isize,
                    1,
                    0.0,
                    out.as_mut_ptr(),
                    n as isize,
                    1,
                )
            }
        })
    });
    g.finish();
}

criterion_group!(benches, compile_latency, add_bandwidth, softmax, gemm);
criterion_main!(benches);
