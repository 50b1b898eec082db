//! Every word of the table reports every mistake in one list, each on its
//! token: its arguments read by the one reader, then its own checks across
//! them, then the list's. (That each positional param is read by its name
//! too is `by_name.rs`.)

use super::errors::{every_mistake, scoped_errors};
use crate::word::Word;
use crate::words::WORDS;

/// A mistake: part of its message, the token it points at, which of them.
type Mistake = (&'static str, &'static str, usize);

/// Per word, a list with several mistakes and every error it must give, in
/// order. A word without params has one mistake to make (its
/// parentheses): its row adds a repeat, a mistake of the list.
const MISTAKES: &[(&str, &str, &[Mistake])] = &[
    (
        "no_grad",
        "no_grad(x), no_grad",
        &[
            ("`no_grad` takes no arguments", "(", 1),
            ("`no_grad` appears twice in this list", "no_grad", 2),
        ],
    ),
    (
        "enable_grad",
        "enable_grad(1), enable_grad(2)",
        &[
            ("`enable_grad` takes no arguments", "(", 1),
            ("`enable_grad` appears twice in this list", "enable_grad", 2),
            ("`enable_grad` takes no arguments", "(", 2),
        ],
    ),
    (
        "grad",
        "grad(a, b, enabled = c)",
        &[
            ("`grad` takes one argument, found 2", "b", 1),
            ("`enabled` is given twice to `grad`", "enabled", 1),
        ],
    ),
    (
        "inference_mode",
        "inference_mode(a, b, enable = c)",
        &[
            ("`inference_mode` takes one argument, found 2", "b", 1),
            (
                "`inference_mode` has no argument `enable` (did you mean `enabled`?)",
                "enable",
                1,
            ),
        ],
    ),
    (
        "device",
        "device(-1, 2)",
        &[
            ("`device` takes one argument, found 2", "2", 1),
            ("a device index can't be negative", "-", 1),
        ],
    ),
    (
        "eval",
        "eval(m, n, model = o)",
        &[
            ("`eval` takes one argument, found 2", "n", 1),
            ("`model` is given twice to `eval`", "model", 1),
        ],
    ),
    (
        "train",
        "train(model = m), eval(m, x)",
        &[
            (
                "`eval(m)` contradicts `train(m)` earlier in this list",
                "eval",
                1,
            ),
            ("`eval` takes one argument, found 2", "x", 1),
        ],
    ),
    (
        "with",
        "with(a, b, scope = c)",
        &[
            ("`with` takes one argument, found 2", "b", 1),
            ("`scope` is given twice to `with`", "scope", 1),
        ],
    ),
    (
        "timed",
        "timed(name = x, sync, events, synced = 1)",
        &[
            ("`name` of `timed` must be a string literal", "x", 1),
            (
                "`timed` has no argument `synced` (did you mean `sync`?)",
                "synced",
                1,
            ),
            (
                "`sync` and `events` are two ways to time CUDA work",
                "events",
                1,
            ),
        ],
    ),
    (
        "memory_scope",
        "memory_scope(label, \"b\")",
        &[
            (
                "`name` of `memory_scope` must be a string literal",
                "label",
                1,
            ),
            ("`memory_scope` takes one argument, found 2", "\"b\"", 1),
        ],
    ),
    (
        "tensor_memory",
        "tensor_memory(name = \"a\", name = \"b\", size = 1)",
        &[
            ("`name` is given twice to `tensor_memory`", "name", 2),
            (
                "`tensor_memory` has no argument `size`; it takes `name`",
                "size",
                1,
            ),
        ],
    ),
    (
        "gpu_memory_scope",
        "gpu_memory_scope(0, empty_cache = b, nme = \"g\")",
        &[
            ("unexpected argument to `gpu_memory_scope`", "0", 1),
            (
                "`gpu_memory_scope` has no argument `nme` (did you mean `name`?)",
                "nme",
                1,
            ),
            ("`gpu_memory_scope` needs `device = …`", "(", 1),
        ],
    ),
    (
        "distributed",
        "distributed(from_env, rank = 1, master = \"x\")",
        &[
            ("master \"x\" is not \"host:port\"", "\"x\"", 1),
            ("`rank` contradicts `from_env`", "rank", 1),
            ("`master` contradicts `from_env`", "master", 1),
        ],
    ),
    (
        "seed",
        "seed(n = 1, 2, devices)",
        &[
            ("`n` is given twice to `seed`", "2", 1),
            (
                "`devices` of `seed` needs a value: write `devices = …`",
                "devices",
                1,
            ),
        ],
    ),
    (
        "fork_rng",
        "fork_rng(1, device = [0])",
        &[
            ("unexpected argument to `fork_rng`", "1", 1),
            (
                "`fork_rng` has no argument `device` (did you mean `devices`?)",
                "device",
                1,
            ),
        ],
    ),
    (
        "threads",
        "threads(n = 1, 2, 3)",
        &[
            ("`n` is given twice to `threads`", "2", 1),
            ("`threads` takes one argument, found 2", "3", 1),
        ],
    ),
    (
        "autocast",
        "autocast(gpu, half, cache)",
        &[
            ("`gpu` is not a device type of `autocast`", "gpu", 1),
            ("`half` is spelled `f16` here", "half", 1),
            ("`cache` of `autocast` needs a value", "cache", 1),
        ],
    ),
    (
        "profile",
        "profile(a, b, path = c)",
        &[
            ("`profile` takes one argument, found 2", "b", 1),
            ("`path` is given twice to `profile`", "path", 1),
        ],
    ),
    (
        "record",
        "record(nme = \"a\", \"b\", \"c\")",
        &[
            (
                "`record` has no argument `nme` (did you mean `name`?)",
                "nme",
                1,
            ),
            ("`record` takes one argument, found 2", "\"c\"", 1),
        ],
    ),
    (
        "checkpoint",
        "checkpoint(v, p, restart, resume = a, resume = b)",
        &[
            ("unexpected argument to `checkpoint`", "restart", 1),
            ("`resume` is given twice to `checkpoint`", "resume", 2),
        ],
    ),
    (
        "detect_anomaly",
        "detect_anomaly(true, check_nans = false)",
        &[
            ("unexpected argument to `detect_anomaly`", "true", 1),
            (
                "`detect_anomaly` has no argument `check_nans` (did you mean `check_nan`?)",
                "check_nans",
                1,
            ),
        ],
    ),
    (
        "deterministic",
        "deterministic(warn_only, warn_only = w, 1)",
        &[
            (
                "`warn_only` is given twice to `deterministic`",
                "warn_only",
                2,
            ),
            ("unexpected argument to `deterministic`", "1", 1),
        ],
    ),
    (
        "matmul_precision",
        "matmul_precision(\"High\", \"low\")",
        &[
            (
                "`matmul_precision` takes one argument, found 2",
                "\"low\"",
                1,
            ),
            (
                "`High` is not a float32 matmul precision: write `\"high\"` (lower case)",
                "\"High\"",
                1,
            ),
        ],
    ),
    (
        "tf32",
        "tf32(a, b, alow = c)",
        &[
            ("`tf32` takes one argument, found 2", "b", 1),
            (
                "`tf32` has no argument `alow` (did you mean `allow`?)",
                "alow",
                1,
            ),
        ],
    ),
    (
        "cudnn",
        "cudnn(fast = true, 1)",
        &[
            (
                "`cudnn` has no argument `fast`; it takes `enabled`",
                "fast",
                1,
            ),
            ("unexpected argument to `cudnn`", "1", 1),
            (
                "`cudnn` changes only the flags written, and none is",
                "(",
                1,
            ),
        ],
    ),
    (
        "stream",
        "stream(s, other, strem = u)",
        &[
            ("`stream` takes one argument, found 2", "other", 1),
            (
                "`stream` has no argument `strem` (did you mean `stream`?)",
                "strem",
                1,
            ),
        ],
    ),
    (
        "sdpa",
        "sdpa(MATH, nope)",
        &[
            ("`MATH` is spelled `math` here", "MATH", 1),
            ("`nope` is not a backend of `sdpa`", "nope", 1),
        ],
    ),
    (
        "deadline",
        "deadline(100, until = 5, budget = 1)",
        &[
            (
                "`deadline` has no argument `budget`; it takes `duration` or `until`",
                "budget",
                1,
            ),
            (
                "`deadline` takes a `std::time::Duration`, and a bare number",
                "100",
                1,
            ),
            ("`deadline(until = …)` takes a `std::time::Instant`", "5", 1),
            (
                "`deadline` takes a duration or `until = instant`, not both",
                "100",
                1,
            ),
        ],
    ),
];

