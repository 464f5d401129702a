//! Item 3, the zombie holder (S23), with real faults and no knob: process A claims a key and
//! runs the handler (`PAYMENTS_DELAY_MS` makes it slow); A is frozen with `SIGSTOP` before the
//! handler's effect, past its 10 s lease (nobody renews it); a retry through process B gets `409`
//! until the lease ends, then takes the operation over (fence 2, the same operation id). A is then
//! thawed with `SIGCONT` and finishes its handler, a zombie:
//!
//! The example creates payments in idem's atomic mode: the payment row and the stored result
//! commit in one transaction, with the completion fenced inside it.
//!
//! * `AfterTheRetryStored`: B has stored its result. The zombie's payment insert hits the unique
//!   constraint on the operation id (no second payment), its transaction rolls back, the fence
//!   refuses its record, and its client is answered the stored result (a replay,
//!   byte-identical to B's answer).
//! * `BeforeTheRetryWrites`: B is frozen too, right after its takeover, before its own effect;
//!   the zombie wakes and **writes the payment first**, in its transaction; its completion in
//!   that transaction matches no record (fenced), so the payment rolls back with it and its
//!   client is answered `409` (B holds the operation); then B is thawed, writes the payment and
//!   stores its result; the zombie's client, retrying, gets that replay.
//!
//! Either way: one payment, carrying the operation id of the first claim; one stored result
//! (fence 2); no client told anything that contradicts it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{self, Response};
use super::fleet::{Backend, Database, Fleet, PaymentRow, RecordRow};
use super::report;
use crate::servers::unique;

/// The example's handler runs this long (after its claim, before its effect).
const HANDLER_MS: u64 = 3_000;
/// The example's lease (`lease = "10s"` on `create_payment`).
const LEASE: Duration = Duration::from_secs(10);
/// Far beyond a lease plus the handler: a hang detector.
const PATIENCE: Duration = Duration::from_secs(90);
/// From the claim seen in the database to the freeze: long enough for the process to have
/// begun its transaction, far shorter than the handler.
const SETTLE: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy)]
pub enum Wake {
    /// The zombie wakes after the retry stored its result.
    AfterTheRetryStored,
    /// The zombie wakes while the retry that took over is frozen before its effect.
    BeforeTheRetryWrites,
}

/// Runs the scenario on `backend` (nothing when its server is not configured).
pub async fn zombie(backend: Backend, wake: Wake) {
    let Some(db) = backend.database().await else {
        return;
    };
    let fleet = Fleet::start(&db, 2, &[("PAYMENTS_DELAY_MS", HANDLER_MS.to_string())]).await;
    // Freezing a process before its effect races with its handler (3 s of margin): when it lost,
    // the attempt says so and the scenario runs again with a new key.
    for _ in 0..3 {
        if let Some(line) = once(&db, &fleet, wake).await {
            report(&format!("zombie [{}, {wake:?}]: {line}", backend.name()));
            return;
        }
    }
    panic!(
        "{}: no process could be frozen in its handler before its effect in 3 attempts",
        backend.name()
    );
}

/// Polls `what` every 20 ms until it yields, for at most [`PATIENCE`].
async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "waited {PATIENCE:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn payments_of(db: &Database, order: &str) -> Vec<PaymentRow> {
    let mut rows = db.payments().await;
    rows.retain(|p| p.order_id == order);
    rows
}

/// Sends `raw` to `addr` until the answer is neither `409` nor `503`; that answer and the
/// number of `409`s before it.
async fn retry(addr: std::net::SocketAddr, raw: Vec<u8>) -> (Response, u32) {
    let mut conflicts = 0;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < PATIENCE,
            "{addr}: no answer but 409/503"
        );
        match client::exchange(addr, &raw, PATIENCE).await {
            Ok(r) if r.status == 409 || r.status == 503 => {
                assert!(r.retry_after().is_some(), "{}", r.text());
                if r.status == 409 {
                    conflicts += 1;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Ok(r) => return (r, conflicts),
            Err(e) => panic!("{addr}: {e}"),
        }
    }
}

