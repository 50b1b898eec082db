//! Property test: deterministic pseudo-random token streams through parse +
//! expand, as plain functions (proc-macro2 runs outside a compiler). Three
//! kinds of input: valid scope lists, mutations of them (tokens dropped,
//! duplicated, swapped, replaced, inside groups too), and random tokens.
//! Nothing may panic; each output is either valid syntax or contains
//! `compile_error!`, and an error points at a token of the input unless
//! there is no token to blame (empty or truncated input).
//!
//! `TCH_SCOPE_FUZZ_CASES` sets the number of cases (10 000 by default, as
//! `make test` runs it); `make fuzz-long` runs 1 000 000 in release. Case
//! `i` depends only on `i`, so a failure names the case, and
//! `TCH_SCOPE_FUZZ_CASE=i` reruns it alone.

use std::panic::{AssertUnwindSafe, catch_unwind};

use proc_macro2::{Group, TokenStream, TokenTree};

use crate::attr::{Attr, attr_tokens, attribute};
use crate::bang::{scoped_macro, scoped_tokens};
use crate::expand::Flavor;

mod input;

use input::{BODIES, Rng, lex, mutate, random_source, valid_list};

const DEFAULT_CASES: u64 = 10_000;

fn has_compile_error(tokens: &TokenStream) -> bool {
    tokens.clone().into_iter().any(|tt| match tt {
        TokenTree::Ident(i) => i == "compile_error",
        TokenTree::Group(g) => has_compile_error(&g.stream()),
        _ => false,
    })
}

fn check(what: &str, out: &TokenStream, valid: impl Fn(TokenStream) -> bool) {
    assert!(!out.is_empty(), "{what}: empty output");
    assert!(
        has_compile_error(out) || valid(out.clone()) || valid(rename_crate(out.clone())),
        "{what}: invalid output without compile_error:\n{out}"
    );
}

/// `crate` as a block's tail (`{ ..; crate }`, from a body `=> crate`) is
/// a path expression to rustc's parser (then a "expected value" error at
/// the user's token), but syn reads it as the start of an item. Renaming
/// it tells that quirk from a real syntax error in the expansion.
fn rename_crate(tokens: TokenStream) -> TokenStream {
    tokens
        .into_iter()
        .map(|tt| match tt {
            TokenTree::Ident(i) if i == "crate" => {
                TokenTree::Ident(proc_macro2::Ident::new("krate", i.span()))
            }
            TokenTree::Group(g) => {
                let mut new = Group::new(g.delimiter(), rename_crate(g.stream()));
                new.set_span(g.span());
                TokenTree::Group(new)
            }
            tt => tt,
        })
        .collect()
}

/// Errors with no token to point at, which span the whole macro call (in
/// rustc, the call site is the invocation or the attribute): syn's "expected
/// X" when a body ends early (`=> const`) reports at its parse scope, the
/// call site, as does a call without the runtime path.
fn may_span_the_call(message: &str) -> bool {
    message.contains("end of input")
        || message.contains("internal to tch-scope")
        || message.contains("expected")
}

/// Every error points at a token of the input, or has none to point at:
/// the user wrote no tokens, the input ended early, or (`word`) the error
/// is about the attribute's own word, whose span is the call site.
fn check_spans(what: &str, err: syn::Error, no_tokens: bool, word: Option<&str>) -> usize {
    let mut at_call_site = 0;
    for e in err {
        let message = e.to_string();
        assert!(!message.is_empty(), "{what}: an error without a message");
        if e.span().byte_range() == (0..0) {
            let about_word = word.is_some_and(|w| message.starts_with(&format!("`{w}`")));
            assert!(
                no_tokens || about_word || may_span_the_call(&message),
                "{what}: `{message}` has no span, though the input has tokens"
            );
            at_call_site += 1;
        }
    }
    at_call_site
}

#[derive(Default)]
struct Tally {
    scoped_ok: usize,
    scoped_err: usize,
    attr_ok: usize,
    attr_err: usize,
    at_call_site: usize,
}

