//! Kernel arguments as `tlc run` takes them: `NAME=@file.npy`,
//! `NAME=rand(SHAPE,DTYPE[,SEED])`, `NAME=zeros(SHAPE,DTYPE)` or
//! `NAME=VALUE`, and the NumPy `.npy` files they are read from and written
//! back to (through ndarray-npy; f16 as NumPy's `<f2`, bf16 as raw `<u2`
//! bits since NumPy has no bfloat16).

use kernbench_compiler::datapath::{elem, Tensor};
use kernbench_compiler::ir::Type;
use kernbench_compiler::sema::types::{DType, Elem};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{ReadDataError, ReadNpyError, ReadableElement, WritableElement, WriteDataError};
use py_literal::Value as PyValue;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Where an argument's value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgSpec {
    Npy(PathBuf),
    /// Uniform values: floats in [-1, 1), signed ints in [-100, 100),
    /// unsigned in [0, 200), bools 0/1. The seed defaults to one derived
    /// from the argument's name, so two `rand` arguments differ.
    Rand {
        shape: Vec<usize>,
        dtype: Option<DType>,
        seed: Option<u64>,
    },
    Zeros {
        shape: Vec<usize>,
        dtype: Option<DType>,
    },
    Value(String),
}

/// A resolved argument.
#[derive(Clone, Debug)]
pub enum HostArg {
    Tensor(Tensor),
    Scalar(elem::Bits),
}

/// Parses `NAME=SPEC`.
pub fn parse_arg(text: &str) -> Result<(String, ArgSpec), String> {
    let (name, spec) = text
        .split_once('=')
        .ok_or_else(|| format!("`--arg {text}`: expected NAME=VALUE"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return Err(format!("`--arg {text}`: `{name}` is not a parameter name"));
    }
    let spec = spec.trim();
    if let Some(path) = spec.strip_prefix('@') {
        return Ok((name.into(), ArgSpec::Npy(PathBuf::from(path))));
    }
    for (fname, is_rand) in [("rand", true), ("zeros", false)] {
        if let Some(inner) = spec
            .strip_prefix(fname)
            .and_then(|r| r.trim_start().strip_prefix('('))
            .and_then(|r| r.strip_suffix(')'))
        {
            let parts = split_top(inner);
            let shape = parts.first().ok_or_else(|| format!("`{fname}(…)` needs a shape"))?;
            let shape = parse_shape(shape).map_err(|e| format!("`--arg {text}`: {e}"))?;
            let dtype = match parts.get(1) {
                Some(d) => Some(
                    DType::from_name(d.trim().trim_start_matches("tl."))
                        .ok_or_else(|| format!("`--arg {text}`: unknown dtype `{}`", d.trim()))?,
                ),
                None => None,
            };
            if is_rand {
                let seed =
                    match parts.get(2) {
                        Some(s) => Some(s.trim().parse::<u64>().map_err(|_| {
                            format!("`--arg {text}`: seed `{}` is not a non-negative integer", s.trim())
                        })?),
                        None => None,
                    };
                if parts.len() > 3 {
                    return Err(format!("`--arg {text}`: rand takes (SHAPE, DTYPE[, SEED])"));
                }
                return Ok((name.into(), ArgSpec::Rand { shape, dtype, seed }));
            }
            if parts.len() > 2 {
                return Err(format!("`--arg {text}`: zeros takes (SHAPE, DTYPE)"));
            }
            return Ok((name.into(), ArgSpec::Zeros { shape, dtype }));
        }
        // `rand(1000,f32` is a call left open, not a value.
        if spec
            .strip_prefix(fname)
            .is_some_and(|r| r.trim_start().starts_with('('))
        {
            return Err(format!(
                "`--arg {text}`: `{fname}(` is not closed: expected `)` at the end"
            ));
        }
    }
    Ok((name.into(), ArgSpec::Value(spec.to_string())))
}

/// Splits on commas outside brackets.
fn split_top(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in s.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        parts.push(cur);
    }
    parts
}

/// `1024`, `(64, 64)`, `[64,64]`.
fn parse_shape(s: &str) -> Result<Vec<usize>, String> {
    let inner = s.trim().trim_start_matches(['(', '[']).trim_end_matches([')', ']']);
    let dims: Result<Vec<usize>, _> = inner
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .map(|d| d.trim().parse::<usize>())
        .collect();
    match dims {
        Ok(d) if !d.is_empty() && d.iter().all(|&x| x > 0) => {
            // Counted in u64 with room for 8-byte elements: a product that
            // wraps would be a small tensor claiming a huge shape.
            match d.iter().try_fold(8u64, |n, &x| n.checked_mul(x as u64)) {
                Some(_) => Ok(d),
                None => Err(format!("`{s}` has more elements than any memory holds")),
            }
        }
        _ => Err(format!("`{s}` is not a shape (positive integers, e.g. `(64, 64)`)")),
    }
}

