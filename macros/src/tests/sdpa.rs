//! `sdpa(..)`: its row's one list param (backends, each once, in our
//! spelling), every mistake reported.

use super::errors::every_mistake;
use super::lex;
use crate::bang::scoped_tokens;
use crate::expand::Flavor;

#[test]
fn reports_every_mistake_in_one_list() {
    every_mistake(
        "sdpa(math, MATH, flash_attention, efficient = true, backends = x, 1 + 1, flash = true, math) => {}",
        &[
            ("`MATH` is spelled `math` here", "MATH", 1),
            (
                "`flash_attention` is spelled `flash` here",
                "flash_attention",
                1,
            ),
            (
                "write `mem_efficient` alone, without `= …` (`efficient` is spelled `mem_efficient` here)",
                "efficient",
                1,
            ),
            (
                "`sdpa` takes its backends bare, one by one: write `sdpa(math, flash, mem_efficient, cudnn)`",
                "backends",
                1,
            ),
            (
                "the backend of `sdpa` is a word, fixed at compile time: write `math`, `flash`, `mem_efficient` or `cudnn`",
                "1",
                1,
            ),
            ("write `flash` alone, without `= …`", "flash = true", 1),
            ("`math` is listed twice in `sdpa`; keep one", "math", 2),
        ],
    );
    every_mistake(
        "sdpa() => {}",
        &[(
            "`sdpa` needs at least one backend (`math`, `flash`, `mem_efficient` or `cudnn`)",
            "(",
            1,
        )],
    );
    every_mistake(
        "sdpa(nope) => {}",
        &[(
            "`nope` is not a backend of `sdpa`: write `math`, `flash`, `mem_efficient` or `cudnn`",
            "nope",
            1,
        )],
    );
}

/// The backends in the order written, each at its token.
#[test]
fn backends_in_written_order() {
    let input = lex("::rt ; sdpa(cudnn, math, mem_efficient) => ()");
    let e = scoped_tokens(Flavor::Scoped, input)
        .expect("expands")
        .to_string()
        .replace(' ', "");
    assert!(
        e.contains(
            "sdpa([::rt::__private::SdpaBackend::Cudnn,::rt::__private::SdpaBackend::Math,\
             ::rt::__private::SdpaBackend::MemEfficient])"
        ),
        "{e}"
    );
}
