//! The scope words: one table row each.
//!
//! Adding a word is a row here. Words whose runtime constructor is
//! `__private::<name>(args..)` need nothing else; a word with its own
//! compile-time checks or constructor gets a [`Shape`] and an arm in
//! `valid.rs` / `expand.rs`.

/// What a word accepts between its parentheses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// No parentheses: `no_grad`.
    Bare,
    /// Positional expressions, all required; the names are for messages.
    /// Expands to `__private::<name>(args..)`.
    Exprs(&'static [&'static str]),
    /// `device(..)`: an index, `cpu`, a device string or a runtime value,
    /// checked at compile time where it is a literal.
    Device,
    /// `with(..)`: any value implementing `Scope`, type-checked by rustc.
    Scope,
    /// `eval(model)`: a model implementing `Trainable`, borrowed: expands to
    /// `__private::<name>(&(model))`. Words of one group contradict each
    /// other only on the same model (the same tokens): `train(gen),
    /// eval(disc)` is fine, `train(m), eval(m)` is not.
    Model,
}

/// One scope word.
#[derive(Debug)]
pub(crate) struct Word {
    pub(crate) name: &'static str,
    pub(crate) shape: Shape,
    /// Words of one group contradict each other: at most one per list.
    pub(crate) group: Option<&'static str>,
    /// Whether the word may appear more than once in a list.
    pub(crate) repeat: bool,
    /// A few words for the list of known words in error messages.
    pub(crate) doc: &'static str,
}

const GRAD_MODE: Option<&str> = Some("grad mode");
const MODEL_MODE: Option<&str> = Some("model mode");

pub(crate) const WORDS: &[Word] = &[
    Word {
        name: "no_grad",
        shape: Shape::Bare,
        group: GRAD_MODE,
        repeat: false,
        doc: "autograd off",
    },
    Word {
        name: "enable_grad",
        shape: Shape::Bare,
        group: GRAD_MODE,
        repeat: false,
        doc: "autograd on",
    },
    Word {
        name: "grad",
        shape: Shape::Exprs(&["enabled"]),
        group: GRAD_MODE,
        repeat: false,
        doc: "autograd on or off",
    },
    Word {
        name: "inference_mode",
        shape: Shape::Bare,
        group: None,
        repeat: false,
        doc: "inference mode",
    },
    Word {
        name: "device",
        shape: Shape::Device,
        group: None,
        repeat: false,
        doc: "default device",
    },
    Word {
        name: "eval",
        shape: Shape::Model,
        group: MODEL_MODE,
        repeat: false,
        doc: "model in eval mode",
    },
    Word {
        name: "train",
        shape: Shape::Model,
        group: MODEL_MODE,
        repeat: false,
        doc: "model in training mode",
    },
    Word {
        name: "with",
        shape: Shape::Scope,
        group: None,
        repeat: true,
        doc: "any `Scope` value",
    },
];

impl Word {
    /// The names of the positional arguments.
    pub(crate) fn params(&self) -> &'static [&'static str] {
        match self.shape {
            Shape::Bare => &[],
            Shape::Exprs(params) => params,
            Shape::Device => &["device"],
            Shape::Scope => &["scope"],
            Shape::Model => &["model"],
        }
    }

    /// How to write the word, for messages: `grad(enabled)`.
    pub(crate) fn usage(&self) -> String {
        match self.shape {
            Shape::Bare => self.name.to_owned(),
            Shape::Device => "device(0)".to_owned(),
            _ => format!("{}({})", self.name, self.params().join(", ")),
        }
    }
}

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
        .map(|w| format!("`{}` ({})", w.usage(), w.doc))
        .collect::<Vec<_>>()
        .join(", ")
}
