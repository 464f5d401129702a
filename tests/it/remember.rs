//! `#[idempotent(remember = "..")]` over real sockets, on every store, with the store's clock
//! moved across both windows: within the TTL a retry is replayed; past it, within the remember
//! window, it is answered `410 key-expired` with the business number and the handler does not
//! run; another payload is `422` all along; past the window the key is a new operation. The
//! actix-web twin is `actix::remembered_over_a_socket`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idem::axum::Json;
use idem::store::ManualClock;
use idem::{Idem, idempotent};
use serde_json::Value;

use crate::backends::{Fixture, backend_tests, on_clocked_store};
use crate::payments::send;
use crate::servers::unique;
use crate::wait::{App, CreatePayment, Payment, pay};

/// The TTL and the remember window of the handlers below.
pub(crate) const TTL: Duration = Duration::from_secs(3600);
pub(crate) const REMEMBER: Duration = Duration::from_secs(36_000);

#[idempotent(scope = global, ttl = "1h", remember = "10h", lease = "5s")]
async fn remembers(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    (StatusCode::CREATED, Json(pay(&app, req).await))
}

/// The scenario, whatever the front serving `path` at `addr` (the handler of `app`, with the
/// TTL and remember window above, on a store reading `clock`).
pub(crate) async fn remembered_over_a_socket(
    addr: SocketAddr,
    path: &str,
    app: &App,
    clock: &ManualClock,
) {
    let key = unique("remember");
    let post = |amount: u64| {
        let (key, path) = (key.clone(), path.to_owned());
        async move {
            let body = format!(r#"{{"amount":{amount}}}"#);
            send(
                addr,
                "POST",
                &path,
                &[("Idempotency-Key", &key)],
                Some(&body),
            )
            .await
        }
    };
    let first = post(100).await;
    assert_eq!(first.status, 201);
    let paid: Value = serde_json::from_slice(&first.body).unwrap();
    // Within the TTL: replayed; another payload refused.
    let replay = post(100).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body);
    let reused = post(200).await;
    assert_eq!(reused.status, 422);
    let reused: Value = serde_json::from_slice(&reused.body).unwrap();

    clock.advance(TTL + Duration::from_secs(1));
    let expired = post(100).await;
    assert_eq!(
        expired.status,
        410,
        "{}",
        String::from_utf8_lossy(&expired.body)
    );
    assert_eq!(
        expired.header("content-type"),
        Some("application/problem+json")
    );
    let problem: Value = serde_json::from_slice(&expired.body).unwrap();
    assert!(
        problem["type"].as_str().unwrap().ends_with("#key-expired"),
        "{problem}"
    );
    assert_eq!(problem["status"], 410);
    assert_eq!(problem["biz_no"], paid["id"], "{problem}");
    assert_eq!(problem["operation_id"], app.runs()[0].as_str());
    assert_eq!(problem["response_status"], 201);
    assert_eq!(problem["idempotency_key"], key.as_str());
    for time in ["completed_at", "expired_at", "remember_until"] {
        let at = problem[time]
            .as_str()
            .unwrap_or_else(|| panic!("{time}: {problem}"));
        assert!(at.ends_with('Z') && at.len() == 24, "{time}: {at}");
    }
    assert!(problem["expired_at"].as_str() < problem["remember_until"].as_str());
    // The 422 says until when the key stays bound to its first request: the remember window.
    assert_eq!(
        reused["key_expires_at"], problem["remember_until"],
        "{reused}"
    );
    assert_eq!(app.runs().len(), 1, "the handler ran again past the TTL");
    let reused = post(200).await;
    assert_eq!(reused.status, 422, "another payload, past the TTL");
    let reused: Value = serde_json::from_slice(&reused.body).unwrap();
    assert_eq!(reused["key_expires_at"], problem["remember_until"]);

    clock.advance(REMEMBER);
    let again = post(200).await;
    assert_eq!(again.status, 201, "past the remember window the key is new");
    let runs = app.runs();
    assert_eq!(runs.len(), 2);
    assert_ne!(runs[0], runs[1], "a new operation");
}

async fn axum_remembered_over_a_socket(fx: &Fixture) {
    let app = App::new(Idem::from_arc(fx.store.clone()), usize::MAX >> 4);
    let router = Router::new()
        .route("/remembers", post(remembers))
        .with_state(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(axum::serve(listener, router).into_future());
    remembered_over_a_socket(addr, "/remembers", &app, fx.clock()).await;
    served.abort();
}

/// The same with the records sealed at rest (`Idem::with_encryption`): past the TTL the `410`
/// carries the business number, also once the purge has freed the response (the record's
/// sealed receipt keeps it), and the handler does not run again.
async fn sealed_and_freed_over_a_socket(fx: &Fixture) {
    let idem =
        Idem::from_arc(fx.store.clone()).with_encryption(crate::encryption::ring(&[("k1", 1)]));
    let app = App::new(idem, usize::MAX >> 4);
    let router = Router::new()
        .route("/remembers", post(remembers))
        .with_state(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(axum::serve(listener, router).into_future());
    let key = unique("remember-sealed");
    let post = || {
        let key = key.clone();
        async move {
            let body = r#"{"amount":100}"#;
            send(
                addr,
                "POST",
                "/remembers",
                &[("Idempotency-Key", &key)],
                Some(body),
            )
            .await
        }
    };
    let first = post().await;
    assert_eq!(first.status, 201);
    let paid: Value = serde_json::from_slice(&first.body).unwrap();
    fx.clock().advance(TTL + Duration::from_secs(1));
    for freed in [false, true] {
        if freed {
            // Other tests' records may share the table: at least this one is freed.
            assert!(fx.store.purge_responses(10_000).await.unwrap() >= 1);
        }
        let expired = post().await;
        assert_eq!(expired.status, 410, "freed: {freed}");
        let problem: Value = serde_json::from_slice(&expired.body).unwrap();
        assert_eq!(problem["biz_no"], paid["id"], "freed: {freed}: {problem}");
        assert_eq!(problem["operation_id"], app.runs()[0].as_str());
    }
    assert_eq!(app.runs().len(), 1);
    served.abort();
}

backend_tests!(
    2,
    on_clocked_store,
    [memory, sqlite, postgres, mysql, redis],
    axum_remembered_over_a_socket,
    sealed_and_freed_over_a_socket,
);
