//! The shared store suite: every function runs against every backend (see `store_suite!`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, Completion, Lease, Outcome, RecordState, Store, StoreError,
};

use crate::support::*;

async fn acquire(store: &dyn Store, req: &ClaimRequest<'_>) -> Lease {
    match store.claim(req).await.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn snapshot() -> Completion {
    Completion::new(
        Outcome::Completed,
        201,
        br#"{"id":"pay_1","amount":"100.00"}"#.to_vec(),
    )
    .with_headers(vec![
        ("content-type".to_owned(), b"application/json".to_vec()),
        ("x-binary".to_owned(), vec![0, 1, 254, 255]),
        ("location".to_owned(), b"/payments/pay_1".to_vec()),
    ])
    .with_biz_no("PAY-2026-0001")
}

fn assert_fenced(r: Result<impl std::fmt::Debug, StoreError>) {
    match r {
        Err(StoreError::FencedOut { .. }) => {}
        other => panic!("expected FencedOut, got {other:?}"),
    }
}

pub async fn first_claim(f: &Fixture) {
    let key = unique_key("first");
    let h = hash("a");
    let lease = acquire(&*f.store, &req(&key, h)).await;
    assert_eq!(lease.fence, 1);
    assert!(!lease.took_over);
    assert_eq!(lease.operation_id.len(), 36);
    assert_eq!(lease.lease_until, f.now() + LEASE);
    assert_eq!(lease.expire_at, f.now() + TTL);
    let rec = f.store.get(&key).await.unwrap().expect("record");
    assert_eq!(rec.state, RecordState::Processing);
    assert_eq!(rec.request_hash, h);
    assert_eq!(rec.key, key.readable());
    assert_eq!(rec.operation_id, lease.operation_id);
    assert_eq!(rec.status, None);
    assert_eq!(rec.locked_at, f.now());
}

/// A TTL no store can count in ms from now (`Duration::MAX`, as a "keep for ever" setting
/// might write it) is kept as the longest one they do (`MAX_DURATION`), never refused.
pub async fn ttl_beyond_what_a_store_counts(f: &Fixture) {
    let key = unique_key("forever");
    let forever = ClaimRequest::new(&key, hash("a"), LEASE, Duration::MAX);
    let lease = acquire(&*f.store, &forever).await;
    assert_eq!(lease.expire_at, f.now() + idem_runtime::store::MAX_DURATION);
    f.store
        .complete(&lease, &snapshot())
        .await
        .expect("stored for as long as the store counts");
    assert!(matches!(
        f.store.claim(&forever).await.unwrap(),
        Claim::Completed(_)
    ));
}

pub async fn duplicate_while_processing(f: &Fixture) {
    let key = unique_key("dup");
    let h = hash("a");
    acquire(&*f.store, &req(&key, h)).await;
    f.advance(Duration::from_secs(10));
    match f.store.claim(&req(&key, h)).await.unwrap() {
        Claim::InProgress {
            request_hash,
            retry_after,
        } => {
            assert_eq!(request_hash, h);
            assert_eq!(retry_after, LEASE - Duration::from_secs(10));
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    // Another payload under the same key sees the holder's hash (the engine answers 422).
    match f.store.claim(&req(&key, hash("b"))).await.unwrap() {
        Claim::InProgress { request_hash, .. } => assert_eq!(request_hash, h),
        other => panic!("expected InProgress, got {other:?}"),
    }
}

pub async fn complete_then_replay_byte_identical(f: &Fixture) {
    let key = unique_key("replay");
    let h = hash("a");
    let lease = acquire(&*f.store, &req(&key, h)).await;
    let done = snapshot();
    f.advance(Duration::from_millis(1500));
    f.store.complete(&lease, &done).await.unwrap();
    for claim_hash in [h, hash("other payload")] {
        match f.store.claim(&req(&key, claim_hash)).await.unwrap() {
            Claim::Completed(rec) => {
                assert_eq!(
                    rec.request_hash, h,
                    "the stored hash, for the engine's 422 check"
                );
                assert_eq!(rec.state, RecordState::Completed);
                assert_eq!(rec.status, Some(201));
                assert_eq!(rec.headers, done.headers);
                assert_eq!(rec.body, done.body);
                assert_eq!(rec.biz_no.as_deref(), Some("PAY-2026-0001"));
                assert_eq!(rec.operation_id, lease.operation_id);
                assert_eq!(rec.completed_at, Some(f.now()));
                assert_eq!(rec.expire_at, lease.expire_at);
            }
            other => panic!("expected Completed, got {other:?}"),
        }
    }
    assert_eq!(f.store.get(&key).await.unwrap().unwrap().body, done.body);
    // A stored failure replays too (exact_replay of a 500), with its own expiry.
    let key = unique_key("failed");
    let lease = acquire(&*f.store, &req(&key, h)).await;
    let until = f.now() + Duration::from_secs(60);
    let failed =
        Completion::new(Outcome::FailedStored, 500, b"boom".to_vec()).with_expire_at(until);
    f.store.complete(&lease, &failed).await.unwrap();
    let rec = f.store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::FailedStored);
    assert_eq!((rec.status, rec.expire_at), (Some(500), until));
    // Completing twice (a retry after a lost acknowledgement) is accepted and changes nothing:
    // the first completion stands.
    let other = Completion::new(Outcome::Completed, 201, b"second".to_vec());
    f.advance(Duration::from_secs(1));
    f.store.complete(&lease, &other).await.unwrap();
    let again = f.store.get(&key).await.unwrap().unwrap();
    assert_eq!(again, rec);
    // Status out of range is refused before touching the store.
    let key = unique_key("bad-status");
    let lease = acquire(&*f.store, &req(&key, h)).await;
    let bad = Completion::new(Outcome::Completed, 42, Vec::new());
    assert!(matches!(
        f.store.complete(&lease, &bad).await,
        Err(StoreError::Invalid(_))
    ));
}

pub async fn release_then_reclaim(f: &Fixture) {
    let key = unique_key("release");
    let first = acquire(&*f.store, &req(&key, hash("a"))).await;
    f.store.release(&first).await.unwrap();
    assert!(f.store.get(&key).await.unwrap().is_none());
    // A corrected request with another payload runs now.
    let second = acquire(&*f.store, &req(&key, hash("b"))).await;
    assert!(!second.took_over);
    assert_ne!(second.operation_id, first.operation_id);
    // The released lease cannot touch the new record, although both have fence 1.
    assert_fenced(f.store.complete(&first, &snapshot()).await);
    assert_fenced(f.store.release(&first).await);
    assert_eq!(
        f.store.get(&key).await.unwrap().unwrap().request_hash,
        hash("b")
    );
    // Releasing twice: the record is gone.
    f.store.release(&second).await.unwrap();
    assert_fenced(f.store.release(&second).await);
}

pub async fn ttl_expiry_then_fresh_claim(f: &Fixture) {
    let key = unique_key("ttl");
    let ttl = Duration::from_secs(60);
    let lease = acquire(&*f.store, &ClaimRequest::new(&key, hash("a"), LEASE, ttl)).await;
    assert_eq!(lease.expire_at, f.now() + ttl);
    f.store.complete(&lease, &snapshot()).await.unwrap();
    f.advance(Duration::from_secs(59));
    assert!(f.store.get(&key).await.unwrap().is_some());
    f.advance(Duration::from_secs(1));
    // Logically absent before any physical delete (S21).
    assert!(f.store.get(&key).await.unwrap().is_none());
    let fresh = acquire(&*f.store, &ClaimRequest::new(&key, hash("b"), LEASE, ttl)).await;
    assert!(!fresh.took_over);
    assert_ne!(fresh.operation_id, lease.operation_id);
    assert!(fresh.fence > lease.fence, "the fence still grows");
    assert_eq!(fresh.expire_at, f.now() + ttl);
    let rec = f.store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.request_hash, rec.status),
        (RecordState::Processing, hash("b"), None)
    );
    assert!(rec.body.is_empty() && rec.biz_no.is_none() && rec.completed_at.is_none());
    assert_eq!(rec.created_at, f.now());
    // The expired holder's lease is dead too.
    assert_fenced(f.store.complete(&lease, &snapshot()).await);
    // A lease shorter than the TTL never outlives the record; a TTL shorter than the lease is
    // stretched to the lease.
    let key = unique_key("ttl-short");
    let l = acquire(
        &*f.store,
        &ClaimRequest::new(&key, hash("a"), LEASE, Duration::from_secs(1)),
    )
    .await;
    assert_eq!(l.expire_at, l.lease_until);
}

