//! Copy-on-write for a checkpoint's step boundaries: a boundary aliases the
//! optimizer's parameters and state instead of copying them, and the next
//! update of an aliased tensor is written into another buffer and swapped
//! in (a parameter keeps its identity: `set_data`), so the boundary keeps
//! the values it aliased and no step pays for a copy.
//!
//! Each tensor's storages are pooled (a [`Cow`]): the one in use, the ones
//! that held earlier values and may still be held by a boundary waiting for
//! its save, and spares. A boundary claims what it aliases with a [`Hold`];
//! a storage with no live hold is written in place, as PyTorch does. Three
//! storages a tensor at most in steady use: the live one, the last
//! boundary's, the one a background write reads.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Weak};

use tch::Tensor;

/// A step boundary's claim on the storages it aliases: while it lives, no
/// update writes them in place. For each parameter it aliased it keeps the
/// parameter's version counter then and the version at which an update
/// moved the parameter to another storage, so a save can tell whether code
/// outside the optimizer wrote the aliased storage in place.
pub struct Hold {
    /// The parameters' versions when the boundary aliased them (`-1`: not
    /// aliased).
    start: Box<[i64]>,
    /// The version each parameter had when an update moved it off the held
    /// storage (`-1`: not moved yet).
    moved: Box<[AtomicI64]>,
    /// Set when a write outside the optimizer was seen on an aliased
    /// parameter.
    spoiled: AtomicBool,
}

impl Hold {
    /// A hold on `start.len()` parameters, aliased at those versions.
    pub(crate) fn new(start: Vec<i64>) -> Arc<Self> {
        let moved = start.iter().map(|_| AtomicI64::new(-1)).collect();
        Arc::new(Self {
            start: start.into_boxed_slice(),
            moved,
            spoiled: AtomicBool::new(false),
        })
    }

    /// Whether parameter `i`'s aliased storage is as the boundary saw it,
    /// its version read now as `current` (through an alias sharing the
    /// parameter's version counter; read *before* this call).
    pub(crate) fn intact(&self, i: usize, current: i64) -> bool {
        let start = self.start[i];
        if current == start {
            // Nothing wrote through the parameter since the boundary.
            return true;
        }
        // Written since: only the update that moved it off the storage may
        // have, and then only on the new storage. The move is recorded
        // before any such write (SeqCst on both sides).
        self.moved[i].load(Ordering::SeqCst) == start
    }

    fn held_at(&self, i: usize) -> Option<i64> {
        self.start.get(i).copied().filter(|&v| v >= 0)
    }

    /// Whether a write outside the optimizer was seen.
    pub(crate) fn spoiled(&self) -> bool {
        self.spoiled.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("params", &self.start.len())
            .field("spoiled", &self.spoiled())
            .finish()
    }
}

/// One storage of a tensor's pool: a handle to it (with a version counter
/// of its own, so writing it never bumps the parameter's) and the holds on
/// it.
struct Buf {
    t: Tensor,
    holds: Vec<Weak<Hold>>,
}

impl Buf {
    fn held(&mut self) -> bool {
        self.holds.retain(|w| w.strong_count() > 0);
        !self.holds.is_empty()
    }
}

/// The storages of one tensor an update writes (a parameter, a moment).
#[derive(Default)]
pub(crate) struct Cow {
    bufs: Vec<Buf>,
}

/// Where `t`'s values sit: its storage's address and size.
fn place(t: &Tensor) -> (usize, i64) {
    (t.data_ptr() as usize, t.numel() as i64)
}

fn fits(a: &Tensor, b: &Tensor) -> bool {
    a.size() == b.size()
        && a.stride() == b.stride()
        && a.kind() == b.kind()
        && a.device() == b.device()
}

impl Cow {
    fn find(&mut self, live: &Tensor) -> Option<&mut Buf> {
        let at = place(live);
        self.bufs.iter_mut().find(|b| place(&b.t) == at)
    }

