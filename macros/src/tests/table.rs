//! The word table is the one source of the word list: every row has its
//! attribute entry point, its rows in the README and the runtime's crate
//! docs, and examples that check and expand.

use super::lex;
use crate::attr::{Attr, attr_tokens};
use crate::bang::scoped_tokens;
use crate::expand::Flavor;
use crate::words::WORDS;

const LIB: &str = include_str!("../lib.rs");
const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
const RUNTIME_LIB: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../runtime/src/lib.rs"
));
/// Each word's constructor, `__private::<word>(..)`.
const RUNTIME_WORDS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../runtime/src/private/words.rs"
));
/// The rest of `__private`: entering, leaving, call-site names.
const RUNTIME_PRIVATE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../runtime/src/private/mod.rs"
));

#[test]
fn every_word_has_an_attribute_entry_point() {
    for w in WORDS {
        let entry = format!("pub fn {}(args: TokenStream, item: TokenStream)", w.name);
        let word = format!("Attr::Word(\"{}\")", w.name);
        assert!(
            LIB.contains(&entry) && LIB.contains(&word),
            "macros/src/lib.rs has no attribute `{}`",
            w.name
        );
        let reexport = [" {},", " {}}", "{{},", "::{};"]
            .iter()
            .any(|form| RUNTIME_LIB.contains(&form.replace("{}", w.name)));
        assert!(
            reexport,
            "runtime/src/lib.rs does not re-export `{}`",
            w.name
        );
    }
}

/// The heading the README's word table sits under.
const WORD_TABLE_HEADING: &str = "## Scope words";

/// The README's word table: the first table after [`WORD_TABLE_HEADING`]
/// and before the next heading, header and separator included. Other tables
/// (features, versions) may have rows that start like a word's.
fn word_table(readme: &str) -> Vec<&str> {
    let mut lines = readme.lines();
    assert!(
        lines.any(|l| l.trim_end() == WORD_TABLE_HEADING),
        "README.md has no `{WORD_TABLE_HEADING}` heading"
    );
    let table: Vec<&str> = lines
        .take_while(|l| !l.starts_with('#'))
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(
        table.len() > 2,
        "README.md has no table under `{WORD_TABLE_HEADING}`"
    );
    table
}

#[test]
fn the_word_table_is_found_by_its_heading() {
    let readme = "\
| feature | what |
|---|---|
| `distributed` | process groups |

## Scope words

Some prose.

| tch-scope | entry | PyTorch | plain tch |
|---|---|---|---|
| `distributed(..)` | can fail | `init_process_group` | — |

| `no_grad` | a later table |
";
    let table = word_table(readme);
    assert_eq!(table.len(), 3, "{table:?}");
    assert!(table[2].starts_with("| `distributed(..)` | can fail"));
}

/// The README's word table: a row per word, whose "entry" column says
/// whether it can fail as the row does.
#[test]
fn every_word_has_its_readme_and_crate_doc_rows() {
    let table = word_table(README);
    let columns: Vec<&str> = table[0].split('|').map(str::trim).collect();
    assert_eq!(
        columns.get(2),
        Some(&"entry"),
        "the README word table's second column: {}",
        table[0]
    );
    for w in WORDS {
        let row = table
            .iter()
            .find(|l| l.starts_with(&format!("| `{}", w.name)))
            .unwrap_or_else(|| panic!("README.md's word table has no row for `{}`", w.name));
        let cell = row.split('|').nth(2).unwrap_or("").trim();
        let want = if w.fails { "can fail" } else { "never fails" };
        assert_eq!(cell, want, "README row of `{}`: {row}", w.name);
        assert!(
            RUNTIME_LIB.contains(&format!("//! | `{}", w.name)),
            "the word table in runtime/src/lib.rs has no row for `{}`",
            w.name
        );
    }
}

#[test]
fn every_example_checks_and_expands() {
    for w in WORDS {
        assert!(!w.examples.is_empty(), "`{}` has no examples", w.name);
        if let Some((feature, false)) = w.feature {
            let input = lex(&format!("::rt ; {} => ()", w.examples[0]));
            let e = scoped_tokens(Flavor::Scoped, input).expect_err("feature off");
            assert!(
                e.to_string().contains(&format!("`{feature}` feature")),
                "{e}"
            );
            continue;
        }
        for example in w.examples {
            let input = lex(&format!("::rt ; {example} => ()"));
            for flavor in [Flavor::Scoped, Flavor::TryScoped] {
                if let Err(e) = scoped_tokens(flavor, input.clone()) {
                    panic!("`{example}` of `{}` does not expand: {e}", w.name);
                }
            }
            let list = example.split(" if ").next().unwrap_or(example);
            if let Err(e) = attr_tokens(Attr::List, lex(list), lex("fn f() {}")) {
                panic!("`#[scope({list})]` does not expand: {e}");
            }
        }
    }
}

