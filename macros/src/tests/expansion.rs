//! Expansion snapshots, pretty-printed, under `macros/tests/snapshots/`.
//! `UPDATE_SNAPSHOTS=1 cargo test -p tch-scope-macros` rewrites them; review
//! the diff by eye before committing.

use std::path::PathBuf;

use proc_macro2::{Spacing, TokenStream, TokenTree};
use quote::quote;

use super::lex;
use crate::attr::{Attr, attr_tokens};
use crate::bang::scoped_tokens;
use crate::expand::Flavor;

fn snapshot(name: &str, input: &str, expansion: TokenStream) {
    let file: syn::File = syn::parse2(expansion.clone())
        .unwrap_or_else(|e| panic!("{name}: expansion doesn't parse: {e}\n{expansion}"));
    let actual = format!(
        "// Input:\n{}// Expansion:\n\n{}",
        input
            .lines()
            .map(|l| format!("//     {l}\n"))
            .collect::<String>(),
        prettyplease::unparse(&file)
    );
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.rs"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_SNAPSHOTS=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        expected, actual,
        "{name}: expansion changed; rerun with UPDATE_SNAPSHOTS=1 and review the diff"
    );
}

/// `scoped!`/`try_scoped!` expand to an expression: shown in a fn body.
fn macro_snapshot(name: &str, flavor: Flavor, input: &str) {
    let bang = match flavor {
        Flavor::Scoped => "scoped!",
        Flavor::TryScoped => "try_scoped!",
    };
    let out = scoped_tokens(flavor, lex(&format!("::tch_scope ; {input}")))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_absolute(&out);
    snapshot(
        name,
        &format!("{bang}({input})"),
        quote!(fn expansion() { #out }),
    );
}

/// `wrap` puts the expanded fn into context (`impl Model { .. }`) when it
/// is a method.
fn attr_snapshot(name: &str, attr: Attr, args: &str, item: &str, wrap: Option<&str>) {
    let out = attr_tokens(attr, lex(args), lex(item)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_absolute(&out);
    let shown = match attr {
        Attr::Word(word) if args.is_empty() => format!("#[{word}]\n{item}"),
        Attr::Word(word) => format!("#[{word}({args})]\n{item}"),
        Attr::List => format!("#[scope({args})]\n{item}"),
    };
    let out = match wrap {
        Some(ty) => {
            let ty = lex(ty);
            quote!(impl #ty { #out })
        }
        None => out,
    };
    snapshot(name, &shown, out);
}

/// No generated path may be relative: the runtime is reached through
/// `::tch_scope` and std through `::core`, so a caller's `mod core` or
/// `type Result` can't capture them. Every `a::b` path in these outputs
/// either starts with `::` or is the user's own.
fn assert_absolute(tokens: &TokenStream) {
    // `clippy::` names lints in `#[allow]`, not a path.
    const USER: &[&str] = &["anyhow", "io", "Timer", "Kind", "clippy"];
    const KEYWORDS: &[&str] = &[
        "match", "return", "in", "let", "move", "async", "if", "as", "use",
    ];
    // Bare `Ok`, `Err`, `From`.. would resolve through the caller's scope;
    // the inputs' own `Ok(..)` is the only one allowed.
    const STD: &[&str] = &["Err", "Some", "None", "From", "Result", "Option"];
    let level: Vec<TokenTree> = tokens.clone().into_iter().collect();
    let colons = |i: usize| {
        matches!(
            (level.get(i), level.get(i + 1)),
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
        )
    };
    for (i, tt) in level.iter().enumerate() {
        match tt {
            TokenTree::Group(g) => assert_absolute(&g.stream()),
            TokenTree::Ident(ident) => {
                let name = ident.to_string();
                let mid_path = i >= 2 && colons(i - 2);
                if colons(i + 1) && !mid_path && !KEYWORDS.contains(&name.as_str()) {
                    assert!(
                        USER.contains(&name.as_str()),
                        "relative path `{name}::` in {tokens}"
                    );
                }
                assert!(
                    mid_path || !STD.contains(&name.as_str()),
                    "bare `{name}` in {tokens}"
                );
            }
            _ => {}
        }
    }
}

#[test]
fn scoped_words_and_condition() {
    macro_snapshot(
        "scoped_words",
        Flavor::Scoped,
        "device(0) if use_gpu, no_grad, inference_mode, with(Timer::new(\"fwd\")) => { model.forward(&x) }",
    );
}

#[test]
fn scoped_devices_and_expression_body() {
    macro_snapshot(
        "scoped_devices",
        Flavor::Scoped,
        "device(\"cuda:1\"), grad(training) => model.forward(&x)",
    );
}

#[test]
fn try_scoped_nested_matches() {
    macro_snapshot(
        "try_scoped",
        Flavor::TryScoped,
        "device(cpu), no_grad => { let y = step(&x)?; y.sum(Kind::Float) }",
    );
}

#[test]
fn scoped_awaiting_body() {
    macro_snapshot(
        "scoped_await",
        Flavor::Scoped,
        "device(0), no_grad if !training => { let x = load().await; model.forward(&x) }",
    );
}

#[test]
fn try_scoped_awaiting_body() {
    macro_snapshot(
        "try_scoped_await",
        Flavor::TryScoped,
        "inference_mode => fetch(url).await",
    );
}

/// A body calling a macro that may await unseen: a debug watch before the
/// flat guards, naming the per-thread words only.
#[test]
fn scoped_body_with_a_macro_call() {
    macro_snapshot(
        "scoped_hidden_await",
        Flavor::Scoped,
        "no_grad, timed(\"step\"), device(0) => { let x = settle!(load()); model.forward(&x) }",
    );
    macro_snapshot(
        "try_scoped_hidden_await",
        Flavor::TryScoped,
        "inference_mode => fetch!(url)",
    );
}

#[test]
fn scoped_model_modes() {
    macro_snapshot(
        "scoped_model_modes",
        Flavor::Scoped,
        "no_grad, eval(model), train(self.encoder) if fine_tune => model.forward_ts(&[&x])",
    );
}

#[test]
fn eval_attribute() {
    attr_snapshot(
        "attr_eval_fn",
        Attr::Word("eval"),
        "model",
        "fn validate(model: &mut Net, x: &Tensor) -> f64 {\n    model.forward(x).double_value(&[])\n}",
        None,
    );
}

#[test]
fn sync_fn() {
    attr_snapshot(
        "attr_sync_fn",
        Attr::Word("no_grad"),
        "",
        "/// Predicts.\n#[inline]\n#[track_caller]\npub(crate) fn predict(model: &Model, x: &Tensor) -> Tensor {\n    model.forward(x)\n}",
        None,
    );
}

#[test]
fn result_fn() {
    attr_snapshot(
        "attr_result_fn",
        Attr::List,
        "device(0), no_grad",
        "fn evaluate(model: &Model) -> anyhow::Result<f64> {\n    let loss = model.loss()?;\n    Ok(loss.double_value(&[]))\n}",
        None,
    );
}

#[test]
fn async_fn() {
    attr_snapshot(
        "attr_async_fn",
        Attr::Word("inference_mode"),
        "",
        "pub async fn serve(&self, request: Request) -> Response {\n    let batch = self.queue.next().await;\n    self.model.forward(&batch).into()\n}",
        Some("Server"),
    );
}

/// Per-thread words around every poll, the timer and the model's mode once
/// for the whole future.
#[test]
fn async_fn_with_span_words() {
    attr_snapshot(
        "attr_async_fn_span_words",
        Attr::List,
        "no_grad, timed, eval(model)",
        "async fn validate(model: &Net, batches: Batches) -> f64 {\n    let batch = batches.next().await;\n    model.loss(&batch)\n}",
        None,
    );
}

/// `timed` on a `Result` function: the body runs as a closure whose value
/// marks an `Err` as a failed run.
#[test]
fn timed_result_fn() {
    attr_snapshot(
        "attr_timed_result_fn",
        Attr::List,
        "no_grad, timed",
        "fn step(batch: &Batch) -> io::Result<f64> {\n    let loss = batch.loss()?;\n    Ok(loss)\n}",
        None,
    );
}

#[test]
fn async_result_fn() {
    attr_snapshot(
        "attr_async_result_fn",
        Attr::Word("device"),
        "\"cuda:0\"",
        "async fn load(path: &Path) -> io::Result<Tensor> {\n    let bytes = read(path).await?;\n    Ok(decode(&bytes))\n}",
        None,
    );
}

#[test]
fn method_with_self() {
    attr_snapshot(
        "attr_method",
        Attr::Word("grad"),
        "self.training",
        "pub fn forward(&mut self, x: &Tensor) -> Tensor {\n    self.steps += 1;\n    self.net.forward(x)\n}",
        Some("Model"),
    );
}

#[test]
fn generic_fn_with_where_clause() {
    attr_snapshot(
        "attr_generic_fn",
        Attr::Word("with"),
        "Timer::new(\"step\")",
        "unsafe fn step<'a, M, O: Optimizer>(model: &'a mut M, opt: &mut O) -> impl Fn() + 'a\nwhere\n    M: Module + 'a,\n{\n    opt.step();\n    move || model.reset()\n}",
        None,
    );
}

#[test]
fn async_impl_trait_return_is_not_annotated() {
    let out = attr_tokens(
        Attr::Word("no_grad"),
        TokenStream::new(),
        lex("async fn f() -> impl Send { 1 }"),
    )
    .unwrap()
    .to_string();
    assert!(!out.contains("__tch_scope_ret"), "{out}");
    assert!(out.contains("async move { { 1 } }"), "{out}");
}

#[test]
fn unit_async_fn_hints_unit() {
    let out = attr_tokens(
        Attr::Word("no_grad"),
        TokenStream::new(),
        lex("async fn f() { g().await }"),
    )
    .unwrap()
    .to_string();
    assert!(
        out.contains("let __tch_scope_ret : () = loop { } ;"),
        "{out}"
    );
}

#[test]
fn runtime_path_is_reemitted_verbatim() {
    let out = scoped_tokens(Flavor::Scoped, lex("my :: rt ; no_grad => 1"))
        .unwrap()
        .to_string();
    assert!(out.contains("my :: rt :: __private :: no_grad ()"), "{out}");
}

#[test]
fn awaits_inside_closures_async_blocks_and_items_dont_count() {
    for body in [
        "{ let f = || async { x.await }; f }",
        "{ spawn(async move { x.await }) }",
        "{ fn g() -> u8 { 0 } async fn h() { x.await } g() }",
    ] {
        let out = scoped_tokens(Flavor::Scoped, lex(&format!("::rt ; no_grad => {body}")))
            .unwrap()
            .to_string();
        assert!(out.contains("enter_or_panic"), "{body} -> {out}");
    }
}

#[test]
fn awaits_written_in_macro_input_count() {
    let out = scoped_tokens(Flavor::Scoped, lex("::rt ; no_grad => { dbg!(x.await) }"))
        .unwrap()
        .to_string();
    assert!(out.contains("Spanned :: new"), "{out}");
    let out = scoped_tokens(
        Flavor::Scoped,
        lex("::rt ; no_grad => { vec![async { x.await }] }"),
    )
    .unwrap()
    .to_string();
    assert!(out.contains("enter_or_panic"), "{out}");
}

#[test]
fn jumps_that_stay_inside_an_awaiting_body_are_fine() {
    for body in [
        "{ loop { x.await; break; } }",
        "{ for i in v { if i { continue; } x.await } }",
        "{ 'l: loop { loop { x.await; break 'l; } } }",
        "{ 'b: { if c { break 'b 1; } x.await } }",
        "{ let f = || { return 1; }; x.await }",
        "{ let f = async { return 1; }; x.await }",
        "{ fn g() -> u8 { return 0; } x.await }",
        "{ let f = |s: &str| -> Result<u8, E> { Ok(s.parse()?) }; x.await }",
        "{ let y = async { f().await? }.await; y }",
        "{ let y = async move { Ok::<_, E>(f()?) }.await; y }",
        "{ fn g() -> Option<u8> { h()? } x.await }",
    ] {
        let out = scoped_tokens(Flavor::Scoped, lex(&format!("::rt ; no_grad => {body}")));
        assert!(
            out.is_ok(),
            "{body}: {:?}",
            out.err().map(|e| e.to_string())
        );
    }
}

#[test]
fn conditional_scope_without_eager_brace() {
    let out = scoped_tokens(Flavor::Scoped, lex("::rt ; no_grad if a == b => { x }"))
        .unwrap()
        .to_string();
    assert!(
        out.contains("when (a == b , :: rt :: __private :: no_grad ())"),
        "{out}"
    );
}

#[test]
fn device_forms() {
    for (arg, ctor) in [
        ("cpu", "device_cpu ()"),
        ("mps", "device_mps ()"),
        ("\"cpu\"", "device_cpu ()"),
        ("\"mps\"", "device_mps ()"),
        ("\"cuda:12\"", "device_cuda (12usize)"),
        ("(1)", "device_cuda (1usize)"),
        ("dev", "device (dev)"),
        ("Device::Cuda(i)", "device (Device :: Cuda (i))"),
        ("-x", "device (- x)"),
    ] {
        let out = scoped_tokens(Flavor::Scoped, lex(&format!("::rt ; device({arg}) => x")))
            .unwrap()
            .to_string();
        assert!(
            out.contains(&format!(":: rt :: __private :: {ctor}")),
            "{arg} -> {out}"
        );
    }
}

#[test]
fn trailing_comma_and_typed_device_index() {
    let out = scoped_tokens(Flavor::Scoped, lex("::rt ; device(3u32), no_grad, => x"))
        .unwrap()
        .to_string();
    assert!(out.contains("device_cuda (3usize)"), "{out}");
}

/// With `deadline` the body is a closure under `catching`, so that the
/// deadline's error can end it; its guard is the one `catching` reads.
#[test]
fn deadline_block_and_fn() {
    macro_snapshot(
        "try_scoped_deadline",
        Flavor::TryScoped,
        "no_grad, deadline(budget) => model.forward(&x)",
    );
    attr_snapshot(
        "attr_deadline_result_fn",
        Attr::List,
        "deadline(budget), timed",
        "fn serve(x: &Tensor) -> anyhow::Result<Tensor> {\n    Ok(x.f_mm(x)?)\n}",
        None,
    );
}