    /// Claims `live`'s storage for `hold`: no update writes it in place
    /// while `hold` lives.
    pub(crate) fn hold(&mut self, live: &Tensor, hold: &Arc<Hold>) -> Result<(), tch::TchError> {
        if let Some(b) = self.find(live) {
            b.holds.push(Arc::downgrade(hold));
            return Ok(());
        }
        // A handle of our own on the storage (`set_`: not a view, so its
        // version counter is not the parameter's).
        let mut t = live.f_empty_like()?;
        let _ = t.f_set_source_tensor_(live)?;
        self.bufs.retain(|b| fits(&b.t, live));
        self.bufs.push(Buf {
            t,
            holds: vec![Arc::downgrade(hold)],
        });
        Ok(())
    }

    /// Where the next update of `live` goes: `None` for `live` itself (its
    /// storage is held by no boundary: in place), else a storage of the
    /// pool that no boundary holds, made on first need.
    pub(crate) fn target(&mut self, live: &Tensor) -> Result<Option<Tensor>, tch::TchError> {
        let at = place(live);
        let held = self
            .bufs
            .iter_mut()
            .find(|b| place(&b.t) == at)
            .is_some_and(Buf::held);
        if !held {
            return Ok(None);
        }
        for b in &mut self.bufs {
            if place(&b.t) != at && !b.held() && fits(&b.t, live) {
                return Ok(Some(b.t.shallow_clone()));
            }
        }
        let t = live.f_empty_like()?;
        let out = t.shallow_clone();
        self.bufs.push(Buf {
            t,
            holds: Vec::new(),
        });
        Ok(Some(out))
    }

    /// Parameter `index` (`live`) moves to `out`, a storage
    /// [`target`](Self::target) gave: `set_data`, so the model's tensor
    /// keeps its identity. The holds on the storage it leaves learn the
    /// version it left at, which tells them whether something else wrote
    /// it meanwhile; `true`: something did.
    pub(crate) fn move_param(
        &mut self,
        index: usize,
        live: &mut Tensor,
        out: &Tensor,
    ) -> Result<bool, tch::TchError> {
        let version = live.f_internal_version()?;
        let mut written = false;
        if let Some(b) = self.find(live) {
            for h in b.holds.iter().filter_map(Weak::upgrade) {
                if let Some(start) = h.held_at(index) {
                    let _ = h.moved[index].compare_exchange(
                        -1,
                        version,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                    if version != start {
                        h.spoiled.store(true, Ordering::SeqCst);
                        written = true;
                    }
                }
            }
        }
        live.f_set_data(out)?;
        // `set_data` keeps the version counter but, unlike the in-place
        // update it stands for, does not bump it: a graph that saved this
        // parameter before the update would then differentiate with the new
        // values, silently. An in-place op on an empty view bumps the
        // counter the views share, touching no element.
        let _ = live.f_flatten(0, -1)?.f_narrow(0, 0, 0)?.f_zero_()?;
        Ok(written)
    }

    /// Whether a hold on `live`'s storage saw parameter `index` written in
    /// place since (by code outside the optimizer: the optimizer never
    /// writes a held storage in place).
    pub(crate) fn written_while_held(&mut self, index: usize, live: &Tensor) -> bool {
        let Ok(version) = live.f_internal_version() else {
            return true;
        };
        let Some(b) = self.find(live) else {
            return false;
        };
        let mut written = false;
        for h in b.holds.iter().filter_map(Weak::upgrade) {
            if h.held_at(index).is_some_and(|start| start != version) {
                h.spoiled.store(true, Ordering::SeqCst);
                written = true;
            }
        }
        written
    }

    /// Forgets the pool (the tensor is no longer aliased at boundaries).
    pub(crate) fn clear(&mut self) {
        self.bufs.clear();
    }
}

/// The value the next operator reads: the update's output once written,
/// else the live tensor.
pub(crate) fn dst<'a>(out: &'a Option<Tensor>, live: &'a Tensor) -> &'a Tensor {
    out.as_ref().unwrap_or(live)
}
