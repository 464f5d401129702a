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

#[idempotent(store = idem, key = msg.id, scope = default, operation = "warehouse.ship", fingerprint(arg = msg))]
async fn ship(idem: &Idem, msg: Message) -> Result<u64, ShipError> {
    let _ = idem;
    if msg.sku.is_empty() {
        return Err(ShipError::OutOfStock);
    }
    Ok(msg.id.len() as u64)
}

fn main() {
    let _ = ship;
}
