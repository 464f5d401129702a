//! The tower [`IdempotencyLayer`]: idempotency for handlers that are not annotated, fingerprinting
//! the raw JSON body with the run-time canonicalizer.
//!
//! The settings it shares with `#[idempotent]` handlers are one [`HandlerConfig`](crate::engine::HandlerConfig); the layer keeps
//! beside it only what a handler has no use for (spec, key header, body limit, scope, ...).

use core::fmt;
use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse as _, Response};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tower::{Layer, Service};

use super::respond::{mark_unprotected, settle};
use crate::engine::problem::INVALID_BODY;
use crate::engine::problem::Problem;
use crate::engine::{ClaimSettings, Contract, Front, IdempotencyError, Settlement, execute};
use crate::http::layer::{LayerConfig, is_safe, middleware_builder};
use crate::http::replay::{exact_replay, suppressed_replay};
use crate::store::{BoxError, Record};

/// Makes every unsafe request (`POST`, `PUT`, `PATCH`, `DELETE`, ...) through the wrapped service
/// idempotent, for handlers that are not annotated with `#[idempotent]`. `GET`, `HEAD`, `OPTIONS`
/// and `TRACE` pass through untouched.
///
/// The request body is read (up to [`body_limit`](Self::body_limit), 1 MiB by default: over it
/// `413 body-too-large`) and fingerprinted with the run-time canonicalizer under a field
/// [`Spec`](crate::json::Spec) — the same bytes as `#[derive(Fingerprint)]` for the same fields
/// ([`IdempotencyLayer::for_type`] takes the spec from a derived type). A body that is not JSON or
/// has no canonical form under the spec is `400 request-not-fingerprintable`, naming the
/// offending JSON path. Everything else is as for `#[idempotent]` handlers (`docs/http.md`):
/// `400` missing or invalid key, `422` key reused, `409` + `Retry-After` in progress, `503` +
/// `Retry-After` store unavailable, replays marked `Idempotent-Replayed: true`.
///
/// The layer sees no typed response: the business number is read from the top-level member
/// [`biz_no_field`](Self::biz_no_field) (`"id"` by default) of a JSON response body. It supports
/// `exact_replay` and `suppress_only`; having no lookup, it replays `latest_state` exactly.
/// A response body over the snapshot limit is stored as `{"<biz_no_field>": "<biz_no>"}`: the
/// business number is looked for in the part of the body already read (the limit and one chunk)
/// and, found there, the rest is streamed to the caller unread; otherwise the body is read whole
/// to find it (and stored whole without one).
///
/// Operation, contract, TTL, lease, timeout, fail-open, replay headers and snapshot size are a
/// [`HandlerConfig`](crate::engine::HandlerConfig) given to [`config`](Self::config), the type `#[idempotent]` handlers are
/// configured with. The operation (part of the scoped key) is the one of
/// [`HandlerConfig::new`](crate::engine::HandlerConfig::new) if named, otherwise ([`HandlerConfig::for_route`](crate::engine::HandlerConfig::for_route), the default)
/// `"<METHOD> <path>"` of the request: the request path, not the route template, so that a path
/// parameter (`/payments/{id}/refunds`) keeps two resources' keys apart, in RFC 3986's normal
/// form. Inside `Router::nest`, and under a named operation (stable when routes are renamed),
/// the whole path from the top of the application is hashed into the fingerprint.
/// The query string is fingerprinted with the body unless [`ignore_query`](Self::ignore_query);
/// a request without a body is fingerprinted by its path and query.
///
/// **Scope.** Keys are scoped per caller: the layer needs [`scope`](Self::scope), the router-wide
/// default scope of its [`Idem`](crate::engine::Idem) handle ([`Idem::with_default_scope`](crate::engine::Idem::with_default_scope)), or an explicit
/// [`global`](Self::global) for keys every caller shares. Without any of them, applying the layer
/// panics at router construction with a message that says what to write: a silently shared key
/// would let one tenant be answered with another tenant's stored responses.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use core::time::Duration;
/// use axum::{Router, routing::post, body::Body, http::Request};
/// use idem_runtime::json::Spec;
/// use idem_runtime::engine::{HandlerConfig, Idem};
/// use idem_runtime::axum::IdempotencyLayer;
/// use tower::ServiceExt;
///
/// let spec = Spec::from_json_str(r#"{"amount": "decimal", "currency": "any", "client_ip": "env"}"#).unwrap();
/// let layer = IdempotencyLayer::new(Idem::new(idem_runtime::store::MemoryStore::new()), spec)
///     .config(HandlerConfig::for_route().ttl(Duration::from_secs(86_400)))
///     .global(); // one client, or keys that are unique across clients
/// let app: Router = Router::new()
///     .route("/payments", post(|| async { (axum::http::StatusCode::CREATED, r#"{"id":"pay_1"}"#) }))
///     .layer(layer);
///
/// let request = |body: &'static str| Request::post("/payments")
///     .header("idempotency-key", "k-1")
///     .body(Body::from(body)).unwrap();
/// let first = app.clone().oneshot(request(r#"{"amount":100,"currency":"EUR","client_ip":"1.2.3.4"}"#)).await.unwrap();
/// assert_eq!(first.status(), 201);
/// // 100.00 == 100, and the environment field does not count.
/// let retry = app.clone().oneshot(request(r#"{"currency":"EUR","amount":"100.00","client_ip":"5.6.7.8"}"#)).await.unwrap();
/// assert_eq!(retry.headers()["idempotent-replayed"], "true");
/// let other = app.oneshot(request(r#"{"amount":5,"currency":"EUR"}"#)).await.unwrap();
/// assert_eq!(other.status(), 422);
/// # });
/// ```
#[derive(Clone)]
pub struct IdempotencyLayer {
    config: Arc<LayerConfig>,
}

