//! The protocol's datatypes and the libtorch kinds they map to.

use std::fmt;
use std::str::FromStr;

use tch::Kind;

use super::OipError;

/// A tensor datatype of the Open Inference Protocol that this codec carries,
/// with the libtorch [`Kind`] it maps to.
///
/// Supported: `BOOL` (one byte, 0 or 1), `UINT8`, `INT8`, `INT16`, `INT32`,
/// `INT64`, `FP16`, `FP32`, `FP64`, little-endian in the binary extension.
/// Refused with a 400 naming the reason: `UINT16`, `UINT32`, `UINT64` (tch
/// has no unsigned kinds wider than a byte), `BF16` (numpy, and so
/// `tritonclient`, has no native bfloat16) and `BYTES` (libtorch has no
/// string tensors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Datatype {
    /// `BOOL`: [`Kind::Bool`], one byte per element.
    Bool,
    /// `UINT8`: [`Kind::Uint8`].
    Uint8,
    /// `INT8`: [`Kind::Int8`].
    Int8,
    /// `INT16`: [`Kind::Int16`].
    Int16,
    /// `INT32`: [`Kind::Int`].
    Int32,
    /// `INT64`: [`Kind::Int64`].
    Int64,
    /// `FP16`: [`Kind::Half`].
    Fp16,
    /// `FP32`: [`Kind::Float`].
    Fp32,
    /// `FP64`: [`Kind::Double`].
    Fp64,
}

/// Every supported datatype, in the protocol's order.
const ALL: [Datatype; 9] = [
    Datatype::Bool,
    Datatype::Uint8,
    Datatype::Int8,
    Datatype::Int16,
    Datatype::Int32,
    Datatype::Int64,
    Datatype::Fp16,
    Datatype::Fp32,
    Datatype::Fp64,
];

impl Datatype {
    /// Every supported datatype.
    #[must_use]
    pub const fn all() -> &'static [Self] {
        &ALL
    }

    /// The protocol's name (`"FP32"`, …).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Bool => "BOOL",
            Self::Uint8 => "UINT8",
            Self::Int8 => "INT8",
            Self::Int16 => "INT16",
            Self::Int32 => "INT32",
            Self::Int64 => "INT64",
            Self::Fp16 => "FP16",
            Self::Fp32 => "FP32",
            Self::Fp64 => "FP64",
        }
    }

    /// The libtorch kind of a tensor of this datatype.
    #[must_use]
    pub const fn kind(self) -> Kind {
        match self {
            Self::Bool => Kind::Bool,
            Self::Uint8 => Kind::Uint8,
            Self::Int8 => Kind::Int8,
            Self::Int16 => Kind::Int16,
            Self::Int32 => Kind::Int,
            Self::Int64 => Kind::Int64,
            Self::Fp16 => Kind::Half,
            Self::Fp32 => Kind::Float,
            Self::Fp64 => Kind::Double,
        }
    }

    /// The datatype of a tensor of `kind`.
    ///
    /// # Errors
    ///
    /// A 500 ([`OipError::internal`]) for a kind the protocol cannot carry
    /// here (complex, quantized, bfloat16, float8): a model answered with a
    /// tensor no client can be sent.
    pub fn from_kind(kind: Kind) -> Result<Self, OipError> {
        ALL.iter().copied().find(|d| d.kind() == kind).ok_or_else(|| {
            OipError::internal(format!(
                "the model answered a tensor of kind {kind:?}, which the protocol cannot carry here \
                 (supported: {})",
                supported_list()
            ))
        })
    }

    /// Bytes per element in the binary extension (1 for `BOOL`).
    #[must_use]
    pub const fn size(self) -> usize {
        match self {
            Self::Bool | Self::Uint8 | Self::Int8 => 1,
            Self::Int16 | Self::Fp16 => 2,
            Self::Int32 | Self::Fp32 => 4,
            Self::Int64 | Self::Fp64 => 8,
        }
    }

    /// Whether the datatype is a floating-point one.
    #[must_use]
    pub const fn is_float(self) -> bool {
        matches!(self, Self::Fp16 | Self::Fp32 | Self::Fp64)
    }

    /// The range of an integer datatype's values, `None` for `BOOL` and the
    /// floating-point ones.
    #[must_use]
    pub const fn int_range(self) -> Option<(i64, i64)> {
        match self {
            Self::Uint8 => Some((0, u8::MAX as i64)),
            Self::Int8 => Some((i8::MIN as i64, i8::MAX as i64)),
            Self::Int16 => Some((i16::MIN as i64, i16::MAX as i64)),
            Self::Int32 => Some((i32::MIN as i64, i32::MAX as i64)),
            Self::Int64 => Some((i64::MIN, i64::MAX)),
            Self::Bool | Self::Fp16 | Self::Fp32 | Self::Fp64 => None,
        }
    }
}

fn supported_list() -> String {
    ALL.iter()
        .map(|d| d.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for Datatype {
    type Err = OipError;

    /// Parses a protocol name; see [`Datatype`] for what is refused and why.
    fn from_str(s: &str) -> Result<Self, OipError> {
        if let Some(d) = ALL.iter().copied().find(|d| d.as_str() == s) {
            return Ok(d);
        }
        let why = match s {
            "UINT16" | "UINT32" | "UINT64" => {
                "libtorch (through tch) has no unsigned kind wider than a byte"
            }
            "BF16" => {
                "bfloat16 is not carried by this server (numpy, and so tritonclient, has no native bfloat16)"
            }
            "BYTES" => "libtorch has no string tensors",
            _ => "it is not a datatype of the Open Inference Protocol",
        };
        Err(OipError::bad_request(format!(
            "datatype {s:?} is not supported: {why} (supported: {})",
            supported_list()
        )))
    }
}

impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Datatype {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The number of elements of `shape`, checked: a negative dimension or a
/// product past `usize` is a 400 naming `what`.
pub(crate) fn numel(shape: &[i64], what: &str) -> Result<usize, OipError> {
    shape.iter().try_fold(1usize, |n, &d| {
        let d = usize::try_from(d).map_err(|_| {
            OipError::bad_request(format!("{what}: shape {shape:?} has a negative dimension"))
        })?;
        n.checked_mul(d).ok_or_else(|| {
            OipError::bad_request(format!(
                "{what}: shape {shape:?} has more elements than memory can hold"
            ))
        })
    })
}