/// A takeover writes the taker's readable key: a handle that switched encryption on
/// (`ScopedKey::opaque`, same hash) taking over a record a plaintext handle claimed leaves
/// nothing of the client key in it.
pub async fn takeover_writes_the_takers_readable_key(f: &Fixture) {
    let key = unique_key("takeover-key");
    let h = hash("a");
    let lease = Duration::from_secs(5);
    acquire(&*f.store, &ClaimRequest::new(&key, h, lease, TTL)).await;
    f.advance(Duration::from_secs(5));
    let opaque = key.opaque();
    let new = acquire(&*f.store, &ClaimRequest::new(&opaque, h, lease, TTL)).await;
    assert!(new.took_over);
    let record = f.store.get(&opaque).await.unwrap().expect("record");
    assert_eq!(record.key, opaque.readable());
}

pub async fn expired_lease_takeover(f: &Fixture) {
    let key = unique_key("takeover");
    let h = hash("a");
    let lease = Duration::from_secs(5);
    let old = acquire(&*f.store, &ClaimRequest::new(&key, h, lease, TTL)).await;
    f.advance(Duration::from_secs(5));
    // Another payload never takes over: it sees the holder's hash (-> 422).
    match f
        .store
        .claim(&ClaimRequest::new(&key, hash("b"), lease, TTL))
        .await
        .unwrap()
    {
        Claim::InProgress {
            request_hash,
            retry_after,
        } => {
            assert_eq!(request_hash, h);
            assert_eq!(retry_after, Duration::ZERO);
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    let new = acquire(&*f.store, &ClaimRequest::new(&key, h, lease, TTL)).await;
    assert!(new.took_over);
    assert!(new.fence > old.fence);
    assert_eq!(
        new.operation_id, old.operation_id,
        "the operation id is stable"
    );
    assert_eq!(new.lease_until, f.now() + lease);
    let rec = f.store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.fence, new.fence);
    assert_eq!(rec.locked_at, f.now());
    assert_eq!(rec.created_at, f.now() - Duration::from_secs(5));
    // The new holder completes; a third claim replays.
    f.store.complete(&new, &snapshot()).await.unwrap();
    assert!(matches!(
        f.store.claim(&req(&key, h)).await.unwrap(),
        Claim::Completed(_)
    ));
}

pub async fn zombie_complete_rejected(f: &Fixture) {
    let key = unique_key("zombie");
    let h = hash("a");
    let lease = Duration::from_secs(5);
    let zombie = acquire(&*f.store, &ClaimRequest::new(&key, h, lease, TTL)).await;
    f.advance(Duration::from_secs(6));
    let holder = acquire(&*f.store, &ClaimRequest::new(&key, h, lease, TTL)).await;
    // The zombie wakes up: every write of it is fenced out and changes nothing.
    assert_fenced(f.store.complete(&zombie, &snapshot()).await);
    assert_fenced(f.store.extend(&zombie, Duration::from_secs(60)).await);
    assert_fenced(f.store.release(&zombie).await);
    let rec = f.store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Processing);
    assert_eq!(rec.fence, holder.fence);
    assert_eq!(rec.lease_until, holder.lease_until);
    assert!(rec.body.is_empty());
    let err = f.store.complete(&zombie, &snapshot()).await.unwrap_err();
    assert!(!err.is_transient());
    assert!(err.to_string().contains("fenced out"), "{err}");
    // Errors are logged: they name the record by its key's hash, never the readable key.
    assert!(
        err.to_string().contains(&key.hash_hex().to_string()),
        "{err}"
    );
    assert!(!err.to_string().contains(key.readable()), "{err}");
    f.store.complete(&holder, &snapshot()).await.unwrap();
}

