//! The variables a step boundary copies: those no optimizer aliases for it
//! (frozen weights, BatchNorm's running statistics, variables the
//! optimizer does not own, or all of them with an optimizer that can't
//! alias). A variable that requires no grad is copied only when it changed
//! since its last copy (its version counter moved, or its storage);
//! otherwise the boundary shares that copy, which nothing writes while a
//! boundary holds it. A trainable one is copied at every boundary: the
//! optimizer that updates it may bypass the version counter (libtorch's
//! C++ optimizers, tch's `nn::Optimizer`, write through `.data()`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use tch::Tensor;

use crate::optim::{Cow, Hold};

/// One variable's latest copy and the storages it has used.
struct Copied {
    buf: Tensor,
    cow: Cow,
    /// The variable's version and address when `buf` was filled.
    seen: (i64, usize),
}

/// The copies of a checkpoint's variables, by name.
#[derive(Default)]
pub(super) struct Copies(HashMap<String, Copied>);

fn fits(a: &Tensor, b: &Tensor) -> bool {
    a.size() == b.size() && a.kind() == b.kind() && a.device() == b.device()
}

impl Copies {
    /// `var`'s value now, as a tensor no later write changes while `hold`
    /// lives: its last copy if `var` has not changed since, else a new
    /// copy (into a storage no live boundary holds).
    pub(super) fn take(
        &mut self,
        name: &str,
        var: &Tensor,
        hold: &Arc<Hold>,
    ) -> Result<Tensor, tch::TchError> {
        let seen = if var.requires_grad() {
            // Never seen before: copied every time.
            (-1, 0)
        } else {
            (var.f_internal_version()?, var.data_ptr() as usize)
        };
        let c = match self.0.entry(name.to_owned()) {
            Entry::Occupied(e) if fits(&e.get().buf, var) => {
                let c = e.into_mut();
                if c.seen != seen || seen.0 < 0 {
                    let out = c.cow.target(&c.buf)?;
                    let mut dst = out.unwrap_or_else(|| c.buf.shallow_clone());
                    dst.f_copy_(var)?;
                    c.buf = dst;
                    c.seen = seen;
                }
                c
            }
            e => {
                let fresh = Copied {
                    buf: var.f_detach_copy()?,
                    cow: Cow::default(),
                    seen,
                };
                match e {
                    Entry::Occupied(mut e) => {
                        e.insert(fresh);
                        e.into_mut()
                    }
                    Entry::Vacant(e) => e.insert(fresh),
                }
            }
        };
        c.cow.hold(&c.buf, hold)?;
        Ok(c.buf.shallow_clone())
    }
}
