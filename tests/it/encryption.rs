//! Encryption at rest (`Idem::with_encryption`) through an `#[idempotent]` axum handler, in
//! process, on every store: what the store holds has nothing readable of the response or of
//! the client key, the replay is the original byte for byte, a rotation keeps older records
//! replaying, and a record that does not open (its key gone, or another key under its id) is
//! answered `503 record-sealed` with `Retry-After`, never replayed as ciphertext and never run
//! again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem::axum::Json;
use idem::key::ScopedKey;
use idem::seal::{KeyRing, SEALED};
use idem::store::Store;
use idem::{Fingerprint, Idem, Snapshot, idempotent};
use tower::ServiceExt;

use crate::backends::{Fixture, backend_tests, on_store};
use crate::servers::unique;

#[derive(Clone)]
struct App {
    idem: Idem,
    runs: Arc<AtomicU64>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: String,
    customer_id: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    payment_id: String,
    amount: String,
    customer_id: String,
}

#[idempotent(scope = global, contract = "exact_replay", headers = ["location"])]
async fn create_payment(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, [(&'static str, String); 1], Json<Payment>) {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let payment_id = format!("pay_secret_{n}");
    (
        StatusCode::CREATED,
        [("location", format!("/v1/payments/{payment_id}"))],
        Json(Payment {
            payment_id,
            amount: req.amount,
            customer_id: req.customer_id,
        }),
    )
}

/// A router over `store`, encrypting with `ring` (or not), counting its handler's runs.
pub(crate) fn app(store: &Arc<dyn Store>, ring: Option<KeyRing>) -> (Router, Arc<AtomicU64>) {
    let mut idem = Idem::from_arc(store.clone());
    if let Some(ring) = ring {
        idem = idem.with_encryption(ring);
    }
    let runs = Arc::new(AtomicU64::new(0));
    let router = Router::new()
        .route("/payments", post(create_payment))
        .with_state(App {
            idem,
            runs: runs.clone(),
        });
    (router, runs)
}

pub(crate) fn ring(spec: &[(&str, u8)]) -> KeyRing {
    let (&(primary, byte), older) = spec.split_first().unwrap();
    older.iter().fold(
        KeyRing::new(primary, [byte; 32]).unwrap(),
        |ring, &(id, byte)| ring.with_older(id, [byte; 32]).unwrap(),
    )
}

const BODY: &str = r#"{"amount":"100.00","customer_id":"cus_secret_42"}"#;

pub(crate) struct Answer {
    pub status: StatusCode,
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub location: Option<String>,
    pub body: Vec<u8>,
}

pub(crate) async fn pay(router: &Router, key: &str) -> Answer {
    pay_with(router, key, BODY).await
}

/// [`pay`] with a body of the caller's.
pub(crate) async fn pay_with(router: &Router, key: &str, body: &str) -> Answer {
    let req = Request::post("/payments")
        .header(CONTENT_TYPE, "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_owned()))
        .unwrap();
    let res = router.clone().oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let header = |name| {
        parts
            .headers
            .get(name)
            .map(|v: &axum::http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    Answer {
        status: parts.status,
        replayed: header("idempotent-replayed").as_deref() == Some("true"),
        retry_after: header(RETRY_AFTER.as_str()),
        location: header("location"),
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

pub(crate) fn scoped(key: &str) -> ScopedKey {
    ScopedKey::new::<&str>(&[], "POST /payments", key).unwrap()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Nothing readable at rest: the store's record of a sealed answer holds neither the customer,
/// the amount, the payment id, the `Location` nor the client key, and the replay is the
/// original byte for byte, headers included.
async fn sealed_at_rest_replayed_in_full(fx: &Fixture) {
    let (router, runs) = app(&fx.store, Some(ring(&[("k1", 1)])));
    let key = unique("client-key-secret");
    let first = pay(&router, &key).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let again = pay(&router, &key).await;
    assert!(again.replayed);
    assert_eq!(
        (again.body.clone(), again.location.clone()),
        (first.body.clone(), first.location.clone())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let record = fx.store.get(&scoped(&key)).await.unwrap().expect("stored");
    assert_eq!(record.headers.len(), 1);
    assert_eq!(record.headers[0].0, SEALED);
    // The business number column holds the record's receipt, sealed too.
    let receipt = record.biz_no.clone().expect("a receipt");
    assert!(receipt.starts_with(idem::seal::RECEIPT), "{receipt}");
    assert!(!contains(receipt.as_bytes(), "pay_secret_1"), "{receipt}");
    for secret in [
        "cus_secret_42",
        "100.00",
        "pay_secret_1",
        "/v1/payments",
        &key,
    ] {
        assert!(
            !contains(&record.body, secret),
            "{secret} readable in the body"
        );
        assert!(
            !contains(&record.headers[0].1, secret),
            "{secret} readable in the headers"
        );
        assert!(
            !record.key.contains(secret),
            "{secret} readable in the key: {}",
            record.key
        );
    }
    assert!(
        record.key.starts_with("POST /payments:sealed:"),
        "{}",
        record.key
    );
}

/// A rotation: the new primary seals new records, the older key still opens the records it
/// sealed; once it is dropped from the ring, those answer `503 record-sealed` (with
/// `Retry-After`), are not run again, and keep their record for when the key comes back.
async fn rotation_keeps_older_records(fx: &Fixture) {
    let (before, runs_before) = app(&fx.store, Some(ring(&[("k1", 1)])));
    let old = unique("rot-old");
    let first = pay(&before, &old).await;
    assert_eq!(first.status, StatusCode::CREATED);

    let (rotated, runs) = app(&fx.store, Some(ring(&[("k2", 2), ("k1", 1)])));
    let replay = pay(&rotated, &old).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
    let new = unique("rot-new");
    assert_eq!(pay(&rotated, &new).await.status, StatusCode::CREATED);
    let meta = &fx.store.get(&scoped(&new)).await.unwrap().unwrap().headers[0].1;
    assert_eq!(&meta[1..], b"k2", "sealed under the new primary");

    let (dropped, runs_dropped) = app(&fx.store, Some(ring(&[("k2", 2)])));
    let refused = pay(&dropped, &old).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.retry_after.as_deref(), Some("30"));
    let problem: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert!(
        problem["type"].as_str().unwrap().ends_with("record-sealed"),
        "{problem}"
    );
    assert!(pay(&dropped, &new).await.replayed);
    assert_eq!(
        runs_before.load(Ordering::SeqCst)
            + runs.load(Ordering::SeqCst)
            + runs_dropped.load(Ordering::SeqCst),
        2,
        "one run per key"
    );
    // Put back, it opens again: nothing was overwritten.
    assert_eq!(pay(&rotated, &old).await.body, first.body);
}

/// Switching encryption off: a ring that seals nothing still opens what its keys sealed, and
/// stores new records in plaintext (their readable key too), which a handle without any ring
/// replays; the sealed ones need the ring until `idem rekey --unseal` opened them.
async fn switching_it_off_keeps_every_record(fx: &Fixture) {
    let (sealing, runs_sealing) = app(&fx.store, Some(ring(&[("k1", 1)])));
    let sealed = unique("off-sealed");
    let first = pay(&sealing, &sealed).await;
    assert_eq!(first.status, StatusCode::CREATED);

    let (off, runs_off) = app(&fx.store, Some(ring(&[("k1", 1)]).sealing_nothing()));
    let replay = pay(&off, &sealed).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
    let plain = unique("off-plain");
    let new = pay(&off, &plain).await;
    assert_eq!(new.status, StatusCode::CREATED);
    let stored = fx.store.get(&scoped(&plain)).await.unwrap().unwrap();
    assert_eq!(stored.body, new.body, "stored in plaintext");
    assert_eq!(stored.key, scoped(&plain).readable());

    let (none, runs_none) = app(&fx.store, None);
    assert_eq!(pay(&none, &plain).await.body, new.body);
    assert_eq!(
        pay(&none, &sealed).await.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "sealed: needs the ring until rekey --unseal"
    );
    let runs = [runs_sealing, runs_off, runs_none].map(|r| r.load(Ordering::SeqCst));
    assert_eq!(runs.iter().sum::<u64>(), 2, "one run per key: {runs:?}");
}

/// Another key under the same id (the tag does not verify) and a handle without any key both
/// refuse a sealed record, rather than replaying what they cannot read.
async fn unopenable_records_are_never_replayed(fx: &Fixture) {
    let (sealing, _) = app(&fx.store, Some(ring(&[("k1", 1)])));
    let key = unique("unopenable");
    assert_eq!(pay(&sealing, &key).await.status, StatusCode::CREATED);
    for other in [Some(ring(&[("k1", 9)])), None] {
        let (router, runs) = app(&fx.store, other);
        let answer = pay(&router, &key).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!contains(&answer.body, "pay_secret"));
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }
    assert!(pay(&sealing, &key).await.replayed);
}

/// Records written before encryption was turned on replay as they are while the ring accepts
/// plaintext (the switch); a ring that does not — where every response is sealed, a plaintext
/// one can only have been written by someone else — answers `503 record-sealed`, runs nothing
/// and leaves the record.
async fn plaintext_records_replay_after_turning_it_on(fx: &Fixture) {
    let (plain, _) = app(&fx.store, None);
    let key = unique("before");
    let first = pay(&plain, &key).await;
    let (sealing, runs) = app(&fx.store, Some(ring(&[("k1", 1)]).accepting_plaintext()));
    let replay = pay(&sealing, &key).await;
    assert!(replay.replayed);
    assert_eq!(
        (&replay.body, &replay.location),
        (&first.body, &first.location)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let (strict, strict_runs) = app(&fx.store, Some(ring(&[("k1", 1)])));
    let refused = pay(&strict, &key).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    let problem: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert!(
        problem["type"].as_str().unwrap().ends_with("record-sealed"),
        "{problem}"
    );
    assert_eq!(strict_runs.load(Ordering::SeqCst), 0);
    assert!(
        pay(&sealing, &key).await.replayed,
        "the record is left as it was"
    );
}

/// The same on MariaDB's one-statement claim, which reads the row it met and must know it for
/// its own key although its readable form changed (`key:sealed:<hash>` now, plaintext before).
#[tokio::test]
async fn mysql_one_statement_claims_find_records_written_before_turning_it_on() {
    let Some(url) = crate::backends::Backend::Mysql.url() else {
        return;
    };
    let store = idem::MySqlStore::connect(&url)
        .await
        .unwrap()
        .with_one_round_trip_replays();
    store.migrate().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let (plain, _) = app(&store, None);
    let key = unique("before-returning");
    let first = pay(&plain, &key).await;
    let (sealing, runs) = app(&store, Some(ring(&[("k1", 1)]).accepting_plaintext()));
    let replay = pay(&sealing, &key).await;
    assert_eq!(
        replay.status, first.status,
        "not 503: the claim found its row"
    );
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A flipped byte in the stored ciphertext (a tampered row, a bad disk, a restored backup
/// that was altered): `503 record-sealed`, the handler not run again, the row left as it is.
async fn a_flipped_byte_is_never_replayed(fx: &Fixture) {
    let (router, runs) = app(&fx.store, Some(ring(&[("k1", 1)])));
    let key = unique("flipped");
    assert_eq!(pay(&router, &key).await.status, StatusCode::CREATED);
    let records = fx.records();
    let before = records.body(&scoped(&key)).await.unwrap();
    records
        .flip_body_byte(&scoped(&key), before.len() / 2)
        .await;
    let refused = pay(&router, &key).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    let problem: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert!(
        problem["type"].as_str().unwrap().ends_with("record-sealed"),
        "{problem}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not run again");
    let after = records.body(&scoped(&key)).await.unwrap();
    assert_eq!(after.len(), before.len());
    assert_ne!(after, before, "the tampered row stays for inspection");
}

// Not on the memory store, which holds nothing at rest: a flipped byte there is a fault of the
// process's own memory.
backend_tests!(
    2,
    on_store,
    [sqlite, postgres, mysql, redis],
    a_flipped_byte_is_never_replayed,
);

backend_tests!(
    2,
    on_store,
    [memory, sqlite, postgres, mysql, redis],
    sealed_at_rest_replayed_in_full,
    rotation_keeps_older_records,
    unopenable_records_are_never_replayed,
    plaintext_records_replay_after_turning_it_on,
    switching_it_off_keeps_every_record,
);
