//! The arguments of a word: missing, extra, malformed, of the wrong
//! literal, each reported on its token; by position or by name.

use super::errors::{every_mistake, one};

#[test]
fn arguments_to_a_word_without_any() {
    one(
        "no_grad(x) => {}",
        "`no_grad` takes no arguments: write `no_grad` without parentheses",
        "(",
        1,
    );
    one(
        "enable_grad() => {}",
        "`enable_grad` takes no arguments",
        "(",
        1,
    );
}

/// Said by the one reader, naming the param: the same for every word.
#[test]
fn missing_arguments() {
    one(
        "grad => {}",
        "`grad` needs its `enabled` argument: write `grad(enabled)`",
        "grad",
        1,
    );
    one(
        "grad() => {}",
        "`grad` needs its `enabled` argument: write `grad(enabled)`",
        "(",
        1,
    );
    one(
        "device => {}",
        "`device` needs its `device` argument: write `device(0)`",
        "device",
        1,
    );
    one(
        "with() => {}",
        "`with` needs its `scope` argument: write `with(scope)`",
        "(",
        1,
    );
}

/// Each argument too many, on its token.
#[test]
fn extra_arguments() {
    one(
        "grad(a, b) => {}",
        "`grad` takes one argument, found 2: write `grad(enabled)`",
        "b",
        1,
    );
    one(
        "device(0, 1) => {}",
        "`device` takes one argument, found 2",
        "1",
        1,
    );
    every_mistake(
        "with(a, b, c) => {}",
        &[
            ("`with` takes one argument, found 3", "b", 1),
            ("`with` takes one argument, found 3", "c", 1),
        ],
    );
}

/// A positional param is also read by its name, and misnamed or given
/// twice like any other.
#[test]
fn positional_params_by_name() {
    let expand = |list: &str| {
        crate::bang::scoped_tokens(
            crate::expand::Flavor::Scoped,
            super::lex(&format!("::rt ; {list} => {{}}")),
        )
        .map(|t| t.to_string())
        .unwrap_or_else(|e| panic!("{list}: {e}"))
    };
    assert_eq!(expand("grad(enabled = true)"), expand("grad(true)"));
    assert_eq!(expand("threads(n = 4)"), expand("threads(4)"));
    assert_eq!(
        expand("checkpoint(path = p, vs = v)"),
        expand("checkpoint(v, p)")
    );
    one(
        "grad(enable = true) => {}",
        "`grad` has no argument `enable` (did you mean `enabled`?)",
        "enable",
        1,
    );
    one(
        "grad(enabled = a, again) => {}",
        "`enabled` is given twice to `grad`; keep one",
        "again",
        1,
    );
    one(
        "threads(n = 1, count = 2) => {}",
        "`threads` has no argument `count`; it takes `n`",
        "count",
        1,
    );
}

#[test]
fn malformed_arguments() {
    one("grad(a b) => {}", "expected `,` between arguments", "b", 1);
    one(
        "device(cuda:0) => {}",
        "unexpected `:`; a device string needs quotes, e.g. `device(\"cuda:0\")`",
        ":",
        1,
    );
}

#[test]
fn bad_device_strings() {
    let forms = "write a CUDA index such as `device(0)`, `device(cpu)`, a device string \"cpu\", \
                 \"mps\" or \"cuda:N\" (N a non-negative integer, e.g. \"cuda:0\"), or an \
                 expression of a device type";
    one(
        "device(\"gpu\") => {}",
        &format!("unknown device string \"gpu\": {forms}"),
        "\"gpu\"",
        1,
    );
    for bad in [
        "cuda:",
        "cuda:-1",
        "cuda:+1",
        "cuda: 0",
        "CUDA:0",
        "cuda:0x1",
        "cuda:99999999999999999999999",
    ] {
        let input = format!("device(\"{bad}\") => {{}}");
        one(&input, "unknown device string", "\"", 1);
    }
}

#[test]
fn cuda_without_an_index() {
    let message = "write `device(0)` or `device(\"cuda:0\")`: the CUDA device needs an index";
    one("device(cuda) => {}", message, "cuda", 1);
    one("device(\"cuda\") => {}", message, "\"cuda\"", 1);
}

#[test]
fn negative_and_non_integer_devices() {
    one(
        "device(-1) => {}",
        "a device index can't be negative: write `device(0)` for the first CUDA device",
        "-",
        1,
    );
    one("device(-(2)) => {}", "can't be negative", "-", 1);
    for lit in ["1.5", "true", "'c'", "b\"x\"", "0f32", "1e3"] {
        one(
            &format!("device({lit}) => {{}}"),
            "this literal is not a device: write a CUDA index such as `device(0)`",
            lit,
            1,
        );
    }
    one(
        "device(99999999999999999999999) => {}",
        "this device index doesn't fit in a `usize`",
        "9",
        1,
    );
}

#[test]
fn model_words_need_a_model() {
    one(
        "eval => {}",
        "`eval` needs its `model` argument: write `eval(model)`",
        "eval",
        1,
    );
    one(
        "train(a, b) => {}",
        "`train` takes one argument, found 2: write `train(model)`",
        "b",
        1,
    );
}

/// `checkpoint` reads its row's params: every mistake, each on its token.
#[test]
fn checkpoint_reports_every_mistake() {
    every_mistake(
        "checkpoint(vs, p, restart, resume, resume = b, save_on_failur = false) => {}",
        &[
            ("unexpected argument to `checkpoint`: write", "restart", 1),
            (
                "`resume` is given twice to `checkpoint`; keep one",
                "resume",
                2,
            ),
            (
                "`checkpoint` has no argument `save_on_failur` (did you mean `save_on_failure`?)",
                "save_on_failur",
                1,
            ),
        ],
    );
    one(
        "checkpoint(vs) => {}",
        "`checkpoint` needs its `path` argument: write `checkpoint(vs, \"model.ot\", resume, optimizer = opt, every = 100)`",
        "(",
        1,
    );
}

/// A bare word after a named one is a misspelt flag, not a second value
/// for the param at its position.
#[test]
fn misspelt_flag_after_a_named_argument() {
    every_mistake(
        "timed(name = \"fwd\", synced) => {}",
        &[(
            "`timed` has no argument `synced` (did you mean `sync`?)",
            "synced",
            1,
        )],
    );
    every_mistake(
        "checkpoint(vs, p, resum) => {}",
        &[(
            "`checkpoint` has no argument `resum` (did you mean `resume`?)",
            "resum",
            1,
        )],
    );
    every_mistake(
        "timed(name = \"fwd\", \"again\") => {}",
        &[("`name` is given twice to `timed`; keep one", "\"again\"", 1)],
    );
}

/// A param written under a near name is told once: not again as missing,
/// nor by a word's own "none given".
#[test]
fn a_misspelt_param_is_not_also_missing() {
    one(
        "deadline(untill = t) => {}",
        "`deadline` has no argument `untill` (did you mean `until`?)",
        "untill",
        1,
    );
    one(
        "cudnn(benchmrk) => {}",
        "`cudnn` has no argument `benchmrk` (did you mean `benchmark`?)",
        "benchmrk",
        1,
    );
    one(
        "record(nme = \"r\") => {}",
        "`record` has no argument `nme` (did you mean `name`?)",
        "nme",
        1,
    );
}
