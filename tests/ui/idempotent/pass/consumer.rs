// The framework-free form: a queue consumer as a free function and as a method; the signature
// is kept, a retry returns the stored `Result`.
#![deny(warnings)]

use std::sync::Arc;

use idem::{Fingerprint, Idem, IdempotencyError, idempotent};

#[derive(Clone, serde::Deserialize, Fingerprint)]
struct Message {
    #[fingerprint(skip)]
    id: String,
    warehouse: Option<u32>,
    sku: String,
    quantity: u32,
    #[fingerprint(env)]
    sent_at: u64,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Shipment {
    shipment_no: String,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum ShipError {
    OutOfStock,
    BadSku,
    Idempotency(u16),
}

impl From<std::num::ParseIntError> for ShipError {
    fn from(_: std::num::ParseIntError) -> Self {
        ShipError::BadSku
    }
}

impl From<IdempotencyError> for ShipError {
    fn from(e: IdempotencyError) -> Self {
        ShipError::Idempotency(e.status())
    }
}

/// Ships a message's order once.
#[idempotent(
    store = idem,
    key = msg.id,
    scope = [msg.warehouse, "eu"],
    operation = "warehouse.ship",
    fingerprint(fields = [sku, quantity]),
    ttl = "30d",
    lease = "1m",
)]
async fn ship(idem: &Idem, msg: Message) -> Result<Shipment, ShipError> {
    if msg.quantity == 0 {
        return Err(ShipError::OutOfStock);
    }
    let _digits: u64 = msg.sku.trim_start_matches("sku-").parse()?;
    let Message {
        id, sku, sent_at, ..
    } = msg;
    Ok(Shipment {
        shipment_no: format!("{id}-{sku}-{}", sent_at > 0),
    })
}

struct Worker {
    idem: Arc<Idem>,
    shipped: std::sync::atomic::AtomicU32,
}

impl Worker {
    #[idempotent(
        store = self.idem,
        key = msg.id.as_str(),
        scope = global,
        fingerprint(arg = msg),
        operation = "warehouse.handle",
        contract = "suppress_only",
        fail_open,
    )]
    async fn handle(&self, msg: &Message) -> Result<u32, ShipError> {
        let n = self
            .shipped
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(n + msg.quantity)
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let idem = Idem::new(idem::MemoryStore::new());
        let msg = Message {
            id: "m-1".into(),
            warehouse: Some(3),
            sku: "sku-1".into(),
            quantity: 2,
            sent_at: 1,
        };
        let first = ship(&idem, msg.clone()).await;
        assert_eq!(
            first,
            Ok(Shipment {
                shipment_no: "m-1-sku-1-true".into()
            })
        );
        // Redelivered at another time: `sent_at` is an environment field.
        let again = ship(
            &idem,
            Message {
                sent_at: 9,
                ..msg.clone()
            },
        )
        .await;
        assert_eq!(again, first);

        let worker = Worker {
            idem: Arc::new(idem),
            shipped: Default::default(),
        };
        assert_eq!(worker.handle(&msg).await, Ok(2));
        assert_eq!(worker.handle(&msg).await, Ok(2));
    });
}
