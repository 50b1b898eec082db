//! The open mode scopes of every model, by [`Trainable::model_id`]: per
//! model, the modes before the first scope and the scopes open, as
//! [`Leases`] (the rules of the process-wide words: scopes of one holder
//! nest, the newest mode applies; scopes of two holders share one mode,
//! and a scope asking for the other mode while another holder has the
//! model is refused; the last to end puts the saved modes back), and the
//! [`Inference`](crate::Inference)s serving it. The models are spread
//! over 64 locks by id, so scopes on different models seldom wait for
//! each other, and each lock has a [`Lane`] beside it: the scopes of one
//! thread on one model, all of one mode, go there without the lock (see
//! `lease/lane.rs`). A model is in its stripe's record or in the lane,
//! never in both: whatever takes the lock for a model first moves the
//! lane's scopes on it into a record, and the lane takes a model only
//! while it has no record.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tch::TchError;

use super::Trainable;
use super::saved::Saved;
use crate::lease::{Lane, Leases, Left, me};
use crate::sync::lock;

struct Model {
    id: usize,
    /// `true`: a `train` scope, `false`: an `eval` scope.
    leases: Leases<bool, Saved>,
    /// [`Inference`](crate::Inference)s serving the model: while one
    /// does, the model stays in eval mode (no `train` scope, no direct
    /// switch), and its modes come back after the last.
    served: usize,
}

const STRIPES: usize = 64;

static MODELS: [Mutex<Vec<Model>>; STRIPES] = [const { Mutex::new(Vec::new()) }; STRIPES];
/// One lane per stripe, biased to one model at a time (its key, the id).
static LANES: [Lane<bool, Saved, true>; STRIPES] = [const { Lane::new() }; STRIPES];

/// The ids of served models, for the direct switches ([`refuse_served`])
/// that do not go through the stripes; `SERVING` counts them, so a
/// process serving nothing takes no lock there.
static SERVED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static SERVING: AtomicUsize = AtomicUsize::new(0);

fn index(id: usize) -> usize {
    // Models are at least 8-aligned: mix the low bits away.
    (id >> 4 ^ id >> 10) % STRIPES
}

/// The stripe of `id`, locked, with the lane's scopes on `id` (if it holds
/// the model) moved into the model's record.
fn stripe(id: usize, me_id: u64) -> std::sync::MutexGuard<'static, Vec<Model>> {
    let i = index(id);
    let mut models = lock(&MODELS[i]);
    if let Some(taken) = LANES[i].settle(me_id, id) {
        // The lane held the model, so it had no record.
        let mut leases = Leases::new();
        leases.adopt(taken);
        models.push(Model {
            id,
            leases,
            served: 0,
        });
    }
    models
}

/// What the lane's first scope on a model does: save its modes into
/// `keep` (the guard's: nothing to erase or move through the lane), and
/// switch them.
#[inline]
fn first<T: Trainable + ?Sized>(
    model: &T,
    training: bool,
    keep: &mut Option<T::Modes>,
) -> Result<Option<Saved>, String> {
    match model.switch_training(training) {
        Ok(saved) => {
            *keep = Some(saved);
            Ok(None)
        }
        Err(e) => Err(e.to_string()),
    }
}

fn word(training: bool) -> &'static str {
    if training {
        "train(model)"
    } else {
        "eval(model)"
    }
}

fn same(a: &bool, b: &bool) -> bool {
    a == b
}

/// Refuses a direct mode switch (`set_training`, `restore_modes`) on a
/// model an [`Inference`](crate::Inference) serves: other threads run it,
/// and the write would race their forward passes.
pub(crate) fn refuse_served(id: usize, what: &str) -> Result<(), TchError> {
    if SERVING.load(Ordering::Acquire) == 0 || !lock(&SERVED).contains(&id) {
        return Ok(());
    }
    Err(TchError::Torch(format!(
        "{what} refused: the model is served by an `Inference`, which keeps it in eval \
         mode while other threads may run it (take it back with `Inference::into_inner`)"
    )))
}

