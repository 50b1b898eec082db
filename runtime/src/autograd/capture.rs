//! [`Capture`]: what a recomputed function keeps of the values it
//! captures until the backward.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

/// An owned copy of a value a recomputed function captures, sharing its
/// tensors (`shallow_clone`): what `#[recompute]` keeps of its non-tensor
/// parameters until the backward, and what a closure given to
/// [`recompute`](super::recompute) can move in. Implemented for tensors, `nn::Linear`,
/// `Arc<T>`, plain values (numbers, `bool`, `Kind`, `Device`, `String`,
/// `&'static str`), and `Option`s, `Vec`s and pairs of them; implement it
/// for your own module (share its tensors) or pass an `Arc` of it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be captured by a recomputed function",
    note = "implement `tch_scope::autograd::Capture` for it (sharing its tensors with `shallow_clone`), or pass an `Arc` of it"
)]
pub trait Capture: Send + 'static {
    /// A copy sharing the tensors.
    fn capture(&self) -> Self
    where
        Self: Sized;
}

impl Capture for Tensor {
    fn capture(&self) -> Self {
        self.shallow_clone()
    }
}

impl Capture for tch::nn::Linear {
    fn capture(&self) -> Self {
        tch::nn::Linear {
            ws: self.ws.shallow_clone(),
            bs: self.bs.as_ref().map(Tensor::shallow_clone),
        }
    }
}

impl<T: ?Sized + Send + Sync + 'static> Capture for Arc<T> {
    fn capture(&self) -> Self {
        Arc::clone(self)
    }
}

impl<T: Capture> Capture for Option<T> {
    fn capture(&self) -> Self {
        self.as_ref().map(T::capture)
    }
}

impl<T: Capture> Capture for Vec<T> {
    fn capture(&self) -> Self {
        self.iter().map(T::capture).collect()
    }
}

impl<A: Capture, B: Capture> Capture for (A, B) {
    fn capture(&self) -> Self {
        (self.0.capture(), self.1.capture())
    }
}

macro_rules! capture_by_clone {
    ($($t:ty),*) => {$(
        impl Capture for $t {
            fn capture(&self) -> Self {
                self.clone()
            }
        }
    )*};
}

capture_by_clone!(
    bool,
    char,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    f32,
    f64,
    String,
    &'static str,
    Kind,
    Device
);
