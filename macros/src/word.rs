//! What a scope word is: one row of the table in `words/`, carrying its own
//! check and build halves and everything the rest of the pipeline asks
//! about it; and a word as written, once its arguments are read
//! ([`Checked`]), which flows from validation to expansion.

use proc_macro2::{Span, TokenStream};
use syn::Expr;

use crate::errors::Errors;
use crate::expand::cx::Cx;

/// One scope word.
pub(crate) struct Word {
    pub(crate) name: &'static str,
    /// How to write it, for messages: `grad(enabled)`.
    pub(crate) usage: &'static str,
    /// A few words for the list of known words in messages.
    pub(crate) doc: &'static str,
    /// Its arguments, read by the one reader, `words/forms.rs`'s `read`.
    pub(crate) params: &'static [Param],
    /// Its checks across those arguments (validation).
    pub(crate) check: Check,
    /// Its scope value, a runtime call (expansion).
    pub(crate) build: Build,
    /// Which other words it contradicts.
    pub(crate) conflict: Conflict,
    /// Whether it may appear more than once in a list.
    pub(crate) repeat: bool,
    /// What it does in async code.
    pub(crate) awaits: Awaits,
    /// Whether it sets state of the whole process (a `Registry` of leases
    /// in the runtime, its guard `!Send`): the lists of such words in the
    /// README, the crate docs and docs/words.md are checked against it.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the table's tests"))]
    pub(crate) process_wide: bool,
    /// Whether it ends the scope with an error of its own (`deadline`):
    /// the body runs as a closure under `catch_unwind`, so `return`,
    /// `break` and `continue` out of a `scoped!` body are compile errors.
    pub(crate) catches: bool,
    /// Whether entering can fail (documentation: the runtime type decides,
    /// through `Scope::Error`); the table's tests check the README by it.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the table's tests"))]
    pub(crate) fails: bool,
    /// The cargo feature of tch-scope it needs, and whether it is on.
    pub(crate) feature: Option<(&'static str, bool)>,
    /// Valid uses in every syntax it accepts (tests and the fuzzer).
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "read by the tests and the fuzzer")
    )]
    pub(crate) examples: &'static [&'static str],
}

/// A word's checks across its arguments (`sync` against `events`, a
/// literal device), after `forms::read` has read them: every mistake is
/// pushed, none returned, so one expansion lists them all.
pub(crate) type Check = fn(&Checked, &mut Errors);

/// A checked word in, its scope value out: a call into the runtime's
/// `__private`, built at expansion (the build half of the row).
pub(crate) type Build = fn(&Checked, &Cx) -> TokenStream;

/// One param's argument as written.
pub(crate) struct Given {
    /// The expression; `true` for a flag or a bare word written alone; a
    /// choice's word in our spelling; a list's words as an array of them.
    pub(crate) value: Expr,
    /// The token that names it (its key or bare word), else its value:
    /// where a cross-field mistake points.
    pub(crate) at: Span,
    /// Its place in the argument list, for words whose expansion keeps
    /// the written order (`autocast`'s builder calls, evaluated in order).
    pub(crate) index: usize,
}

/// A word as written, its arguments read into its row's params: what
/// validation checks and what expansion builds from.
pub(crate) struct Checked {
    pub(crate) word: &'static Word,
    /// The word's name as written: scope values are spanned there, so
    /// rustc's errors about the scope point at it.
    pub(crate) span: Span,
    /// Its parentheses, or its name when it has none: where a missing
    /// argument is reported.
    pub(crate) args_span: Span,
    /// What was written for each of the row's params, in param order.
    pub(crate) written: Vec<Option<Given>>,
    /// Whether each param was written at all, right or wrong, or
    /// misspelt close to its name (`untill`): a check that says "none
    /// given" keeps quiet about it, its mistake is already told.
    pub(crate) tried: Vec<bool>,
}

impl Checked {
    /// The argument written for `param`, if any.
    pub(crate) fn given(&self, param: &str) -> Option<&Given> {
        let i = self.word.params.iter().position(|p| p.name == param)?;
        self.written.get(i)?.as_ref()
    }

    /// The value written for `param`, if any.
    pub(crate) fn value(&self, param: &str) -> Option<&Expr> {
        self.given(param).map(|g| &g.value)
    }

