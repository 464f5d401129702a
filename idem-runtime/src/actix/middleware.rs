//! The actix [`Idempotency`] middleware: idempotency for handlers that are not annotated,
//! fingerprinting the raw JSON body with the run-time canonicalizer — the counterpart of the
//! tower `IdempotencyLayer`, with the same configuration and semantics.

use core::fmt;
use core::future::{Future, Ready, ready};
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::web::{Bytes, BytesMut};
use actix_web::{HttpMessage as _, HttpResponse, ResponseError};

use super::context::parts_of;
use super::respond::{mark_unprotected, settle};
use crate::engine::{ClaimSettings, Contract, Front, IdempotencyError, Settlement, execute};
use crate::http::invalid_body;
use crate::http::layer::{LayerConfig, is_safe, middleware_builder};
use crate::http::replay::{exact_replay, suppressed_replay};
use crate::store::Record;

/// Makes every unsafe request (`POST`, `PUT`, `PATCH`, `DELETE`, ...) through the wrapped
/// service idempotent, for actix-web handlers that are not annotated with `#[idempotent]`;
/// `GET`, `HEAD`, `OPTIONS` and `TRACE` pass through. The same configuration and answers as the
/// tower `IdempotencyLayer` (`docs/http.md`): the body read up to
/// [`body_limit`](Self::body_limit) (1 MiB; over it `413 body-too-large`) and fingerprinted under
/// a [`Spec`](crate::json::Spec) (`400 request-not-fingerprintable` when it has no canonical form), the business
/// number read from the top-level member [`biz_no_field`](Self::biz_no_field) (`"id"`) of a JSON
/// response, the operation of the [`HandlerConfig`](crate::engine::HandlerConfig) or `"<METHOD> <path>"`, `exact_replay` and
/// `suppress_only` (`latest_state` replays exactly: no lookup).
///
/// **Scope.** [`scope`](Self::scope), the handle's default scope
/// ([`Idem::with_default_scope`](crate::engine::Idem::with_default_scope)) or an explicit [`global`](Self::global): without any of them
/// the application panics when it starts (`App::wrap` builds the middleware), with a message
/// that says what to write.
///
/// ```
/// # actix_web::rt::System::new().block_on(async {
/// use actix_web::{App, HttpResponse, test, web};
/// use idem_runtime::actix::Idempotency;
/// use idem_runtime::engine::Idem;
/// use idem_runtime::json::Spec;
///
/// let spec = Spec::from_json_str(r#"{"amount": "decimal", "client_ip": "env"}"#).unwrap();
/// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
/// let app = test::init_service(
///     App::new()
///         .wrap(Idempotency::new(idem, spec).global())
///         .route("/payments", web::post().to(|| async {
///             HttpResponse::Created().content_type("application/json").body(r#"{"id":"pay_1"}"#)
///         })),
/// ).await;
/// let request = |body: &'static str| test::TestRequest::post().uri("/payments")
///     .insert_header(("idempotency-key", "k-1")).set_payload(body).to_request();
/// let first = test::call_service(&app, request(r#"{"amount":100,"client_ip":"1.2.3.4"}"#)).await;
/// assert_eq!(first.status(), 201);
/// let retry = test::call_service(&app, request(r#"{"amount":"100.00","client_ip":"5.6.7.8"}"#)).await;
/// assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
/// let other = test::call_service(&app, request(r#"{"amount":5}"#)).await;
/// assert_eq!(other.status(), 422);
/// # });
/// ```
#[derive(Clone)]
pub struct Idempotency {
    config: Arc<LayerConfig>,
}

middleware_builder!(Idempotency, "actix::Idempotency");

impl<S, B> Transform<S, ServiceRequest> for Idempotency
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Transform = IdempotencyMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    /// # Panics
    /// When the middleware has no scope: neither [`scope`](Idempotency::scope) nor
    /// [`global`](Idempotency::global), and its `Idem` handle no default scope.
    fn new_transform(&self, service: S) -> Self::Future {
        self.config.assert_scoped("actix Idempotency middleware");
        ready(Ok(IdempotencyMiddleware {
            service: Rc::new(service),
            config: self.config.clone(),
        }))
    }
}

/// The service of [`Idempotency`] (what `App::wrap` puts around the application's service).
///
/// ```
/// # actix_web::rt::System::new().block_on(async {
/// use actix_web::dev::{Service, ServiceRequest, Transform};
/// use actix_web::{HttpResponse, test};
/// use idem_runtime::{Spec, actix::{Idempotency, IdempotencyMiddleware}, engine::Idem};
///
/// let inner = actix_web::dev::fn_service(|req: ServiceRequest| async move {
///     Ok::<_, actix_web::Error>(req.into_response(HttpResponse::Created().finish()))
/// });
/// let mw = Idempotency::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new()).global();
/// let svc: IdempotencyMiddleware<_> = mw.new_transform(inner).await.unwrap();
/// let req = test::TestRequest::post().insert_header(("idempotency-key", "k-1"))
///     .set_payload("{}").to_srv_request();
/// assert_eq!(svc.call(req).await.unwrap().status(), 201);
/// # });
/// ```
pub struct IdempotencyMiddleware<S> {
    service: Rc<S>,
    config: Arc<LayerConfig>,
}

