//! `autocast(..)`: its row's params (a device type and a dtype, each a
//! fixed word, then `enabled` and `cache`), every mistake reported.

use super::errors::every_mistake;
use super::lex;
use crate::bang::scoped_tokens;
use crate::expand::Flavor;

fn expand(list: &str) -> String {
    let input = lex(&format!("::rt ; {list} => ()"));
    match scoped_tokens(Flavor::Scoped, input) {
        Ok(t) => t.to_string().replace(' ', ""),
        Err(e) => panic!("{list}: {e}"),
    }
}

#[test]
fn reports_every_mistake_in_one_list() {
    every_mistake(
        "autocast(gpu, half, cache_enabled = false, enabled = a, enabled = b, cache, extra) => {}",
        &[
            (
                "`gpu` is not a device type of `autocast`: write `cpu` or `cuda`",
                "gpu",
                1,
            ),
            ("`half` is spelled `f16` here", "half", 1),
            (
                "`autocast` has no argument `cache_enabled` (did you mean `cache`?)",
                "cache_enabled",
                1,
            ),
            // The first `enabled` is inside `cache_enabled`.
            (
                "`enabled` is given twice to `autocast`; keep one",
                "enabled",
                3,
            ),
            (
                "`cache` of `autocast` needs a value: write `cache = …`",
                "cache",
                2,
            ),
            (
                "unexpected argument to `autocast`: write `autocast(cpu, bf16, enabled = b, cache = b)`",
                "extra",
                1,
            ),
        ],
    );
    every_mistake(
        r#"autocast("cpu", dtype = f32) => {}"#,
        &[
            ("write `cpu` without quotes", r#""cpu""#, 1),
            (
                "`f32` is not a dtype of `autocast`: write `bf16` or `f16`",
                "f32",
                1,
            ),
        ],
    );
    every_mistake(
        "autocast(1 + 1, bfloat16) => {}",
        &[
            (
                "the device type of `autocast` is a word, fixed at compile time: write `cpu` or `cuda`",
                "1",
                1,
            ),
            ("`bfloat16` is spelled `bf16` here", "bfloat16", 1),
        ],
    );
    // tch's and PyTorch's paths are told our word.
    every_mistake(
        "autocast(Device::Cuda, Kind::Half) => {}",
        &[
            ("`Device::Cuda` is spelled `cuda` here", "Device", 1),
            ("`Kind::Half` is spelled `f16` here", "Kind", 1),
        ],
    );
    every_mistake(
        "autocast(cpu, dtype = Kind::Float) => {}",
        &[(
            "the dtype of `autocast` is a word, fixed at compile time: write `bf16` or `f16`",
            "Kind",
            1,
        )],
    );
    // A missing device type, said once.
    every_mistake(
        "autocast(enabled = false) => {}",
        &[(
            "`autocast` needs a device type (`cpu` or `cuda`): write `autocast(cpu, bf16, enabled = b, cache = b)`",
            "(",
            1,
        )],
    );
}

/// `torch.autocast`'s own keyword names work too, and options keep the
/// order written (the user's expressions are evaluated in that order).
#[test]
fn named_params_and_written_order() {
    assert_eq!(
        expand("autocast(device_type = cuda, dtype = bf16)"),
        expand("autocast(cuda, bf16)")
    );
    let e = expand("autocast(cpu, cache = a(), enabled = b())");
    assert!(
        e.contains("autocast_cpu_bf16().cache(a()).enabled(b())"),
        "{e}"
    );
    let e = expand("autocast(enabled = x, cuda)");
    assert!(e.contains("autocast_cuda_f16().enabled(x)"), "{e}");
}