middleware_builder!(IdempotencyLayer, "axum::IdempotencyLayer");

impl<S> Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    /// # Panics
    /// When the layer has no scope: neither [`scope`](IdempotencyLayer::scope) nor
    /// [`global`](IdempotencyLayer::global), and its `Idem` handle no default scope.
    fn layer(&self, inner: S) -> Idempotency<S> {
        self.config.assert_scoped("IdempotencyLayer");
        Idempotency {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The service of [`IdempotencyLayer`].
///
/// ```
/// use idem_runtime::{Spec, engine::Idem, axum::{Idempotency, IdempotencyLayer}};
/// use tower::Layer;
/// let layer = IdempotencyLayer::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new()).global();
/// let svc: Idempotency<_> = layer.layer(tower::service_fn(|_req: http::Request<axum::body::Body>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::empty()))
/// }));
/// # let _ = svc;
/// ```
#[derive(Clone)]
pub struct Idempotency<S> {
    inner: S,
    config: Arc<LayerConfig>,
}

impl<S: fmt::Debug> fmt::Debug for Idempotency<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, ResBody> Service<Request<B>> for Idempotency<S>
where
    S: Service<Request<Body>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The service that was polled ready handles this request; a clone takes its place.
        let clone = self.inner.clone();
        let inner = core::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            inner: Box::pin(handle(self.config.clone(), inner, req)),
        }
    }
}

/// The response future of [`Idempotency`].
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture<E> {
    inner: Pin<Box<dyn Future<Output = Result<Response, E>> + Send>>,
}

impl<E> fmt::Debug for ResponseFuture<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<E> Future for ResponseFuture<E> {
    type Output = Result<Response, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

async fn handle<S, B, ResBody>(
    config: Arc<LayerConfig>,
    mut inner: S,
    req: Request<B>,
) -> Result<Response, S::Error>
where
    S: Service<Request<Body>, Response = http::Response<ResBody>>,
    S::Future: Send,
    S::Error: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    if is_safe(req.method()) {
        return Ok(inner.call(req.map(Body::new)).await?.map(Body::new));
    }
    let (parts, body) = req.into_parts();
    let client_key = match config.client_key(&parts) {
        Ok(key) => key,
        Err(e) => return Ok(config.idem.problem(&e, None).into_response()),
    };
    let bytes = match Limited::new(body, config.body_limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            let e = IdempotencyError::BodyTooLarge {
                limit: config.body_limit,
            };
            return Ok(config.idem.problem(&e, Some(&client_key)).into_response());
        }
        Err(e) => {
            let detail = format!("the request body could not be read: {e}; send it again");
            let p = Problem::new(INVALID_BODY, "Invalid request body", 400, detail);
            let base = config.idem.problem_base().map(|b| &**b);
            return Ok(p.rebase_onto(base).into_response());
        }
    };
    let (key, hash) = match config.key(&parts, client_key.clone(), &bytes) {
        Ok(found) => found,
        Err(e) => return Ok(config.idem.problem(&e, Some(&client_key)).into_response()),
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    super::respond::ProblemBase::insert(&config.idem, req.extensions_mut());
    let settings = ClaimSettings::of(&config.handler);
    let front = Layered {
        config: &config,
        _out: PhantomData,
    };
    // `call` only once the claim says run: a service may start its work in `call` itself
    // (tower allows it; `service_fn`'s closure runs there), before its future is polled.
    let run = async move { inner.call(req).await };
    execute(&config.idem, settings, key, hash, front, run).await
}

/// The front of [`Idempotency`]: responses of the wrapped service, business number read from the
/// JSON body.
struct Layered<'a, E, ResBody> {
    config: &'a LayerConfig,
    _out: PhantomData<fn() -> (E, ResBody)>,
}

impl<E, ResBody> Front for Layered<'_, E, ResBody>
where
    E: Send,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Out = Result<http::Response<ResBody>, E>;
    type Answer = Result<Response, E>;

    fn reject(&self, error: IdempotencyError, client_key: Option<&str>) -> Self::Answer {
        Ok(self.config.idem.problem(&error, client_key).into_response())
    }

    async fn replay(self, record: Record) -> Self::Answer {
        Ok(match self.config.handler.contract {
            Contract::SuppressOnly => suppressed_replay(record, &self.config.biz_no_field),
            Contract::ExactReplay | Contract::LatestState => exact_replay(record),
        })
    }

    fn unprotected(self, out: Self::Out) -> Self::Answer {
        let mut resp = out?.map(Body::new);
        mark_unprotected(&mut resp);
        Ok(resp)
    }

    async fn settle(&mut self, out: Self::Out) -> (Settlement, Self::Answer) {
        let resp = match out {
            Ok(resp) => resp.map(Body::new),
            // The service failed without a response after it started: a retry continues the
            // operation.
            Err(e) => return (Settlement::Abandon, Err(e)),
        };
        let config = self.config;
        let disposition = config.disposition(resp.status().as_u16());
        let rules = config.rules();
        let (settlement, resp) = settle(disposition, resp, None, &rules).await;
        (settlement, Ok(resp))
    }
}
