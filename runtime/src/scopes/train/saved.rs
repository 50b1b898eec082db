//! [`Saved`]: a model's modes before its first scope, whatever the model's
//! type, kept in place when small (a `bool`, a TorchScript module's
//! `ModuleModes`) so that the first scope on a model allocates nothing;
//! larger modes are boxed.

use std::any::{Any, TypeId};
use std::mem::{ManuallyDrop, MaybeUninit};

/// Room for the modes kept in place.
type Buf = [usize; 6];

/// A model's saved modes, of any `Send + 'static` type.
pub(crate) struct Saved(Repr);

enum Repr {
    Inline {
        buf: MaybeUninit<Buf>,
        type_id: TypeId,
        /// Drops the value in `buf` as its own type.
        drop: unsafe fn(*mut Buf),
    },
    Boxed(Box<dyn Any + Send>),
}

// SAFETY: `new` takes only `Send` values, and `Inline` holds nothing else.
unsafe impl Send for Saved {}

/// Drops the `M` at `p`.
///
/// # Safety
/// `p` holds an `M` that is dropped nowhere else.
unsafe fn drop_as<M>(p: *mut Buf) {
    // SAFETY: the caller's.
    unsafe { p.cast::<M>().drop_in_place() }
}

impl Saved {
    /// Keeps `modes`: in place when it fits.
    #[inline]
    pub(crate) fn new<M: Send + 'static>(modes: M) -> Self {
        if size_of::<M>() > size_of::<Buf>() || align_of::<M>() > align_of::<Buf>() {
            return Saved(Repr::Boxed(Box::new(modes)));
        }
        let mut buf = MaybeUninit::<Buf>::uninit();
        // SAFETY: `buf` is large and aligned enough for an `M`.
        unsafe { buf.as_mut_ptr().cast::<M>().write(modes) };
        Saved(Repr::Inline {
            buf,
            type_id: TypeId::of::<M>(),
            drop: drop_as::<M>,
        })
    }

    /// The modes as an `M`, or `self` back if they are of another type.
    #[inline]
    pub(crate) fn take<M: 'static>(self) -> Result<M, Self> {
        let me = ManuallyDrop::new(self);
        match &me.0 {
            Repr::Inline { buf, type_id, .. } if *type_id == TypeId::of::<M>() => {
                // SAFETY: `buf` holds an `M` (its `TypeId` says so), read
                // once: `me` is never dropped.
                Ok(unsafe { buf.as_ptr().cast::<M>().read() })
            }
            Repr::Boxed(b) if b.is::<M>() => {
                // SAFETY: moved out once; `me` is never dropped.
                let b = unsafe { std::ptr::read(b) };
                b.downcast::<M>()
                    .map(|m| *m)
                    .map_err(|b| Saved(Repr::Boxed(b)))
            }
            _ => Err(ManuallyDrop::into_inner(me)),
        }
    }
}

impl Drop for Saved {
    fn drop(&mut self) {
        if let Repr::Inline { buf, drop, .. } = &mut self.0 {
            // SAFETY: `buf` holds the value `drop` was made for, dropped
            // only here.
            unsafe { drop(buf.as_mut_ptr()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Saved;
    use std::sync::Arc;

    #[test]
    fn small_and_large_modes_come_back_and_drop_once() {
        let small = Arc::new(7u8);
        let s = Saved::new(Arc::clone(&small));
        assert_eq!(Arc::strong_count(&small), 2);
        let Err(s) = s.take::<bool>() else {
            panic!("not a bool");
        };
        assert_eq!(s.take::<Arc<u8>>().ok().map(|a| *a), Some(7));
        drop(Saved::new(Arc::clone(&small)));
        assert_eq!(Arc::strong_count(&small), 1, "dropped in place");

        let large = vec![Arc::clone(&small); 9];
        let s = Saved::new((large, [0u64; 8]));
        let Err(s) = s.take::<u32>() else {
            panic!("not a u32");
        };
        let Ok((back, _)) = s.take::<(Vec<Arc<u8>>, [u64; 8])>() else {
            panic!("boxed modes come back as their type");
        };
        assert_eq!(back.len(), 9);
        drop(back);
        drop(Saved::new(vec![Arc::clone(&small); 4]));
        assert_eq!(Arc::strong_count(&small), 1);
    }
}
