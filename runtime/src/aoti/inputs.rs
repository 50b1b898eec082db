//! What each input of a package must be ([`InputSpec`]), read from the
//! package's own generated input check, and the check of a run's inputs
//! against it, before the package sees them.
//!
//! AOTInductor writes what it compiled each input for nowhere but in the
//! `check_input_<i>` functions of the wrapper source it ships in the
//! package: a dtype, each dim's size (a fixed value, or a range for a
//! dynamic dim), each stride that does not depend on a dynamic size, and
//! the device type. Their lines have one shape each (PyTorch's
//! `torch/_inductor/codegen/cpp_wrapper_cpu.py`,
//! `generate_input_output_runtime_checks`), and this module reads those
//! lines and nothing else. A package whose source has none (or not one per
//! input) has its count, rank, dtype and device learned from its first run
//! that succeeds instead.

use std::fmt;

use tch::{Device, Kind, Tensor};

/// One dim of a package's input: what its size must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputDim {
    /// Exactly this size (a static dim).
    Fixed(i64),
    /// A dynamic dim, within these bounds (both inclusive); `None` where
    /// the package checks no bound on that side.
    Range {
        /// The smallest size taken.
        min: Option<i64>,
        /// The largest size taken.
        max: Option<i64>,
    },
}

/// What one input tensor of a package must be: its dtype, rank, each dim's
/// size, its strides where they are fixed, and its device type.
///
/// `Display` writes it as `Float [1..=4096, 16]` (a range for a dynamic
/// dim, `_` for a dim whose size is not known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    /// PyTorch's name of the dtype (`float32`), as the package writes it.
    dtype: String,
    kind: Option<Kind>,
    dims: Vec<InputDim>,
    /// One per dim; `None` where the stride depends on a dynamic size (or
    /// is not known).
    strides: Vec<Option<i64>>,
    /// c10's `DeviceType` (0 = CPU, 1 = CUDA).
    device_type: Option<i32>,
    /// Learned from a run, not read from the package's check: the sizes
    /// and strides are not known.
    learned: bool,
}

impl InputSpec {
    /// The dtype as tch names it (`Float`); `None` for a dtype tch has no
    /// [`Kind`] for (see [`dtype`](Self::dtype)).
    pub fn kind(&self) -> Option<Kind> {
        self.kind
    }

    /// PyTorch's name of the dtype: `float32`, `int64`, …
    pub fn dtype(&self) -> &str {
        &self.dtype
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// What each dim's size must be.
    pub fn dims(&self) -> &[InputDim] {
        &self.dims
    }

    /// Each dim's stride where it is fixed (`None` where it depends on a
    /// dynamic size, or was not read from the package).
    pub fn strides(&self) -> &[Option<i64>] {
        &self.strides
    }

    /// Whether this was learned from the package's first successful run
    /// (its source had no input check to read): then only the rank, the
    /// dtype and the device are known.
    pub fn is_learned(&self) -> bool {
        self.learned
    }
}

impl fmt::Display for InputSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [", DtypeName(self.kind, &self.dtype))?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match *d {
                InputDim::Fixed(n) => write!(f, "{n}")?,
                InputDim::Range {
                    min: None,
                    max: None,
                } => f.write_str("_")?,
                InputDim::Range { min, max } => write!(
                    f,
                    "{}..={}",
                    min.map_or(String::new(), |v| v.to_string()),
                    max.map_or(String::new(), |v| v.to_string())
                )?,
            }
        }
        f.write_str("]")
    }
}

/// `Float`, or PyTorch's name where tch has no kind for it.
struct DtypeName<'a>(Option<Kind>, &'a str);

impl fmt::Display for DtypeName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(k) => write!(f, "{k:?}"),
            None => f.write_str(self.1),
        }
    }
}