pub async fn extend_lease(f: &Fixture) {
    let key = unique_key("extend");
    let h = hash("a");
    let lease = Duration::from_secs(5);
    let ttl = Duration::from_secs(20);
    let first = acquire(&*f.store, &ClaimRequest::new(&key, h, lease, ttl)).await;
    f.advance(Duration::from_secs(4));
    let renewed = f
        .store
        .extend(&first, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(renewed.fence, first.fence);
    assert_eq!(renewed.operation_id, first.operation_id);
    assert_eq!(renewed.lease_until, f.now() + Duration::from_secs(10));
    f.advance(Duration::from_secs(6)); // past the original lease
    match f
        .store
        .claim(&ClaimRequest::new(&key, h, lease, ttl))
        .await
        .unwrap()
    {
        Claim::InProgress { retry_after, .. } => assert_eq!(retry_after, Duration::from_secs(4)),
        other => panic!("expected InProgress, got {other:?}"),
    }
    // Extending past the TTL stretches the record's life: a live lease never expires.
    let long = f
        .store
        .extend(&renewed, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(long.expire_at, long.lease_until);
    f.advance(Duration::from_secs(30)); // past the original TTL
    assert!(f.store.get(&key).await.unwrap().is_some());
    // Both the original and the renewed lease value still complete (same fence).
    f.store.complete(&first, &snapshot()).await.unwrap();
    assert_eq!(
        f.store.get(&key).await.unwrap().unwrap().expire_at,
        long.expire_at
    );
}

pub async fn purge_in_batches(f: &Fixture) {
    // The fixture's records are this test's alone (a database of its own on the servers), so
    // every count below is exact.
    let ttl = Duration::from_secs(60);
    let mut short = Vec::new();
    for i in 0..25 {
        let key = unique_key("purge");
        let lease = acquire(&*f.store, &ClaimRequest::new(&key, hash("a"), LEASE, ttl)).await;
        if i % 2 == 0 {
            f.store.complete(&lease, &snapshot()).await.unwrap();
        }
        short.push(key);
    }
    let keep = unique_key("purge-keep");
    acquire(
        &*f.store,
        &ClaimRequest::new(&keep, hash("a"), LEASE, Duration::from_secs(86_400)),
    )
    .await;
    assert_eq!(
        f.store.purge_expired(10).await.unwrap(),
        0,
        "nothing expired yet"
    );
    f.advance(Duration::from_secs(61));
    let mut batches = Vec::new();
    loop {
        let n = f.store.purge_expired(10).await.unwrap();
        assert!(n <= 10);
        batches.push(n);
        if n == 0 {
            break;
        }
    }
    assert_eq!(batches, [10, 10, 5, 0]);
    assert!(f.store.get(&keep).await.unwrap().is_some());
    // Purged keys are free again.
    acquire(&*f.store, &req(&short[0], hash("z"))).await;
    // The sweeper runs the same purge in a loop of bounded batches.
    f.advance(Duration::from_secs(86_400 * 2));
    let swept = idem_runtime::store::Sweeper::new(f.store.clone())
        .batch(1)
        .sweep_once()
        .await
        .unwrap();
    assert_eq!(swept, 2, "the re-claimed key and `keep`");
    assert!(f.store.get(&keep).await.unwrap().is_none());
    assert_eq!(f.store.purge_expired(10).await.unwrap(), 0);
}

pub async fn race_256_claims_one_winner(f: &Fixture) {
    for round in 0..20 {
        let key = Arc::new(unique_key("race"));
        let h = hash("a");
        let start = Arc::new(tokio::sync::Barrier::new(256));
        let tasks: Vec<_> = (0..256)
            .map(|_| {
                let (store, key, start) = (f.store.clone(), key.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store.claim(&req(&key, h)).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut in_progress = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(Claim::Acquired(l)) => winners.push(l),
                Ok(Claim::InProgress { request_hash, .. }) => {
                    assert_eq!(request_hash, h);
                    in_progress += 1;
                }
                other => panic!("{}: round {round}: unexpected {other:?}", f.backend),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "{}: round {round}: exactly one winner",
            f.backend
        );
        assert_eq!(in_progress, 255);
        assert_eq!(winners[0].fence, 1);
    }
}

pub async fn body_of_one_mib(f: &Fixture) {
    let key = unique_key("big");
    let lease = acquire(&*f.store, &req(&key, hash("a"))).await;
    let body: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let done = Completion::new(Outcome::Completed, 200, body.clone());
    f.store.complete(&lease, &done).await.unwrap();
    match f.store.claim(&req(&key, hash("a"))).await.unwrap() {
        Claim::Completed(rec) => {
            assert_eq!(rec.body.len(), 1 << 20);
            assert!(rec.body == body, "1 MiB body changed");
        }
        other => panic!("expected Completed, got {other:?}"),
    }
}

pub async fn unicode_keys_of_255_characters(f: &Fixture) {
    let mut seen = HashSet::new();
    // The tenant makes the keys unique per run on a shared server; the client key is the test.
    let run = unique_key("unicode");
    for unit in ["é", "日", "🦀", "a:%"] {
        let client: String = unit.chars().cycle().take(255).collect();
        assert_eq!(client.chars().count(), 255);
        let key = idem_runtime::key::ScopedKey::new(
            &[&format!("租户:{}", run.readable()), "usér"],
            "POST /ünïcode",
            &client,
        )
        .unwrap();
        let lease = acquire(&*f.store, &req(&key, hash(unit))).await;
        f.store.complete(&lease, &snapshot()).await.unwrap();
        let rec = f.store.get(&key).await.unwrap().unwrap();
        assert_eq!(rec.key, key.readable());
        assert!(
            rec.key
                .ends_with(&client.replace('%', "%25").replace(':', "%3A"))
        );
        assert_eq!(rec.request_hash, hash(unit));
        assert!(seen.insert(*key.hash()));
    }
    let too_long: String = "🦀".repeat(256);
    assert!(idem_runtime::key::ScopedKey::new(&["t", "u"], "o", &too_long).is_err());
}

pub async fn object_safe_and_clock(f: &Fixture) {
    let store: Arc<dyn Store> = f.store.clone();
    assert_eq!(store.clock().now(), f.now());
    store.migrate().await.unwrap(); // idempotent
    let key = unique_key("zero-lease");
    let bad = ClaimRequest::new(&key, hash("a"), Duration::ZERO, TTL);
    assert!(matches!(
        store.claim(&bad).await,
        Err(StoreError::Invalid(_))
    ));
}

/// Two claims race to take over one expired lease: exactly one wins (fence + 1, same
/// operation), the other sees the winner's live lease.
pub async fn concurrent_takeovers_one_winner(f: &Fixture) {
    let lease = Duration::from_secs(5);
    for round in 0..10 {
        let key = Arc::new(unique_key("takeover-race"));
        let h = hash("a");
        let first = acquire(&*f.store, &ClaimRequest::new(&key, h, lease, TTL)).await;
        f.advance(lease);
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let (store, key, start) = (f.store.clone(), key.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store.claim(&ClaimRequest::new(&key, h, lease, TTL)).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(Claim::Acquired(l)) => winners.push(l),
                Ok(Claim::InProgress {
                    request_hash,
                    retry_after,
                }) => {
                    assert_eq!(request_hash, h);
                    assert_eq!(
                        retry_after, lease,
                        "{}: the winner's fresh lease",
                        f.backend
                    );
                }
                other => panic!("{}: round {round}: unexpected {other:?}", f.backend),
            }
        }
        assert_eq!(winners.len(), 1, "{}: round {round}: one winner", f.backend);
        let won = &winners[0];
        assert!(won.took_over);
        assert_eq!(won.fence, first.fence + 1);
        assert_eq!(won.operation_id, first.operation_id);
        assert_eq!(f.store.get(&key).await.unwrap().unwrap().fence, won.fence);
    }
}

/// A takeover races the old holder's late completion: exactly one result is stored. Either the
/// completion lands first (accepted: nobody had superseded it) and the claim replays it, or the
/// takeover lands first and the completion is fenced out.
pub async fn takeover_races_old_holders_completion(f: &Fixture) {
    let lease = Duration::from_secs(5);
    let (mut completed_first, mut taken_over_first) = (0, 0);
    for round in 0..20 {
        let key = Arc::new(unique_key("takeover-vs-complete"));
        let h = hash("a");
        let old = acquire(&*f.store, &ClaimRequest::new(&key, h, lease, TTL)).await;
        f.advance(lease + Duration::from_secs(1));
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let completing = {
            let (store, start, old) = (f.store.clone(), start.clone(), old.clone());
            tokio::spawn(async move {
                start.wait().await;
                let late = Completion::new(Outcome::Completed, 201, b"old".to_vec());
                store.complete(&old, &late).await
            })
        };
        let claiming = {
            let (store, start, key) = (f.store.clone(), start.clone(), key.clone());
            tokio::spawn(async move {
                start.wait().await;
                store.claim(&ClaimRequest::new(&key, h, lease, TTL)).await
            })
        };
        let (completed, claimed) = (completing.await.unwrap(), claiming.await.unwrap().unwrap());
        let stored_body = match (completed, claimed) {
            (Ok(()), Claim::Completed(rec)) => {
                completed_first += 1;
                assert_eq!(rec.body, b"old");
                assert_eq!(rec.fence, old.fence);
                b"old".to_vec()
            }
            (Err(StoreError::FencedOut { .. }), Claim::Acquired(new)) => {
                taken_over_first += 1;
                assert!(new.took_over);
                assert_eq!(new.operation_id, old.operation_id);
                let mine = Completion::new(Outcome::Completed, 201, b"new".to_vec());
                f.store.complete(&new, &mine).await.unwrap();
                b"new".to_vec()
            }
            (completed, claimed) => panic!(
                "{}: round {round}: two results or none: complete {completed:?}, claim {claimed:?}",
                f.backend
            ),
        };
        let rec = f.store.get(&key).await.unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Completed);
        assert_eq!(rec.body, stored_body, "{}: round {round}", f.backend);
    }
    eprintln!(
        "{}: completion first {completed_first}, takeover first {taken_over_first}",
        f.backend
    );
}

/// `abandon` ends the lease at once: a claim of the same request takes the record over
/// immediately, with the same operation id and fence + 1; another request hash still gets
/// "in progress" (the engine answers 422).
pub async fn abandon_then_immediate_takeover(f: &Fixture) {
    let key = unique_key("abandon");
    let h = hash("a");
    let first = acquire(&*f.store, &req(&key, h)).await;
    f.store.abandon(&first).await.unwrap();
    let rec = f.store.get(&key).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Processing);
    assert_eq!(rec.operation_id, first.operation_id);
    assert_eq!(rec.lease_until, f.now());
    match f.store.claim(&req(&key, hash("b"))).await.unwrap() {
        Claim::InProgress {
            request_hash,
            retry_after,
        } => {
            assert_eq!(request_hash, h);
            assert_eq!(retry_after, Duration::ZERO);
        }
        other => panic!("expected InProgress for another request hash, got {other:?}"),
    }
    let second = acquire(&*f.store, &req(&key, h)).await;
    assert!(second.took_over);
    assert_eq!(second.fence, first.fence + 1);
    assert_eq!(second.operation_id, first.operation_id);
    assert_eq!(second.lease_until, f.now() + LEASE);
    // The abandoned attempt owns nothing any more.
    assert_fenced(f.store.abandon(&first).await);
    assert_fenced(f.store.complete(&first, &snapshot()).await);
    f.store.complete(&second, &snapshot()).await.unwrap();
    // A stored record cannot be abandoned.
    assert_fenced(f.store.abandon(&second).await);
}

/// A completion after the record's `expire_at` that nobody superseded is stored: no one else
/// ran, so its result is never dropped.
pub async fn completion_past_expire_at_accepted(f: &Fixture) {
    let key = unique_key("late");
    let h = hash("a");
    let ttl = Duration::from_secs(10);
    let lease = acquire(
        &*f.store,
        &ClaimRequest::new(&key, h, Duration::from_secs(5), ttl),
    )
    .await;
    f.advance(ttl + Duration::from_secs(5));
    assert!(
        f.store.get(&key).await.unwrap().is_none(),
        "expired: logically absent"
    );
    let keep = f.now() + Duration::from_secs(3600);
    let late = snapshot().with_expire_at(keep);
    f.store.complete(&lease, &late).await.unwrap();
    let rec = f
        .store
        .get(&key)
        .await
        .unwrap()
        .expect("the late result is stored");
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!((rec.fence, rec.expire_at), (lease.fence, keep));
    assert_eq!(rec.body, late.body);
    match f.store.claim(&req(&key, h)).await.unwrap() {
        Claim::Completed(r) => assert_eq!(r.operation_id, lease.operation_id),
        other => panic!("expected the late result replayed, got {other:?}"),
    }
    // Extending and abandoning past expire_at are accepted alike while nobody superseded it.
    let key = unique_key("late-extend");
    let lease = acquire(
        &*f.store,
        &ClaimRequest::new(&key, h, Duration::from_secs(5), ttl),
    )
    .await;
    f.advance(ttl + Duration::from_secs(1));
    let renewed = f
        .store
        .extend(&lease, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(renewed.lease_until, f.now() + Duration::from_secs(30));
    assert_eq!(renewed.expire_at, renewed.lease_until);
    assert!(f.store.get(&key).await.unwrap().is_some(), "alive again");
    f.store.abandon(&renewed).await.unwrap();
}

/// A completion retried after its acknowledgement was lost (the engine retries transient
/// errors) returns `Ok` and leaves the first completion as it was; a stale lease of the same
/// key is still fenced out.
pub async fn completion_retried_after_lost_ack(f: &Fixture) {
    let key = unique_key("lost-ack");
    let h = hash("a");
    let lease = acquire(&*f.store, &req(&key, h)).await;
    let done = snapshot();
    f.store.complete(&lease, &done).await.unwrap();
    let first = f.store.get(&key).await.unwrap().unwrap();
    f.advance(Duration::from_secs(2));
    f.store.complete(&lease, &done).await.unwrap();
    f.store.complete(&lease, &done).await.unwrap();
    assert_eq!(f.store.get(&key).await.unwrap().unwrap(), first);
    // Completed by another holder of the same operation: the old lease is not "ours".
    let key = unique_key("lost-ack-zombie");
    let short = Duration::from_secs(5);
    let zombie = acquire(&*f.store, &ClaimRequest::new(&key, h, short, TTL)).await;
    f.advance(short);
    let holder = acquire(&*f.store, &ClaimRequest::new(&key, h, short, TTL)).await;
    f.store.complete(&holder, &done).await.unwrap();
    assert_fenced(f.store.complete(&zombie, &done).await);
    f.store.complete(&holder, &done).await.unwrap();
}

/// How long the records of the remember tests are remembered: ten TTLs.
const REMEMBER: Duration = Duration::from_secs(36_000);

fn remembering<'a>(
    key: &'a idem_runtime::key::ScopedKey,
    h: idem_runtime::RequestHash,
) -> ClaimRequest<'a> {
    req(key, h).remembering(REMEMBER)
}

