//! Lost acknowledgements, for real: a small TCP proxy between the store's pool and the server
//! that can be told to cut the connection right after the server has answered the next
//! statement, without passing the answer on. The statement ran and committed; the client only
//! sees its connection drop (`Unavailable`). A claim retried after that sees its own record in
//! progress until the lease ends, then takes it over with the same operation id; a completion
//! retried after that is accepted once. On Redis the "statement" is a script call (`EVALSHA`),
//! which has run in full before the first byte of its reply.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use idem_runtime::store::mysql::MySqlStore;
use idem_runtime::store::postgres::PostgresStore;
use idem_runtime::store::{
    Claim, Completion, ManualClock, Outcome, RecordState, Store, StoreError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Postgres,
    MySql,
    /// RESP: not framed here; a client write that carries `EVALSHA` is a statement, and the
    /// first byte of the reply means it ran.
    Redis,
}

/// Splits a byte stream into the protocol's messages, returning the kind of each message that
/// starts: PostgreSQL's type byte (the very first message, the startup packet, has none), or
/// MySQL's first payload byte of a packet with sequence id 0 (a command).
struct Framer {
    protocol: Protocol,
    started: bool,
    buf: Vec<u8>,
}

impl Framer {
    fn new(protocol: Protocol, untyped_first: bool) -> Self {
        Framer {
            protocol,
            started: !untyped_first,
            buf: Vec::new(),
        }
    }

    /// Feeds `bytes`; returns the kinds of the messages completed by them.
    fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.buf.extend_from_slice(bytes);
        let mut kinds = Vec::new();
        loop {
            let (kind, len) = match self.protocol {
                Protocol::Postgres if !self.started => {
                    if self.buf.len() < 4 {
                        break;
                    }
                    let len = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                    (0, len)
                }
                Protocol::Postgres => {
                    if self.buf.len() < 5 {
                        break;
                    }
                    let len = u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                    (self.buf[0], len + 1)
                }
                Protocol::MySql => {
                    if self.buf.len() < 5 {
                        break;
                    }
                    let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], 0]);
                    let kind = if self.buf[3] == 0 { self.buf[4] } else { 0 };
                    (kind, len as usize + 4)
                }
                Protocol::Redis => break,
            };
            if self.buf.len() < len {
                break;
            }
            self.buf.drain(..len);
            self.started = true;
            kinds.push(kind);
        }
        kinds
    }
}

/// A forwarding proxy on a loopback port.
struct Proxy {
    addr: SocketAddr,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicU64>,
}

impl Proxy {
    async fn start(upstream: SocketAddr, protocol: Protocol) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (armed, cuts) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (a, c) = (armed.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (a, c) = (a.clone(), c.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, protocol, a, c).await;
                    }
                });
            }
        });
        Proxy { addr, armed, cuts }
    }

    /// Cuts the connection that carries the next statement, right after the server answered.
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::SeqCst)
    }
}

/// Forwards both ways until either side closes, or until the armed cut happens: after the
/// client sent a statement (PostgreSQL `Execute` / `Query`, MySQL `COM_STMT_EXECUTE` /
/// `COM_QUERY`) while armed, the server's answer is held back, and once it is complete
/// (PostgreSQL: `CommandComplete` or `ErrorResponse`, then `ReadyForQuery`, i.e. committed;
/// MySQL: the first packet, sent after the commit) both connections are dropped.
async fn relay(
    mut client: TcpStream,
    mut server: TcpStream,
    protocol: Protocol,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicU64>,
) {
    let mut from_client = Framer::new(protocol, protocol == Protocol::Postgres);
    let mut answer = Framer::new(protocol, false);
    let (mut triggered, mut done_seen) = (false, false);
    let (mut cbuf, mut sbuf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        tokio::select! {
            n = client.read(&mut cbuf) => {
                let Ok(n @ 1..) = n else { return };
                let statement = match protocol {
                    Protocol::Redis => cbuf[..n].windows(7).any(|w| w == b"EVALSHA"),
                    _ => from_client.feed(&cbuf[..n]).into_iter().any(|k| match protocol {
                        Protocol::Postgres => k == b'E' || k == b'Q',
                        _ => k == 0x17 || k == 0x03,
                    }),
                };
                if statement
                    && !triggered
                    && armed
                        .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    triggered = true;
                }
                if server.write_all(&cbuf[..n]).await.is_err() {
                    return;
                }
            }
            n = server.read(&mut sbuf) => {
                let Ok(n @ 1..) = n else { return };
                if !triggered {
                    if client.write_all(&sbuf[..n]).await.is_err() {
                        return;
                    }
                    continue;
                }
                let complete = match protocol {
                    Protocol::MySql | Protocol::Redis => true,
                    Protocol::Postgres => answer.feed(&sbuf[..n]).into_iter().any(|k| {
                        done_seen |= k == b'C' || k == b'E';
                        done_seen && k == b'Z'
                    }),
                };
                if complete {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    return; // both streams dropped: the client never sees the answer
                }
            }
        }
    }
}

/// `url` with its `host:port` replaced by the proxy's and TLS off (the proxy reads the
/// protocol).
fn through(url: &str, proxy: SocketAddr, tls_off: &str) -> String {
    let (scheme_user, rest) = url.rsplit_once('@').unwrap();
    let (_, path) = rest.split_once('/').unwrap();
    format!("{scheme_user}@{proxy}/{path}?{tls_off}")
}

