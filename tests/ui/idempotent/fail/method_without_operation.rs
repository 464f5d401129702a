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

struct Shipper {
    idem: Idem,
}

impl Shipper {
    #[idempotent(store = self.idem, key = msg.id, scope = global)]
    async fn ship(&self, msg: Message) -> Result<u64, ShipError> {
        if msg.sku.is_empty() {
            return Err(ShipError::OutOfStock);
        }
        Ok(7)
    }
}

fn main() {
    let _ = Shipper::ship;
}