fn remembered(claim: Claim) -> idem_runtime::store::Record {
    match claim {
        Claim::Remembered(record) => record,
        other => panic!("expected Remembered, got {other:?}"),
    }
}

/// `remember`: the response is replayed within the TTL; past it the record is remembered (the
/// claim answers `Remembered` with what identifies the operation, for the same request and for
/// another, and never acquires); past the remember window the key is new.
pub async fn remembered_past_the_ttl(f: &Fixture) {
    let key = unique_key("remember");
    let (h, other) = (hash("a"), hash("b"));
    let start = f.now();
    let lease = acquire(&*f.store, &remembering(&key, h)).await;
    assert_eq!(lease.expire_at, start + REMEMBER, "the record lives on");
    f.store.complete(&lease, &snapshot()).await.unwrap();
    f.advance(TTL - Duration::from_secs(1));
    match f.store.claim(&remembering(&key, h)).await.unwrap() {
        Claim::Completed(r) => assert_eq!(r.body, snapshot().body, "replayed within the TTL"),
        other => panic!("expected Completed, got {other:?}"),
    }
    f.advance(Duration::from_secs(1));
    for (request, who) in [(h, "the same request"), (other, "another request")] {
        let r = remembered(f.store.claim(&remembering(&key, request)).await.unwrap());
        assert_eq!(r.request_hash, h, "{who}");
        assert_eq!(r.operation_id, lease.operation_id, "{who}");
        assert_eq!(r.biz_no.as_deref(), Some("PAY-2026-0001"), "{who}");
        assert_eq!(r.status, Some(201), "{who}");
        assert_eq!(r.replay_until, Some(start + TTL), "{who}");
        assert_eq!(r.expire_at, start + REMEMBER, "{who}");
        assert!(r.completed_at.is_some(), "{who}");
    }
    // A claim without `remember` meets the remembered record all the same: the record decides.
    remembered(f.store.claim(&req(&key, h)).await.unwrap());
    f.advance(REMEMBER - TTL - Duration::from_millis(1));
    remembered(f.store.claim(&remembering(&key, other)).await.unwrap());
    f.advance(Duration::from_millis(1));
    let new = acquire(&*f.store, &remembering(&key, other)).await;
    assert_ne!(
        new.operation_id, lease.operation_id,
        "past the window: a new operation"
    );
    assert_eq!(new.fence, lease.fence + 1);
    assert!(!new.took_over);
}