/// tch's kind for a dtype name of `aoti_torch_dtype_<name>()`.
fn kind_of(dtype: &str) -> Option<Kind> {
    Some(match dtype {
        "float32" => Kind::Float,
        "float64" => Kind::Double,
        "float16" => Kind::Half,
        "bfloat16" => Kind::BFloat16,
        "int64" => Kind::Int64,
        "int32" => Kind::Int,
        "int16" => Kind::Int16,
        "int8" => Kind::Int8,
        "uint8" => Kind::Uint8,
        "bool" => Kind::Bool,
        "complex32" => Kind::ComplexHalf,
        "complex64" => Kind::ComplexFloat,
        "complex128" => Kind::ComplexDouble,
        "float8_e5m2" => Kind::Float8e5m2,
        "float8_e4m3fn" => Kind::Float8e4m3fn,
        "float8_e5m2fnuz" => Kind::Float8e5m2fnuz,
        "float8_e4m3fnuz" => Kind::Float8e4m3fnuz,
        _ => return None,
    })
}

/// PyTorch's name of a kind (`float64` for `Double`).
fn torch_name(kind: Kind) -> String {
    let name = match kind {
        Kind::Float => "float32",
        Kind::Double => "float64",
        Kind::Half => "float16",
        Kind::BFloat16 => "bfloat16",
        Kind::Int64 => "int64",
        Kind::Int => "int32",
        Kind::Int16 => "int16",
        Kind::Int8 => "int8",
        Kind::Uint8 => "uint8",
        Kind::Bool => "bool",
        Kind::ComplexHalf => "complex32",
        Kind::ComplexFloat => "complex64",
        Kind::ComplexDouble => "complex128",
        other => return format!("{other:?}").to_lowercase(),
    };
    name.to_owned()
}

/// c10's `DeviceType` of a tch device.
fn device_type(d: Device) -> i32 {
    match d {
        Device::Cpu => 0,
        Device::Cuda(_) => 1,
        Device::Vulkan => 10,
        Device::Mps => 13,
    }
}

fn device_type_name(t: i32) -> String {
    match t {
        0 => "cpu".into(),
        1 => "cuda".into(),
        10 => "vulkan".into(),
        13 => "mps".into(),
        12 => "xpu".into(),
        other => format!("device type {other}"),
    }
}

// ---- reading the package's check ---------------------------------------------

/// The input specs in the source of a package's `check_input_<i>`
/// functions, one per input; `None` unless there are exactly `inputs` of
/// them, numbered `0..inputs`.
pub(super) fn parse(source: &str, inputs: usize) -> Option<Vec<InputSpec>> {
    let mut specs: Vec<Option<InputSpec>> = vec![None; inputs];
    for chunk in source.split("static void check_input_").skip(1) {
        let digits: String = chunk.chars().take_while(char::is_ascii_digit).collect();
        let i: usize = digits.parse().ok()?;
        let slot = specs.get_mut(i)?;
        if slot.is_some() {
            return None;
        }
        *slot = Some(parse_one(chunk, i)?);
    }
    specs.into_iter().collect()
}

