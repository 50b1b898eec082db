//! The bound on distinct measurement names.
//!
//! A name made at run time (a `timed` on a generic method, `Timed::new`
//! with a leaked string, a memory scope named per request) can mint names
//! without end; each costs a row, a site and per-thread totals that live
//! as long as the process. Past [`name_limit`] distinct names (timed and
//! memory together), a new name has no row of its own: its runs count in
//! one row named [`OTHER`], and the exit hook hears of it once.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::lock;

/// The row that names past the bound count in.
pub const OTHER: &str = "other";

/// Distinct names before new ones count under [`OTHER`], unless
/// [`set_name_limit`] says otherwise.
pub const DEFAULT_NAME_LIMIT: usize = 4096;

static LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_NAME_LIMIT);
/// Set once a name was refused (the exit hook heard of it).
static NOTICED: AtomicBool = AtomicBool::new(false);
static KNOWN: Mutex<Known> = Mutex::new(Known(None));

/// The names that have a row of their own.
struct Known(Option<HashSet<&'static str>>);

impl Known {
    /// Whether `name` has a row: seen before, or new with room under
    /// `limit` (then it is seen from now on).
    fn admit(&mut self, name: &'static str, limit: usize) -> bool {
        let known = self.0.get_or_insert_with(HashSet::new);
        known.contains(name) || (known.len() < limit && known.insert(name))
    }
}

/// Sets how many distinct measurement names (`timed` and memory scopes
/// together) get a row of their own. Past it, a name not seen before
/// counts in the row [`OTHER`] (`"other"`), and the exit hook
/// ([`set_exit_hook`](crate::set_exit_hook)) hears of it once, with the
/// first name refused; setting the limit again re-arms that notice.
///
/// Names that already have a row keep it (a lower limit refuses only new
/// names), and a call site that was counted under `other` stays there
/// (its row is decided once, at its first run); [`reset`](super::reset)
/// forgets totals, not names. Default [`DEFAULT_NAME_LIMIT`] (4096): each
/// name costs up to ≈ 6 KiB of totals in each thread that runs it.
///
/// ```
/// tch_scope::report::set_name_limit(10_000);
/// assert_eq!(tch_scope::report::name_limit(), 10_000);
/// tch_scope::report::set_name_limit(tch_scope::report::DEFAULT_NAME_LIMIT);
/// ```
pub fn set_name_limit(names: usize) {
    LIMIT.store(names, Ordering::Relaxed);
    NOTICED.store(false, Ordering::Relaxed);
}

/// How many distinct names get a row of their own (see [`set_name_limit`]).
///
/// ```
/// assert_eq!(tch_scope::report::name_limit(), tch_scope::report::DEFAULT_NAME_LIMIT);
/// ```
pub fn name_limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}

/// Whether `name` has a row of its own: seen before, or new with room
/// under the limit (then it counts as seen from now on). A caller told
/// `false` calls [`refused`] once its own locks are released.
pub(crate) fn admit(name: &'static str) -> bool {
    lock(&KNOWN).admit(name, name_limit())
}

/// Tells the exit hook, the first time only, that `name` (of the scope
/// `word`) and later new names count under [`OTHER`]. Call it holding no
/// lock: the hook may run any code.
#[cold]
pub(crate) fn refused(word: &str, name: &str) {
    if NOTICED.swap(true, Ordering::Relaxed) {
        return;
    }
    crate::exit::notify(crate::ExitError::new(
        format!("{word}({name:?})"),
        format!(
            "more than {} distinct measurement names: this one and later new names count \
             in the row {OTHER:?} (tch_scope::report::set_name_limit raises the bound)",
            name_limit()
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_past_the_limit_are_refused_and_known_ones_stay() {
        let mut k = Known(None);
        assert!(k.admit("a", 2));
        assert!(k.admit("b", 2));
        assert!(!k.admit("c", 2), "a third name past a limit of two");
        assert!(k.admit("a", 2), "a known name keeps its row");
        assert!(!k.admit("c", 2), "still refused");
        assert!(k.admit("b", 1), "a lower limit refuses only new names");
        assert!(k.admit("c", 3), "a higher limit admits");
        assert_eq!(k.0.as_ref().map(HashSet::len), Some(3));
    }
}
