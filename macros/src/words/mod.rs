//! The scope words: one row each, in `table.rs`. A row holds everything
//! about its word — how to check and build it, what it contradicts, how it
//! awaits, whether it can fail, the feature it needs — so adding a word is
//! its row there, its attribute in `lib.rs`, its guard in the runtime, its
//! tests and its README row (a test checks that none is left behind).
//!
//! Every word's arguments are read by one reader, `forms::read`; a row's
//! `check` (validation) looks across what it read, and its `build`
//! (expansion) turns it into the scope value. Both halves of the words
//! that need their own are in the modules here, one per word or family.

mod autocast;
mod backends;
mod borrowed;
mod checkpoint;
mod choice;
mod deadline;
mod device;
mod distributed;
pub(crate) mod forms;
mod measure;
mod rng;
mod table;

pub(crate) use table::WORDS;

use crate::word::Word;

pub(crate) fn lookup(name: &str) -> Option<&'static Word> {
    WORDS.iter().find(|w| w.name == name)
}

/// The closest known word, if it is close enough to be a typo.
pub(crate) fn suggest(name: &str) -> Option<&'static str> {
    WORDS
        .iter()
        .map(|w| (w.name, strsim::jaro_winkler(name, w.name)))
        .filter(|&(known, score)| score > 0.8 || strsim::levenshtein(name, known) <= 2)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(known, _)| known)
}

/// "`no_grad` (autograd off), `grad(enabled)` (...), ..." for messages.
pub(crate) fn known_list() -> String {
    WORDS
        .iter()
        .map(|w| format!("`{}` ({})", w.usage, w.doc))
        .collect::<Vec<_>>()
        .join(", ")
}