/// One `check_input_<i>` function's body.
fn parse_one(body: &str, i: usize) -> Option<InputSpec> {
    // `ConstantHandle arg16_1 = ConstantHandle(input_handles[0]);`
    let handle = format!("ConstantHandle(input_handles[{i}]);");
    let name = body.lines().find_map(|l| {
        let l = l.trim().strip_prefix("ConstantHandle ")?;
        let (name, rest) = l.split_once(" = ")?;
        (rest == handle).then(|| name.to_owned())
    })?;
    let size = format!("{name}_size[");
    let stride = format!("{name}_stride[");
    let mut dtype = None;
    let mut device_type = None;
    // Per dim index: (fixed, min, max), and strides.
    let mut dims: Vec<(Option<i64>, Option<i64>, Option<i64>)> = Vec::new();
    let mut strides: Vec<Option<i64>> = Vec::new();
    let mut rank = 0;
    for line in body.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix(&format!("int32_t {name}_expected_dtype = ")) {
            dtype = Some(
                rest.strip_prefix("aoti_torch_dtype_")?
                    .strip_suffix("();")?
                    .to_owned(),
            );
        } else if let Some(rest) =
            line.strip_prefix(&format!("int32_t {name}_expected_device_type = "))
        {
            device_type = Some(rest.strip_suffix(';')?.trim().parse().ok()?);
        } else if let Some(cond) = line
            .strip_prefix("if (")
            .and_then(|l| l.strip_suffix(") {"))
        {
            // `N != x_size[d]`, `x_size[d] < N`, `x_size[d] > N`,
            // `N != x_stride[d]`.
            if let Some((value, rhs)) = cond.split_once(" != ") {
                let Ok(value) = value.parse::<i64>() else {
                    continue;
                };
                if let Some(d) = index(rhs, &size) {
                    grow(&mut dims, d, (None, None, None)).0 = Some(value);
                    rank = rank.max(d + 1);
                } else if let Some(d) = index(rhs, &stride) {
                    *grow(&mut strides, d, None) = Some(value);
                    rank = rank.max(d + 1);
                }
            } else if let Some((lhs, value)) = cond.split_once(" < ") {
                if let (Some(d), Ok(v)) = (index(lhs, &size), value.parse::<i64>()) {
                    grow(&mut dims, d, (None, None, None)).1 = Some(v);
                    rank = rank.max(d + 1);
                }
            } else if let Some((lhs, value)) = cond.split_once(" > ")
                && let (Some(d), Ok(v)) = (index(lhs, &size), value.parse::<i64>())
            {
                grow(&mut dims, d, (None, None, None)).2 = Some(v);
                rank = rank.max(d + 1);
            }
        }
    }
    let dtype = dtype?;
    dims.resize(rank, (None, None, None));
    strides.resize(rank, None);
    Some(InputSpec {
        kind: kind_of(&dtype),
        dtype,
        dims: dims
            .into_iter()
            .map(|(fixed, min, max)| match fixed {
                Some(n) => InputDim::Fixed(n),
                None => InputDim::Range { min, max },
            })
            .collect(),
        strides,
        device_type,
        learned: false,
    })
}

/// `d` of `<prefix>d]`.
fn index(expr: &str, prefix: &str) -> Option<usize> {
    expr.strip_prefix(prefix)?.strip_suffix(']')?.parse().ok()
}

/// `v[i]`, growing `v` with `fill` to reach it.
fn grow<T: Clone>(v: &mut Vec<T>, i: usize, fill: T) -> &mut T {
    if v.len() <= i {
        v.resize(i + 1, fill);
    }
    &mut v[i]
}

/// What a run that succeeded shows of its inputs: rank, dtype and device.
pub(super) fn learned(inputs: &[&Tensor]) -> Vec<InputSpec> {
    inputs
        .iter()
        .map(|t| {
            let kind = t.f_kind().ok();
            InputSpec {
                dtype: kind.map_or_else(|| "unknown".to_owned(), torch_name),
                kind,
                dims: vec![
                    InputDim::Range {
                        min: None,
                        max: None
                    };
                    t.dim()
                ],
                strides: vec![None; t.dim()],
                device_type: Some(device_type(t.device())),
                learned: true,
            }
        })
        .collect()
}

// ---- checking a run's inputs -------------------------------------------------------

/// Checks input `i` against `spec`: `Err` says why it is refused ("input 0
/// does not match the package: …"). `Ok(Some(view))`: the input differs
/// only in the stride of dims of size 1, which carry no meaning, and
/// `view` is it with the package's strides there (no copy).
pub(super) fn check(i: usize, spec: &InputSpec, t: &Tensor) -> Result<Option<Tensor>, String> {
    mismatch(spec, t).map_err(|why| format!("input {i} does not match the package: {why}"))
}

