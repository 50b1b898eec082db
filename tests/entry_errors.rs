//! Whether a word's entry can fail is a property of its runtime type
//! (`Scope::Error`); the README's word table says the same (and the macros'
//! own test checks each row of the word table against the README).

use tch_scope::__private as p;
use tch_scope::{EntryError, Scope};

fn can_fail<S: Scope>(_: &S) -> bool {
    <S::Error as EntryError>::CAN_FAIL
}

/// `stream(s)`'s scope is a `cuda::Stream`, which needs CUDA to be made:
/// its type alone answers.
fn stream_can_fail() -> bool {
    <<tch_scope::cuda::Stream as Scope>::Error as EntryError>::CAN_FAIL
}

const README: &str = include_str!("../README.md");

/// The README's "entry" cell of the row that starts with `` `word``.
fn documented(word: &str) -> bool {
    let row = README
        .lines()
        .find(|l| l.starts_with(&format!("| `{word}")))
        .unwrap_or_else(|| panic!("no README row for `{word}`"));
    match row.split('|').nth(2).map(str::trim) {
        Some("can fail") => true,
        Some("never fails") => false,
        other => panic!("README row of `{word}` says {other:?}"),
    }
}

#[test]
fn each_word_s_type_can_fail_as_the_readme_says() {
    let model = tch_scope::WithMode::new(tch::nn::func(|x| x.shallow_clone()));
    let vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let site: &'static p::Site = Box::leak(Box::new(p::Site::new("entry_errors")));
    let words: [(&str, bool); 27] = [
        ("no_grad", can_fail(&p::no_grad())),
        ("enable_grad", can_fail(&p::enable_grad())),
        ("grad", can_fail(&p::grad(true))),
        ("inference_mode", can_fail(&p::inference_mode())),
        ("device", can_fail(&p::device_cpu())),
        ("eval", can_fail(&p::eval(&model))),
        ("train", can_fail(&p::train(&model))),
        ("with", can_fail(&p::with(p::device_cpu()))),
        ("timed", can_fail(&p::timed(site, p::SyncMode::Auto))),
        ("memory_scope", can_fail(&p::memory_scope("entry_errors"))),
        ("tensor_memory", can_fail(&p::tensor_memory("entry_errors"))),
        (
            "gpu_memory_scope",
            can_fail(&p::gpu_memory_scope("e", 0, true)),
        ),
        ("seed", can_fail(&p::seed(1))),
        ("fork_rng", can_fail(&p::fork_rng())),
        ("threads", can_fail(&p::threads(1))),
        ("autocast", can_fail(&p::autocast_cpu_bf16())),
        ("profile", can_fail(&p::profile("t.json"))),
        ("record", can_fail(&p::record("r"))),
        (
            "checkpoint",
            can_fail(&p::checkpoint(&vs, "c.ot", false, true)),
        ),
        ("detect_anomaly", can_fail(&p::detect_anomaly(true))),
        ("deterministic", can_fail(&p::deterministic(false))),
        ("matmul_precision", can_fail(&p::matmul_precision("high"))),
        ("tf32", can_fail(&p::tf32(true))),
        ("cudnn", can_fail(&p::cudnn(None, Some(true), None, None))),
        ("sdpa", can_fail(&p::sdpa([p::SdpaBackend::Math]))),
        (
            "deadline",
            can_fail(&p::deadline(std::time::Duration::from_secs(1))),
        ),
        // Without CUDA no stream can be made; the type says it all.
        ("stream", stream_can_fail()),
    ];
    for (word, fails) in words {
        assert_eq!(fails, documented(word), "`{word}`");
    }
    let dist = p::Distributed::from_env();
    assert_eq!(can_fail(&dist), documented("distributed"));
}
