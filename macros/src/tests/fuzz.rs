//! Property test: thousands of deterministic pseudo-random token streams
//! through parse + expand. Nothing may panic, and each output is either
//! valid syntax or contains `compile_error!`.

use proc_macro2::{TokenStream, TokenTree};

use crate::attr::{Attr, attribute};
use crate::bang::{Flavor, scoped_macro};

const CASES: usize = 3000;

const VOCABULARY: &[&str] = &[
    "no_grad",
    "enable_grad",
    "grad",
    "inference_mode",
    "device",
    "with",
    "scoped",
    "cpu",
    "cuda",
    "mps",
    "no_grd",
    "x",
    "self",
    "if",
    "else",
    "return",
    "break",
    "continue",
    "loop",
    "async",
    "move",
    "await",
    ".",
    ".await",
    "?",
    ",",
    ",",
    ",",
    "=>",
    "=>",
    "=",
    "==",
    "-",
    "!",
    ":",
    "::",
    ";",
    "|",
    "&",
    "'a",
    "'a:",
    "0",
    "1",
    "-1",
    "1.5",
    "99999999999999999999999",
    "\"cpu\"",
    "\"cuda:0\"",
    "\"gpu\"",
    "\"cuda\"",
    "true",
    "'c'",
    "fn",
    "const",
    "pub",
    "struct",
    "impl",
    "#",
    "match",
    "let",
    "mut",
    "->",
    "Result",
    "<",
    ">",
    "crate",
    "unsafe",
];

/// Valid items and bodies, mixed in so later stages are reached too.
const ITEMS: &[&str] = &[
    "no_grad",
    "enable_grad",
    "grad(t)",
    "inference_mode",
    "device(0)",
    "device(cpu)",
    "device(\"cuda:1\")",
    "device(d)",
    "with(s)",
    "no_grad if c",
];
const BODIES: &[&str] = &[
    "{ x }",
    "x + 1",
    "{ f()?; x.await }",
    "{ loop { x.await; break; } }",
    "{ return; }",
    "{ 'a: loop { break 'a; } }",
    "async { x.await }",
    "{ let y = || { return 1; }; y }",
];

/// xorshift64*: fixed seed, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random source text with balanced delimiters, so it always lexes.
fn random_source(rng: &mut Rng, depth: usize) -> String {
    let mut out = String::new();
    for _ in 0..rng.below(10) {
        match rng.below(8) {
            0 if depth < 3 => {
                let (open, close) = [("(", ")"), ("{", "}"), ("[", "]")][rng.below(3)];
                out += open;
                out += &random_source(rng, depth + 1);
                out += close;
            }
            _ => out += VOCABULARY[rng.below(VOCABULARY.len())],
        }
        out += " ";
    }
    out
}

fn lex(src: &str) -> TokenStream {
    src.parse()
        .unwrap_or_else(|e| panic!("generated source doesn't lex: {e:?}: {src}"))
}

fn has_compile_error(tokens: &TokenStream) -> bool {
    tokens.clone().into_iter().any(|tt| match tt {
        TokenTree::Ident(i) => i == "compile_error",
        TokenTree::Group(g) => has_compile_error(&g.stream()),
        _ => false,
    })
}

fn check(what: &str, src: &str, out: &TokenStream, valid: impl FnOnce(TokenStream) -> bool) {
    assert!(!out.is_empty(), "{what}: empty output for {src}");
    assert!(
        has_compile_error(out) || valid(out.clone()),
        "{what}: invalid output without compile_error for {src}:\n{out}"
    );
}

#[test]
fn random_input_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut scoped_ok, mut attr_ok) = (0, 0);
    for _ in 0..CASES {
        let list = match rng.below(2) {
            0 => random_source(&mut rng, 0),
            _ => (0..=rng.below(3))
                .map(|_| ITEMS[rng.below(ITEMS.len())])
                .collect::<Vec<_>>()
                .join(", "),
        };
        let body = match rng.below(2) {
            0 => random_source(&mut rng, 0),
            _ => BODIES[rng.below(BODIES.len())].to_owned(),
        };
        let src = match rng.below(4) {
            0 => format!("{list} => {body}"),
            1 => format!("::tch_scope ; {list}"),
            _ => format!("::tch_scope ; {list} => {{ {body} }}"),
        };
        for flavor in [Flavor::Scoped, Flavor::TryScoped] {
            let out = scoped_macro(flavor, lex(&src));
            check("scoped", &src, &out, |t| {
                syn::parse2::<syn::Expr>(t).is_ok()
            });
            scoped_ok += usize::from(!has_compile_error(&out));
        }

        let item = match rng.below(3) {
            0 => random_source(&mut rng, 0),
            1 => format!("fn f() {{ {body} }}"),
            _ => format!(
                "{} fn f(&self) -> Result<u8> {{ {body} }}",
                ["", "async", "pub"][rng.below(3)]
            ),
        };
        // rustc hands attributes only items that parse; for those, the
        // output must parse too.
        let item_parses = syn::parse2::<syn::ImplItem>(lex(&item)).is_ok();
        for attr in [Attr::List, Attr::Word("device"), Attr::Word("no_grad")] {
            let out = attribute(attr, lex(&list), lex(&item));
            check("attribute", &format!("#[..({list})] {item}"), &out, |t| {
                !item_parses || syn::parse2::<syn::ImplItem>(t).is_ok()
            });
            attr_ok += usize::from(!has_compile_error(&out));
        }
    }
    // The generator must reach successful expansions too, or the property
    // says little.
    assert!(scoped_ok > 50, "only {scoped_ok} scoped! successes");
    assert!(attr_ok > 50, "only {attr_ok} attribute successes");
}
