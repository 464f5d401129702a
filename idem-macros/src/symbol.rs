//! Attribute keys, as named constants so that a typo is a compile error, not a silent no-op.

use std::fmt::{self, Display};

use syn::{Ident, Path};

/// One attribute name or key.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) struct Symbol(pub(crate) &'static str);

// Attribute names.
pub(crate) const FINGERPRINT: Symbol = Symbol("fingerprint");
pub(crate) const SERDE: Symbol = Symbol("serde");
pub(crate) const SNAPSHOT: Symbol = Symbol("snapshot");

// `#[fingerprint(..)]` on a container.
pub(crate) const CRATE: Symbol = Symbol("crate");

// `#[fingerprint(..)]` on a field.
pub(crate) const ENV: Symbol = Symbol("env");
pub(crate) const SKIP: Symbol = Symbol("skip");
pub(crate) const INCLUDE: Symbol = Symbol("include");
pub(crate) const FLOAT: Symbol = Symbol("float");
pub(crate) const BASE64: Symbol = Symbol("base64");
pub(crate) const WITH: Symbol = Symbol("with");

// `#[snapshot(..)]` on a field.
pub(crate) const BIZ_NO: Symbol = Symbol("biz_no");

// `#[idempotent(..)]` keys (and `crate`, `fingerprint` above).
pub(crate) const KEY: Symbol = Symbol("key");
pub(crate) const SCOPE: Symbol = Symbol("scope");
pub(crate) const TTL: Symbol = Symbol("ttl");
pub(crate) const LEASE: Symbol = Symbol("lease");
pub(crate) const WAIT: Symbol = Symbol("wait");
pub(crate) const REMEMBER: Symbol = Symbol("remember");
pub(crate) const TIMEOUT: Symbol = Symbol("timeout");
pub(crate) const CONTRACT: Symbol = Symbol("contract");
pub(crate) const LOOKUP: Symbol = Symbol("lookup");
pub(crate) const STORE: Symbol = Symbol("store");
pub(crate) const OPERATION: Symbol = Symbol("operation");
pub(crate) const HEADERS: Symbol = Symbol("headers");
pub(crate) const FAIL_OPEN: Symbol = Symbol("fail_open");
pub(crate) const MAX_SNAPSHOT_BYTES: Symbol = Symbol("max_snapshot_bytes");
pub(crate) const TRANSACTION: Symbol = Symbol("transaction");

// Inside `#[idempotent(fingerprint(..))]`.
pub(crate) const FIELDS: Symbol = Symbol("fields");
pub(crate) const ARG: Symbol = Symbol("arg");

// `scope = global`, `scope = default`.
pub(crate) const GLOBAL: Symbol = Symbol("global");
pub(crate) const DEFAULT: Symbol = Symbol("default");

// `header("Name")` in `key = ..` and `scope = [..]`.
pub(crate) const HEADER: Symbol = Symbol("header");

// `#[serde(..)]` keys that change the serialized form.
pub(crate) const RENAME: Symbol = Symbol("rename");
pub(crate) const RENAME_ALL: Symbol = Symbol("rename_all");
pub(crate) const RENAME_ALL_FIELDS: Symbol = Symbol("rename_all_fields");
pub(crate) const SERIALIZE: Symbol = Symbol("serialize");
pub(crate) const DESERIALIZE: Symbol = Symbol("deserialize");
pub(crate) const ALIAS: Symbol = Symbol("alias");
pub(crate) const SKIP_DESERIALIZING: Symbol = Symbol("skip_deserializing");
pub(crate) const SKIP_SERIALIZING: Symbol = Symbol("skip_serializing");
pub(crate) const SKIP_SERIALIZING_IF: Symbol = Symbol("skip_serializing_if");
pub(crate) const FLATTEN: Symbol = Symbol("flatten");
pub(crate) const TAG: Symbol = Symbol("tag");
pub(crate) const CONTENT: Symbol = Symbol("content");
pub(crate) const UNTAGGED: Symbol = Symbol("untagged");
pub(crate) const TRANSPARENT: Symbol = Symbol("transparent");
pub(crate) const DESERIALIZE_WITH: Symbol = Symbol("deserialize_with");

impl PartialEq<Symbol> for Ident {
    fn eq(&self, word: &Symbol) -> bool {
        self == word.0
    }
}

impl PartialEq<Symbol> for &Ident {
    fn eq(&self, word: &Symbol) -> bool {
        *self == word.0
    }
}

impl PartialEq<Symbol> for Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl PartialEq<Symbol> for &Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
