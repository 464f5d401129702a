//! The derive's own view of the input: fields and variants with their attributes parsed and
//! their wire names computed (serde's renaming rules applied).

use syn::ext::IdentExt;
use syn::punctuated::Punctuated;

use super::attr::{self, Key};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;

pub(crate) struct Container<'a> {
    pub(crate) ident: &'a syn::Ident,
    pub(crate) generics: &'a syn::Generics,
    pub(crate) attrs: attr::Container,
    pub(crate) data: Data<'a>,
    /// A prost message (a field has `#[prost(..)]`) or a `prost::Oneof` enum (a variant has).
    pub(crate) proto: bool,
}

pub(crate) enum Data<'a> {
    Struct(Style, Vec<Field<'a>>),
    Enum(Vec<Variant<'a>>),
}

/// The shape of a struct or variant, as serde sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    /// Named fields: an object.
    Struct,
    /// Two or more unnamed fields: an array.
    Tuple,
    /// Exactly one unnamed field: the field itself.
    Newtype,
    /// No fields: `null` (a unit struct) or `"Name"` (a unit variant).
    Unit,
}

pub(crate) struct Variant<'a> {
    pub(crate) ident: &'a syn::Ident,
    /// The serialized variant name.
    pub(crate) wire: String,
    pub(crate) attrs: attr::Variant,
    pub(crate) style: Style,
    pub(crate) fields: Vec<Field<'a>>,
}

pub(crate) struct Field<'a> {
    /// `name` or `0`, to access the field.
    pub(crate) member: syn::Member,
    /// Position in the declaration (the field's bit in a `FieldMask`).
    pub(crate) index: usize,
    /// The serialized member name (named fields only).
    pub(crate) wire: String,
    /// The member names a client may send the field under besides `wire` (serde's
    /// deserialize-side name and aliases), for the run-time spec.
    pub(crate) inputs: Vec<String>,
    /// Whether a client's member named `wire` is read as this field (not when serde reads the
    /// field under other names only).
    pub(crate) reads_wire: bool,
    pub(crate) ty: &'a syn::Type,
    pub(crate) attrs: attr::Field,
    pub(crate) original: &'a syn::Field,
}

/// How the fingerprint treats a field.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Part of the fingerprint.
    Hashed,
    /// `#[fingerprint(env)]`: varies per attempt, never hashed.
    Env,
    /// `#[fingerprint(skip)]` or `#[serde(skip)]`: not part of the identity.
    Skipped,
}

/// How a hashed field is written.
pub(crate) enum Writer<'f> {
    /// `Canonical::write_canonical`.
    Canonical,
    /// `FloatField::write_float` (`#[fingerprint(float)]`).
    Float,
    /// `Base64Field::write_base64` (`#[fingerprint(base64)]`).
    Base64,
    /// A user function (`#[fingerprint(with = path)]`).
    With(&'f syn::ExprPath),
}

impl<'a> Container<'a> {
    /// `None` (with an error recorded) for inputs the derive cannot handle at all (unions).
    pub(crate) fn from_ast(cx: &Ctxt, item: &'a syn::DeriveInput) -> Option<Self> {
        let attrs = attr::Container::from_ast(cx, item);
        let data = match &item.data {
            syn::Data::Struct(data) => {
                let (style, mut fields) = fields_from_ast(cx, &data.fields);
                for field in &mut fields {
                    field.rename_by(attrs.rename_all, attrs.rename_all_de);
                }
                Data::Struct(style, fields)
            }
            syn::Data::Enum(data) => Data::Enum(
                data.variants
                    .iter()
                    .map(|variant| Variant::from_ast(cx, variant, &attrs))
                    .collect(),
            ),
            syn::Data::Union(data) => {
                cx.error_spanned_by(
                    data.union_token,
                    "`#[derive(Fingerprint)]` does not support unions: a union has no serialized form; fingerprint a struct or an enum instead",
                );
                return None;
            }
        };
        let proto = match &data {
            Data::Struct(_, fields) => fields.iter().any(|f| f.attrs.proto.is_some()),
            Data::Enum(variants) => variants.iter().any(|v| v.attrs.proto.is_some()),
        };
        Some(Container {
            ident: &item.ident,
            generics: &item.generics,
            attrs,
            data,
            proto,
        })
    }

    /// The named fields of a struct (those that get a `FieldRef`); empty for other shapes.
    pub(crate) fn named_fields(&self) -> &[Field<'a>] {
        match &self.data {
            Data::Struct(Style::Struct, fields) if self.attrs.transparent.is_none() => fields,
            _ => &[],
        }
    }

    /// Every field, of the struct or of all variants.
    pub(crate) fn all_fields(&self) -> Box<dyn Iterator<Item = &Field<'a>> + '_> {
        match &self.data {
            Data::Struct(_, fields) => Box::new(fields.iter()),
            Data::Enum(variants) => Box::new(variants.iter().flat_map(|v| v.fields.iter())),
        }
    }
}

