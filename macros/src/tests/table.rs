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

/// The README's word table: a row per word, whose "can fail" column
/// matches the row.
#[test]
fn every_word_has_its_readme_and_crate_doc_rows() {
    for w in WORDS {
        let row = README
            .lines()
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
