//! The open mode scopes of every model, by [`Trainable::model_id`]: per
//! model, the modes before the first scope and the scopes open, as
//! [`Leases`] (the rules of the process-wide words: scopes of one holder
//! nest, the newest mode applies; scopes of two holders share one mode,
//! and a scope asking for the other mode while another holder has the
//! model is refused; the last to end puts the saved modes back), and the
//! [`Inference`](crate::Inference)s serving it. The models are spread
//! over 64 locks by id, so scopes on different models seldom wait for
//! each other.

use std::any::Any;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tch::TchError;

use super::Trainable;
use crate::lease::{Leases, Left, me};
use crate::sync::lock;

/// The modes before the first scope, whatever the model's type.
type Saved = Box<dyn Any + Send>;

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

/// The ids of served models, for the direct switches ([`refuse_served`])
/// that do not go through the stripes; `SERVING` counts them, so a
/// process serving nothing takes no lock there.
static SERVED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static SERVING: AtomicUsize = AtomicUsize::new(0);

fn stripe(id: usize) -> std::sync::MutexGuard<'static, Vec<Model>> {
    // Models are at least 8-aligned: mix the low bits away.
    lock(&MODELS[(id >> 4 ^ id >> 10) % STRIPES])
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

pub(super) fn enter<T: Trainable + ?Sized>(
    model: &T,
    id: usize,
    training: bool,
) -> Result<u64, String>
where
    T::Modes: Send + 'static,
{
    let me_id = me();
    let mut models = stripe(id);
    let k = match models.iter().position(|m| m.id == id) {
        Some(k) => k,
        None => {
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
            .map(|saved| m.leases.saved = Some(Box::new(saved)))
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
    Ok(m.leases.push(holder, training, me_id))
}

pub(super) type Restore<T> = fn(&T, Saved) -> Result<(), TchError>;

pub(super) fn restore<T: Trainable + ?Sized>(model: &T, saved: Saved) -> Result<(), TchError>
where
    T::Modes: Send + 'static,
{
    match saved.downcast::<T::Modes>() {
        Ok(saved) => model.restore_modes(*saved),
        Err(_) => Err(TchError::Torch(
            "the model's saved modes are of another type than this handle's".into(),
        )),
    }
}

pub(super) fn leave<T: Trainable + ?Sized>(
    model: &T,
    id: usize,
    ticket: u64,
    restore: Restore<T>,
) -> Result<(), TchError> {
    let mut models = stripe(id);
    let Some(k) = models.iter().position(|m| m.id == id) else {
        return Ok(());
    };
    let m = &mut models[k];
    match m.leases.leave(ticket, same) {
        Left::Nothing => Ok(()),
        Left::Value(&training) => model.set_training(training),
        // Still served: it stays in eval mode, as it is.
        Left::Last if m.served > 0 => Ok(()),
        Left::Last => match models.swap_remove(k).leases.saved.take() {
            Some(saved) => restore(model, saved),
            None => Ok(()),
        },
    }
}

/// Moves the entry of `ticket` onto the thread `to` (0: none).
pub(super) fn step(id: usize, ticket: u64, to: u64) {
    if let Some(m) = stripe(id).iter_mut().find(|m| m.id == id) {
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
    let mut models = stripe(id);
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
            leases.saved = Some(Box::new(saved) as Saved);
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
    let mut models = stripe(id);
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