/// The host memory available to a new allocation (`MemAvailable` of
/// `/proc/meminfo`); `None` where that is not known.
pub fn host_memory_available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// An error when argument `name`'s `bytes` would not fit in the host's
/// available memory (the allocation would abort the process instead).
fn fits_host(name: &str, bytes: u64) -> Result<(), String> {
    match host_memory_available_bytes() {
        Some(avail) if bytes > avail => Err(format!(
            "argument `{name}` needs {bytes} bytes, and the host has {avail} bytes of memory available"
        )),
        _ => Ok(()),
    }
}

/// Bytes of the tensor `spec` makes for a parameter of type `ty`, when it
/// makes one (`rand(…)`, `zeros(…)`) before making it; `None` for a file
/// (already on disk) or a scalar.
pub fn made_tensor_bytes(spec: &ArgSpec, ty: &Type) -> Option<u64> {
    let Elem::Ptr(d) = ty.elem() else { return None };
    match spec {
        ArgSpec::Rand { shape, .. } | ArgSpec::Zeros { shape, .. } => Some(tensor_bytes(shape, d)),
        ArgSpec::Npy(_) | ArgSpec::Value(_) => None,
    }
}

/// Bytes of a tensor of `shape` and `d` (shapes are checked by
/// [`parse_shape`] not to overflow).
fn tensor_bytes(shape: &[usize], d: DType) -> u64 {
    shape.iter().fold(d.size_bytes(), |n, &x| n.saturating_mul(x as u64))
}

/// SplitMix64: a tiny, well-known generator with a fixed output sequence.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        let out = splitmix64(self.0);
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        out
    }
}

/// SplitMix64's output for state `x` (its step, then its finalizer): well
/// spread from consecutive inputs, so also a hash of `x`.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Deterministic random data (see [`ArgSpec::Rand`]).
pub fn random_tensor(d: DType, shape: &[usize], seed: u64) -> Tensor {
    let mut rng = SplitMix(seed);
    let mut t = Tensor::zeros(Elem::Num(d), shape);
    for i in 0..t.numel() {
        let r = rng.next();
        let bits = if d.is_float() {
            // 24 random bits → exactly representable in f32, in [-1, 1).
            let x = ((r >> 40) as f32) / (1u64 << 23) as f32 - 1.0;
            elem::from_f32(d, x)
        } else if d == DType::Bool {
            r & 1
        } else if d.is_signed() {
            elem::from_i64(d, (r % 200) as i64 - 100)
        } else {
            elem::from_i64(d, (r % 200) as i64)
        };
        t.set_bits(i, bits);
    }
    t
}

/// Resolves an argument for a parameter of type `ty`.
pub fn resolve(name: &str, spec: &ArgSpec, ty: &Type) -> Result<HostArg, String> {
    let pointee = match ty.elem() {
        Elem::Ptr(d) => Some(d),
        Elem::Num(_) => None,
    };
    let check_dtype = |given: Option<DType>, want: DType| match given {
        Some(g) if g != want => Err(format!("argument `{name}` is {g}, but the parameter is ptr[{want}]")),
        _ => Ok(()),
    };
    match (spec, pointee) {
        (ArgSpec::Value(v), None) => parse_scalar(name, v, ty).map(HostArg::Scalar),
        (ArgSpec::Value(_), Some(d)) => Err(format!(
            "parameter `{name}` is ptr[{d}]: pass a tensor, e.g. `{name}=@{name}.npy`, `{name}=rand(1024,{d})` or `{name}=zeros(1024,{d})`"
        )),
        (_, None) => Err(format!("parameter `{name}` is a scalar of type {ty}: pass a value, e.g. `{name}=16`")),
        (ArgSpec::Npy(path), Some(d)) => read_npy(path, d).map(HostArg::Tensor),
        (ArgSpec::Rand { shape, dtype, seed }, Some(d)) => {
            check_dtype(*dtype, d)?;
            fits_host(name, tensor_bytes(shape, d))?;
            Ok(HostArg::Tensor(random_tensor(d, shape, seed.unwrap_or_else(|| name_seed(name)))))
        }
        (ArgSpec::Zeros { shape, dtype }, Some(d)) => {
            check_dtype(*dtype, d)?;
            fits_host(name, tensor_bytes(shape, d))?;
            Ok(HostArg::Tensor(Tensor::zeros(Elem::Num(d), shape)))
        }
    }
}

