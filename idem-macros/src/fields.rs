//! `fields!(Type: a, b, ..)`: a compile-time checked `FieldMask` of a `Fingerprint` type.
//!
//! The expansion (see [`expand`]) is shared with `#[idempotent(fingerprint(fields = [..]))]`:
//! each field becomes `hashable(<Type as Fingerprint>::FIELDS.name)` spanned on the user's
//! token, so that rustc itself reports an unknown field ("no field `x` on type ..") and the
//! `Hashable` bound rejects `env` and `skip` fields, both at that token.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Ident, Token};

use crate::ctxt::Ctxt;
use crate::respan::respan;

const USAGE: &str =
    "write `fields!(Type: field, ..)`, e.g. `idem::fields!(CreatePayment: amount, currency)`";

/// `Type: a, b, ..`.
pub(crate) struct FieldsInput {
    pub(crate) ty: syn::Type,
    pub(crate) colon: Token![:],
    pub(crate) list: Punctuated<Ident, Token![,]>,
}

impl FieldsInput {
    pub(crate) fn fields(&self) -> Vec<Ident> {
        self.list.iter().cloned().collect()
    }
}

impl Parse for FieldsInput {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(input.error(format!("`fields!` needs a type and its fields: {USAGE}")));
        }
        let ty = input.parse()?;
        if !input.peek(Token![:]) || input.peek(Token![::]) {
            return Err(input.error(format!("expected `:` after the type: {USAGE}")));
        }
        let colon = input.parse()?;
        let list = Punctuated::parse_terminated(input).map_err(|err| {
            syn::Error::new(err.span(), format!("expected a field name: {USAGE}"))
        })?;
        Ok(FieldsInput { ty, colon, list })
    }
}

pub(crate) fn check(input: &FieldsInput) -> syn::Result<()> {
    let cx = Ctxt::new();
    check_list(
        &cx,
        input.colon.span,
        &input.fields(),
        "no field listed: name at least one, as in `idem::fields!(CreatePayment: amount, currency)`; to hash every field, use `fingerprint()` instead",
    );
    cx.check()
}

/// An empty list and a field listed twice are errors (an unknown field, an `env` or a `skip`
/// field are rustc's, on the expansion). `empty_at` spans the error `if_empty` of an empty list.
pub(crate) fn check_list(cx: &Ctxt, empty_at: proc_macro2::Span, fields: &[Ident], if_empty: &str) {
    if fields.is_empty() {
        cx.syn_error(syn::Error::new(empty_at, if_empty));
    }
    for (i, field) in fields.iter().enumerate() {
        if fields[..i].contains(field) {
            cx.error_spanned_by(
                field,
                format!("field `{field}` is listed twice: remove the second `{field}`"),
            );
        }
    }
}

pub(crate) fn default_crate_path() -> syn::Path {
    syn::parse_quote!(::idem)
}

/// A block evaluating to the `FieldMask` of `fields` of `ty`, computed in a `const`.
pub(crate) fn expand(krate: &syn::Path, ty: &syn::Type, fields: &[Ident]) -> TokenStream {
    let pv = quote!(#krate::__private);
    let all = respan(quote!(<#ty as #pv::Fingerprint>::FIELDS), ty.span());
    let mut masks = fields.iter().map(|field| {
        let hashable = respan(quote!(#pv::hashable), field.span());
        quote_spanned!(field.span()=> #hashable(__idem_fields.#field))
    });
    let first = masks.next();
    quote! {{
        const __IDEM_MASK: #pv::FieldMask = {
            let __idem_fields = #all;
            #first #(.with(#masks))*
        };
        __IDEM_MASK
    }}
}