impl<'a> Variant<'a> {
    fn from_ast(cx: &Ctxt, variant: &'a syn::Variant, container: &attr::Container) -> Self {
        let attrs = attr::Variant::from_ast(cx, variant);
        let (style, mut fields) = fields_from_ast(cx, &variant.fields);
        let field_rule = attrs.rename_all.or(container.rename_all_fields);
        let field_de_rule = attrs.rename_all_de.or(container.rename_all_fields_de);
        for field in &mut fields {
            field.rename_by(field_rule, field_de_rule);
        }
        let rule = match attrs.proto {
            // prost-build names a oneof variant after its field, in UpperCamelCase: the member
            // name is the field's name again.
            Some(_) => RenameRule::SnakeCase,
            None => container.rename_all,
        };
        let wire = match &attrs.rename {
            Some(name) => name.clone(),
            None => rule.apply_to_variant(&variant.ident.unraw().to_string()),
        };
        if let (Some(proto), [field]) = (&attrs.proto, fields.as_mut_slice()) {
            // The variant's `#[fingerprint(..)]` options are its field's.
            let all: Vec<syn::Attribute> = variant
                .attrs
                .iter()
                .chain(&field.original.attrs)
                .cloned()
                .collect();
            field.attrs = attr::Field::from_attrs(cx, &all);
            field.attrs.proto = Some(proto.clone());
        }
        Variant {
            ident: &variant.ident,
            wire,
            attrs,
            style,
            fields,
        }
    }
}

impl Field<'_> {
    pub(crate) fn kind(&self) -> Kind {
        if self.attrs.has(Key::Env) {
            Kind::Env
        } else if self.attrs.has(Key::Skip) || self.attrs.serde_skip.is_some() {
            Kind::Skipped
        } else {
            Kind::Hashed
        }
    }

    pub(crate) fn writer(&self) -> Writer<'_> {
        if self.attrs.has(Key::Float) {
            Writer::Float
        } else if self.attrs.has(Key::Base64) {
            Writer::Base64
        } else if let Some(path) = &self.attrs.with {
            Writer::With(path)
        } else {
            Writer::Canonical
        }
    }

    /// `#[fingerprint(float)]`.
    pub(crate) fn writer_is_float(&self) -> bool {
        self.attrs.has(Key::Float)
    }

    /// The Rust name without `r#`, for messages (`None` for unnamed fields).
    pub(crate) fn rust_name(&self) -> Option<String> {
        self.original.ident.as_ref().map(|i| i.unraw().to_string())
    }

    /// Names the field: `wire` by the serialize-side `rename` or `rule`, `inputs` by the
    /// deserialize-side ones (`de_rule`) and the aliases.
    fn rename_by(&mut self, rule: crate::case::RenameRule, de_rule: crate::case::RenameRule) {
        if let Some(name) = self.rust_name() {
            self.wire = match &self.attrs.rename {
                Some(renamed) => renamed.clone(),
                None => rule.apply_to_field(&name),
            };
            let de = match &self.attrs.rename_de {
                Some(renamed) => renamed.clone(),
                None => de_rule.apply_to_field(&name),
            };
            self.reads_wire = de == self.wire || self.attrs.aliases.contains(&self.wire);
            let mut inputs = vec![de];
            inputs.extend(self.attrs.aliases.iter().cloned());
            inputs.retain(|n| *n != self.wire);
            inputs.dedup();
            self.inputs = inputs;
        }
    }
}

fn fields_from_ast<'a>(cx: &Ctxt, fields: &'a syn::Fields) -> (Style, Vec<Field<'a>>) {
    match fields {
        syn::Fields::Named(named) => (Style::Struct, fields_vec(cx, &named.named)),
        syn::Fields::Unnamed(unnamed) if unnamed.unnamed.len() == 1 => {
            (Style::Newtype, fields_vec(cx, &unnamed.unnamed))
        }
        syn::Fields::Unnamed(unnamed) => (Style::Tuple, fields_vec(cx, &unnamed.unnamed)),
        syn::Fields::Unit => (Style::Unit, Vec::new()),
    }
}

fn fields_vec<'a>(cx: &Ctxt, fields: &'a Punctuated<syn::Field, syn::Token![,]>) -> Vec<Field<'a>> {
    fields
        .iter()
        .enumerate()
        .map(|(index, field)| Field {
            member: match &field.ident {
                Some(ident) => syn::Member::Named(ident.clone()),
                None => syn::Member::Unnamed(syn::Index {
                    index: index as u32,
                    span: proc_macro2::Span::call_site(),
                }),
            },
            index,
            wire: String::new(),
            inputs: Vec::new(),
            reads_wire: true,
            ty: &field.ty,
            attrs: attr::Field::from_ast(cx, field),
            original: field,
        })
        .collect()
}

/// The hashed fields in canonical member order: by the bytes of their wire names.
pub(super) fn sorted_hashed<'c, 'a>(fields: &'c [Field<'a>]) -> Vec<&'c Field<'a>> {
    let mut hashed: Vec<_> = fields.iter().filter(|f| f.kind() == Kind::Hashed).collect();
    hashed.sort_by(|a, b| a.wire.as_bytes().cmp(b.wire.as_bytes()));
    hashed
}