/// One key through the scenario; `None` when a process could not be frozen in its handler
/// before its effect.
async fn once(db: &Database, fleet: &Fleet, wake: Wake) -> Option<String> {
    let addrs = fleet.addrs();
    let key = unique("zombie");
    let order = format!("ord-{key}");
    let body =
        json!({"amount": "42.00", "currency": "EUR", "customer_id": "cus_z", "order_id": order})
            .to_string();
    let raw = client::request(
        "POST",
        "/v1/payments",
        &[("Idempotency-Key", &key)],
        Some(&body),
    );

    // A claims and starts its handler; it is frozen before its effect.
    let a_addr = addrs[0];
    let a_raw = raw.clone();
    let a_client = tokio::spawn(async move { client::exchange(a_addr, &a_raw, PATIENCE).await });
    let claimed: RecordRow = until("A's claim", || db.record(&key)).await;
    // A begins its transaction right after the claim, then sleeps in its handler: freezing it a
    // little later finds it in the handler, not inside a store call (see `InAStoreCall`).
    tokio::time::sleep(SETTLE).await;
    fleet.signal(0, "STOP");
    let frozen_at = Instant::now();
    let record = db.record(&key).await.unwrap();
    // A's effect (its payment, then its completion, in one transaction) begins HANDLER_MS after
    // its claim: uncommitted, neither shows in the checks below, and a completion begun holds the
    // record's row, which the takeover would then wait for until A is thawed. A claim this young
    // when read after the freeze proves the freeze came first, however late this test saw the
    // claim on a loaded machine.
    let young = record.lease_age_ms < HANDLER_MS as i64 - 500;
    if record.state != 0 || record.fence != 1 || !young || !payments_of(db, &order).await.is_empty()
    {
        fleet.signal(0, "CONT");
        let _ = a_client.await;
        report(&format!(
            "zombie: {key}: A was not frozen before its effect; once more"
        ));
        return None;
    }
    let op = claimed.operation_id.clone();
    let expected_id = format!("pay_{}", op.replace('-', ""));

    // B retries: 409 while A's lease runs, then it takes the operation over.
    let b_client = tokio::spawn(retry(addrs[1], raw.clone()));
    let mut zombie_rolled_back = false;
    let frozen_for;
    let (a, b, b_conflicts) = match wake {
        Wake::AfterTheRetryStored => {
            let (b, conflicts) = b_client.await.unwrap();
            fleet.signal(0, "CONT");
            frozen_for = frozen_at.elapsed();
            let a = a_client
                .await
                .unwrap()
                .expect("the zombie's client is answered");
            (a, b, conflicts)
        }
        Wake::BeforeTheRetryWrites => {
            until("B's takeover", || async {
                db.record(&key).await.filter(|r| r.fence >= 2).map(drop)
            })
            .await;
            fleet.signal(1, "STOP");
            // As for A: B's takeover read young after the freeze proves B had not begun its effect.
            let taken = db.record(&key).await.unwrap();
            let young = taken.lease_age_ms < HANDLER_MS as i64 - 500;
            if !young || !payments_of(db, &order).await.is_empty() {
                fleet.signal(1, "CONT");
                fleet.signal(0, "CONT");
                let _ = (a_client.await, b_client.await);
                report(&format!(
                    "zombie: {key}: B was not frozen before its effect; once more"
                ));
                return None;
            }
            fleet.signal(0, "CONT");
            frozen_for = frozen_at.elapsed();
            let a = a_client
                .await
                .unwrap()
                .expect("the zombie's client is answered");
            // The zombie wrote its payment in its transaction, whose fenced completion matched
            // no record: the payment rolled back with it.
            let rows = payments_of(db, &order).await;
            assert!(rows.is_empty(), "the zombie's payment committed: {rows:?}");
            zombie_rolled_back = true;
            fleet.signal(1, "CONT");
            let (b, conflicts) = b_client.await.unwrap();
            (a, b, conflicts)
        }
    };

    // B took the operation over (it waited for the lease: 409s), ran, and stored its answer,
    // under the first claim's operation id.
    assert_eq!((b.status, b.replayed()), (201, false), "B: {}", b.text());
    assert!(b_conflicts > 0, "B never saw the running lease (409)");
    let b_body: Value = serde_json::from_slice(&b.body).unwrap();
    assert_eq!(b_body["payment_id"], expected_id.as_str());
    // The zombie's client: what a retry sees, never something that contradicts the record.
    let a_seen = format!("{} (replayed: {})", a.status, a.replayed());
    // Frozen inside a store call after all (a loaded machine took longer than `SETTLE` to begin
    // the transaction): when A woke, that call's deadline had passed, and A answered `503` +
    // `Retry-After` without running its handler. A correct answer, but no zombie: checked like
    // the others, then the scenario runs again.
    let in_a_store_call = a.status == 503 && a.problem().as_deref() == Some("store-unavailable");
    if in_a_store_call {
        assert!(a.retry_after().is_some(), "A: {}", a.text());
        let (again, _) = retry(addrs[0], raw.clone()).await;
        assert_eq!((again.status, again.replayed()), (201, true));
        assert_eq!(again.body, b.body, "A's client, retrying, gets the replay");
    } else {
        match wake {
            Wake::AfterTheRetryStored => {
                assert_eq!((a.status, a.replayed()), (201, true), "A: {}", a.text());
                assert_eq!(a.body, b.body, "the zombie's client gets the stored answer");
            }
            Wake::BeforeTheRetryWrites => {
                assert_eq!(a.status, 409, "A: {}", a.text());
                assert_eq!(a.problem().as_deref(), Some("in-progress"));
                assert!(a.retry_after().is_some());
                let (again, _) = retry(addrs[0], raw.clone()).await;
                assert_eq!((again.status, again.replayed()), (201, true));
                assert_eq!(
                    again.body, b.body,
                    "the zombie's client, retrying, gets the replay"
                );
            }
        }
    }
    // One payment, of the first claim's operation; one stored result, by the takeover (fence 2).
    let rows = payments_of(db, &order).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].payment_id.as_str(), rows[0].operation_id.as_str()),
        (expected_id.as_str(), op.as_str())
    );
    let record = db.record(&key).await.unwrap();
    assert_eq!((record.state, record.fence), (1, 2), "{record:?}");
    assert_eq!(record.operation_id, op);
    for addr in &addrs {
        let replay = client::exchange(*addr, &raw, PATIENCE).await.unwrap();
        assert_eq!((replay.status, replay.replayed()), (201, true));
        assert_eq!(replay.body, b.body);
    }
    if in_a_store_call {
        report(&format!(
            "zombie: {key}: A was frozen inside a store call and answered {a_seen} on waking; \
             once more"
        ));
        return None;
    }
    Some(format!(
        "A frozen {:.1} s (lease {} s); B: {b_conflicts} x 409, then took over (fence 2, same \
         operation) and answered 201; the zombie's client got {a_seen}; payments 1 ({}); record \
         completed at fence 2",
        frozen_for.as_secs_f64(),
        LEASE.as_secs(),
        if zombie_rolled_back {
            "written by B; the zombie's rolled back with its fenced completion"
        } else {
            "written by B; the zombie's insert hit the unique constraint"
        }
    ))
}