fn mismatch(spec: &InputSpec, t: &Tensor) -> Result<Option<Tensor>, String> {
    if !t.defined() {
        return Err("an undefined tensor".to_owned());
    }
    let kind = t.f_kind().ok();
    let what = || {
        format!(
            "a {} tensor of shape {:?}",
            kind.map_or_else(|| "?".to_owned(), |k| format!("{k:?}")),
            t.size()
        )
    };
    if t.dim() != spec.rank() {
        return Err(format!(
            "{} has {} dim{}, the package takes {}: {spec}",
            what(),
            t.dim(),
            if t.dim() == 1 { "" } else { "s" },
            spec.rank()
        ));
    }
    if let (Some(want), Some(got)) = (spec.kind, kind)
        && want != got
    {
        return Err(format!(
            "a {got:?} tensor (torch.{}), the package takes {want:?} (torch.{}): {spec}",
            torch_name(got),
            spec.dtype
        ));
    }
    if let Some(want) = spec.device_type
        && want != device_type(t.device())
    {
        return Err(format!(
            "a tensor on {}, the package takes {} tensors",
            crate::error::DeviceName(t.device()),
            device_type_name(want)
        ));
    }
    let size = t.size();
    for (d, (&n, want)) in size.iter().zip(&spec.dims).enumerate() {
        let refused = match *want {
            InputDim::Fixed(m) => (n != m).then(|| format!("{m}")),
            InputDim::Range { min, max } => (min.is_some_and(|m| n < m)
                || max.is_some_and(|m| n > m))
            .then(|| match (min, max) {
                (Some(lo), Some(hi)) => format!("{lo} to {hi}"),
                (Some(lo), None) => format!("at least {lo}"),
                (None, Some(hi)) => format!("at most {hi}"),
                // Refuses nothing: never reached.
                (None, None) => String::new(),
            }),
        };
        if let Some(takes) = refused {
            let hint = if matches!(*want, InputDim::Range { min: Some(2), .. }) && n == 1 {
                " (its export ruled out a size of 1: export with \
                 `backed_size_oblivious` around both `torch.export.export` and \
                 `aoti_compile_and_package`, see the `.pt2` section of docs/words.md)"
            } else {
                ""
            };
            return Err(format!(
                "{} has size {n} at dim {d}, the package takes {takes} there: {spec}{hint}",
                what()
            ));
        }
    }
    check_strides(spec, t, &size)
}

fn check_strides(spec: &InputSpec, t: &Tensor, size: &[i64]) -> Result<Option<Tensor>, String> {
    let stride = t.stride();
    let wrong: Vec<usize> = (0..stride.len())
        .filter(|&d| spec.strides[d].is_some_and(|s| s != stride[d]))
        .collect();
    if wrong.is_empty() {
        return Ok(None);
    }
    let want: Vec<i64> = (0..stride.len())
        .map(|d| spec.strides[d].unwrap_or(stride[d]))
        .collect();
    if wrong.iter().all(|&d| size[d] == 1) {
        // A dim of size 1 is never stepped over: its stride is free, and
        // `.contiguous()` would not change it.
        return t
            .f_as_strided(size, &want, None)
            .map(Some)
            .map_err(|e| format!("restriding a dim of size 1 failed: {e}"));
    }
    let contiguous = contiguous_strides(size);
    let known_match_contiguous = (0..stride.len())
        .all(|d| spec.strides[d].is_none_or(|s| s == contiguous[d] || size[d] == 1));
    let fix = if known_match_contiguous {
        ", those of a contiguous tensor: pass `x.contiguous()`"
    } else {
        " (the layout it was exported with)"
    };
    Err(format!(
        "strides {stride:?} (shape {size:?}), the package takes {}{fix}",
        StridesWanted(&spec.strides)
    ))
}

/// `[32, 1]`, with `_` where any stride is taken.
struct StridesWanted<'a>(&'a [Option<i64>]);

impl fmt::Display for StridesWanted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match s {
                Some(s) => write!(f, "{s}")?,
                None => f.write_str("_")?,
            }
        }
        f.write_str("]")
    }
}

/// The strides of a contiguous tensor of shape `size`.
fn contiguous_strides(size: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; size.len()];
    for d in (0..size.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * size[d + 1].max(1);
    }
    strides
}