fn parse_scalar(name: &str, v: &str, ty: &Type) -> Result<elem::Bits, String> {
    let d = match ty.elem() {
        Elem::Num(d) => d,
        Elem::Ptr(_) => DType::I64,
    };
    let bad = || format!("argument `{name}`: `{v}` is not a valid {d}");
    let t = v.trim();
    if d == DType::Bool {
        return match t {
            "true" | "True" | "1" => Ok(1),
            "false" | "False" | "0" => Ok(0),
            _ => Err(bad()),
        };
    }
    if d.is_float() {
        let x: f64 = t.parse().map_err(|_| bad())?;
        // A finite value the dtype cannot hold is an error, not `inf`
        // (integers do not wrap either); `inf` and `nan` are taken as such.
        let bits = elem::from_f32(d, x as f32);
        if x.is_finite() && !elem::to_f32(d, bits).is_finite() {
            return Err(format!("argument `{name}`: {t} does not fit in {d}"));
        }
        return Ok(bits);
    }
    let x: i64 = if let Some(h) = t.strip_prefix("0x") {
        i64::from_str_radix(h, 16).map_err(|_| bad())?
    } else {
        t.parse().map_err(|_| bad())?
    };
    // Out-of-range values are an error, not a silent wrap.
    if elem::to_i64(d, elem::from_i64(d, x)) != x {
        return Err(format!("argument `{name}`: {x} does not fit in {d}"));
    }
    Ok(elem::from_i64(d, x))
}

/// An f16 element as NumPy's `<f2` (ndarray-npy has no half types).
#[derive(Clone, Copy, Default)]
struct F16Bits(u16);

impl ReadableElement for F16Bits {
    fn read_to_end_exact_vec<R: Read>(
        mut reader: R,
        type_desc: &PyValue,
        len: usize,
    ) -> Result<Vec<Self>, ReadDataError> {
        match type_desc {
            PyValue::String(s) if s == "<f2" => {
                let mut bytes = vec![0u8; len * 2];
                reader.read_exact(&mut bytes)?;
                let mut extra = [0u8; 1];
                if reader.read(&mut extra)? != 0 {
                    return Err(ReadDataError::ExtraBytes(1));
                }
                Ok(bytes
                    .chunks_exact(2)
                    .map(|c| F16Bits(u16::from_le_bytes([c[0], c[1]])))
                    .collect())
            }
            other => Err(ReadDataError::WrongDescriptor(other.clone())),
        }
    }
}

impl WritableElement for F16Bits {
    fn type_descriptor() -> PyValue {
        PyValue::String("<f2".into())
    }

    fn write<W: Write>(&self, mut writer: W) -> Result<(), WriteDataError> {
        writer.write_all(&self.0.to_le_bytes())?;
        Ok(())
    }

    fn write_slice<W: Write>(slice: &[Self], mut writer: W) -> Result<(), WriteDataError> {
        for x in slice {
            writer.write_all(&x.0.to_le_bytes())?;
        }
        Ok(())
    }
}

fn read_as<T: ReadableElement + Copy>(
    path: &Path,
    d: DType,
    to_bits: impl Fn(T) -> u64,
) -> Result<Tensor, ReadNpyError> {
    let a: ArrayD<T> = ndarray_npy::read_npy(path)?;
    let a = a.as_standard_layout().to_owned();
    let mut t = Tensor::zeros(Elem::Num(d), a.shape());
    for (i, x) in a.iter().enumerate() {
        t.set_bits(i, to_bits(*x));
    }
    Ok(t)
}

/// The bytes of data an `.npy` file's header declares (its shape times
/// its item size, saturating) and the bytes it holds after the header;
/// `None` when the header cannot be read this simply (the reader then
/// says what is wrong).
fn npy_declared(path: &Path) -> Option<(u64, u64)> {
    let mut f = std::fs::File::open(path).ok()?;
    let file_bytes = f.metadata().ok()?.len();
    let mut magic = [0u8; 8];
    f.read_exact(&mut magic).ok()?;
    if &magic[..6] != b"\x93NUMPY" {
        return None;
    }
    // Version 1 has a 2-byte header length, versions 2 and 3 a 4-byte one.
    let (len_bytes, header_len) = if magic[6] == 1 {
        let mut b = [0u8; 2];
        f.read_exact(&mut b).ok()?;
        (2, u64::from(u16::from_le_bytes(b)))
    } else {
        let mut b = [0u8; 4];
        f.read_exact(&mut b).ok()?;
        (4, u64::from(u32::from_le_bytes(b)))
    };
    if header_len > 1 << 20 {
        return None;
    }
    let mut header = vec![0u8; header_len as usize];
    f.read_exact(&mut header).ok()?;
    let header = String::from_utf8_lossy(&header);
    // 'descr': '<f4' (the item size is its trailing digits).
    let descr = header.split("'descr':").nth(1)?.trim_start().strip_prefix('\'')?;
    let descr = descr.split('\'').next()?;
    let digits = descr.trim_start_matches(|c: char| !c.is_ascii_digit());
    let item: u64 = digits.parse().ok()?;
    // 'shape': (2, 3)
    let shape = header.split("'shape':").nth(1)?.trim_start().strip_prefix('(')?;
    let mut bytes = item;
    for d in shape
        .split(')')
        .next()?
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        bytes = bytes.saturating_mul(d.parse().ok()?);
    }
    Some((bytes, file_bytes.saturating_sub(8 + len_bytes + header_len)))
}