/// Opens a scope on the model: its ticket, and the modes before it when
/// this scope saved them and keeps them (the lane's first scope; see
/// [`leave`]).
#[inline]
pub(super) fn enter<T: Trainable + ?Sized>(
    model: &T,
    id: usize,
    training: bool,
) -> Result<(u64, Option<T::Modes>), String>
where
    T::Modes: Send + 'static,
{
    let me_id = me();
    let code = u8::from(training);
    let mut keep = None;
    let on_lane =
        LANES[index(id)].enter(me_id, id, code, &training, |&t| first(model, t, &mut keep));
    match on_lane {
        Some(r) => r.map(|ticket| (ticket, keep)),
        None => enter_locked(model, id, training, me_id),
    }
}

#[inline(never)]
fn enter_locked<T: Trainable + ?Sized>(
    model: &T,
    id: usize,
    training: bool,
    me_id: u64,
) -> Result<(u64, Option<T::Modes>), String>
where
    T::Modes: Send + 'static,
{
    let mut models = stripe(id, me_id);
    let k = match models.iter().position(|m| m.id == id) {
        Some(k) => k,
        None => {
            let lane = &LANES[index(id)];
            let code = u8::from(training);
            let mut keep = None;
            let first = lane.acquire(me_id, id, code, &training, |&t| first(model, t, &mut keep));
            if let Some(r) = first {
                return r.map(|ticket| (ticket, keep));
            }
            models.push(Model {
                id,
                leases: Leases::new(),
                served: 0,
            });
            models.len() - 1
        }
    };
    let m = &mut models[k];
    if training && m.served > 0 {
        return Err(format!(
            "{} refused: the model is served by an `Inference`, which keeps it in eval mode \
             while other threads may run it (take it back with `Inference::into_inner` first)",
            word(training)
        ));
    }
    let holder = m.leases.holder(me_id);
    if let Some(o) = m.leases.conflict(holder, &training, same) {
        return Err(format!(
            "{} conflicts with {} held by {}",
            word(training),
            word(o.value),
            o.holder_name(me_id)
        ));
    }
    let switched = if m.leases.is_empty() && m.served == 0 {
        // The first scope: save the modes while switching.
        model
            .switch_training(training)
            .map(|saved| m.leases.saved = Some(Saved::new(saved)))
    } else if m.leases.in_force().is_some_and(|&t| t != training) {
        model.set_training(training)
    } else {
        Ok(())
    };
    if let Err(e) = switched {
        if m.leases.is_empty() && m.served == 0 {
            models.swap_remove(k);
        }
        return Err(e.to_string());
    }
    Ok((m.leases.push(holder, training, me_id), None))
}

pub(super) type Restore<T> = fn(&T, Saved) -> Result<(), TchError>;

/// What a guard of `T` needs to leave that `Drop` cannot name (it has not
/// the bounds): keep its modes in the record (or the lane) for the last
/// scope, and put saved modes back.
pub(super) type Fns<T> = (fn(<T as Trainable>::Modes) -> Saved, Restore<T>);

/// [`Fns`] for `T`.
pub(super) fn fns<T: Trainable + ?Sized>() -> Fns<T>
where
    T::Modes: Send + 'static,
{
    (Saved::new::<T::Modes>, restore::<T>)
}

pub(super) fn restore<T: Trainable + ?Sized>(model: &T, saved: Saved) -> Result<(), TchError>
where
    T::Modes: Send + 'static,
{
    match saved.take::<T::Modes>() {
        Ok(saved) => model.restore_modes(saved),
        Err(_) => Err(TchError::Torch(
            "the model's saved modes are of another type than this handle's".into(),
        )),
    }
}

