//! [`ScopePart`]: the parts of a key's scope (tenant, user, ...), and [`scoped_key`].

use std::borrow::Cow;
use std::sync::Arc;

use super::rules::InvalidKey;
use super::scoped::ScopedKey;

/// One part of a key's scope: tenant, user, account, ... (`scope = [auth.tenant_id, auth.user_id]`).
///
/// The same client key under two different scopes names two different operations. Implemented for
/// strings, integers, `bool`, `char`, references and smart pointers of parts, `Option` (`None` is
/// the empty part), `uuid::Uuid` (feature `uuid`, lowercase hyphenated) and `http::HeaderValue`
/// (feature `axum`; `%` and bytes outside visible ASCII percent-encoded).
///
/// A part is its text alone: `None`, `Some("")` and `""` are one scope, the anonymous one. Ids
/// are never empty in practice, so that is the sharing an `Option` part means. Where an empty id
/// is an identity of its own that must not share keys with "none" (an id taken from client input,
/// say), write the part with a marker, e.g. `tenant.as_deref().map(|t| format!("t:{t}"))`. The
/// encoding itself is fixed: changing it would give every stored key a new hash, and a retry in
/// flight across that upgrade would run again under a new operation id.
///
/// `Sync` so that a `&[&dyn ScopePart]` can be held across an `.await` in a `Send` future.
///
/// ```
/// use idem_runtime::key::{ScopePart, write_scope_part};
/// struct TenantId(u64);
/// impl ScopePart for TenantId {
///     fn write_scope_part(&self, out: &mut String) {
///         out.push_str("t-");
///         self.0.write_scope_part(out);
///     }
/// }
/// assert_eq!(write_scope_part(&TenantId(7)), "t-7");
/// assert_eq!(write_scope_part(&None::<u8>), "");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of an idempotency scope",
    note = "scope parts are strings, integers, `Option`s of them, `uuid::Uuid` or `HeaderValue`; implement `idem::ScopePart` for your id type, or pass `.to_string()`"
)]
pub trait ScopePart: Sync {
    /// Appends this part's text to `out`.
    fn write_scope_part(&self, out: &mut String);
}

/// The text of one scope part.
///
/// ```
/// use idem_runtime::key::write_scope_part;
/// assert_eq!(write_scope_part(&42u32), "42");
/// assert_eq!(write_scope_part(&Some("acme")), "acme");
/// ```
pub fn write_scope_part(part: &(impl ScopePart + ?Sized)) -> String {
    let mut out = String::new();
    part.write_scope_part(&mut out);
    out
}

impl ScopePart for str {
    fn write_scope_part(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl ScopePart for String {
    fn write_scope_part(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl ScopePart for Cow<'_, str> {
    fn write_scope_part(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl<T: ScopePart + ?Sized> ScopePart for &T {
    fn write_scope_part(&self, out: &mut String) {
        (**self).write_scope_part(out);
    }
}

impl<T: ScopePart + ?Sized> ScopePart for &mut T {
    fn write_scope_part(&self, out: &mut String) {
        (**self).write_scope_part(out);
    }
}

impl<T: ScopePart + ?Sized> ScopePart for Box<T> {
    fn write_scope_part(&self, out: &mut String) {
        (**self).write_scope_part(out);
    }
}

impl<T: ScopePart + ?Sized + Send> ScopePart for Arc<T> {
    fn write_scope_part(&self, out: &mut String) {
        (**self).write_scope_part(out);
    }
}

impl<T: ScopePart> ScopePart for Option<T> {
    fn write_scope_part(&self, out: &mut String) {
        if let Some(part) = self {
            part.write_scope_part(out);
        }
    }
}

macro_rules! display_parts {
    ($($t:ty),*) => {$(
        impl ScopePart for $t {
            fn write_scope_part(&self, out: &mut String) {
                use core::fmt::Write;
                // Writing into a String cannot fail.
                let _ = write!(out, "{self}");
            }
        }
    )*};
}

display_parts!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, bool, char
);

#[cfg(feature = "uuid")]
#[cfg_attr(docsrs, doc(cfg(feature = "uuid")))]
impl ScopePart for uuid::Uuid {
    fn write_scope_part(&self, out: &mut String) {
        out.push_str(
            self.hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        );
    }
}

#[cfg(any(feature = "axum", feature = "actix"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "axum", feature = "actix"))))]
impl ScopePart for http::HeaderValue {
    fn write_scope_part(&self, out: &mut String) {
        for &b in self.as_bytes() {
            match b {
                b'%' => out.push_str("%25"),
                0x21..=0x7e => out.push(char::from(b)),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789ABCDEF";
                    out.push('%');
                    out.push(char::from(HEX[usize::from(b >> 4)]));
                    out.push(char::from(HEX[usize::from(b & 0xf)]));
                }
            }
        }
    }
}

/// An actix-web path segment (`payment_id: web::Path<String>`): its value, as axum's
/// destructured `Path(payment_id)` gives it.
#[cfg(feature = "actix")]
#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
impl<T: ScopePart> ScopePart for actix_web::web::Path<T> {
    fn write_scope_part(&self, out: &mut String) {
        (**self).write_scope_part(out);
    }
}

/// The [`ScopedKey`] of `client_key` for `operation` under `scope`: each part rendered by its
/// [`ScopePart`] impl, then hashed length-prefixed with the number of parts first
/// ([`ScopedKey::new`]), so the mapping is injective for any number and content of parts:
/// `["a:b", "c"]` and `["a", "b:c"]`, `["t"]` and `["t", ""]` are different scopes. An empty
/// scope is the global one: the key is shared by every caller of the operation.
///
/// # Errors
/// [`InvalidKey`] when the client key is empty, longer than 255 characters, or has control
/// characters.
///
/// ```
/// use idem_runtime::key::scoped_key;
/// let k = scoped_key("payments::create", &[&"acme", &42u64], "k-1")?;
/// assert_eq!(k.readable(), "acme:42:payments%3A%3Acreate:k-1");
/// let k3 = scoped_key("op", &[&"acme", &"u1", &"acct:9"], "k-1")?;
/// assert_eq!(k3.readable(), "acme:u1:acct%3A9:op:k-1");
/// assert_ne!(scoped_key("op", &[&"a"], "k")?, scoped_key("op", &[&"b"], "k")?);
/// assert_ne!(scoped_key("op", &[&"t"], "k")?, scoped_key("op", &[&"t", &""], "k")?);
/// # Ok::<(), idem_runtime::key::InvalidKey>(())
/// ```
pub fn scoped_key(
    operation: &str,
    scope: &[&dyn ScopePart],
    client_key: &str,
) -> Result<ScopedKey, InvalidKey> {
    let parts: Vec<String> = scope.iter().map(|p| write_scope_part(*p)).collect();
    ScopedKey::new(&parts, operation, client_key)
}
