//! The checkpoint file: written (`.ot` through libtorch's archive writer,
//! `.safetensors` by hand) through a checked writer, and read back for
//! `resume`. Only fallible tch calls: these run in a guard's exit.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::sync::MutexGuard;

use tch::nn::{VarStore, Variables};
use tch::{Device, Kind, TchError, Tensor};

use super::PREFIX;
use super::log::Metrics;
use crate::NoGrad;
use crate::Scope;
use crate::durable::{self, Replaced, Turn};
use crate::scopes::deadline::DeadlineExcluded;
use crate::sync::lock;

fn is_safetensors(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "safetensors")
}

/// A tch error as one line.
fn clean(e: &TchError) -> String {
    durable::without_backtrace(&e.to_string()).to_owned()
}

/// The VarStore's variables; a lock poisoned by a panic elsewhere still
/// holds them (tch's `variables()` would panic).
fn variables(vs: &VarStore) -> MutexGuard<'_, Variables> {
    lock(&vs.variables_)
}

/// The VarStore's variables by name (shallow: the same storage).
pub(super) fn named_variables(vs: &VarStore) -> Vec<(String, Tensor)> {
    variables(vs)
        .named_variables
        .iter()
        .map(|(name, t)| (name.clone(), t.shallow_clone()))
        .collect()
}

