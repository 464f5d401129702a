//! What an auditor finds at rest: the payments example run with `PAYMENTS_ENCRYPTION_KEYS`'s
//! key ring, then every byte its database keeps searched — the SQLite file and its WAL,
//! `pg_dump`'s output, MariaDB's whole data directory — for what only idem stores of a payment:
//! the client's key, the response's `"customer_id":..` and `"amount":..` members and its
//! `Location`. None is found, in bytes or in hex (`pg_dump` writes `bytea` as hex). The same run
//! without encryption finds every one, so the search can fail. The example's own `payments`
//! table keeps the customer id and the amount in plaintext: that is the application's data,
//! which is why the markers are the forms only the stored response holds. Redis, which the
//! example does not run on, is searched the same way after an `#[idempotent]` handler's run:
//! its RDB file (written uncompressed), its append-only files and a `DUMP` of the record.

use std::path::Path;
use std::time::{Duration, Instant};

use idem::seal::KeyRing;
use serde_json::json;

use super::{Config, Server, post, serve_with};
use crate::backends::{Backend, backend_tests};
use crate::records::Records;
use crate::servers::unique;

/// One named source of bytes at rest (a file, a dump).
type Haystack = (String, Vec<u8>);

/// Where `needle` is in `haystacks`, as bytes or as hex (either case).
fn find(haystacks: &[Haystack], needle: &[u8]) -> Option<String> {
    let lower: String = needle.iter().map(|b| format!("{b:02x}")).collect();
    let upper = lower.to_uppercase();
    for (name, bytes) in haystacks {
        for (form, n) in [
            ("bytes", needle),
            ("hex", lower.as_bytes()),
            ("HEX", upper.as_bytes()),
        ] {
            if memchr::memmem::find(bytes, n).is_some() {
                return Some(format!("{name} ({form})"));
            }
        }
    }
    None
}

/// Every regular file under `dir`, read.
fn files_under(dir: &Path, out: &mut Vec<Haystack>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            files_under(&path, out);
        } else if kind.is_file() {
            // A file may go between the listing and the read (a rotated log).
            if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
}

/// What the example's database keeps at rest, as an auditor with access to it reads it.
async fn at_rest(s: &Server) -> Vec<Haystack> {
    let mut out = Vec::new();
    match s.db.backend {
        Backend::Sqlite => {
            let path = s.db.url.trim_start_matches("sqlite://");
            for suffix in ["", "-wal", "-journal"] {
                let file = format!("{path}{suffix}");
                if let Ok(bytes) = std::fs::read(&file) {
                    out.push((file, bytes));
                }
            }
        }
        Backend::Postgres => {
            let bin = std::env::var("PGBIN").unwrap_or("/usr/lib/postgresql/15/bin".to_owned());
            let dump = std::process::Command::new(format!("{bin}/pg_dump"))
                .arg("--dbname")
                .arg(&s.db.url)
                .output()
                .unwrap_or_else(|e| panic!("{bin}/pg_dump: {e} (set PGBIN)"));
            assert!(
                dump.status.success(),
                "{}",
                String::from_utf8_lossy(&dump.stderr)
            );
            out.push(("pg_dump".to_owned(), dump.stdout));
        }
        Backend::Mysql => {
            let dir = std::env::var("IDEM_TEST_MYSQL_DATADIR").expect(
                "IDEM_TEST_MYSQL_DATADIR: the data directory of the server at \
                 IDEM_TEST_MYSQL_URL (scripts/test sets both)",
            );
            files_under(Path::new(&dir), &mut out);
        }
        Backend::Memory | Backend::Redis => unreachable!("no database"),
    }
    out
}

/// What only idem's stored response holds of one payment: the client key, the response's
/// `customer_id` and `amount` members as serialized, and the `Location`.
struct Markers(Vec<String>);

/// `"name":value` as `body` (compact JSON) has it.
fn member(body: &str, name: &str) -> String {
    let start = body
        .find(&format!("\"{name}\":"))
        .unwrap_or_else(|| panic!("no {name} in {body}"));
    let len = body[start..].find([',', '}']).unwrap();
    body[start..start + len].to_owned()
}

/// A payment of markers of its own through the example.
async fn pay(s: &Server) -> Markers {
    let key = unique("audit_key");
    let customer = unique("cus_audit");
    // Unique like the other markers: an earlier run's plaintext stays in the server's log.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let amount = format!("{}.37", 1 + nanos % 1_000_000_000_000);
    let body = json!({
        "amount": amount,
        "currency": "EUR",
        "customer_id": customer,
        "order_id": unique("ord_audit"),
    });
    let r = post(s, "/v1/payments", &key, body).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let text = r.text();
    let location = r.header("location").expect("a Location").to_owned();
    Markers(vec![
        key,
        member(&text, "customer_id"),
        member(&text, "amount"),
        location,
    ])
}

