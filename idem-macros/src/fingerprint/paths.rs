//! [`Paths`]: how generated code names idem's items, shared by the writers (`expand`) and the
//! specs (`spec`) that the derive generates, and the null check both use.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;

use super::ast::{Field, Writer};
use crate::respan::respan;

/// `#krate::__private`, the only paths generated code names.
pub(super) struct Paths {
    pub(super) private: TokenStream,
}

/// `<Ty as #pv::Trait>::method` spanned on the field's type, so that a type that cannot be
/// written is reported at the user's field.
pub(super) fn qualified(p: &Paths, field: &Field<'_>, tr: &str, method: &str) -> TokenStream {
    let pv = &p.private;
    let ty = field.ty;
    let tr = syn::Ident::new(tr, Span::call_site());
    let method = syn::Ident::new(method, Span::call_site());
    respan(quote!(<#ty as #pv::#tr>::#method), ty.span())
}

/// An expression, `true` when `value` is null (`None` for `with` fields: never null).
pub(super) fn null_check(p: &Paths, field: &Field<'_>, value: &TokenStream) -> Option<TokenStream> {
    let f = match field.writer() {
        Writer::Canonical => qualified(p, field, "Canonical", "is_null"),
        Writer::Float => qualified(p, field, "FloatField", "is_null"),
        Writer::Base64 => qualified(p, field, "Base64Field", "is_null"),
        Writer::With(_) => return None,
    };
    Some(quote!(#f(#value)))
}
