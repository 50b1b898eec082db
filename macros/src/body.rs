//! What a `scoped!` body does, as far as its tokens tell: whether it
//! `.await`s, and whether it jumps out of itself.
//!
//! Closures, async blocks and nested items are skipped: an `.await` or a
//! `return` there belongs to them, not to the body.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Expr, ExprAsync, ExprBreak, ExprClosure, ExprContinue, Item, Label, Lifetime, Macro};

/// Whether the body suspends, so its scopes must be re-entered on every poll.
pub(crate) fn awaits(body: &Expr) -> bool {
    let mut finder = AwaitFinder(false);
    finder.visit_expr(body);
    finder.0
}

struct AwaitFinder(bool);

impl<'ast> Visit<'ast> for AwaitFinder {
    fn visit_expr_await(&mut self, _: &'ast syn::ExprAwait) {
        self.0 = true;
    }
    fn visit_expr_closure(&mut self, _: &'ast ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'ast ExprAsync) {}
    fn visit_item(&mut self, _: &'ast Item) {}
    fn visit_macro(&mut self, mac: &'ast Macro) {
        // Macro input is opaque; `.await` written in it almost always ends up
        // in the body. `join!`, `select!` and their kin (tokio's and
        // futures', by the last path segment) await without writing it.
        self.0 |= awaiting_macro(mac) || tokens_await(mac.tokens.clone());
    }
}

/// Whether the body calls a macro that might `.await` unseen: any macro
/// but the standard library's and logging's, which never do (unless a
/// macro is called inside them). Such a body's flat guards get a debug
/// watch in the runtime (`watch_hidden_await`).
pub(crate) fn may_hide_await(body: &Expr) -> bool {
    let mut finder = HiddenFinder(false);
    finder.visit_expr(body);
    finder.0
}

struct HiddenFinder(bool);

impl<'ast> Visit<'ast> for HiddenFinder {
    fn visit_macro(&mut self, mac: &'ast Macro) {
        let known = mac
            .path
            .segments
            .last()
            .is_some_and(|s| SYNC_MACROS.iter().any(|m| s.ident == m));
        self.0 |= !known || calls_a_macro(mac.tokens.clone());
    }
    fn visit_expr_closure(&mut self, _: &'ast ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'ast ExprAsync) {}
    fn visit_item(&mut self, _: &'ast Item) {}
}

/// Macros that never await: std's and the logging facades'.
const SYNC_MACROS: &[&str] = &[
    "assert",
    "assert_eq",
    "assert_ne",
    "concat",
    "dbg",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "eprint",
    "eprintln",
    "format",
    "format_args",
    "matches",
    "panic",
    "print",
    "println",
    "stringify",
    "todo",
    "unimplemented",
    "unreachable",
    "vec",
    "write",
    "writeln",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
    "event",
];

/// `name!(..)` anywhere in `tokens`.
fn calls_a_macro(tokens: TokenStream) -> bool {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    tokens.windows(3).any(|w| {
        matches!(
            w,
            [TokenTree::Ident(_), TokenTree::Punct(p), TokenTree::Group(_)]
                if p.as_char() == '!' && p.spacing() == proc_macro2::Spacing::Alone
        )
    }) || tokens
        .iter()
        .any(|t| matches!(t, TokenTree::Group(g) if calls_a_macro(g.stream())))
}

/// The macros that await without an `.await` in their input.
const AWAITING_MACROS: &[&str] = &["join", "try_join", "select", "select_biased"];

/// `join!(..)`, `tokio::select! {..}`, `futures::select_biased!(..)`, ...
fn awaiting_macro(mac: &Macro) -> bool {
    mac.path
        .segments
        .last()
        .is_some_and(|s| AWAITING_MACROS.iter().any(|m| s.ident == m))
}

/// `.await` anywhere in `tokens`, except inside `async { .. }` blocks.
fn tokens_await(tokens: TokenStream) -> bool {
    let mut prev_dot = false;
    let mut after_async = false;
    for tt in tokens {
        match &tt {
            TokenTree::Ident(i) if prev_dot && i == "await" => return true,
            TokenTree::Group(g) if !after_async && tokens_await(g.stream()) => return true,
            _ => {}
        }
        prev_dot = matches!(&tt, TokenTree::Punct(p) if p.as_char() == '.');
        after_async = match &tt {
            TokenTree::Ident(i) if i == "async" => true,
            TokenTree::Ident(i) if i == "move" => after_async,
            _ => false,
        };
    }
    false
}

/// `return`, `break` and `continue` that would leave an awaiting body (or
/// a `deadline`'s): that body runs as its own future (closure), so they
/// would leave only that.
pub(crate) fn escapes(body: &Expr) -> Vec<(Span, &'static str)> {
    let mut finder = EscapeFinder::default();
    finder.visit_expr(body);
    finder.found
}

/// [`escapes`], and every `?` that acts on an awaiting body: in the flat
/// form `?` acts on the enclosing fn, so in the future form it would
/// silently mean something else (or fail as rustc's "async block that
/// returns ..." where the user wrote no async block). A `deadline`'s
/// closure keeps its documented `?`-acts-on-the-body.
pub(crate) fn awaiting_escapes(body: &Expr) -> Vec<(Span, &'static str)> {
    let mut finder = EscapeFinder {
        questions: true,
        ..EscapeFinder::default()
    };
    finder.visit_expr(body);
    finder.found
}

#[derive(Default)]
struct EscapeFinder {
    /// Loops entered inside the body: an unlabeled `break` targets them.
    loops: usize,
    /// Labels defined inside the body.
    labels: Vec<Lifetime>,
    /// Whether `?` counts (outside `try` blocks, which own their `?`).
    questions: bool,
    /// `try { .. }` blocks entered inside the body.
    try_blocks: usize,
    found: Vec<(Span, &'static str)>,
}

impl EscapeFinder {
    fn jump(&mut self, label: Option<&Lifetime>, span: Span, keyword: &'static str) {
        let inside = match label {
            Some(label) => self.labels.contains(label),
            None => self.loops > 0,
        };
        if !inside {
            self.found.push((span, keyword));
        }
    }

