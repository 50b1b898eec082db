//! `distributed(..)`: the forms it accepts and every mistake, each
//! reported (the word needs the `distributed` feature).
#![cfg(feature = "distributed")]

use super::errors::every_mistake;
use crate::bang::scoped_tokens;
use crate::expand::Flavor;

fn expand(list: &str) -> syn::Result<String> {
    let input = format!("::rt ; {list} => ()").parse().expect("lexes");
    scoped_tokens(Flavor::TryScoped, input).map(|t| t.to_string().replace(' ', ""))
}

/// Every error message, with the text of the token it points at.
fn errors(list: &str) -> Vec<String> {
    match expand(list) {
        Ok(t) => panic!("expected errors for {list}, got {t}"),
        Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn accepted_forms() {
    let e = expand(r#"distributed(rank = r, world_size = 2, master = "127.0.0.1:29500")"#).unwrap();
    assert!(
        e.contains(r#"Distributed::new(::rt::__private::DistBackend::Gloo,r,2,"127.0.0.1:29500")"#)
    );
    let e = expand("distributed(from_env, backend = \"gloo\", timeout = t)").unwrap();
    assert!(
        e.contains(
            "Distributed::from_env().backend(::rt::__private::DistBackend::Gloo).timeout(t)"
        ),
        "{e}"
    );
    let e = expand("distributed(backend = nccl, from_env)").unwrap();
    assert!(e.contains("DistBackend::Nccl"), "{e}");
    // A runtime master is checked at run time.
    assert!(expand("distributed(rank = 0, world_size = 1, master = addr)").is_ok());
}

#[test]
fn mistakes() {
    let bad = |list: &str, want: &[&str]| {
        let got = errors(list);
        assert_eq!(got.len(), want.len(), "{list}: {got:#?}");
        for (g, w) in got.iter().zip(want) {
            assert!(g.contains(w), "{list}:\n  got {g}\n  want {w}");
        }
    };
    bad(
        "distributed(backend = mpi, from_env)",
        &["`mpi` is not a backend of `distributed`: write `gloo` (CPU tensors) or `nccl`"],
    );
    bad(
        "distributed(backend = b, from_env)",
        &["`b` is not a backend of `distributed`"],
    );
    bad(
        "distributed(backend = 1 + 1, from_env)",
        &["the backend of `distributed` is a word, fixed at compile time: write `gloo`"],
    );
    bad(
        "distributed(from_env, rank = 1)",
        &["`rank` contradicts `from_env`"],
    );
    bad(
        "distributed(rank = 0)",
        &["needs `world_size = …`, `master = \"host:port\"`, or `from_env`"],
    );
    bad("distributed", &["`distributed` needs `rank = …`"]);
    bad(
        r#"distributed(rank = 0, world_size = 1, master = "nohost")"#,
        &[r#"master "nohost" is not "host:port""#],
    );
    bad(
        "distributed(from_env, port = 1, from_env)",
        &["has no argument `port`", "`from_env` is given twice"],
    );
    bad(
        "distributed(from_env = true)",
        &["write `from_env` alone", "`distributed` needs"],
    );
    bad(
        "distributed(from_env, 3)",
        &["unexpected argument to `distributed`"],
    );
    bad(
        "distributed(from_env, timeout = a, timeout = b)",
        &["`timeout` is given twice"],
    );
    bad(
        "distributed(from_env), distributed(from_env)",
        &["`distributed` appears twice"],
    );
}

/// The row's params read by `forms::read`, then the checks across them:
/// every mistake in one list, each on its token.
#[test]
fn reports_every_mistake_in_one_list() {
    every_mistake(
        r#"distributed(from_env, rank = 1, backend = mpi, master = "x", from_env = 1, 7) => {}"#,
        &[
            (
                "`mpi` is not a backend of `distributed`: write `gloo` (CPU tensors) or `nccl` (CUDA tensors)",
                "mpi",
                1,
            ),
            ("write `from_env` alone, without `= …`", "from_env", 2),
            ("unexpected argument to `distributed`: write", "7", 1),
            (r#"master "x" is not "host:port""#, r#""x""#, 1),
            ("`rank` contradicts `from_env`", "rank", 1),
            ("`master` contradicts `from_env`", "master", 1),
        ],
    );
    every_mistake(
        "distributed(rank = 1, rank = 2, wrld_size = 2, port = 3) => {}",
        &[
            (
                "`rank` is given twice to `distributed`; keep one",
                "rank",
                2,
            ),
            (
                "`distributed` has no argument `wrld_size` (did you mean `world_size`?)",
                "wrld_size",
                1,
            ),
            (
                "`distributed` has no argument `port`; it takes `backend`, `rank`, \
                 `world_size`, `master`, `timeout` or `from_env`",
                "port",
                1,
            ),
            (
                "`distributed` needs `world_size = …`, `master = \"host:port\"`, or `from_env`",
                "(",
                1,
            ),
        ],
    );
    every_mistake(
        r#"distributed(backend = "NCCL", from_env, timeout) => {}"#,
        &[
            ("`NCCL` is spelled `nccl` here", r#""NCCL""#, 1),
            (
                "`timeout` of `distributed` needs a value: write `timeout = …`",
                "timeout",
                1,
            ),
        ],
    );
}
