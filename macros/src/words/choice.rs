//! The arguments that are words from a fixed set (`Kind::Choice`,
//! `Kind::List`): `autocast`'s `cpu`/`cuda`, `sdpa`'s backends,
//! `distributed`'s `backend`. Each is told in our spelling at the written
//! token, PyTorch's names for it and tch's paths told ours.

use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit};

use crate::word::{Choice, Given, Word};

/// `value` as one of `choice`'s words: our spelling, at the written token.
pub(super) fn choose(word: &Word, choice: &Choice, value: &Expr) -> syn::Result<Ident> {
    let name = word.name;
    let what = choice.what;
    // Over the whole value (`Kind::Half`, `1 + 1`), not its first token.
    let fixed = || {
        syn::Error::new_spanned(
            value,
            format!(
                "the {what} of `{name}` is a word, fixed at compile time: write {}",
                choice.list()
            ),
        )
    };
    // What was written, the word to look up, whether it may stand as
    // written, and its one token (`None`: point at the whole value). A
    // path (tch's `Kind::Half`) is looked up by its last segment, so it is
    // told our word, but never taken.
    let (written, word_part, exact, span) = match value {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => {
            let Some(last) = p.path.segments.last() else {
                return Err(fixed());
            };
            let segments: Vec<String> = p
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            let lead = if p.path.leading_colon.is_some() {
                "::"
            } else {
                ""
            };
            let written = format!("{lead}{}", segments.join("::"));
            match p.path.get_ident() {
                Some(id) => (written, id.to_string(), true, Some(id.span())),
                None => (written, last.ident.to_string(), false, None),
            }
        }
        Expr::Lit(l) => match &l.lit {
            Lit::Str(s) => (s.value(), s.value(), choice.strings, Some(s.span())),
            _ => return Err(fixed()),
        },
        _ => return Err(fixed()),
    };
    let message = match choice.find(&word_part) {
        Some(ours) if ours == written && exact => {
            let span = span.unwrap_or_else(|| value.span());
            return Ok(Ident::new(ours, span));
        }
        Some(ours) if ours == written => format!("write `{ours}` without quotes"),
        Some(ours) => format!("`{written}` is spelled `{ours}` here"),
        None if written != word_part => return Err(fixed()),
        None => format!(
            "`{written}` is not a {what} of `{name}`: write {}",
            choice.list()
        ),
    };
    Err(match span {
        Some(span) => syn::Error::new(span, message),
        None => syn::Error::new_spanned(value, message),
    })
}

/// Adds one word to a `List` param's array, refusing any other value and
/// a word listed twice.
pub(super) fn add_to_list(
    word: &Word,
    choice: &Choice,
    slot: &mut Option<Given>,
    value: &Expr,
    index: usize,
) -> syn::Result<()> {
    let ours = choose(word, choice, value)?;
    let Some(given) = slot else {
        let at = ours.span();
        *slot = Some(Given {
            value: syn::parse_quote!([#ours]),
            at,
            index,
        });
        return Ok(());
    };
    if words(&given.value).contains(&ours) {
        return Err(syn::Error::new(
            ours.span(),
            format!("`{ours}` is listed twice in `{}`; keep one", word.name),
        ));
    }
    if let Expr::Array(a) = &mut given.value {
        a.elems.push(syn::parse_quote!(#ours));
    }
    Ok(())
}

/// The word a `Choice` param's value is, or each word of a `List`'s, as
/// `read` left them (our spelling, at the written token).
pub(crate) fn words(value: &Expr) -> Vec<Ident> {
    match value {
        Expr::Array(a) => a.elems.iter().flat_map(words).collect(),
        Expr::Path(p) => p.path.get_ident().cloned().into_iter().collect(),
        _ => Vec::new(),
    }
}