fn upstream(url: &str) -> SocketAddr {
    let rest = url.rsplit_once('@').unwrap().1;
    rest.split_once('/').unwrap().0.parse().unwrap()
}

/// A claim and a completion, each of whose acknowledgement is lost.
async fn lost_acknowledgements(
    store: Arc<dyn Store>,
    clock: &ManualClock,
    proxy: &Proxy,
    rev: impl AsyncFn(&idem_runtime::key::ScopedKey) -> i64,
) {
    let h = hash("a");
    let key = unique_key("lost-claim");
    assert!(store.get(&key).await.unwrap().is_none()); // the pool's connection is open
    proxy.arm();
    match store.claim(&req(&key, h)).await {
        Err(e @ StoreError::Unavailable { .. }) => assert!(e.is_transient()),
        other => panic!("expected Unavailable from a cut connection, got {other:?}"),
    }
    assert_eq!(proxy.cuts(), 1, "the proxy cut the claim's connection");
    // The claim committed: the record is there, processing.
    let rec = store.get(&key).await.unwrap().expect("the claim committed");
    assert_eq!((rec.state, rec.fence), (RecordState::Processing, 1));
    // The client's retry cannot tell it was its own claim: 409 until the lease ends ...
    match store.claim(&req(&key, h)).await.unwrap() {
        Claim::InProgress {
            request_hash,
            retry_after,
        } => assert_eq!((request_hash, retry_after), (h, LEASE)),
        other => panic!("expected InProgress, got {other:?}"),
    }
    // ... then it takes the record over, the same operation.
    clock.advance(LEASE);
    let lease = match store.claim(&req(&key, h)).await.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert!(lease.took_over);
    assert_eq!((lease.fence, &lease.operation_id), (2, &rec.operation_id));
    let done = Completion::new(Outcome::Completed, 201, b"paid".to_vec());
    store.complete(&lease, &done).await.unwrap();

    // A completion whose acknowledgement is lost, retried: accepted, written once.
    let key = unique_key("lost-complete");
    let Claim::Acquired(lease) = store.claim(&req(&key, h)).await.unwrap() else {
        panic!("fresh key not free")
    };
    proxy.arm();
    match store.complete(&lease, &done).await {
        Err(e @ StoreError::Unavailable { .. }) => assert!(e.is_transient()),
        other => panic!("expected Unavailable from a cut connection, got {other:?}"),
    }
    assert_eq!(proxy.cuts(), 2, "the proxy cut the completion's connection");
    let stored = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        stored.state,
        RecordState::Completed,
        "the completion committed"
    );
    store.complete(&lease, &done).await.unwrap();
    let again = store.get(&key).await.unwrap().unwrap();
    assert_eq!(again, stored);
    assert_eq!(
        rev(&key).await,
        2,
        "written by the claim and one completion"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lost_acknowledgements() {
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    let direct = PostgresStore::connect(&url).await.unwrap();
    direct.migrate().await.unwrap();
    let proxy = Proxy::start(upstream(&url), Protocol::Postgres).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&through(&url, proxy.addr, "sslmode=disable"))
        .await
        .unwrap();
    let clock = Arc::new(ManualClock::starting_now());
    let store = PostgresStore::from_pool(pool).with_clock(clock.clone());
    let raw = direct.pool().clone();
    lost_acknowledgements(Arc::new(store), &clock, &proxy, async |key| {
        sqlx::query_scalar("SELECT rev FROM idem.idempotency_records WHERE key_hash = $1")
            .bind(&key.hash()[..])
            .fetch_one(&raw)
            .await
            .unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lost_acknowledgements() {
    let Some(url) = server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    let direct = MySqlStore::connect(&url).await.unwrap();
    direct.migrate().await.unwrap();
    let proxy = Proxy::start(upstream(&url), Protocol::MySql).await;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&through(&url, proxy.addr, "ssl-mode=disabled"))
        .await
        .unwrap();
    let clock = Arc::new(ManualClock::starting_now());
    let store = MySqlStore::from_pool(pool).with_clock(clock.clone());
    let raw = direct.pool().clone();
    lost_acknowledgements(Arc::new(store), &clock, &proxy, async |key| {
        sqlx::query_scalar("SELECT rev FROM idem_idempotency_records WHERE key_hash = ?")
            .bind(&key.hash()[..])
            .fetch_one(&raw)
            .await
            .unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lost_acknowledgements() {
    let Some(url) = server_url("IDEM_TEST_REDIS_URL") else {
        return;
    };
    let prefix = redis_prefix();
    let direct = idem_runtime::store::redis::RedisStore::connect(&url)
        .await
        .unwrap()
        .with_prefix(&prefix);
    direct.migrate().await.unwrap();
    let (_, rest) = url.split_once("//").unwrap();
    let (host, db) = rest.split_once('/').unwrap_or((rest, "0"));
    let proxy = Proxy::start(host.parse().unwrap(), Protocol::Redis).await;
    let clock = Arc::new(ManualClock::starting_now());
    let store =
        idem_runtime::store::redis::RedisStore::connect(&format!("redis://{}/{db}", proxy.addr))
            .await
            .unwrap()
            .with_prefix(&prefix)
            .with_clock(clock.clone());
    let conn = direct.connection().clone();
    lost_acknowledgements(Arc::new(store), &clock, &proxy, async |key| {
        redis::cmd("HGET")
            .arg(format!("{prefix}rec:{}", key.hash_hex()))
            .arg("rev")
            .query_async(&mut conn.clone())
            .await
            .unwrap()
    })
    .await;
}
