use idem::{Fingerprint, Idem, IdempotencyError, idempotent};

#[derive(Fingerprint)]
struct Ship {
    id: String,
}

#[idempotent(store = idem, key = msg.id, scope = global, operation = "ship", transaction = tx)]
async fn ship(
    idem: &Idem,
    msg: Ship,
    tx: idem::Tx<idem::SqliteStore>,
) -> Result<String, IdempotencyError> {
    let _ = (idem, tx);
    Ok(msg.id)
}

fn main() {
    let _ = ship;
}
