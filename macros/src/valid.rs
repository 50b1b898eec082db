//! Turns parsed items into checked scopes, reporting every mistake (each on
//! its token, each saying what to write instead) rather than the first.
//! What is checked per word is the word's own row (`words/`: its arguments
//! read by `forms::read`, then its `check`); what is checked here is the
//! list: unknown words, features, repeats, conflicts. Nothing here builds
//! tokens: a scope's value is built at expansion, by its row's `build`.

use proc_macro2::Span;
use syn::Expr;
use syn::ext::IdentExt;

use crate::ast::Item;
use crate::errors::Errors;
use crate::word::{Checked, Conflict, Word};
use crate::words::{self, forms};

/// A checked list item: what expansion builds its scope from.
pub(crate) struct Scope {
    /// The word and its arguments, read and checked.
    pub(crate) checked: Checked,
    pub(crate) cond: Option<Expr>,
}

impl Scope {
    pub(crate) fn word(&self) -> &'static Word {
        self.checked.word
    }

    /// The word's name as written: expansions carry it so that rustc's
    /// errors about the scope point there.
    pub(crate) fn span(&self) -> Span {
        self.checked.span
    }
}

/// Checks every item, pushing every mistake to `errors`: a word's own
/// (its arguments, read by `forms::read`, then its row's `check`) and the
/// list's. An item with a mistake yields no scope.
pub(crate) fn validate(items: Vec<Item>, errors: &mut Errors) -> Vec<Scope> {
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
        // The word's own mistakes, then the list's (at its name, reported
        // first since the name comes first).
        let mut own = Errors::default();
        let checked = forms::read(word, &item, &mut own);
        (word.check)(&checked, &mut own);
        let seen_here = Seen {
            word,
            target: target(&checked),
        };
        let conflict = conflict(&seen_here, &seen, &item);
        let ok = own.is_empty() && conflict.is_none();
        match conflict {
            Some(e) => errors.push(e),
            None => seen.push(seen_here),
        }
        if let Err(e) = own.finish() {
            errors.push(e);
        }
        if ok {
            scopes.push(Scope {
                checked,
                cond: item.cond,
            });
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

/// The model of a per-model word (its first param, written by position or
/// by name), as tokens.
fn target(checked: &Checked) -> Option<String> {
    let Conflict::PerModel(_) = checked.word.conflict else {
        return None;
    };
    let model = checked.written.first()?.as_ref()?;
    Some(quote::ToTokens::to_token_stream(&model.value).to_string())
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