impl<S> fmt::Debug for IdempotencyMiddleware<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyMiddleware")
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for IdempotencyMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>>>>;

    fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&self, req: ServiceRequest) -> Self::Future {
        Box::pin(handle(self.config.clone(), self.service.clone(), req))
    }
}

async fn handle<S, B>(
    config: Arc<LayerConfig>,
    service: Rc<S>,
    mut req: ServiceRequest,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    // No clone of the request is kept while the inner service runs: actix routes a request
    // (`App::wrap` sits before the router) by mutating it in place, which panics when another
    // handle to it exists.
    let parts = parts_of(req.request());
    if is_safe(&parts.method) {
        return Ok(service.call(req).await?.map_into_boxed_body());
    }
    let idem = &config.idem;
    let client_key = match config.client_key(&parts) {
        Ok(key) => key,
        Err(e) => return Ok(req.into_response(idem.problem(&e, None).error_response())),
    };
    let bytes = match read_body(req.take_payload(), config.body_limit).await {
        Ok(bytes) => bytes,
        Err(BodyRead::TooLarge) => {
            let e = IdempotencyError::BodyTooLarge {
                limit: config.body_limit,
            };
            let resp = idem.problem(&e, Some(&client_key)).error_response();
            return Ok(req.into_response(resp));
        }
        Err(BodyRead::Failed(e)) => {
            let detail = format!("the request body could not be read: {e}");
            let base = idem.problem_base().map(|b| &**b);
            return Ok(req.into_response(invalid_body(400, &detail, base).error_response()));
        }
    };
    let (key, hash) = match config.key(&parts, client_key.clone(), &bytes) {
        Ok(found) => found,
        Err(e) => {
            let resp = idem.problem(&e, Some(&client_key)).error_response();
            return Ok(req.into_response(resp));
        }
    };
    req.set_payload(Payload::from(bytes));
    // The request goes to the inner service when the engine runs it, or answers a replay or a
    // rejection when it does not.
    let pending = Rc::new(Cell::new(Some(req)));
    let front = Middleware {
        config: &config,
        req: pending.clone(),
        _out: PhantomData,
    };
    let run = async move {
        let req = pending
            .take()
            .expect("the engine runs the inner service once");
        service.call(req).await
    };
    let settings = ClaimSettings::of(&config.handler);
    execute(idem, settings, key, hash, front, run).await
}

enum BodyRead {
    TooLarge,
    Failed(actix_web::error::PayloadError),
}

/// The request body, at most `limit` bytes.
async fn read_body(mut payload: Payload, limit: usize) -> Result<Bytes, BodyRead> {
    use futures_core::Stream;
    let mut body = BytesMut::new();
    while let Some(chunk) = core::future::poll_fn(|cx| Pin::new(&mut payload).poll_next(cx)).await {
        let chunk = chunk.map_err(BodyRead::Failed)?;
        if body.len() + chunk.len() > limit {
            return Err(BodyRead::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

type Out<B> = Result<ServiceResponse<B>, actix_web::Error>;
type Answer = Result<ServiceResponse<BoxBody>, actix_web::Error>;

/// The front of [`IdempotencyMiddleware`]: responses of the wrapped service, business number
/// read from the JSON body.
struct Middleware<'a, B> {
    config: &'a LayerConfig,
    /// The request, until the inner service takes it.
    req: Rc<Cell<Option<ServiceRequest>>>,
    _out: PhantomData<fn() -> B>,
}

impl<B> Middleware<'_, B> {
    /// `resp` as the answer to the request. Once the inner service has taken the request (a
    /// rejection after it started: a timeout), as an error rendered as `resp` exactly.
    fn answer(&self, resp: HttpResponse) -> Answer {
        match self.req.take() {
            Some(req) => Ok(req.into_response(resp)),
            None => Err(actix_web::error::InternalError::from_response("idempotency", resp).into()),
        }
    }
}

impl<B: MessageBody + 'static> Front for Middleware<'_, B> {
    type Out = Out<B>;
    type Answer = Answer;

    fn reject(&self, error: IdempotencyError, client_key: Option<&str>) -> Answer {
        let resp = self
            .config
            .idem
            .problem(&error, client_key)
            .error_response();
        self.answer(resp)
    }

    async fn replay(self, record: Record) -> Answer {
        let resp = match self.config.handler.contract {
            Contract::SuppressOnly => suppressed_replay(record, &self.config.biz_no_field),
            Contract::ExactReplay | Contract::LatestState => exact_replay(record),
        };
        self.answer(resp)
    }

    fn unprotected(self, out: Out<B>) -> Answer {
        let mut resp = out?.map_into_boxed_body();
        mark_unprotected(resp.response_mut());
        Ok(resp)
    }

    async fn settle(&mut self, out: Out<B>) -> (Settlement, Answer) {
        let (req, resp) = match out {
            Ok(resp) => resp.map_into_boxed_body().into_parts(),
            // The service failed without a response after it started: a retry continues the
            // operation.
            Err(e) => return (Settlement::Abandon, Err(e)),
        };
        let config = self.config;
        let disposition = config.disposition(resp.status().as_u16());
        let rules = config.rules();
        let (settlement, resp) = settle(disposition, resp, None, &rules).await;
        (settlement, Ok(ServiceResponse::new(req, resp)))
    }
}
