//! The client half on a bad day: `examples/pay_client` (idem-client) creates thousands of
//! payments against processes of `examples/payments` through a [`FaultProxy`] that, at random,
//! drops the connection before forwarding a request, after forwarding it but before the
//! answer, or in the middle of the answer, and holds answers past the client's timeout; the
//! processes are killed with `SIGKILL` and restarted meanwhile. Every payment must succeed
//! with its own `payment_id`, the service must count exactly N payments, and every attempt of
//! one payment must have carried the same key.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::fleet::{self, Backend, Fleet};
use super::rng::{Rng, seed};
use super::{client, report};

/// The client's timeout for one attempt; [`Fault::Hold`] holds an answer longer.
const TIMEOUT_MS: u64 = 1500;

/// What the proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fault {
    /// Forward it and its answer.
    Pass,
    /// Close the connection without forwarding the request: it never ran.
    DropBefore,
    /// Forward the request, then close without the answer: it ran, the client does not know.
    DropAfter,
    /// Forward half of the answer, then close.
    CutAnswer,
    /// Hold the answer past the client's timeout, then close.
    Hold,
}

fn draw(rng: &mut Rng) -> Fault {
    match rng.below(100) {
        0..8 => Fault::DropBefore,
        8..16 => Fault::DropAfter,
        16..24 => Fault::CutAnswer,
        24..27 => Fault::Hold,
        _ => Fault::Pass,
    }
}

/// What the proxy saw.
#[derive(Default)]
struct Seen {
    /// `order_id` -> the keys its requests carried.
    keys: HashMap<String, HashSet<String>>,
    /// POSTs without a key.
    keyless: usize,
    faults: HashMap<Fault, usize>,
}

/// A TCP proxy in front of the processes (round robin per connection) that speaks just enough
/// HTTP/1.1 to find where a request and its answer end, and breaks exchanges at random.
struct FaultProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
}

impl FaultProxy {
    async fn start(upstreams: Vec<SocketAddr>, mut rng: Rng) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let log = seen.clone();
        let next = AtomicUsize::new(0);
        tokio::spawn(async move {
            while let Ok((downstream, _)) = listener.accept().await {
                let upstream = upstreams[next.fetch_add(1, Ordering::Relaxed) % upstreams.len()];
                tokio::spawn(relay(downstream, upstream, rng.fork(), log.clone()));
            }
        });
        FaultProxy { addr, seen }
    }
}