    /// Visits a loop's body with its label in scope.
    fn in_loop(&mut self, label: Option<&Label>, body: &syn::Block) {
        self.labels.extend(label.map(|l| l.name.clone()));
        self.loops += 1;
        self.visit_block(body);
        self.loops -= 1;
        if label.is_some() {
            self.labels.pop();
        }
    }
}

impl<'ast> Visit<'ast> for EscapeFinder {
    fn visit_expr_return(&mut self, e: &'ast syn::ExprReturn) {
        self.found.push((e.return_token.span, "return"));
        visit::visit_expr_return(self, e);
    }
    fn visit_expr_break(&mut self, e: &'ast ExprBreak) {
        self.jump(e.label.as_ref(), e.break_token.span, "break");
        visit::visit_expr_break(self, e);
    }
    fn visit_expr_continue(&mut self, e: &'ast ExprContinue) {
        self.jump(e.label.as_ref(), e.continue_token.span, "continue");
    }
    fn visit_expr_loop(&mut self, e: &'ast syn::ExprLoop) {
        self.in_loop(e.label.as_ref(), &e.body);
    }
    fn visit_expr_while(&mut self, e: &'ast syn::ExprWhile) {
        self.visit_expr(&e.cond);
        self.in_loop(e.label.as_ref(), &e.body);
    }
    fn visit_expr_for_loop(&mut self, e: &'ast syn::ExprForLoop) {
        self.visit_expr(&e.expr);
        self.in_loop(e.label.as_ref(), &e.body);
    }
    fn visit_expr_block(&mut self, e: &'ast syn::ExprBlock) {
        // A labeled block is a `break 'label` target but not a loop.
        self.labels.extend(e.label.as_ref().map(|l| l.name.clone()));
        self.visit_block(&e.block);
        if e.label.is_some() {
            self.labels.pop();
        }
    }
    fn visit_expr_try(&mut self, e: &'ast syn::ExprTry) {
        if self.questions && self.try_blocks == 0 {
            self.found.push((e.question_token.span, "?"));
        }
        visit::visit_expr_try(self, e);
    }
    fn visit_expr_try_block(&mut self, e: &'ast syn::ExprTryBlock) {
        self.try_blocks += 1;
        visit::visit_expr_try_block(self, e);
        self.try_blocks -= 1;
    }
    fn visit_expr_closure(&mut self, _: &'ast ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'ast ExprAsync) {}
    fn visit_item(&mut self, _: &'ast Item) {}
}