/// A remembered operation whose attempt ended without a result is not forgotten at the TTL: the
/// same request takes it over under the same operation id, another is refused as in progress.
pub async fn remembered_attempt_without_a_result_goes_on(f: &Fixture) {
    let key = unique_key("remember-open");
    let lease = acquire(&*f.store, &remembering(&key, hash("a"))).await;
    f.advance(TTL + Duration::from_secs(1));
    match f.store.claim(&remembering(&key, hash("b"))).await.unwrap() {
        Claim::InProgress { request_hash, .. } => assert_eq!(request_hash, hash("a")),
        other => panic!("expected InProgress, got {other:?}"),
    }
    let taken = acquire(&*f.store, &remembering(&key, hash("a"))).await;
    assert!(taken.took_over);
    assert_eq!(taken.operation_id, lease.operation_id);
    f.store.complete(&taken, &snapshot()).await.unwrap();
    // Replayed while the lease it was stored under lasts (no window ends before its lease)...
    match f.store.claim(&remembering(&key, hash("a"))).await.unwrap() {
        Claim::Completed(r) => assert_eq!(r.operation_id, lease.operation_id),
        other => panic!("expected Completed, got {other:?}"),
    }
    // ...then remembered: its TTL is over.
    f.advance(LEASE);
    let r = remembered(f.store.claim(&remembering(&key, hash("a"))).await.unwrap());
    assert_eq!(r.operation_id, lease.operation_id);
}