/// One case: a list and a body through both block macros, and an item
/// through three attributes.
fn run_case(case: u64, tally: &mut Tally) {
    let mut rng = Rng::for_case(case);
    // Token streams, not strings: a mutation can make token sequences that
    // have no source text (a lone `'`), and those must be handled too.
    let list = match rng.below(3) {
        0 => lex(&random_source(&mut rng, 0)),
        1 => lex(&valid_list(&mut rng)),
        _ => {
            let valid = lex(&valid_list(&mut rng));
            mutate(&mut rng, valid)
        }
    };
    let body = match rng.below(2) {
        0 => lex(&random_source(&mut rng, 0)),
        _ => lex(rng.pick(BODIES)),
    };
    // Lexed, not `Group::new`: every token rustc hands a macro has a real span.
    let braced = lex(&format!("{{ {body} }}"));
    let concat = |parts: &[TokenStream]| parts.iter().cloned().collect::<TokenStream>();
    // What the user wrote; `scoped!` (a macro_rules! wrapper) puts the
    // runtime path `$crate ;` in front, so that part is never mutated.
    let user = match rng.below(5) {
        0 => list.clone(),
        1 => concat(&[list.clone(), lex("=>"), body.clone()]),
        2 => {
            let whole = concat(&[list.clone(), lex("=>"), braced.clone()]);
            mutate(&mut rng, whole)
        }
        _ => concat(&[list.clone(), lex("=>"), braced.clone()]),
    };
    // Now and then without the path, as if called directly. Then the user's
    // tokens up to a `;` are taken for the path, and only "no panic, some
    // tokens" is checked: no user can write that call.
    let with_path = rng.below(20) != 0;
    let src = match with_path {
        false => user.clone(),
        true => concat(&[lex("::tch_scope ;"), user.clone()]),
    };
    for flavor in [Flavor::Scoped, Flavor::TryScoped] {
        let what = format!("case {case}: scoped!({src})");
        let valid = |t| !with_path || syn::parse2::<syn::Expr>(t).is_ok();
        match scoped_tokens(flavor, src.clone()) {
            Ok(out) => {
                check(&what, &out, valid);
                tally.scoped_ok += usize::from(!has_compile_error(&out));
            }
            Err(e) => {
                let no_tokens = user.is_empty() || !with_path;
                tally.at_call_site += check_spans(&what, e, no_tokens, None);
                tally.scoped_err += 1;
            }
        }
        // The entry point the compiler calls: always tokens.
        let out = scoped_macro(flavor, src.clone());
        check(&what, &out, valid);
    }

    let item = match rng.below(3) {
        0 => random_source(&mut rng, 0),
        1 => format!("fn f() {{ {body} }}"),
        _ => format!(
            "{} fn f(&self) -> Result<u8> {{ {body} }}",
            ["", "async", "pub", "pub async"][rng.below(4)]
        ),
    };
    // rustc hands attributes only items that parse; for those, the output
    // must parse too.
    let item_parses = syn::parse2::<syn::ImplItem>(lex(&item)).is_ok();
    let word = rng.pick(
        &crate::words::WORDS
            .iter()
            .map(|w| w.name)
            .collect::<Vec<_>>(),
    );
    for (attr, name, word) in [
        (Attr::List, "scope", None),
        (Attr::Word(word), word, Some(word)),
        (Attr::Word("no_grad"), "no_grad", Some("no_grad")),
    ] {
        let what = format!("case {case}: #[{name}({list})] {item}");
        match attr_tokens(attr, list.clone(), lex(&item)) {
            Ok(_) => tally.attr_ok += 1,
            Err(e) => {
                tally.at_call_site += check_spans(&what, e, list.is_empty(), word);
                tally.attr_err += 1;
            }
        }
        let out = attribute(attr, list.clone(), lex(&item));
        check(&what, &out, |t| {
            !item_parses || syn::parse2::<syn::ImplItem>(t).is_ok()
        });
    }
}

/// `TCH_SCOPE_FUZZ_CASE=i` runs case `i` alone (to reproduce a failure).
fn only() -> Option<u64> {
    let n = std::env::var("TCH_SCOPE_FUZZ_CASE").ok()?;
    Some(n.parse().expect("TCH_SCOPE_FUZZ_CASE is a number"))
}

fn cases() -> u64 {
    match std::env::var("TCH_SCOPE_FUZZ_CASES") {
        Ok(n) => n
            .replace('_', "")
            .parse()
            .expect("TCH_SCOPE_FUZZ_CASES is a number"),
        Err(_) => DEFAULT_CASES,
    }
}

#[test]
fn random_input_never_panics() {
    let total = cases();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let start = std::time::Instant::now();
    // Cases are split across threads by index; each thread has its own
    // proc-macro2 source map.
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut tally = Tally::default();
                    let mine = (t..total).step_by(threads as usize);
                    let mine: Vec<u64> = match only() {
                        Some(i) => mine.filter(|&c| c == i).collect(),
                        None => mine.collect(),
                    };
                    for case in mine {
                        let result = catch_unwind(AssertUnwindSafe(|| run_case(case, &mut tally)));
                        // Spans are thread-local and grow with every lexed
                        // string; none outlives a case.
                        proc_macro2::extra::invalidate_current_thread_spans();
                        if let Err(panic) = result {
                            let msg = panic
                                .downcast_ref::<String>()
                                .map(String::as_str)
                                .or_else(|| panic.downcast_ref::<&str>().copied())
                                .unwrap_or("a panic");
                            panic!("case {case} (TCH_SCOPE_FUZZ_CASES={}): {msg}", case + 1);
                        }
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let sum = |f: fn(&Tally) -> usize| tallies.iter().map(f).sum::<usize>();
    let (scoped_ok, attr_ok) = (sum(|t| t.scoped_ok), sum(|t| t.attr_ok));
    eprintln!(
        "fuzz: {total} cases in {:.1?}: scoped! {scoped_ok} expanded, {} errors; \
         attributes {attr_ok} expanded, {} errors; {} errors at the call site",
        start.elapsed(),
        sum(|t| t.scoped_err),
        sum(|t| t.attr_err),
        sum(|t| t.at_call_site),
    );
    // The generator must reach successful expansions too, or the property
    // says little.
    if only().is_none() {
        let floor = (total / 60) as usize;
        assert!(scoped_ok > floor, "only {scoped_ok} scoped! successes");
        assert!(attr_ok > floor, "only {attr_ok} attribute successes");
    }
}
