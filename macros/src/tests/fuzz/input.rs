//! The fuzzer's inputs: a vocabulary (every scope word from the table,
//! their argument words, near misses, Rust tokens that trip parsers), the
//! rows' examples as valid items, bodies, a seeded generator, and
//! mutations of token streams.

use proc_macro2::{Group, TokenStream, TokenTree};

/// Rust tokens and words around the scope words (which come from the
/// table, see [`vocabulary`]).
const EXTRA_VOCABULARY: &[&str] = &[
    "scoped",
    "scope",
    // Their argument and option words.
    "cpu",
    "cuda",
    "mps",
    "bf16",
    "f16",
    "bfloat16",
    "half",
    "name",
    "sync",
    "empty_cache",
    "rank",
    "world_size",
    "master",
    "backend",
    "gloo",
    "nccl",
    "from_env",
    "timeout",
    "resume",
    "check_nan",
    "warn_only",
    "vs",
    "model",
    "name =",
    "sync =",
    "device =",
    "rank =",
    "timeout =",
    "check_nan =",
    // Positional params by name.
    "n =",
    "model =",
    "enabled =",
    "backends =",
    // Near misses.
    "no_grd",
    "timd",
    "fork_rgn",
    "Eval",
    // Rust.
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
    "0u8",
    "99999999999999999999999",
    "\"cpu\"",
    "\"cuda:0\"",
    "\"cuda:-1\"",
    "\"gpu\"",
    "\"cuda\"",
    "\"\"",
    "\"t\"",
    "r#\"raw\"#",
    "b\"bytes\"",
    "true",
    "false",
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
    "crate = \"ts\"",
    "unsafe",
    "Duration::from_secs(1)",
    "format!(\"h:{}\", p)",
];

/// Every scope word (from the table), its option and argument words,
/// misspellings, and Rust tokens that trip parsers (jumps, labels, literals
/// of every kind).
pub(super) fn vocabulary() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let words = crate::words::WORDS.iter().map(|w| w.name);
        words.chain(EXTRA_VOCABULARY.iter().copied()).collect()
    })
}

/// Valid items of every word in every syntax (each row's examples), mixed
/// in so validation and expansion are reached too, and mutated into
/// near-valid input.
pub(super) fn items() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let rows = crate::words::WORDS.iter();
        rows.flat_map(|w| w.examples.iter().copied()).collect()
    })
}

pub(super) const BODIES: &[&str] = &[
    "{ x }",
    "x + 1",
    "{ f()?; x.await }",
    "{ loop { x.await; break; } }",
    "{ return; }",
    "{ 'a: loop { break 'a; } }",
    "async { x.await }",
    "{ let y = || { return 1; }; y }",
    "{ model.forward(&x) }",
];

/// xorshift64*: a case's stream depends only on its index.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn for_case(case: u64) -> Self {
        // splitmix64 of the index: neighbouring cases get unrelated streams.
        let mut z = case.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(super) fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// Random source text with balanced delimiters, so it always lexes.
pub(super) fn random_source(rng: &mut Rng, depth: usize) -> String {
    let mut out = String::new();
    for _ in 0..rng.below(10) {
        match rng.below(8) {
            0 if depth < 3 => {
                let (open, close) = [("(", ")"), ("{", "}"), ("[", "]")][rng.below(3)];
                out += open;
                out += &random_source(rng, depth + 1);
                out += close;
            }
            _ => out += rng.pick(vocabulary()),
        }
        out += " ";
    }
    out
}

/// A valid list of one to four items.
pub(super) fn valid_list(rng: &mut Rng) -> String {
    (0..=rng.below(4))
        .map(|_| rng.pick(items()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One to three random edits of `tokens`, at any depth: drop, duplicate,
/// swap with a neighbour, replace by or insert a vocabulary token, or
/// change a group's delimiter.
pub(super) fn mutate(rng: &mut Rng, tokens: TokenStream) -> TokenStream {
    let mut tts: Vec<TokenTree> = tokens.into_iter().collect();
    for _ in 0..=rng.below(3) {
        if tts.is_empty() {
            tts.extend(lex(rng.pick(vocabulary())));
            continue;
        }
        let i = rng.below(tts.len());
        match rng.below(7) {
            0 => drop(tts.remove(i)),
            1 => tts.insert(i, tts[i].clone()),
            2 if i + 1 < tts.len() => tts.swap(i, i + 1),
            3 => {
                let new: Vec<_> = lex(rng.pick(vocabulary())).into_iter().collect();
                tts.splice(i..=i, new);
            }
            4 => {
                let new: Vec<_> = lex(rng.pick(vocabulary())).into_iter().collect();
                tts.splice(i..i, new);
            }
            _ => {
                if let TokenTree::Group(g) = &tts[i] {
                    let delimiter = match rng.below(3) {
                        0 => g.delimiter(),
                        1 => proc_macro2::Delimiter::Bracket,
                        _ => proc_macro2::Delimiter::Brace,
                    };
                    let mut new = Group::new(delimiter, mutate(rng, g.stream()));
                    new.set_span(g.span());
                    tts[i] = TokenTree::Group(new);
                }
            }
        }
    }
    tts.into_iter().collect()
}

pub(super) fn lex(src: &str) -> TokenStream {
    src.parse()
        .unwrap_or_else(|e| panic!("generated source doesn't lex: {e:?}: {src}"))
}