/// Reads what `s`'s database keeps at rest until `ready` says what must be there is (a server
/// writes its log and pages when it likes: MariaDB here flushes its log once a second), 20 s
/// at most.
async fn settled(s: &Server, ready: impl Fn(&[Haystack]) -> bool) -> Vec<Haystack> {
    let started = Instant::now();
    loop {
        let bytes = at_rest(s).await;
        if ready(&bytes) || started.elapsed() > Duration::from_secs(20) {
            return bytes;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Asserts that no marker is anywhere in `bytes`.
fn none_readable(markers: &[Markers], bytes: &[Haystack]) {
    let found: Vec<String> = markers
        .iter()
        .flat_map(|m| &m.0)
        .filter_map(|m| find(bytes, m.as_bytes()).map(|at| format!("{m:?} in {at}")))
        .collect();
    assert!(found.is_empty(), "readable at rest: {found:?}");
}

/// Asserts that every marker is somewhere in `bytes`.
fn all_readable(markers: &[Markers], bytes: &[Haystack]) {
    let missing: Vec<&String> = markers
        .iter()
        .flat_map(|m| &m.0)
        .filter(|m| find(bytes, m.as_bytes()).is_none())
        .collect();
    assert!(missing.is_empty(), "not found at rest: {missing:?}");
}

/// 16 bytes from the middle of a sealed body (`hex` as the database writes it), past its
/// 24-byte nonce: found at rest, it proves the search reads what the store wrote.
fn ciphertext_sample(hex: &str) -> Vec<u8> {
    let hex = hex.trim().to_ascii_lowercase();
    let mid = &hex[48 + 2 * 8..48 + 2 * 24];
    (0..16)
        .map(|i| u8::from_str_radix(&mid[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

const RING: &str = "audit:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The auditor's search over the example's database, with encryption on and then off.
async fn nothing_readable_at_rest(backend: Backend) {
    let sealing = Config {
        encryption: Some(KeyRing::parse(RING).unwrap()),
        ..super::default_config()
    };
    serve_with(super::Front::Axum, backend, sealing, async |s| {
        let markers = vec![pay(s).await, pay(s).await, pay(s).await];
        let pool = s.db.pool().await;
        let hex = match backend {
            Backend::Postgres => "encode(resp_body, 'hex')",
            _ => "hex(resp_body)",
        };
        let table = backend.records_table();
        let sealed = pool
            .text(format!("SELECT MAX({hex}) FROM {table} WHERE state = 1"))
            .await;
        pool.close().await;
        let sample = ciphertext_sample(&sealed);
        let bytes = settled(s, |b| find(b, &sample).is_some()).await;
        assert!(
            find(&bytes, &sample).is_some(),
            "the stored ciphertext is not where the search looks"
        );
        none_readable(&markers, &bytes);
    })
    .await;

    serve_with(
        super::Front::Axum,
        backend,
        super::default_config(),
        async |s| {
            let markers = vec![pay(s).await, pay(s).await, pay(s).await];
            let bytes = settled(s, |b| {
                markers
                    .iter()
                    .flat_map(|m| &m.0)
                    .all(|m| find(b, m.as_bytes()).is_some())
            })
            .await;
            all_readable(&markers, &bytes);
        },
    )
    .await;
}

backend_tests!(
    2,
    nothing_readable_at_rest_on,
    [sqlite, postgres, mysql],
    nothing_readable_at_rest,
);

async fn nothing_readable_at_rest_on(backend: Backend, test: impl AsyncFnOnce(Backend)) {
    test(backend).await;
}

/// What the Redis server keeps at rest: an RDB snapshot written now without compression (so
/// that plaintext would show), every file of its directory (the append-only files), and a
/// `DUMP` of `record`.
async fn redis_at_rest(records: &Records, record: &str) -> Vec<Haystack> {
    let Records::Redis { conn, .. } = records else {
        unreachable!("a Redis fixture")
    };
    let mut conn = conn.clone();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdbcompression")
        .arg("no")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SAVE").query_async(&mut conn).await.unwrap();
    let (_, dir): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dir")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    files_under(Path::new(&dir), &mut out);
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg(record)
        .query_async(&mut conn)
        .await
        .unwrap();
    out.push(("DUMP".to_owned(), dump));
    out
}

/// The same search on Redis, after an `#[idempotent]` handler's run with encryption on and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_readable_at_rest_on_redis() {
    use crate::encryption::{app, pay_with, ring, scoped};
    let Some(fx) = Backend::Redis.open().await else {
        return;
    };
    let records = fx.records();
    let Records::Redis {
        records: prefix, ..
    } = &records
    else {
        unreachable!("a Redis fixture")
    };
    for sealed in [true, false] {
        let (router, _) = app(&fx.store, sealed.then(|| ring(&[("k1", 1)])));
        let key = unique("audit_key");
        let (amount, customer) = (unique("amount"), unique("cus_audit"));
        let body = json!({"amount": amount, "customer_id": customer}).to_string();
        let answer = pay_with(&router, &key, &body).await;
        let text = String::from_utf8(answer.body).unwrap();
        let markers = [Markers(vec![
            key.clone(),
            member(&text, "customer_id"),
            member(&text, "amount"),
        ])];
        let record = format!("{prefix}{}", scoped(&key).hash_hex());
        let bytes = redis_at_rest(&records, &record).await;
        if sealed {
            let body = records.body(&scoped(&key)).await.unwrap();
            let sample: String = body.iter().map(|b| format!("{b:02x}")).collect();
            assert!(find(&bytes, &ciphertext_sample(&sample)).is_some());
            none_readable(&markers, &bytes);
        } else {
            all_readable(&markers, &bytes);
        }
    }
}