/// The purge's two phases: past the TTL the responses of remembered records are freed in
/// batches (what identifies the operation stays), past the remember window the records go.
pub async fn purge_frees_remembered_responses(f: &Fixture) {
    // Remembered, their attempts ended without a result and were never retried: first in the
    // purge's order, they hold no response and must not hold up the batches of those that do.
    for _ in 0..3 {
        let key = unique_key("remember-open");
        let lease = acquire(&*f.store, &remembering(&key, hash("a"))).await;
        f.store.abandon(&lease).await.unwrap();
    }
    f.advance(Duration::from_millis(1));
    let mut keys = Vec::new();
    for _ in 0..5 {
        let key = unique_key("remember-purge");
        let lease = acquire(&*f.store, &remembering(&key, hash("a"))).await;
        f.store.complete(&lease, &snapshot()).await.unwrap();
        keys.push(key);
    }
    // Not remembered, and longer-lived than the TTL: untouched by both phases until its end.
    let plain = unique_key("remember-plain");
    let long = ClaimRequest::new(&plain, hash("a"), LEASE, TTL * 2);
    let lease = acquire(&*f.store, &long).await;
    f.store.complete(&lease, &snapshot()).await.unwrap();
    assert_eq!(
        f.store.purge_responses(2).await.unwrap(),
        0,
        "none past its TTL"
    );
    f.advance(TTL + Duration::from_secs(1));
    let mut batches = Vec::new();
    loop {
        let n = f.store.purge_responses(2).await.unwrap();
        batches.push(n);
        if n == 0 {
            break;
        }
    }
    assert_eq!(batches, [2, 2, 1, 0]);
    assert_eq!(
        f.store.purge_expired(10).await.unwrap(),
        0,
        "every record kept"
    );
    for key in &keys {
        let r = remembered(f.store.claim(&remembering(key, hash("a"))).await.unwrap());
        assert!(
            r.body.is_empty() && r.headers.is_empty(),
            "the response is freed"
        );
        assert_eq!(r.biz_no.as_deref(), Some("PAY-2026-0001"));
        assert_eq!(r.status, Some(201));
        assert_eq!(
            r.replays_until(),
            r.created_at + TTL,
            "still says when it expired"
        );
        assert!(r.response_freed());
    }
    // The store's clock steps back before the TTL's end (a failover to a server whose clock
    // is behind): a freed response is never replayed, whatever the clock says.
    f.clock.set(f.now() - Duration::from_secs(2));
    for key in &keys {
        remembered(f.store.claim(&remembering(key, hash("a"))).await.unwrap());
    }
    f.advance(Duration::from_secs(2));
    match f.store.claim(&long).await.unwrap() {
        Claim::Completed(r) => assert_eq!(r.body, snapshot().body),
        other => panic!("expected Completed, got {other:?}"),
    }
    f.advance(REMEMBER);
    let swept = idem_runtime::store::Sweeper::new(f.store.clone())
        .batch(100)
        .sweep_once()
        .await
        .unwrap();
    assert_eq!(swept, 9, "eight remembered records and the plain one");
    for key in &keys {
        acquire(&*f.store, &remembering(key, hash("z"))).await;
    }
}

/// A completion whose expiry is already past (`Completion::expire_at`) on a remembered record
/// ends its replays at once: remembered from then on, never replayed for the whole window.
pub async fn remembered_completion_expiring_at_once(f: &Fixture) {
    let key = unique_key("remember-now");
    let lease = acquire(&*f.store, &remembering(&key, hash("a"))).await;
    let at_once = snapshot().with_expire_at(idem_runtime::store::Timestamp::from_millis(0));
    f.store.complete(&lease, &at_once).await.unwrap();
    f.advance(Duration::from_millis(1));
    let r = remembered(f.store.claim(&remembering(&key, hash("a"))).await.unwrap());
    assert_eq!(
        r.expire_at, lease.expire_at,
        "still remembered to the end of its window"
    );
}