/// Writes `tensors` (the weights and the training state) and the metric
/// log to `path`, crash-safely, in `turn`; `intact`, asked once the file
/// is written and before it replaces `path`, can still refuse it (a
/// boundary whose aliased values were overwritten). Only tch's fallible
/// calls: it runs in `Drop`, and on the background writer.
pub(super) fn save(
    path: &Path,
    turn: &Turn,
    tensors: &[(&str, &Tensor)],
    log: &Metrics,
    intact: &dyn Fn() -> Result<(), String>,
) -> Result<Replaced, String> {
    let metrics = log
        .0
        .iter()
        .map(|(name, values)| match Tensor::f_from_slice(values) {
            Ok(t) => Ok((format!("{PREFIX}{name}"), t)),
            Err(e) => Err(format!("metric {name}: {}", clean(&e))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let named: Vec<(&str, &Tensor)> = tensors
        .iter()
        .copied()
        .chain(metrics.iter().map(|(name, t)| (name.as_str(), t)))
        .collect();
    let safetensors = is_safetensors(path);
    durable::replace_in_turn(path, turn, |tmp| {
        // Through a writer whose every write is checked: libtorch's own
        // file writer throws out of its archive writer on a full disk
        // (an abort) and never checks its final `close()`.
        let out = durable::Output::create(tmp)?;
        let written = if safetensors {
            write_safetensors(&named, &mut out.writer())
        } else {
            Tensor::save_multi_to_stream(&named, out.writer()).map_err(|e| clean(&e))
        };
        // A failed write first: libtorch's error after it is its echo.
        out.finish()?;
        written?;
        // After every read of the tensors: if they were intact now, they
        // were while the file was written (versions only grow).
        intact()
    })
}

/// The shape of `t`. Through torch-sys: tch's `size()` unwraps.
fn shape(t: &Tensor) -> Result<Vec<i64>, String> {
    let ptr = t.as_ptr().cast_mut();
    // SAFETY: a live tensor; `at_shape` writes `at_dim` values; both catch
    // C++ exceptions into torch-sys's last error, read (and freed) at once.
    unsafe {
        let dim = torch_sys::at_dim(ptr);
        torch_error()?;
        let mut shape = vec![0i64; dim];
        torch_sys::at_shape(ptr, shape.as_mut_ptr());
        torch_error()?;
        Ok(shape)
    }
}

/// The address of `t`'s first element. Through torch-sys: tch's
/// `data_ptr()` panics on an error.
fn data_ptr(t: &Tensor) -> Result<*const std::ffi::c_void, String> {
    // SAFETY: a live tensor; the call catches C++ exceptions into
    // torch-sys's last error, read (and freed) at once.
    let ptr = unsafe {
        let ptr = torch_sys::at_data_ptr(t.as_ptr().cast_mut());
        torch_error()?;
        ptr
    };
    if ptr.is_null() {
        return Err("the tensor has no data".into());
    }
    Ok(ptr.cast_const())
}

/// torch-sys's last error on this thread, cleared.
///
/// # Safety
/// Only after a torch-sys call on this thread.
unsafe fn torch_error() -> Result<(), String> {
    // SAFETY: a string from `strdup`, or null; freed once, here.
    unsafe {
        let err = torch_sys::get_and_reset_last_err();
        if err.is_null() {
            return Ok(());
        }
        let msg = CStr::from_ptr(err).to_string_lossy().into_owned();
        libc::free(err.cast());
        Err(durable::without_backtrace(&msg).to_owned())
    }
}

/// The safetensors name of a kind (as tch's `write_safetensors` has it).
fn safetensors_dtype(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Bool => "BOOL",
        Kind::Uint8 => "U8",
        Kind::Int8 => "I8",
        Kind::Int16 => "I16",
        Kind::Int => "I32",
        Kind::Int64 => "I64",
        Kind::BFloat16 => "BF16",
        Kind::Half => "F16",
        Kind::Float => "F32",
        Kind::Double => "F64",
        _ => return None,
    })
}

/// `s` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes `named` in the safetensors format, as `Tensor::write_safetensors`
/// does, through `w` and with tch's fallible calls only (its writer copies
/// each tensor's bytes with an `unwrap`, and opens its own file).
fn write_safetensors(named: &[(&str, &Tensor)], w: &mut impl Write) -> Result<(), String> {
    struct Entry<'t> {
        name: &'t str,
        tensor: &'t Tensor,
        dtype: &'static str,
        shape: Vec<i64>,
        bytes: usize,
    }
    let mut entries = Vec::with_capacity(named.len());
    for &(name, tensor) in named {
        let what = |e: String| format!("variable {name}: {e}");
        let kind = tensor.f_kind().map_err(|e| what(clean(&e)))?;
        let dtype = safetensors_dtype(kind)
            .ok_or_else(|| what(format!("{kind:?} has no safetensors dtype")))?;
        let shape = shape(tensor).map_err(what)?;
        let bytes = shape
            .iter()
            .try_fold(kind.elt_size_in_bytes(), |n, &d| {
                usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
            })
            .ok_or_else(|| what(format!("shape {shape:?} is too large")))?;
        entries.push(Entry {
            name,
            tensor,
            dtype,
            shape,
            bytes,
        });
    }
    // Sorted, so that one VarStore always makes the same file.
    entries.sort_by(|a, b| a.name.cmp(b.name));
    let mut header = String::from("{");
    let mut offset = 0usize;
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        json_string(&mut header, e.name);
        let dims: Vec<String> = e.shape.iter().map(i64::to_string).collect();
        let _ = write!(
            header,
            r#":{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}}"#,
            e.dtype,
            dims.join(","),
            offset,
            offset + e.bytes
        );
        offset += e.bytes;
    }
    header.push('}');
    // Padded with spaces to a multiple of 8, as safetensors does.
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let io = |e: std::io::Error| e.to_string();
    w.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(header.as_bytes()).map_err(io)?;
    for e in &entries {
        let what = |err: TchError| format!("variable {}: {}", e.name, clean(&err));
        let cpu = e
            .tensor
            .f_to(Device::Cpu)
            .and_then(|t| t.f_contiguous())
            .map_err(what)?;
        if e.bytes == 0 {
            continue;
        }
        // Straight from the tensor's memory: no copy of our own (a save is
        // mostly this loop, and it runs beside training on the background
        // writer).
        // SAFETY: `cpu` is a contiguous CPU tensor of `e.shape` and its
        // kind: `e.bytes` bytes from its first element's address, alive
        // while the slice is read. The slice only goes to the file's
        // `write`, which copies it as libtorch's `copy_data` did; a write
        // into the tensor meanwhile (user code on a boundary's alias) is
        // caught by the save's `intact` check, and the file is discarded.
        let first = data_ptr(&cpu).map_err(|err| format!("variable {}: {err}", e.name))?;
        let bytes = unsafe { std::slice::from_raw_parts(first.cast::<u8>(), e.bytes) };
        w.write_all(bytes).map_err(io)?;
    }
    Ok(())
}