/// The words whose feature is on in this build (`distributed` is not,
/// unless the tests run with `--features distributed`).
pub(super) fn words() -> impl Iterator<Item = &'static Word> {
    WORDS
        .iter()
        .filter(|w| !matches!(w.feature, Some((_, false))))
}

#[test]
fn the_mistakes_table_has_every_word() {
    for w in WORDS {
        assert!(
            MISTAKES.iter().any(|(name, ..)| *name == w.name),
            "`{}` has no row in MISTAKES",
            w.name
        );
    }
}

#[test]
fn each_word_reports_every_mistake_at_once() {
    for w in words() {
        for (_, list, want) in MISTAKES.iter().filter(|(name, ..)| *name == w.name) {
            every_mistake(&format!("{list} => {{}}"), want);
        }
    }
}

/// The reader never stops at the first mistake: two unknown names are two
/// errors, each at its name, beside whatever else the word says.
#[test]
fn two_unknown_names_are_two_errors_for_every_word() {
    for w in words().filter(|w| !w.params.is_empty()) {
        let input = format!("{}(zz_a = 1, zz_b = 2) => {{}}", w.name);
        let errors = scoped_errors(&input);
        for key in ["zz_a", "zz_b"] {
            let column = "::rt ; ".len() + input.find(key).expect("written");
            assert!(
                errors.iter().any(|(text, line, col)| {
                    text.contains(&format!("has no argument `{key}`"))
                        && (*line, *col) == (1, column)
                }),
                "{input}: {errors:#?}"
            );
        }
    }
}
