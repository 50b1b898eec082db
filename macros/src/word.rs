//! What a scope word is: one row of the table in `words/`, carrying its own
//! checker and everything the rest of the pipeline asks about it.

use proc_macro2::{Span, TokenStream};

use crate::ast::Item;

/// One scope word.
pub(crate) struct Word {
    pub(crate) name: &'static str,
    /// How to write it, for messages: `grad(enabled)`.
    pub(crate) usage: &'static str,
    /// A few words for the list of known words in messages.
    pub(crate) doc: &'static str,
    /// Its arguments, read by the shared checkers in `words/forms.rs`.
    pub(crate) params: &'static [Param],
    /// Tokens in, the scope value (a runtime call) or errors out.
    pub(crate) check: Check,
    /// Which other words it contradicts.
    pub(crate) conflict: Conflict,
    /// Whether it may appear more than once in a list.
    pub(crate) repeat: bool,
    /// What it does in async code.
    pub(crate) awaits: Awaits,
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

/// A word's checker.
pub(crate) type Check = fn(&Word, &Item, &Cx) -> syn::Result<TokenStream>;

/// What a checker knows besides the item.
pub(crate) struct Cx {
    /// The runtime crate's path (`::tch_scope`, `$crate`, a `crate = "…"`).
    rt: TokenStream,
    /// The name a measurement gets when none is written: the function's
    /// path for an attribute; `None` in `scoped!`, where it is the place.
    pub(crate) default_name: Option<DefaultName>,
}

/// The name of an attributed function's measurements.
pub(crate) enum DefaultName {
    /// `module::path::function`: a `&'static str` expression.
    Function(TokenStream),
    /// A method with a receiver: `module::Type::method`, `Type` known only
    /// at run time (`type_name::<Self>()`).
    Method(syn::Ident),
}

impl Cx {
    pub(crate) fn new(rt: TokenStream, default_name: Option<DefaultName>) -> Self {
        Self { rt, default_name }
    }

    /// `RT::__private`, shown at `span`: `$crate` resolves as before, but
    /// rustc's errors (say, a `with(..)` value that is not a `Scope`) point
    /// at the word rather than at the whole macro call.
    pub(crate) fn private(&self, span: Span) -> TokenStream {
        let rt: TokenStream = self
            .rt
            .clone()
            .into_iter()
            .map(|mut tt| {
                tt.set_span(tt.span().located_at(span));
                tt
            })
            .collect();
        quote::quote_spanned!(span=> #rt::__private)
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
    /// May be written without `name =` at this position (0-based).
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
    /// argument from its position on (`sdpa(math, flash)`).
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