/// The `X` of every `__private::X` in `tokens`.
fn private_names(tokens: proc_macro2::TokenStream, out: &mut Vec<String>) {
    let tokens: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
    for (i, tt) in tokens.iter().enumerate() {
        match tt {
            proc_macro2::TokenTree::Group(g) => private_names(g.stream(), out),
            proc_macro2::TokenTree::Ident(id) if id == "__private" => {
                if let Some(proc_macro2::TokenTree::Ident(name)) = tokens.get(i + 3) {
                    out.push(name.to_string());
                }
            }
            _ => {}
        }
    }
}

/// Whether a Rust source declares `name` as a public item or re-export.
fn declares(src: &str, name: &str) -> bool {
    [
        format!("pub fn {name}("),
        format!("pub fn {name}<"),
        format!("pub struct {name}"),
        format!("pub trait {name}"),
        format!("pub use crate::{name};"),
        format!(" as {name}}}"),
        format!(" as {name},"),
        format!("::{name};"),
        format!("{{{name},"),
        format!(", {name}}}"),
        format!(" {name},"),
    ]
    .iter()
    .any(|form| {
        src.lines()
            .any(|l| l.trim_start().starts_with("pub ") && l.contains(form.as_str()))
    })
}

/// Adding a word means a row here and its constructor in the runtime's
/// `private/words.rs`: what every example of every row builds is there
/// (the `__private` plumbing beside it in `private/mod.rs`).
#[test]
fn every_row_has_its_constructor_in_the_runtime() {
    use syn::parse::Parser;
    for w in WORDS {
        if let Some((_, false)) = w.feature {
            continue;
        }
        for example in w.examples {
            let mut errors = crate::errors::Errors::default();
            let items = (|input: syn::parse::ParseStream| {
                Ok(crate::ast::parse_list(
                    input,
                    crate::ast::End::Eof,
                    &mut errors,
                ))
            })
            .parse2(lex(example))
            .expect("parses");
            let scopes = crate::valid::validate(items, &mut errors);
            assert!(errors.is_empty(), "`{example}` does not check");
            let cx = crate::expand::cx::Cx::new(quote::quote!(::rt), None);
            let mut names = Vec::new();
            for s in scopes {
                private_names((s.word().build)(&s.checked, &cx), &mut names);
            }
            assert!(
                names.iter().any(|n| declares(RUNTIME_WORDS, n)),
                "`{example}` of `{}` builds none of its constructors {names:?} \
                 from runtime/src/private/words.rs",
                w.name
            );
            for n in &names {
                assert!(
                    declares(RUNTIME_WORDS, n) || declares(RUNTIME_PRIVATE, n),
                    "`{example}` of `{}` calls `__private::{n}`, which \
                     runtime/src/private/words.rs does not declare",
                    w.name
                );
            }
        }
    }
}

#[test]
fn the_known_words_message_lists_every_word() {
    let known = crate::words::known_list();
    for w in WORDS {
        assert!(known.contains(&format!("`{}", w.name)), "{known}");
    }
}

#[test]
fn the_crate_doc_lists_every_word() {
    let doc: String = LIB
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    for w in WORDS {
        assert!(
            doc.contains(&format!("`{}`", w.name)),
            "macros/src/lib.rs docs miss `{}`",
            w.name
        );
    }
}

/// The process-wide words, as the prose lists them: each list starts with
/// `` `seed`, `fork_rng` `` and ends with `` and `last` ``.
fn prose_lists(doc: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = doc
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let mut lists = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with("`seed`, `fork_rng`") {
            continue;
        }
        let text = lines[i..(i + 3).min(lines.len())].join(" ");
        let and = text.find("` and `").expect("a list ends with `and`");
        let end = and + 7 + text[and + 7..].find('`').expect("its last word");
        let words = text[..end]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        lists.push(words);
    }
    lists
}

#[test]
fn every_list_of_process_wide_words_is_the_tables() {
    let mut want: Vec<&str> = WORDS
        .iter()
        .filter(|w| w.process_wide)
        .map(|w| w.name)
        .collect();
    want.sort_unstable();
    let words_md = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/words.md"));
    for (doc, name, count) in [
        (README, "README.md", 1),
        (RUNTIME_LIB, "runtime/src/lib.rs", 2),
        (words_md, "docs/words.md", 1),
    ] {
        let lists = prose_lists(doc);
        assert_eq!(lists.len(), count, "lists of process-wide words in {name}");
        for list in lists {
            let mut got: Vec<&str> = list.iter().map(String::as_str).collect();
            got.sort_unstable();
            assert_eq!(got, want, "the process-wide words listed in {name}");
        }
    }
}