/// Reads one HTTP/1.1 message (head, then a `Content-Length` or chunked body) from `stream`,
/// keeping what follows it in `carry`. `None` when the stream ends first.
async fn message(stream: &mut TcpStream, carry: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = complete(carry) {
            return Some(carry.drain(..end).collect());
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => carry.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The length of the first complete message in `buf`, if it holds one.
fn complete(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if head.contains("transfer-encoding: chunked") {
        let tail = buf[head_end..].windows(5).position(|w| w == b"0\r\n\r\n")?;
        return Some(head_end + tail + 5);
    }
    let length = header(&head, "content-length").map_or(0, |v| v.parse().unwrap());
    (buf.len() >= head_end + length).then_some(head_end + length)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Records the key and the `order_id` of a request.
fn record(request: &[u8], seen: &Mutex<Seen>) {
    let text = String::from_utf8_lossy(request);
    if !text.starts_with("POST /v1/payments ") {
        return;
    }
    let key = header(&text, "idempotency-key").map(str::to_owned);
    let order = text
        .split("\"order_id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a payment request names its order")
        .to_owned();
    let mut seen = seen.lock().unwrap();
    match key {
        Some(key) => {
            seen.keys.entry(order).or_default().insert(key);
        }
        None => seen.keyless += 1,
    }
}

async fn relay(mut down: TcpStream, upstream: SocketAddr, mut rng: Rng, seen: Arc<Mutex<Seen>>) {
    // A killed process refuses the connection: the client sees the connection closed.
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut from_down, mut from_up) = (Vec::new(), Vec::new());
    loop {
        let Some(request) = message(&mut down, &mut from_down).await else {
            return;
        };
        let fault = draw(&mut rng);
        *seen.lock().unwrap().faults.entry(fault).or_default() += 1;
        // Only what reaches the service counts as carried; a dropped request is retried and
        // seen again.
        if fault == Fault::DropBefore {
            return;
        }
        record(&request, &seen);
        if up.write_all(&request).await.is_err() {
            return;
        }
        let Some(answer) = message(&mut up, &mut from_up).await else {
            return;
        };
        match fault {
            Fault::Pass => {
                if down.write_all(&answer).await.is_err() {
                    return;
                }
            }
            Fault::DropBefore | Fault::DropAfter => return,
            Fault::CutAnswer => {
                let _ = down.write_all(&answer[..answer.len() / 2]).await;
                return;
            }
            Fault::Hold => {
                tokio::time::sleep(Duration::from_millis(TIMEOUT_MS + 500)).await;
                return;
            }
        }
    }
}

/// The JSON line of `pay_client`.
#[derive(Debug, serde::Deserialize)]
struct Line {
    sent: usize,
    succeeded: usize,
    failed: usize,
    attempts: u64,
    replayed: usize,
    payment_ids: usize,
}

/// `payments` payments with `processes` processes of the example on `backend`.
pub async fn through_a_fault_proxy(backend: Backend, processes: usize, payments: usize) {
    let Some(db) = backend.database().await else {
        return;
    };
    let seed = seed();
    let mut rng = Rng::new(seed ^ 0x00C1_1E47);
    let fleet = Arc::new(
        Fleet::start(
            &db,
            processes,
            &[("PAYMENTS_STORE_TIMEOUT_MS", "20000".to_owned())],
        )
        .await,
    );
    let proxy = FaultProxy::start(fleet.addrs(), rng.fork()).await;
    let started = Instant::now();
    let client = tokio::task::spawn_blocking({
        let url = format!("http://{}", proxy.addr);
        move || {
            std::process::Command::new(fleet::example("pay_client"))
                .args(["--url", &url, "--payments", &payments.to_string()])
                .args([
                    "--concurrency",
                    "8",
                    "--timeout-ms",
                    &TIMEOUT_MS.to_string(),
                ])
                .stderr(std::process::Stdio::inherit())
                .output()
                .unwrap()
        }
    });
    // Kill a process every 1-2 s while the client runs, and restart it at once.
    let done = Arc::new(AtomicBool::new(false));
    let killer = tokio::spawn({
        let (fleet, done, mut rng) = (fleet.clone(), done.clone(), rng.fork());
        async move {
            let mut kills = 0;
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(rng.between(1000, 2000))).await;
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let i = rng.below(fleet.len() as u64) as usize;
                fleet.kill(i);
                fleet.restart(i).await;
                kills += 1;
            }
            kills
        }
    });
    let output = client.await.unwrap();
    done.store(true, Ordering::Relaxed);
    let kills = killer.await.unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line: Line = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("pay_client printed {stdout:?} ({e}), {}", output.status));
    fleet.assert_alive();

    assert_eq!(line.sent, payments, "{line:?}");
    assert_eq!(
        (line.succeeded, line.failed, line.payment_ids),
        (payments, 0, payments),
        "{line:?} (seed {seed})"
    );
    assert!(output.status.success(), "{}", output.status);
    // The service's own count, asked directly.
    let raw = client::request("GET", "/v1/stats", &[], None);
    let stats = client::exchange(fleet.addrs()[0], &raw, Duration::from_secs(5))
        .await
        .unwrap();
    let stats: serde_json::Value = serde_json::from_str(&stats.text()).unwrap();
    assert_eq!(stats["payments"], payments, "{stats}");
    assert_eq!(db.payments().await.len(), payments);

    let seen = proxy.seen.lock().unwrap();
    assert_eq!(seen.keyless, 0, "every payment request carries a key");
    assert_eq!(
        seen.keys.len(),
        payments,
        "every payment reached the service"
    );
    let split: Vec<_> = seen
        .keys
        .iter()
        .filter(|(_, keys)| keys.len() != 1)
        .collect();
    assert!(
        split.is_empty(),
        "orders sent under several keys: {split:?}"
    );
    let faults = |f| seen.faults.get(&f).copied().unwrap_or(0);
    assert!(
        line.attempts > payments as u64 && line.replayed > 0,
        "the faults made retries and replays: {line:?}"
    );
    report(&format!(
        "clients [{}] {processes} process(es), {kills} kills, seed {seed}: {payments} payments \
         through the fault proxy in {:.1} s: {} attempts, {} replayed; faults: {} dropped \
         before, {} after forwarding, {} cut answers, {} held past the timeout, {} passed; \
         payments {payments}, one key per order",
        backend.name(),
        took.as_secs_f64(),
        line.attempts,
        line.replayed,
        faults(Fault::DropBefore),
        faults(Fault::DropAfter),
        faults(Fault::CutAnswer),
        faults(Fault::Hold),
        faults(Fault::Pass),
    ));
}
