//! The scope words: one table row each.
//!
//! Adding a word is a row here. Words whose runtime constructor is
//! `__private::<name>(args..)` need nothing else; a word with its own
//! compile-time checks or constructor gets a [`Shape`] and an arm in
//! `valid.rs` / `expand.rs`.

use crate::options::{self, Spec};

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
    /// Optional, named and flag arguments described by a [`Spec`]; each
    /// such word has its own arm in `expand.rs`.
    Options(&'static Spec),
    /// `eval(model)`: a model implementing `Trainable`, borrowed: expands to
    /// `__private::<name>(&(model))`. Words of one group contradict each
    /// other only on the same model (the same tokens): `train(gen),
    /// eval(disc)` is fine, `train(m), eval(m)` is not.
    Model,
    /// `distributed(..)`: named arguments checked in `distributed.rs`.
    Distributed,
    /// Arguments checked by the word's own function in `custom.rs`
    /// (`autocast(cpu, bf16)`, `checkpoint(vs, "p", resume)`, …).
    Custom(&'static crate::custom::Custom),
}

/// How a scope behaves in a future.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Awaits {
    /// Per-thread state (grad mode, the current device), and a model's
    /// mode: entered around every poll, so it neither leaks into other
    /// tasks (another task may use the same model in training mode) nor
    /// stays behind on a thread the task left. (`distributed` joins its group at the
    /// first poll and only makes it the thread's current one at the others.)
    PerPoll,
    /// Covers the whole future, entered once (a timer, a seed, a
    /// checkpoint): re-entering per poll would re-seed, time or save at
    /// each poll.
    Span,
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
    /// What the word does in async code (an `async fn`, a body that
    /// `.await`s).
    pub(crate) awaits: Awaits,
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
        awaits: Awaits::PerPoll,
        doc: "autograd off",
    },
    Word {
        name: "enable_grad",
        shape: Shape::Bare,
        group: GRAD_MODE,
        repeat: false,
        awaits: Awaits::PerPoll,
        doc: "autograd on",
    },
    Word {
        name: "grad",
        shape: Shape::Exprs(&["enabled"]),
        group: GRAD_MODE,
        repeat: false,
        awaits: Awaits::PerPoll,
        doc: "autograd on or off",
    },
    Word {
        name: "inference_mode",
        shape: Shape::Bare,
        group: None,
        repeat: false,
        awaits: Awaits::PerPoll,
        doc: "inference mode",
    },
    Word {
        name: "device",
        shape: Shape::Device,
        group: None,
        repeat: false,
        awaits: Awaits::PerPoll,
        doc: "current device",
    },
    Word {
        name: "eval",
        shape: Shape::Model,
        group: MODEL_MODE,
        repeat: false,
        awaits: Awaits::PerPoll,
        doc: "model in eval mode",
    },
    Word {
        name: "train",
        shape: Shape::Model,
        group: MODEL_MODE,
        repeat: false,
        awaits: Awaits::PerPoll,
        doc: "model in training mode",
    },
    Word {
        name: "with",
        shape: Shape::Scope,
        group: None,
        repeat: true,
        awaits: Awaits::PerPoll,
        doc: "any `Scope` value",
    },
    Word {
        name: "timed",
        shape: Shape::Options(&options::TIMED),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "wall time",
    },
    Word {
        name: "memory_scope",
        shape: Shape::Options(&options::MEMORY),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "process memory",
    },
    Word {
        name: "gpu_memory_scope",
        shape: Shape::Options(&options::GPU_MEMORY),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "CUDA memory",
    },
    Word {
        name: "distributed",
        shape: Shape::Distributed,
        group: None,
        repeat: false,
        awaits: Awaits::PerPoll,
        doc: "a torch.distributed process group",
    },
    Word {
        name: "seed",
        shape: Shape::Exprs(&["n"]),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "RNG seeded, restored on exit",
    },
    Word {
        name: "fork_rng",
        shape: Shape::Bare,
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "RNG state restored on exit",
    },
    Word {
        name: "autocast",
        shape: Shape::Custom(&crate::custom::AUTOCAST),
        group: None,
        repeat: true,
        awaits: Awaits::PerPoll,
        doc: "mixed precision",
    },
    Word {
        name: "profile",
        shape: Shape::Exprs(&["path"]),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "profiler trace written on exit",
    },
    Word {
        name: "record",
        shape: Shape::Exprs(&["name"]),
        group: None,
        repeat: true,
        awaits: Awaits::PerPoll,
        doc: "named profiler range",
    },
    Word {
        name: "checkpoint",
        shape: Shape::Custom(&crate::custom::CHECKPOINT),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "VarStore saved on exit",
    },
    Word {
        name: "detect_anomaly",
        shape: Shape::Custom(&crate::custom::DETECT_ANOMALY),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "autograd anomaly detection",
    },
    Word {
        name: "deterministic",
        shape: Shape::Custom(&crate::custom::DETERMINISTIC),
        group: None,
        repeat: false,
        awaits: Awaits::Span,
        doc: "deterministic algorithms",
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
            Shape::Options(_) => &[],
            Shape::Distributed => &[],
            Shape::Custom(custom) => custom.params,
        }
    }

    /// How to write the word, for messages: `grad(enabled)`.
    pub(crate) fn usage(&self) -> String {
        match self.shape {
            Shape::Bare => self.name.to_owned(),
            Shape::Device => "device(0)".to_owned(),
            Shape::Options(spec) => spec.usage.to_owned(),
            Shape::Distributed => "distributed(from_env)".to_owned(),
            Shape::Custom(custom) => custom.usage.to_owned(),
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