/// Closes the scope of `ticket`. `kept`: the modes before the first scope
/// on the model, when this scope's guard kept them; they are restored
/// here if this scope is the last, or else left in the record (or the
/// lane) for the last.
#[inline]
pub(super) fn leave<T: Trainable + ?Sized>(
    model: &T,
    id: usize,
    ticket: u64,
    mut kept: Option<T::Modes>,
    (erase, restore): Fns<T>,
) -> Result<(), TchError> {
    let me_id = me();
    let on_lane =
        LANES[index(id)].leave(me_id, id, ticket, |last, saved| match (last, kept.take()) {
            (true, Some(modes)) => model.restore_modes(modes),
            (true, None) => saved.take().map_or(Ok(()), |s| restore(model, s)),
            (false, modes) => {
                if let Some(modes) = modes {
                    *saved = Some(erase(modes));
                }
                Ok(())
            }
        });
    match on_lane {
        Some(r) => r,
        None => leave_locked(model, id, ticket, kept, (erase, restore), me_id),
    }
}

#[inline(never)]
fn leave_locked<T: Trainable + ?Sized>(
    model: &T,
    id: usize,
    ticket: u64,
    kept: Option<T::Modes>,
    (erase, restore): Fns<T>,
    me_id: u64,
) -> Result<(), TchError> {
    let mut models = stripe(id, me_id);
    let Some(k) = models.iter().position(|m| m.id == id) else {
        return Ok(());
    };
    let m = &mut models[k];
    let set = match m.leases.leave(ticket, same) {
        Left::Nothing => None,
        Left::Value(&training) => Some(training),
        // Still served: it stays in eval mode, as it is.
        Left::Last if m.served > 0 => None,
        Left::Last => {
            let saved = models.swap_remove(k).leases.saved.take();
            return match (kept, saved) {
                (Some(modes), _) => model.restore_modes(modes),
                (None, Some(saved)) => restore(model, saved),
                (None, None) => Ok(()),
            };
        }
    };
    if let Some(modes) = kept {
        // Not the last: the modes stay for the last.
        m.leases.saved = Some(erase(modes));
    }
    set.map_or(Ok(()), |training| model.set_training(training))
}

/// Moves the entry of `ticket` onto the thread `to` (0: none).
pub(super) fn step(id: usize, ticket: u64, to: u64) {
    if let Some(m) = stripe(id, me()).iter_mut().find(|m| m.id == id) {
        m.leases.step(ticket, to);
    }
}

/// An [`Inference`](crate::Inference) begins serving the model: it is put
/// in eval mode (unless scopes already hold it there), and kept there
/// until [`unserve`].
pub(super) fn serve<T: Trainable + ?Sized>(model: &T, id: usize) -> Result<(), String>
where
    T::Modes: Send + 'static,
{
    let mut models = stripe(id, me());
    match models.iter_mut().find(|m| m.id == id) {
        Some(m) => {
            if let Some(o) = m.leases.iter().rev().find(|o| o.value) {
                return Err(format!(
                    "the model is in a `train(model)` scope held by {}: a served model must \
                     stay in eval mode, so end that scope first",
                    o.holder_name(me())
                ));
            }
            m.served += 1;
        }
        None => {
            let saved = model.switch_training(false).map_err(|e| e.to_string())?;
            let mut leases = Leases::new();
            leases.saved = Some(Saved::new(saved));
            models.push(Model {
                id,
                leases,
                served: 1,
            });
        }
    }
    lock(&SERVED).push(id);
    SERVING.fetch_add(1, Ordering::Release);
    Ok(())
}

/// An [`Inference`](crate::Inference) stops serving the model: after the
/// last (and the last scope), its modes before the first come back.
pub(super) fn unserve<T: Trainable + ?Sized>(
    model: &T,
    id: usize,
    restore: Restore<T>,
) -> Result<(), TchError> {
    let mut models = stripe(id, me());
    {
        let mut list = lock(&SERVED);
        if let Some(i) = list.iter().position(|&s| s == id) {
            list.swap_remove(i);
            SERVING.fetch_sub(1, Ordering::Release);
        }
    }
    let Some(k) = models.iter().position(|m| m.id == id) else {
        return Ok(());
    };
    let m = &mut models[k];
    m.served = m.served.saturating_sub(1);
    if m.served > 0 || !m.leases.is_empty() {
        return Ok(());
    }
    match models.swap_remove(k).leases.saved.take() {
        Some(saved) => restore(model, saved),
        None => Ok(()),
    }
}
