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
                "`x` is not a backend of `sdpa`: write `math`, `flash`, `mem_efficient` or `cudnn`",
                "x",
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

/// By name, the list is an array of the same words, checked the same way.
#[test]
fn backends_by_name() {
    let expand = |list: &str| {
        scoped_tokens(Flavor::Scoped, lex(&format!("::rt ; {list} => ()")))
            .map(|t| t.to_string())
            .unwrap_or_else(|e| panic!("{list}: {e}"))
    };
    assert_eq!(
        expand("sdpa(backends = [math, flash])"),
        expand("sdpa(math, flash)")
    );
    assert_eq!(expand("sdpa(backends = cudnn)"), expand("sdpa(cudnn)"));
    every_mistake(
        "sdpa(backends = [math, Flash, math]) => {}",
        &[
            ("`Flash` is spelled `flash` here", "Flash", 1),
            ("`math` is listed twice in `sdpa`; keep one", "math", 2),
        ],
    );
    every_mistake(
        "sdpa(backends = []) => {}",
        &[(
            "`sdpa` needs at least one backend (`math`, `flash`, `mem_efficient` or `cudnn`)",
            "backends",
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
