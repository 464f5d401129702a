use idem::{Fingerprint, Idem, IdempotencyError, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct Message {
    id: String,
    sku: String,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum ShipError {
    OutOfStock,
    Idempotency(u16),
}

impl From<IdempotencyError> for ShipError {
    fn from(e: IdempotencyError) -> Self {
        ShipError::Idempotency(e.status())
    }
}

#[idempotent(store = idem, key = msg.id, scope = global, operation = "warehouse.ship")]
async fn ship(idem: &Idem, msg: Message) -> u64 {
    let _ = idem;
    msg.sku.len() as u64
}

fn main() {
    let _ = ship;
}
