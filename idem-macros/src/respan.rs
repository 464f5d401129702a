//! Re-spanning generated tokens onto a user token, so that rustc reports a type error (a field
//! type without `Canonical`, an unknown field in `fields!`) at the user's code.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote_spanned};

/// `tokens`, every token (and group) set to `span`.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = group.into();
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

/// The spans of the first and the last token of `tokens` (`call_site` if there are none): on
/// stable, a span cannot be joined, so a range is made of two tokens.
pub(crate) fn first_last(tokens: &TokenStream) -> (Span, Span) {
    let mut iter = tokens.clone().into_iter();
    let first = iter.next().map_or_else(Span::call_site, |tt| tt.span());
    let last = iter.last().map_or(first, |tt| tt.span());
    (first, last)
}

/// `&(expr)`, the `&` spanned on the first token of `expr` and the parentheses on its last, so
/// that an error about the reference (an unsatisfied trait bound) covers exactly `expr`.
pub(crate) fn spanned_ref<T: ToTokens>(expr: &T) -> TokenStream {
    let tokens = expr.to_token_stream();
    let (first, last) = first_last(&tokens);
    let mut parens = Group::new(Delimiter::Parenthesis, tokens);
    parens.set_span(last);
    let mut out = quote_spanned!(first=> &);
    out.extend([TokenTree::Group(parens)]);
    out
}
