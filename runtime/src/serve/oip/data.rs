//! Tensor data in both encodings: little-endian bytes (the binary tensor data
//! extension) and JSON arrays, read into tensors and written from them.

use std::fmt;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde_json::value::RawValue;
use tch::{Device, Kind, Tensor};

use super::OipError;
use super::types::{Datatype, numel};

/// A tensor of `datatype` and `shape` from its little-endian bytes: exactly
/// `numel × size` of them, and for `BOOL` each 0 or 1 (another byte is no
/// boolean libtorch can hold). `what` names the tensor in errors.
pub(crate) fn tensor_from_bytes(
    bytes: &[u8],
    shape: &[i64],
    datatype: Datatype,
    what: &str,
) -> Result<Tensor, OipError> {
    let n = numel(shape, what)?;
    let want = n.checked_mul(datatype.size()).ok_or_else(|| {
        OipError::bad_request(format!(
            "{what}: shape {shape:?} has more bytes than memory can hold"
        ))
    })?;
    if bytes.len() != want {
        return Err(OipError::bad_request(format!(
            "{what}: {} bytes of binary data, but shape {shape:?} of {datatype} needs {want}",
            bytes.len()
        )));
    }
    if datatype == Datatype::Bool
        && let Some(i) = bytes.iter().position(|&b| b > 1)
    {
        return Err(OipError::bad_request(format!(
            "{what}: BOOL element {i} is the byte {}, not 0 or 1",
            bytes[i]
        )));
    }
    let tensor = if cfg!(target_endian = "little") {
        Tensor::f_from_data_size(bytes, shape, datatype.kind())
    } else {
        // The protocol's byte order is little-endian; libtorch's the host's.
        let mut swapped = bytes.to_vec();
        swapped
            .chunks_exact_mut(datatype.size())
            .for_each(<[u8]>::reverse);
        Tensor::f_from_data_size(&swapped, shape, datatype.kind())
    };
    tensor.map_err(|e| OipError::internal(format!("{what}: cannot make the tensor: {e}")))
}

/// Appends `tensor`'s elements to `out` as the binary extension carries them
/// (row-major, little-endian); returns how many bytes it appended.
pub(crate) fn append_bytes(
    tensor: &Tensor,
    datatype: Datatype,
    out: &mut Vec<u8>,
) -> Result<usize, OipError> {
    let t = cpu_contiguous(tensor)?;
    let n = t.numel();
    let len = n * datatype.size();
    let start = out.len();
    out.resize(start + len, 0);
    t.f_copy_data_u8(&mut out[start..], n)
        .map_err(|e| OipError::internal(format!("cannot read the output tensor: {e}")))?;
    if cfg!(target_endian = "big") {
        out[start..]
            .chunks_exact_mut(datatype.size())
            .for_each(<[u8]>::reverse);
    }
    Ok(len)
}

fn cpu_contiguous(tensor: &Tensor) -> Result<Tensor, OipError> {
    tensor
        .f_to_device(Device::Cpu)
        .and_then(|t| t.f_contiguous())
        .map_err(|e| OipError::internal(format!("cannot read the output tensor: {e}")))
}

/// A tensor's elements as a JSON array: booleans, integers, or numbers.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum JsonData {
    /// `BOOL`.
    Bool(Vec<bool>),
    /// The integer datatypes.
    Int(Vec<i64>),
    /// The floating-point ones, widened to `f64` exactly, so the decimal
    /// written is the shortest that reads back as the same `f64` and so as
    /// the same `f32` or `f16` (no rounding twice at the reader).
    Float(Vec<f64>),
}

/// `tensor`'s elements, flat and row-major, for a JSON response. A NaN or
/// infinity is a 400 naming `name`: JSON has no token for them, and the
/// binary encoding carries them.
pub(crate) fn tensor_to_json(
    tensor: &Tensor,
    datatype: Datatype,
    name: &str,
) -> Result<JsonData, OipError> {
    let t = cpu_contiguous(tensor)?;
    let flat = |kind: Kind| {
        t.f_to_kind(kind)
            .and_then(|t| t.f_reshape([-1]))
            .map_err(|e| OipError::internal(format!("cannot read output {name}: {e}")))
    };
    let read = |e: tch::TchError| OipError::internal(format!("cannot read output {name}: {e}"));
    Ok(match datatype {
        Datatype::Bool => JsonData::Bool(Vec::<bool>::try_from(&flat(Kind::Bool)?).map_err(read)?),
        d if d.is_float() => {
            let v = Vec::<f64>::try_from(&flat(Kind::Double)?).map_err(read)?;
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(OipError::bad_request(format!(
                    "output {name}: element {i} is {}, which JSON cannot carry; ask for this output \
                     in binary (its parameter binary_data: true)",
                    v[i]
                )));
            }
            JsonData::Float(v)
        }
        _ => JsonData::Int(Vec::<i64>::try_from(&flat(Kind::Int64)?).map_err(read)?),
    })
}