/// Reads an `.npy` file whose elements must be of dtype `d`.
pub fn read_npy(path: &Path, d: DType) -> Result<Tensor, String> {
    // The reader allocates what the header declares before it reads: a
    // small file claiming a huge shape would abort the process.
    if let Some((declared, held)) = npy_declared(path) {
        if declared > held {
            return Err(format!(
                "`{}` declares {declared} bytes of data in its header but holds {held}",
                path.display()
            ));
        }
    }
    let r = match d {
        DType::Bool => read_as::<bool>(path, d, |x| x as u64),
        DType::I8 => read_as::<i8>(path, d, |x| x as u8 as u64),
        DType::U8 => read_as::<u8>(path, d, |x| x as u64),
        DType::I32 => read_as::<i32>(path, d, |x| x as u32 as u64),
        DType::U32 => read_as::<u32>(path, d, |x| x as u64),
        DType::I64 => read_as::<i64>(path, d, |x| x as u64),
        DType::F32 => read_as::<f32>(path, d, |x| x.to_bits() as u64),
        DType::F16 => read_as::<F16Bits>(path, d, |x| x.0 as u64),
        DType::BF16 => read_as::<u16>(path, d, |x| x as u64),
    };
    let t = r.map_err(|e| match e {
        ReadNpyError::WrongDescriptor(desc) => {
            format!(
                "`{}` holds elements of NumPy type {desc}, but the parameter needs {d} ({})",
                path.display(),
                npy_name(d)
            )
        }
        other => format!("cannot read `{}`: {other}", path.display()),
    })?;
    // As `zeros`/`rand` shapes: a tensor argument has elements to place.
    if t.numel() == 0 {
        return Err(format!(
            "`{}` holds no elements (shape {:?}); a tensor argument needs at least one",
            path.display(),
            t.shape
        ));
    }
    Ok(t)
}

fn npy_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::I8 => "int8",
        DType::U8 => "uint8",
        DType::I32 => "int32",
        DType::U32 => "uint32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "uint16 holding bfloat16 bits",
    }
}

