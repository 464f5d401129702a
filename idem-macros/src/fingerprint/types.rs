//! Walks a field type for the paths it mentions: to find binary floats (`Option<Vec<f64>>`) and
//! the type parameters a field uses (to bound them).

/// Calls `f` on every path in `ty`, outermost first (`Option<Vec<f64>>`: `Option<..>`,
/// `Vec<f64>`, `f64`).
pub(crate) fn for_each_path<'t>(ty: &'t syn::Type, f: &mut dyn FnMut(&'t syn::Path)) {
    match ty {
        syn::Type::Path(p) => {
            if let Some(qself) = &p.qself {
                for_each_path(&qself.ty, f);
            }
            path(&p.path, f);
        }
        syn::Type::Reference(r) => for_each_path(&r.elem, f),
        syn::Type::Ptr(p) => for_each_path(&p.elem, f),
        syn::Type::Slice(s) => for_each_path(&s.elem, f),
        syn::Type::Array(a) => for_each_path(&a.elem, f),
        syn::Type::Paren(p) => for_each_path(&p.elem, f),
        syn::Type::Group(g) => for_each_path(&g.elem, f),
        syn::Type::Tuple(t) => t.elems.iter().for_each(|e| for_each_path(e, f)),
        syn::Type::BareFn(b) => {
            b.inputs.iter().for_each(|a| for_each_path(&a.ty, f));
            if let syn::ReturnType::Type(_, out) = &b.output {
                for_each_path(out, f);
            }
        }
        syn::Type::TraitObject(t) => bounds(&t.bounds, f),
        syn::Type::ImplTrait(t) => bounds(&t.bounds, f),
        _ => {}
    }
}

fn path<'t>(p: &'t syn::Path, f: &mut dyn FnMut(&'t syn::Path)) {
    f(p);
    for segment in &p.segments {
        match &segment.arguments {
            syn::PathArguments::AngleBracketed(args) => {
                for arg in &args.args {
                    match arg {
                        syn::GenericArgument::Type(t) => for_each_path(t, f),
                        syn::GenericArgument::AssocType(a) => for_each_path(&a.ty, f),
                        _ => {}
                    }
                }
            }
            syn::PathArguments::Parenthesized(args) => {
                args.inputs.iter().for_each(|t| for_each_path(t, f));
                if let syn::ReturnType::Type(_, out) = &args.output {
                    for_each_path(out, f);
                }
            }
            syn::PathArguments::None => {}
        }
    }
}

fn bounds<'t>(
    bounds: &'t syn::punctuated::Punctuated<syn::TypeParamBound, syn::Token![+]>,
    f: &mut dyn FnMut(&'t syn::Path),
) {
    for bound in bounds {
        if let syn::TypeParamBound::Trait(t) = bound {
            path(&t.path, f);
        }
    }
}

/// The first `f32` / `f64` token in `ty`.
pub(crate) fn find_float(ty: &syn::Type) -> Option<&syn::Ident> {
    let mut found = None;
    for_each_path(ty, &mut |p| {
        if found.is_none()
            && let Some(last) = p.segments.last()
            && last.arguments.is_none()
            && (last.ident == "f32" || last.ident == "f64")
        {
            found = Some(&last.ident);
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::find_float;

    fn float_in(ty: &str) -> Option<String> {
        let ty: syn::Type = syn::parse_str(ty).unwrap();
        find_float(&ty).map(|i| i.to_string())
    }

    #[test]
    fn finds_floats_anywhere() {
        assert_eq!(float_in("f64").as_deref(), Some("f64"));
        assert_eq!(float_in("Option<Vec<f32>>").as_deref(), Some("f32"));
        assert_eq!(
            float_in("&'a [core::primitive::f64; 3]").as_deref(),
            Some("f64")
        );
        assert_eq!(
            float_in("BTreeMap<String, (u8, f64)>").as_deref(),
            Some("f64")
        );
        assert_eq!(float_in("Box<dyn Fn(f32) -> u8>").as_deref(), Some("f32"));
        assert_eq!(float_in("<f64 as Tr>::Out").as_deref(), Some("f64"));
        assert_eq!(float_in("Option<Decimal>"), None);
        assert_eq!(float_in("f64x4"), None);
    }
}