    /// Whether anything was written for `param`, right or wrong.
    pub(crate) fn tried(&self, param: &str) -> bool {
        let i = self.word.params.iter().position(|p| p.name == param);
        i.is_some_and(|i| self.tried[i])
    }
}

/// Which words a word contradicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    None,
    /// At most one word of the group per list: `no_grad, enable_grad`.
    Group(&'static str),
    /// At most one word of the group per model (the first argument's
    /// tokens): `train(gen), eval(disc)` is fine, `train(m), eval(m)` not.
    PerModel(&'static str),
}

/// How a scope behaves in a future.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Awaits {
    /// Per-thread state (grad mode, the current device), and a model's
    /// mode: entered around every poll, so it neither leaks into other
    /// tasks nor stays behind on a thread the task left.
    EachPoll,
    /// Covers the whole future, entered once (a timer, a seed, a
    /// checkpoint): re-entering per poll would re-seed, time or save at
    /// each poll.
    WholeFuture,
}

/// One argument of a word.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Param {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// May be written without `name =` at this position (0-based);
    /// `name = value` is read anywhere, positional or not.
    pub(crate) position: Option<usize>,
    pub(crate) required: bool,
}

impl Param {
    /// A required positional argument: `grad(enabled)`.
    pub(crate) const fn positional(name: &'static str, position: usize) -> Self {
        Self {
            name,
            kind: Kind::Expr,
            position: Some(position),
            required: true,
        }
    }

    /// An optional `name = expr`, never positional: `enabled = b`.
    pub(crate) const fn named(name: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Expr,
            position: None,
            required: false,
        }
    }

    /// An optional `name = bool`, or `name` alone for `true`.
    pub(crate) const fn flag(name: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Flag,
            position: None,
            required: false,
        }
    }
}

/// What one argument accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A string literal (names become `&'static str` statics).
    Str,
    /// Any expression.
    Expr,
    /// A `bool`: written bare (`sync`) for `true`, or `sync = expr`.
    Flag,
    /// A word written alone, never `= value` (`from_env`): what it picks
    /// is known at compile time.
    Bare,
    /// One of a fixed set of words (`cpu` or `cuda`): it picks the
    /// expansion, so it is known at compile time.
    Choice(&'static Choice),
    /// One or more of a fixed set of words, each once, every positional
    /// argument from its position on (`sdpa(math, flash)`), or by name an
    /// array of them (`sdpa(backends = [math, flash])`).
    List(&'static Choice),
}

/// The words a [`Kind::Choice`] or [`Kind::List`] param takes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Choice {
    /// What one of them is, for messages: "device type".
    pub(crate) what: &'static str,
    /// Each word, with a note for messages ("CPU tensors") or "".
    pub(crate) words: &'static [(&'static str, &'static str)],
    /// PyTorch's names for them, lower case, and ours (`half`, `f16`):
    /// a user who writes PyTorch's is told ours.
    pub(crate) aliases: &'static [(&'static str, &'static str)],
    /// Whether a string literal stands for its word (`backend = "gloo"`).
    pub(crate) strings: bool,
}

impl Choice {
    /// Our spelling of `written`, if it names one of the words in any
    /// case or by an alias.
    pub(crate) fn find(&self, written: &str) -> Option<&'static str> {
        let lower = written.to_ascii_lowercase();
        self.words
            .iter()
            .map(|&(w, _)| (w, w))
            .chain(self.aliases.iter().copied())
            .find(|&(name, _)| name == lower)
            .map(|(_, ours)| ours)
    }

    /// "`gloo` (CPU tensors) or `nccl` (CUDA tensors)", for messages.
    pub(crate) fn list(&self) -> String {
        either(self.words.iter().map(|(w, note)| match *note {
            "" => format!("`{w}`"),
            note => format!("`{w}` ({note})"),
        }))
    }
}

/// "`a`, `b` or `c`".
pub(crate) fn either(items: impl IntoIterator<Item = String>) -> String {
    let mut items: Vec<String> = items.into_iter().collect();
    match items.pop() {
        None => String::new(),
        Some(last) if items.is_empty() => last,
        Some(last) => format!("{} or {last}", items.join(", ")),
    }
}
