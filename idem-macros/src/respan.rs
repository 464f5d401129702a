//! Re-spanning generated tokens onto a user token, so that rustc reports a type error (a field
//! type without `Canonical`, an unknown field in `fields!`) at the user's code.

use proc_macro2::{Group, Span, TokenStream, TokenTree};

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