/// The file's tensors (on `device`) and its metric log.
pub(super) fn read(
    path: &Path,
    device: Device,
) -> Result<(HashMap<String, Tensor>, Metrics), String> {
    let named = if is_safetensors(path) {
        Tensor::read_safetensors(path)
    } else {
        Tensor::load_multi_with_device(path, device)
    }
    .map_err(|e| clean(&e))?;
    let mut log = Metrics::default();
    let mut tensors = HashMap::new();
    for (name, t) in named {
        match name.strip_prefix(PREFIX) {
            Some(metric) => {
                let values = t
                    .f_to_kind(Kind::Double)
                    .and_then(|t| t.f_to(Device::Cpu))
                    .and_then(|t| Vec::<f64>::try_from(&t))
                    .map_err(|e| format!("metric {metric}: {}", clean(&e)))?;
                log.0.insert(metric.to_owned(), values);
            }
            None => {
                tensors.insert(name, t);
            }
        }
    }
    Ok((tensors, log))
}

/// Checks that `tensors` hold every variable of `vs` with its shape.
pub(super) fn check_variables(
    vs: &VarStore,
    path: &Path,
    tensors: &HashMap<String, Tensor>,
) -> Result<(), String> {
    let vars = variables(vs);
    for (name, var) in &vars.named_variables {
        let src = tensors
            .get(name)
            .ok_or_else(|| format!("{} has no variable {name}", path.display()))?;
        let (have, want) = (shape(src)?, shape(var)?);
        if have != want {
            return Err(format!(
                "variable {name} has shape {have:?} in {}, {want:?} in the VarStore",
                path.display(),
            ));
        }
    }
    Ok(())
}

/// Copies `tensors` into `vs`, checked by [`check_variables`] first.
pub(super) fn copy_variables(
    vs: &VarStore,
    tensors: &HashMap<String, Tensor>,
) -> Result<(), String> {
    let mut vars = variables(vs);
    let _no_grad = NoGrad.enter().map_err(|e| e.to_string())?;
    // All or nothing: a deadline around the entry (it has refused the
    // reading already if it passed) must not stop the copy halfway.
    let _unchecked = DeadlineExcluded::new();
    for (name, var) in &mut vars.named_variables {
        if let Some(src) = tensors.get(name) {
            var.f_copy_(src)
                .map_err(|e| format!("variable {name}: {}", clean(&e)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tch-scope-ckpt-{}-{name}", std::process::id()))
    }

    #[test]
    fn safetensors_are_written_as_tch_writes_them() {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).view([2, 3]);
        let b = Tensor::from_slice(&[7.0f32]);
        let s = Tensor::from_slice(&[0.5f32]).view([0i64; 0]);
        let named = [("w\"ei\\rd", &a), ("b", &b), ("s", &s)];
        let mut mine = vec![];
        write_safetensors(&named, &mut mine).unwrap();
        let path = temp("same.safetensors");
        Tensor::write_safetensors(&named, &path).unwrap();
        assert_eq!(mine, std::fs::read(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn safetensors_of_mixed_kinds_and_strided_tensors_read_back() {
        let t = Tensor::arange(6, (Kind::Float, Device::Cpu))
            .view([2, 3])
            .tr();
        let d = Tensor::from_slice(&[0.25f64, 0.5]);
        let i = Tensor::from_slice(&[3i64, -4, 5]);
        let e = Tensor::from_slice::<f64>(&[]);
        let named = [("t", &t), ("d", &d), ("i", &i), ("e", &e)];
        let mut bytes = vec![];
        write_safetensors(&named, &mut bytes).unwrap();
        let path = temp("mixed.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let back: HashMap<String, Tensor> = Tensor::read_safetensors(&path)
            .unwrap()
            .into_iter()
            .collect();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(back.len(), 4);
        for (name, want) in named {
            let got = &back[name];
            assert_eq!(got.kind(), want.kind(), "{name}");
            assert_eq!(got.size(), want.size(), "{name}");
            assert!(got.equal(want), "{name}");
        }
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        json_string(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, r#""a\"b\\c\u000ad\u0001é""#);
    }

    #[test]
    fn shapes_come_without_panicking_calls() {
        let t = Tensor::zeros([2, 0, 3], (Kind::Float, Device::Cpu));
        assert_eq!(shape(&t), Ok(vec![2, 0, 3]));
        assert_eq!(shape(&Tensor::from(1.5f64)), Ok(vec![]));
    }
}
