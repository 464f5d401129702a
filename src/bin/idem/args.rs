//! What the command line names: a record (by its scope parts, operation and key, or by its key
//! hash) and the key ring.
//!
//! The rule: a key ring never comes from the command line, where every user of the machine
//! could read it, but from `--keys-file` or `IDEM_ENCRYPTION_KEYS`.

use clap::ArgMatches;
use idem::key::ScopedKey;
use idem::seal::KeyRing;

use crate::error::Error;

pub(crate) fn key_hash(m: &ArgMatches) -> Result<Vec<u8>, Error> {
    if let Some(hex) = m.get_one::<String>("key-hash") {
        return parse_hash(hex, "--key-hash");
    }
    let (Some(op), Some(key)) = (m.get_one::<String>("operation"), m.get_one::<String>("key"))
    else {
        return Err(
            "name the record: --operation and --key (with --scope parts), or --key-hash".into(),
        );
    };
    let scope: Vec<&String> = m
        .get_many("scope")
        .map(Iterator::collect)
        .unwrap_or_default();
    Ok(ScopedKey::new(&scope, op, key)?.hash().to_vec())
}

/// Why no record was found under `hash`: what it was computed from, and how to name the
/// record otherwise. A scope part absent from the request (a header not sent) is an empty part,
/// which the key hash includes: the payments example's `POST /v1/payments` has two parts.
pub(crate) fn no_record(m: &ArgMatches, hash: &[u8]) -> String {
    let hash = hex(hash);
    let Some(op) = m.get_one::<String>("operation") else {
        return format!("no record with key hash {hash}: check the hash (idem's logs carry it)");
    };
    let scope: Vec<String> = m
        .get_many::<String>("scope")
        .map(|parts| parts.map(|p| format!("{p:?}")).collect())
        .unwrap_or_default();
    format!(
        "no record with key hash {hash}, computed from operation {op:?} and {}{}: pass one \
         --scope per part of the handler's scope, in order, and --scope \"\" for each part the \
         request did not send (the payments example's `POST /v1/payments` has 2: X-Tenant-Id, \
         X-User-Id), or pass --key-hash from idem's logs",
        plural(scope.len(), "scope part"),
        if scope.is_empty() {
            String::new()
        } else {
            format!(" [{}]", scope.join(", "))
        }
    )
}

/// `n thing` or `n things`.
pub(crate) fn plural(n: impl std::fmt::Display, thing: &str) -> String {
    let n = n.to_string();
    if n == "1" {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// A key hash given as 64 hex digits to the option `option`.
pub(crate) fn parse_hash(hex: &str, option: &str) -> Result<Vec<u8>, Error> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{option} takes 64 hex digits").into());
    }
    Ok((0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or_default())
        .collect())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key ring of `--keys-file` or `IDEM_ENCRYPTION_KEYS` (`ID:BASE64,...`, the primary
/// first), if either is given. Never from the command line, where every user of the machine
/// could read it.
pub(crate) fn key_ring(m: &ArgMatches) -> Result<Option<KeyRing>, Error> {
    let (list, from) = match m.get_one::<String>("keys-file") {
        Some(path) => {
            let list = std::fs::read_to_string(path)
                .map_err(|e| format!("--keys-file {path}: cannot read it: {e}"))?;
            (list, format!("--keys-file {path}"))
        }
        None => match std::env::var("IDEM_ENCRYPTION_KEYS") {
            Ok(list) if !list.trim().is_empty() => (list, "IDEM_ENCRYPTION_KEYS".to_owned()),
            _ => return Ok(None),
        },
    };
    KeyRing::parse(&list)
        .map(Some)
        .map_err(|e| format!("{from}: {e}").into())
}
