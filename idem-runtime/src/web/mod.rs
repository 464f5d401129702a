//! What the HTTP fronts (axum's [`http`](crate::http), actix-web's [`actix`](crate::actix))
//! share and no framework decides: the header names, the request head a key is read and scoped
//! from ([`RequestHead`]), and the rules of a snapshot (which response headers are stored, the
//! business number a store can keep, a body over the size limit).

mod head;
pub(crate) mod headers;
pub(crate) mod snapshot;

pub(crate) use head::{RequestHead, header_key};

/// Default largest request body the middlewares read (the tower `IdempotencyLayer`, the actix
/// `Idempotency`): 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