fn write_as<T: WritableElement>(path: &Path, t: &Tensor, from_bits: impl Fn(u64) -> T) -> Result<(), String> {
    let data: Vec<T> = (0..t.numel()).map(|i| from_bits(t.get_bits(i))).collect();
    let a = ArrayD::from_shape_vec(IxDyn(&t.shape), data).map_err(|e| e.to_string())?;
    ndarray_npy::write_npy(path, &a).map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// Writes a tensor as `.npy`.
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), String> {
    match t.dtype() {
        DType::Bool => write_as::<bool>(path, t, |b| b & 1 != 0),
        DType::I8 => write_as::<i8>(path, t, |b| b as u8 as i8),
        DType::U8 => write_as::<u8>(path, t, |b| b as u8),
        DType::I32 => write_as::<i32>(path, t, |b| b as u32 as i32),
        DType::U32 => write_as::<u32>(path, t, |b| b as u32),
        DType::I64 => write_as::<i64>(path, t, |b| b as i64),
        DType::F32 => write_as::<f32>(path, t, |b| f32::from_bits(b as u32)),
        DType::F16 => write_as::<F16Bits>(path, t, |b| F16Bits(b as u16)),
        DType::BF16 => write_as::<u16>(path, t, |b| b as u16),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_argument_forms() {
        assert_eq!(parse_arg("x=@in.npy"), Ok(("x".into(), ArgSpec::Npy("in.npy".into()))));
        assert_eq!(
            parse_arg("x=rand((64, 32), f16, 7)"),
            Ok((
                "x".into(),
                ArgSpec::Rand {
                    shape: vec![64, 32],
                    dtype: Some(DType::F16),
                    seed: Some(7)
                }
            ))
        );
        assert_eq!(
            parse_arg("y=zeros(128,f32)"),
            Ok((
                "y".into(),
                ArgSpec::Zeros {
                    shape: vec![128],
                    dtype: Some(DType::F32)
                }
            ))
        );
        assert_eq!(parse_arg("n=1024"), Ok(("n".into(), ArgSpec::Value("1024".into()))));
        assert!(parse_arg("x=rand((0,2),f32)").is_err());
        assert!(parse_arg("nonsense").is_err());
        let open = parse_arg("x=rand(1000,f32").expect_err("unclosed");
        assert!(open.contains("`rand(` is not closed"), "{open}");
        let negative = parse_arg("x=rand(1000,f32,-1)").expect_err("negative seed");
        assert!(
            negative.contains("seed `-1` is not a non-negative integer"),
            "{negative}"
        );
    }

    #[test]
    fn npy_round_trip_every_dtype() {
        let dir = std::env::temp_dir().join(format!("kb-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for d in DType::ALL {
            let t = random_tensor(d, &[3, 5], 42);
            let p = dir.join(format!("{d}.npy"));
            write_npy(&p, &t).expect("write");
            let back = read_npy(&p, d).expect("read");
            assert_eq!(back, t, "{d}");
        }
        let wrong = read_npy(&dir.join("f32.npy"), DType::I32).expect_err("dtype mismatch");
        assert!(wrong.contains("float32") || wrong.contains("<f4"), "{wrong}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A finite float the dtype cannot hold is an error (it became `inf`);
    /// `inf` itself, and values in range, are taken.
    #[test]
    fn float_scalars_out_of_range_are_errors() {
        let scalar = |v: &str, d: DType| parse_scalar("a", v, &Type::Scalar(Elem::Num(d)));
        let e = scalar("1e39", DType::F32).expect_err("past f32");
        assert_eq!(e, "argument `a`: 1e39 does not fit in f32");
        assert!(scalar("70000", DType::F16).is_err(), "past f16's 65504");
        assert_eq!(scalar("65504", DType::F16), Ok(elem::from_f32(DType::F16, 65504.0)));
        assert_eq!(scalar("inf", DType::F32), Ok(f32::INFINITY.to_bits() as u64));
        assert_eq!(
            scalar("1e38", DType::BF16).map(|b| elem::to_f32(DType::BF16, b).is_finite()),
            Ok(true)
        );
    }

    /// Sizes no host holds are errors before anything is allocated (the
    /// allocation aborted the process): a shape whose element count wraps,
    /// `zeros` past the host's memory, and a small `.npy` whose header
    /// claims a huge shape (or more data than it has).
    #[test]
    fn huge_sizes_are_errors_before_allocation() {
        let e = parse_arg("x=zeros((4294967296,4294967296),f32)").expect_err("wraps");
        assert!(e.contains("has more elements than any memory holds"), "{e}");
        if host_memory_available_bytes().is_some() {
            let (name, spec) = parse_arg("x=zeros(100000000000000,f32)").expect("a shape");
            let ty = Type::Scalar(Elem::Ptr(DType::F32));
            let e = resolve(&name, &spec, &ty)
                .map(|_| ())
                .expect_err("past the host's memory");
            assert!(
                e.contains("argument `x` needs 400000000000000 bytes, and the host has"),
                "{e}"
            );
        }
        let dir = std::env::temp_dir().join(format!("kb-npy-huge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let npy = |shape: &str, data: &[u8]| {
            let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
            while (10 + header.len() + 1) % 64 != 0 {
                header.push(' ');
            }
            header.push('\n');
            let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
            bytes.extend((header.len() as u16).to_le_bytes());
            bytes.extend(header.as_bytes());
            bytes.extend(data);
            let p = dir.join(format!("{}.npy", data.len()));
            std::fs::write(&p, bytes).expect("write");
            p
        };
        let e = read_npy(&npy("(100000000000000,)", &[]), DType::F32).expect_err("huge");
        assert!(
            e.contains("declares 400000000000000 bytes of data in its header but holds 0"),
            "{e}"
        );
        let e = read_npy(&npy("(2, 3)", &[0; 20]), DType::F32).expect_err("short");
        assert!(
            e.contains("declares 24 bytes of data in its header but holds 20"),
            "{e}"
        );
        let ok = read_npy(&npy("(2, 3)", &[0; 24]), DType::F32).expect("whole");
        assert_eq!(ok.shape.to_vec(), vec![2, 3]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
