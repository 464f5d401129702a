//! The framework-free form of `#[idempotent]` (`store = ..`), through `examples/consumer.rs`: a
//! queue consumer whose messages are delivered twice ships each order once, on the memory store
//! and on SQLite.

#[allow(dead_code)]
#[path = "../../examples/consumer.rs"]
mod consumer;

use consumer::{ShipError, Warehouse, demo};
use idem::{Idem, store::Store};

async fn check(idem: Idem) {
    let warehouse = Warehouse::with_stock(&[("mug", 5), ("slow-sku", 5)]);
    let log = demo(&idem, &warehouse).await;
    let outcome = |i: usize| &log[i].outcome;

    // m-1 shipped once; its redelivery got the stored shipment back, operation id included.
    let first = outcome(0).clone().expect("m-1 ships");
    assert_eq!(first.shipment_no, "S-1-o-1");
    assert_eq!(first.operation_id.len(), 36);
    assert_eq!(outcome(1), &Ok(first.clone()));

    // m-2 failed; the failure is stored and replayed, even though the lamp is back in stock.
    let out_of_stock = Err(ShipError::OutOfStock { sku: "lamp".into() });
    assert_eq!(outcome(2), &out_of_stock);
    assert_eq!(outcome(3), &out_of_stock);

    // m-1's id reused for another order: 422, nothing shipped.
    assert!(
        matches!(outcome(4), Err(ShipError::Idempotency { status: 422, .. })),
        "{}",
        log[4]
    );

    // Two consumers at once: one ships, the other is told the message is in progress (409).
    let mut concurrent: Vec<_> = log[5..].iter().map(|d| d.outcome.clone()).collect();
    concurrent.sort_by_key(|o| o.is_err());
    assert!(
        matches!(&concurrent[0], Ok(s) if s.shipment_no == "S-2-o-3"),
        "{concurrent:?}"
    );
    assert!(
        matches!(
            &concurrent[1],
            Err(ShipError::Idempotency { status: 409, .. })
        ),
        "{concurrent:?}"
    );

    assert_eq!(
        warehouse.shipped(),
        ["o-1", "o-3"],
        "each order shipped once"
    );
    for delivery in &log {
        println!("{delivery}");
    }
}

#[tokio::test]
async fn memory_store() {
    check(Idem::new(idem::MemoryStore::new())).await;
}

#[tokio::test]
async fn sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = idem::SqliteStore::open(dir.path().join("idem.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    check(Idem::new(store)).await;
}
