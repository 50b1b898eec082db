//! Turns parsed items into checked scopes, reporting every mistake (each on
//! its token, each saying what to write instead) rather than the first.
//! What is checked per word is the word's own row (`words/`); what is
//! checked here is the list: unknown words, features, repeats, conflicts.

use proc_macro2::{Span, TokenStream};
use syn::Expr;
use syn::ext::IdentExt;

use crate::ast::{Arg, Item};
use crate::errors::Errors;
use crate::word::{Conflict, Cx, Word};
use crate::words;

/// A checked list item.
pub(crate) struct Scope {
    pub(crate) word: &'static Word,
    /// The word's name as written: expansions carry it so that rustc's
    /// errors about the scope point there.
    pub(crate) span: Span,
    /// The scope value: a call into the runtime.
    pub(crate) value: TokenStream,
    pub(crate) cond: Option<Expr>,
}

pub(crate) fn validate(items: Vec<Item>, cx: &Cx, errors: &mut Errors) -> Vec<Scope> {
    let mut seen: Vec<Seen> = Vec::new();
    let mut scopes = Vec::new();
    for item in items {
        let name = item.name.unraw().to_string();
        let Some(word) = words::lookup(&name) else {
            errors.push(unknown(&item));
            continue;
        };
        if let Some((feature, false)) = word.feature {
            errors.push(syn::Error::new(
                item.name.span(),
                format!(
                    "`{name}` needs tch-scope's `{feature}` feature: \
                     `tch-scope = {{ version = \"…\", features = [\"{feature}\"] }}` in Cargo.toml"
                ),
            ));
            continue;
        }
        let seen_here = Seen {
            word,
            target: target(word, &item),
        };
        if let Some(e) = conflict(&seen_here, &seen, &item) {
            errors.push(e);
            continue;
        }
        seen.push(seen_here);
        match (word.check)(word, &item, cx) {
            Ok(value) => scopes.push(Scope {
                word,
                span: item.name.span(),
                value,
                cond: item.cond,
            }),
            Err(e) => errors.push(e),
        }
    }
    scopes
}

fn unknown(item: &Item) -> syn::Error {
    let name = item.name.to_string();
    // A likely typo gets the one fix; otherwise the whole (short) list.
    let message = match words::suggest(&name) {
        Some(known) => format!("unknown scope word `{name}`; did you mean `{known}`?"),
        None => format!(
            "unknown scope word `{name}`; known words: {}",
            words::known_list()
        ),
    };
    syn::Error::new(item.name.span(), message)
}

/// A word already in the list, and what it acts on.
struct Seen {
    word: &'static Word,
    /// For per-model words, the model's tokens: `eval(a), train(b)` act on
    /// different models and don't conflict. `None` for every other word.
    target: Option<String>,
}

fn target(word: &Word, item: &Item) -> Option<String> {
    let Conflict::PerModel(_) = word.conflict else {
        return None;
    };
    match item.args.as_ref()?.list.first()? {
        Arg::Expr(e) => Some(quote::ToTokens::to_token_stream(e).to_string()),
        Arg::Named(..) => None,
    }
}

fn group(word: &Word) -> Option<&'static str> {
    match word.conflict {
        Conflict::None => None,
        Conflict::Group(g) | Conflict::PerModel(g) => Some(g),
    }
}

fn conflict(here: &Seen, seen: &[Seen], item: &Item) -> Option<syn::Error> {
    let word = here.word;
    let same = |s: &&Seen| s.target == here.target;
    let message = if !word.repeat && seen.iter().filter(same).any(|s| s.word.name == word.name) {
        format!("`{}` appears twice in this list; keep one", word.name)
    } else {
        let earlier = seen.iter().filter(same).find(|s| {
            group(word).is_some() && group(s.word) == group(word) && s.word.name != word.name
        })?;
        match &here.target {
            Some(model) => format!(
                "`{}({model})` contradicts `{}({model})` earlier in this list; keep one",
                word.name, earlier.word.name
            ),
            None => format!(
                "`{}` contradicts `{}` earlier in this list; keep one",
                word.name, earlier.word.name
            ),
        }
    };
    Some(syn::Error::new(item.name.span(), message))
}
