//! The client half of [idem](https://docs.rs/idem): retries that can never charge twice.
//!
//! A client that retries a `POST` after a timeout must send the **same** idempotency key, or the
//! server sees a new operation; it must wait when the server says the first attempt still runs
//! (`409` + `Retry-After`), retry what was not run (`503`, `429`, broken connections), and
//! stop at what a retry would only repeat (`422`, `400`, a stored answer). This crate does that
//! for [reqwest](https://docs.rs/reqwest), as a [reqwest-middleware](https://docs.rs/reqwest-middleware)
//! middleware so that it composes with tracing and authentication middleware:
//!
//! - [`Idempotency`]: the middleware (a key per request, kept for its retries; the retry loop);
//! - [`RetryPolicy`]: the budget and the backoff; [`classify`]: the classification table;
//! - [`SendIdempotent`]: `send_idempotent()`, the final answer as [`Sent`] or a typed [`Error`]
//!   with the parsed [`Problem`];
//! - `tonic::GrpcIdempotencyLayer` (feature `tonic`): the same for tonic clients, as a tower
//!   layer on the channel, with the same [`RetryPolicy`].
//!
//! ```no_run
//! use idem_client::{Error, Idempotency, SendIdempotent};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(Idempotency::new())
//!     .build();
//! match client.post("http://127.0.0.1:3000/v1/payments").body("{..}").send_idempotent().await {
//!     Ok(sent) => {
//!         let replayed = sent.replayed();
//!         println!("{} (replayed: {replayed})", sent.response.text().await?);
//!     }
//!     Err(Error::KeyReused(failure)) => panic!("a bug: one key, two requests: {failure}"),
//!     // Ran long ago (the server remembers the key past its TTL): look the payment up.
//!     Err(Error::KeyExpired(expired)) => println!("already paid: {:?}", expired.biz_no),
//!     Err(e) => eprintln!("outcome unknown; retry later with key {:?}: {e}", e.key()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The crate depends on reqwest without TLS: enable reqwest's `rustls` (or `native-tls`)
//! feature in the application for `https` URLs. It does not depend on idem's server crates.
//! `docs/guides/clients.md` explains what is retried and why.

#[cfg(feature = "tonic")]
pub mod tonic;

mod error;
mod middleware;
mod policy;
mod retry_after;

pub use error::{
    Delivery, Error, Failure, GaveUp, KeyExpired, LastAttempt, Problem, SendIdempotent, Sent,
};
pub use middleware::{IDEMPOTENCY_KEY, Idempotency};
pub use policy::{IDEMPOTENT_REPLAYED, RetryPolicy, Verdict, classify, is_replayed};
pub use retry_after::parse_retry_after;
