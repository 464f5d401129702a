//! A queue consumer made idempotent with `#[idempotent(store = .., key = msg.message_id)]`.
//!
//! Queues deliver at least once: a message comes back after a consumer crash, a visibility
//! timeout or a rebalance. Here every message is delivered twice (and one twice at the same
//! time); the warehouse still ships each order once, and each redelivery gets the first result
//! back, failures included.
//!
//! ```sh
//! cargo run --example consumer
//! ```
//!
//! `tests/it/idempotent_consumer.rs` runs the same [`demo`] against the memory and SQLite stores.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use idem::{Fingerprint, Idem, IdempotencyError, idempotent};

/// A message from the queue: ship an order.
#[derive(Clone, Debug, serde::Deserialize, Fingerprint)]
pub struct ShipOrder {
    /// The queue's message id: the idempotency key, the same on every redelivery.
    #[fingerprint(skip)]
    pub message_id: String,
    /// The order to ship.
    pub order_no: String,
    /// What to ship.
    pub sku: String,
    /// How many.
    pub quantity: u32,
    /// When this delivery happened: differs on every redelivery, never hashed.
    #[fingerprint(env)]
    pub delivered_at: u64,
}

/// What shipping an order produced; stored, and returned again to every redelivery.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shipment {
    /// The warehouse's number for the shipment: the business number callers track.
    pub shipment_no: String,
    /// `idem::operation_id()` (S22): pass it to the carrier, which deduplicates on it.
    pub operation_id: String,
}

/// Why a message was not shipped. Stored as well: under `exact_replay` (the default) a
/// redelivery of a message that failed gets the same failure back without running again; under
/// `suppress_only` a failure is released and a redelivery runs again.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShipError {
    /// Not enough stock of `sku`.
    OutOfStock {
        /// The missing SKU.
        sku: String,
    },
    /// The idempotency layer answered instead of the handler (never stored): `status` 409 =
    /// the same message is being processed now (requeue with a delay), 422 = the message id was
    /// reused for another order (a producer bug), 503 = the store is unavailable.
    Idempotency {
        /// The HTTP status the condition maps to.
        status: u16,
        /// What happened and what to do.
        detail: String,
    },
}

impl From<IdempotencyError> for ShipError {
    fn from(e: IdempotencyError) -> Self {
        ShipError::Idempotency {
            status: e.status(),
            detail: e.to_string(),
        }
    }
}

/// The side effect to protect: a warehouse with stock, counting what it shipped.
#[derive(Default)]
pub struct Warehouse {
    stock: Mutex<HashMap<String, u32>>,
    shipments: Mutex<Vec<String>>,
}

impl Warehouse {
    /// A warehouse holding `stock` (SKU, quantity).
    pub fn with_stock(stock: &[(&str, u32)]) -> Self {
        Warehouse {
            stock: Mutex::new(stock.iter().map(|(s, n)| (s.to_string(), *n)).collect()),
            shipments: Mutex::default(),
        }
    }

    /// Adds `quantity` of `sku`.
    pub fn restock(&self, sku: &str, quantity: u32) {
        *self.stock.lock().unwrap().entry(sku.into()).or_default() += quantity;
    }

    /// The orders shipped, in order.
    pub fn shipped(&self) -> Vec<String> {
        self.shipments.lock().unwrap().clone()
    }
}

/// Ships `msg`'s order once per message id, for 7 days: a redelivery gets the stored result, and
/// a redelivery after a crash ships under the same operation id, which the carrier deduplicates.
#[idempotent(
    store = idem,
    key = msg.message_id,
    // Message ids are unique across the producers of this queue.
    scope = global,
    operation = "warehouse.ship",
    fingerprint(arg = msg, fields = [order_no, sku, quantity]),
    ttl = "7d",
    lease = "30s",
)]
pub async fn ship(
    idem: &Idem,
    warehouse: &Warehouse,
    msg: ShipOrder,
) -> Result<Shipment, ShipError> {
    // A slow carrier for one SKU, so that a concurrent redelivery finds the message in progress.
    if msg.sku == "slow-sku" {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        let mut stock = warehouse.stock.lock().unwrap();
        let left = stock.entry(msg.sku.clone()).or_default();
        if *left < msg.quantity {
            return Err(ShipError::OutOfStock { sku: msg.sku });
        }
        *left -= msg.quantity;
    }
    let operation_id = idem::operation_id()
        .map(|id| id.to_string())
        .unwrap_or_default();
    let mut shipments = warehouse.shipments.lock().unwrap();
    shipments.push(msg.order_no.clone());
    Ok(Shipment {
        shipment_no: format!("S-{}-{}", shipments.len(), msg.order_no),
        operation_id,
    })
}

/// One delivery and what came of it.
pub struct Delivery {
    /// How the message came.
    pub what: &'static str,
    /// The message delivered.
    pub message_id: String,
    /// What `ship` returned.
    pub outcome: Result<Shipment, ShipError>,
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<38} {:<4} -> ", self.what, self.message_id)?;
        match &self.outcome {
            Ok(s) => write!(
                f,
                "Ok: shipment {} (operation {})",
                s.shipment_no, s.operation_id
            ),
            Err(ShipError::OutOfStock { sku }) => write!(f, "Err: out of stock ({sku})"),
            Err(ShipError::Idempotency { status, detail }) => {
                write!(f, "Err: {status}: {detail}")
            }
        }
    }
}

fn message(id: &str, order_no: &str, sku: &str, delivered_at: u64) -> ShipOrder {
    ShipOrder {
        message_id: id.into(),
        order_no: order_no.into(),
        sku: sku.into(),
        quantity: 1,
        delivered_at,
    }
}

/// Delivers messages the way a queue does (twice, and once twice at the same time) and
/// returns what each delivery got.
pub async fn demo(idem: &Idem, warehouse: &Warehouse) -> Vec<Delivery> {
    let mut log = Vec::new();
    let mut deliver = async |what: &'static str, msg: ShipOrder| {
        let message_id = msg.message_id.clone();
        let outcome = ship(idem, warehouse, msg).await;
        log.push(Delivery {
            what,
            message_id,
            outcome,
        });
    };
    deliver("first delivery", message("m-1", "o-1", "mug", 1)).await;
    deliver("redelivery (1 min later)", message("m-1", "o-1", "mug", 61)).await;
    deliver("first delivery", message("m-2", "o-2", "lamp", 2)).await;
    warehouse.restock("lamp", 3);
    deliver(
        "redelivery, after a restock",
        message("m-2", "o-2", "lamp", 90),
    )
    .await;
    deliver(
        "same message id, another order",
        message("m-1", "o-9", "mug", 120),
    )
    .await;

    let (a, b) = tokio::join!(
        ship(idem, warehouse, message("m-3", "o-3", "slow-sku", 3)),
        ship(idem, warehouse, message("m-3", "o-3", "slow-sku", 3)),
    );
    for outcome in [a, b] {
        log.push(Delivery {
            what: "two consumers at once",
            message_id: "m-3".into(),
            outcome,
        });
    }
    log
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let idem = Idem::new(idem::MemoryStore::new());
    let warehouse = Warehouse::with_stock(&[("mug", 5), ("slow-sku", 5)]);
    for delivery in demo(&idem, &warehouse).await {
        println!("{delivery}");
    }
    println!("orders shipped by the warehouse: {:?}", warehouse.shipped());
}
