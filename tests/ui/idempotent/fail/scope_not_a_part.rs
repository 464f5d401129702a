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

struct Tenant {
    id: (u32, u32),
}

#[idempotent(store = idem, key = msg.id, scope = [tenant.id], operation = "warehouse.ship")]
async fn ship(idem: &Idem, msg: Message, tenant: Tenant) -> Result<u64, ShipError> {
    let _ = (idem, tenant.id);
    if msg.sku.is_empty() {
        return Err(ShipError::OutOfStock);
    }
    Ok(7)
}

fn main() {
    let _ = ship;
}