/// A tensor of `datatype` and `shape` from the JSON array `data`, flat or
/// nested (row-major either way; the nesting is not checked against the
/// shape, the element count is). `what` names the tensor in errors.
///
/// Numbers are read as the nearest `f64` and then converted to the
/// datatype, as `numpy.array(data, dtype)` does: a value a client took from
/// a tensor of that datatype comes back bitwise. Integers must be integral
/// and in the datatype's range; booleans must be `true` or `false`.
pub(crate) fn tensor_from_json(
    data: &RawValue,
    shape: &[i64],
    datatype: Datatype,
    what: &str,
) -> Result<Tensor, OipError> {
    let n = numel(shape, what)?;
    if !data.get().trim_start().starts_with('[') {
        return Err(OipError::bad_request(format!(
            "{what}: data must be a JSON array"
        )));
    }
    let mut elems = match datatype {
        Datatype::Bool => Elems::Bool(Vec::with_capacity(n)),
        d if d.is_float() => Elems::Float(Vec::with_capacity(n)),
        d => Elems::Int(Vec::with_capacity(n), d),
    };
    let mut de = serde_json::Deserializer::from_str(data.get());
    Flatten(&mut elems)
        .deserialize(&mut de)
        .map_err(|e| OipError::bad_request(format!("{what}: data: {e}")))?;
    let got = elems.len();
    if got != n {
        return Err(OipError::bad_request(format!(
            "{what}: data holds {got} elements, but shape {shape:?} has {n}"
        )));
    }
    let make = |t: Result<Tensor, tch::TchError>| {
        t.and_then(|t| t.f_reshape(shape))
            .and_then(|t| t.f_to_kind(datatype.kind()))
            .map_err(|e| OipError::internal(format!("{what}: cannot make the tensor: {e}")))
    };
    match elems {
        Elems::Bool(v) => make(Tensor::f_from_slice(&v)),
        Elems::Float(v) => make(Tensor::f_from_slice(&v)),
        Elems::Int(v, _) => make(Tensor::f_from_slice(&v)),
    }
}

/// The elements read so far, in the widest type of their class.
enum Elems {
    Bool(Vec<bool>),
    Int(Vec<i64>, Datatype),
    Float(Vec<f64>),
}

impl Elems {
    fn len(&self) -> usize {
        match self {
            Self::Bool(v) => v.len(),
            Self::Int(v, _) => v.len(),
            Self::Float(v) => v.len(),
        }
    }

    fn push_int<E: de::Error>(&mut self, v: i128) -> Result<(), E> {
        match self {
            Self::Int(out, d) => {
                let (lo, hi) = d.int_range().unwrap_or((i64::MIN, i64::MAX));
                let x = i64::try_from(v)
                    .ok()
                    .filter(|x| (lo..=hi).contains(x))
                    .ok_or_else(|| E::custom(format!("{v} is out of the range of {d}")))?;
                out.push(x);
                Ok(())
            }
            #[allow(clippy::cast_precision_loss)] // the nearest f64, as numpy reads it
            Self::Float(out) => {
                out.push(v as f64);
                Ok(())
            }
            Self::Bool(_) => Err(E::custom(format!("{v} where BOOL expects true or false"))),
        }
    }
}

/// Reads a JSON value into [`Elems`], descending into nested arrays.
struct Flatten<'a>(&'a mut Elems);

impl<'de> DeserializeSeed<'de> for Flatten<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array (flat or nested) of numbers or booleans")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Flatten(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        match self.0 {
            Elems::Bool(out) => {
                out.push(v);
                Ok(())
            }
            _ => Err(E::custom(format!("{v} where a number is expected"))),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.push_int(i128::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.0.push_int(i128::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match self.0 {
            Elems::Float(out) => {
                out.push(v);
                Ok(())
            }
            // An integral number written with a fraction or exponent (`2.0`,
            // `1e3`) is the integer; any other is refused, not truncated.
            #[allow(clippy::cast_possible_truncation)] // checked integral and in range
            Elems::Int(..) if v.fract() == 0.0 && v.abs() < 9.3e18 => self.0.push_int(v as i128),
            Elems::Int(_, d) => Err(E::custom(format!("{v} where {d} expects an integer"))),
            Elems::Bool(_) => Err(E::custom(format!("{v} where BOOL expects true or false"))),
        }
    }
}
