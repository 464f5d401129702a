//! A closed-loop HTTP/1.1 load generator for idempotent write endpoints: N keep-alive
//! connections, one request in flight on each, for a fixed time, with a chosen mix of
//! idempotency keys; or bursts of N requests released at once, on one key or N keys.
//! `scripts/bench-http` and `scripts/bench-storm` drive it against
//! `examples/loadtest_server.rs` (BENCHMARKS.md, "HTTP end to end" and "Contention"); point it
//! at your own deployment the same way.
//!
//! ```sh
//! cargo run --release --example loadgen -- --url http://127.0.0.1:8080/idem \
//!     --connections 4 --duration 10s --mix dup30
//! cargo run --release --example loadgen -- --url http://127.0.0.1:8080/idem \
//!     --burst 1000 --burst-keys one --repeat 9 --stats /stats
//! ```
//!
//! | flag | default | |
//! |---|---|---|
//! | `--url URL` | `http://127.0.0.1:8080/idem` | the endpoint (`http://` only: put a TLS terminator aside) |
//! | `--path PATH` | the URL's path | overrides the URL's path and query |
//! | `--method M` | `POST` | |
//! | `--connections N` | `1` | keep-alive connections, one request in flight on each (closed loop) |
//! | `--duration D` | `10s` | how long to measure (`5`, `5s`, `500ms`, `2m`) |
//! | `--warmup D` | `1s` | load sent before measuring, not counted |
//! | `--mix M` | `fresh` | `fresh`: a new key per request; `replay`: one key, sent once before the run, then replayed; `dupNN` (`dup30`): NN % of requests reuse one of the connection's last 64 keys, the others are fresh; `none`: no key header |
//! | `--body JSON` | a small payment | the request body; `@FILE` reads it from a file; every `{key}` in it is replaced by the request's key |
//! | `--header 'Name: value'` | | an extra request header (repeatable): authentication, tenant |
//! | `--key-header NAME` | `Idempotency-Key` | the header that carries the key |
//! | `--key K` | a new one per run | the key replayed by `--mix replay` (keys are otherwise `lg-<run>-<connection>-<n>`) |
//! | `--threads N` | `1` | client threads (one is enough below ~30k requests/s and leaves the CPUs to the server) |
//! | `--json` | | one JSON object on stdout instead of the text report (`sent`: every request sent, the warm-up's included) |
//! | `--burst N` | | burst mode instead of the closed loop: open N connections, then send one request on each at the same moment (a barrier); `--connections`, `--duration`, `--mix` and `--key` do not apply (keys are `lg-<run>-<burst>` or `lg-<run>-<burst>-<n>`) |
//! | `--burst-keys one\|distinct` | `distinct` | in a burst, one key on all N requests (a single-key storm) or N distinct keys |
//! | `--repeat R` | `5` | measured bursts, new keys in each, after one unmeasured (none with `--warmup 0`); the report gives the median over bursts |
//! | `--baseline PATH` | | pairs every burst with the same burst on PATH (distinct keys, no `--stats`), before it and after it in turn, and reports the medians of the per-pair ratios: a baseline measured within a second of its subject |
//! | `--grpc` | | gRPC instead of HTTP/1.1 (closed loop only): the URL's path is the unary method's (`/payments.v1.Payments/CreatePayment`), each connection is an HTTP/2 channel, the message is `CreatePaymentRequest` of `examples/proto/payments.proto` (amount `100.00`, currency `EUR`, order id `ord_<key>`) with the key in the `idempotency-key` metadata (`--key-header`), and answers are counted by gRPC code (`OK` is the success) and as replayed by the metadata `idempotent-replayed: true` |
//! | `--stats PATH` | | a `GET` of PATH on the same server before and after each burst: a JSON object whose numbers are reported as per-burst differences (`examples/loadtest_server.rs` serves `/stats`: the store's statements, the handler's runs) |
//!
//! A request counts when it starts after the warm-up and finishes before the end. Latency is
//! from the request's start to its body's last byte. Answers outside `2xx` are counted by status
//! and as errors, connection failures as `io` errors (the connection is then reopened); responses
//! carrying `Idempotent-Replayed: true` are counted as `replayed`.
//!
//! A burst's requests are built and their connections ready before the barrier opens; its wall
//! time runs from the barrier to the last answer's last byte, its throughput is N / wall time,
//! and a request's latency runs from its own start (the single client thread writes the N
//! requests one after the other, so the last starts a little after the barrier). The N
//! connections stay open across bursts (a connection that failed is reopened before the next
//! burst); 1,000 of them need as many file descriptors (`ulimit -n`) and fit the server's
//! accept backlog (1,024 for tokio's `TcpListener::bind`).

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type BoxError = Box<dyn Error + Send + Sync>;

const DEFAULT_BODY: &str = r#"{"amount": "100.00", "currency": "EUR", "order_id": "ord_{key}"}"#;

const USAGE: &str = "usage: loadgen [--url http://HOST:PORT/PATH] [--path PATH] [--method M] \
[--connections N] [--duration D] [--warmup D] [--mix fresh|replay|dupNN|none] [--body JSON|@FILE] \
[--header 'Name: value']... [--key-header NAME] [--key K] [--threads N] [--json] \
[--burst N [--burst-keys one|distinct] [--repeat R] [--stats PATH] [--baseline PATH]]";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mix {
    None,
    Fresh,
    Replay,
    /// Percent of requests that reuse a recent key.
    Dup(u32),
}

impl Mix {
    fn parse(s: &str) -> Result<Mix, BoxError> {
        Ok(match s {
            "none" => Mix::None,
            "fresh" => Mix::Fresh,
            "replay" => Mix::Replay,
            _ => match s.strip_prefix("dup").map(str::parse::<u32>) {
                Some(Ok(p)) if p <= 100 => Mix::Dup(p),
                _ => return Err(format!("--mix {s}: fresh, replay, dupNN (0-100) or none").into()),
            },
        })
    }

    fn name(self) -> String {
        match self {
            Mix::None => "none".into(),
            Mix::Fresh => "fresh".into(),
            Mix::Replay => "replay".into(),
            Mix::Dup(p) => format!("dup{p}"),
        }
    }
}

struct Config {
    host: String,
    port: u16,
    authority: String,
    path: String,
    method: Method,
    connections: usize,
    duration: Duration,
    warmup: Duration,
    mix: Mix,
    /// The body, split at every `{key}`.
    body: Vec<String>,
    headers: Vec<(HeaderName, HeaderValue)>,
    key_header: HeaderName,
    replay_key: String,
    prefix: String,
    threads: usize,
    json: bool,
    /// Burst mode: the number of requests released at once.
    burst: Option<usize>,
    /// In a burst, one key for all requests.
    burst_one_key: bool,
    repeat: usize,
    stats: Option<String>,
    /// In burst mode, the path of the baseline burst paired with each burst.
    baseline: Option<String>,
    /// gRPC: `path` is a unary method's.
    grpc: bool,
}

fn duration(s: &str) -> Result<Duration, BoxError> {
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    let secs = match unit {
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("{s:?}: units ms, s, m").into()),
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("{s:?}: not a duration").into());
    }
    Ok(Duration::from_secs_f64(secs))
}

fn config() -> Result<Config, BoxError> {
    let mut url = "http://127.0.0.1:8080/idem".to_owned();
    let mut path = None;
    let mut method = Method::POST;
    let mut connections = 1;
    let mut dur = Duration::from_secs(10);
    let mut warmup = Duration::from_secs(1);
    let mut mix = Mix::Fresh;
    let mut body = DEFAULT_BODY.to_owned();
    let mut headers = Vec::new();
    let mut key_header = HeaderName::from_static("idempotency-key");
    let mut key = None;
    let mut threads = 1;
    let mut json = false;
    let mut burst = None;
    let mut burst_one_key = false;
    let mut repeat = 5;
    let mut stats = None;
    let mut baseline = None;
    let mut grpc = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--url" => url = value()?,
            "--path" => path = Some(value()?),
            "--method" => method = value()?.parse()?,
            "--connections" | "-c" => connections = value()?.parse()?,
            "--duration" | "-d" => dur = duration(&value()?)?,
            "--warmup" => warmup = duration(&value()?)?,
            "--mix" => mix = Mix::parse(&value()?)?,
            "--body" => {
                let v = value()?;
                body = match v.strip_prefix('@') {
                    Some(file) => {
                        std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?
                    }
                    None => v,
                };
            }
            "--header" | "-H" => {
                let v = value()?;
                let (name, val) = v
                    .split_once(':')
                    .ok_or_else(|| format!("--header {v:?}: 'Name: value'"))?;
                headers.push((name.trim().parse()?, val.trim().parse()?));
            }
            "--key-header" => key_header = value()?.parse()?,
            "--key" => key = Some(value()?),
            "--threads" => threads = value()?.parse()?,
            "--json" => json = true,
            "--burst" => burst = Some(value()?.parse()?),
            "--burst-keys" => {
                burst_one_key = match value()?.as_str() {
                    "one" => true,
                    "distinct" => false,
                    v => return Err(format!("--burst-keys {v}: one or distinct").into()),
                }
            }
            "--repeat" => repeat = value()?.parse()?,
            "--stats" => stats = Some(value()?),
            "--baseline" => baseline = Some(value()?),
            "--grpc" => grpc = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}").into()),
        }
    }
    let uri: Uri = url.parse().map_err(|e| format!("--url {url}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("--url {url}: http:// only").into());
    }
    let host = uri.host().ok_or("--url: no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let authority = uri.authority().map(ToString::to_string).unwrap_or_default();
    let path = path.unwrap_or_else(|| {
        uri.path_and_query()
            .map_or_else(|| "/".to_owned(), ToString::to_string)
    });
    if grpc && burst.is_some() {
        return Err("--grpc measures the closed loop only, not --burst".into());
    }
    if connections == 0 || threads == 0 || burst == Some(0) || repeat == 0 {
        return Err("--connections, --threads, --burst and --repeat must be at least 1".into());
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!(
        "lg-{:x}{:05x}",
        nanos & 0xffff_ffff_ffff,
        std::process::id()
    );
    Ok(Config {
        host,
        port,
        authority,
        path,
        method,
        connections,
        duration: dur,
        warmup,
        mix,
        body: body.split("{key}").map(str::to_owned).collect(),
        headers,
        key_header,
        replay_key: key.unwrap_or_else(|| format!("{prefix}-replay")),
        prefix,
        threads,
        json,
        burst,
        burst_one_key,
        repeat,
        stats,
        baseline,
        grpc,
    })
}

/// Whether an answer of `status` (an HTTP status, or a gRPC code) is a success.
fn success(cfg: &Config, status: u16) -> bool {
    if cfg.grpc {
        status == 0
    } else {
        (200..300).contains(&status)
    }
}

/// How `status` is reported: the HTTP status, or the gRPC code's name.
fn status_name(cfg: &Config, status: u16) -> String {
    if cfg.grpc {
        format!("{:?}", tonic::Code::from(i32::from(status)))
    } else {
        status.to_string()
    }
}

/// xorshift64*: the duplicate choices, reproducible per connection.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// What one connection measured.
#[derive(Default)]
struct Tally {
    latencies_ns: Vec<u64>,
    status: BTreeMap<u16, u64>,
    replayed: u64,
    io_errors: u64,
    /// Every request sent, the warm-up's and those that ended past the end included.
    sent: u64,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.latencies_ns.extend(other.latencies_ns);
        for (s, n) in other.status {
            *self.status.entry(s).or_default() += n;
        }
        self.replayed += other.replayed;
        self.io_errors += other.io_errors;
        self.sent += other.sent;
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// The request of `--grpc`: the fields of `payments.v1.CreatePaymentRequest` it sets.
#[derive(Clone, PartialEq, prost::Message)]
struct CreatePaymentRequest {
    #[prost(string, tag = "1")]
    amount: String,
    #[prost(string, tag = "2")]
    currency: String,
    #[prost(string, tag = "3")]
    customer_id: String,
    #[prost(string, tag = "4")]
    order_id: String,
}

/// Any answer of `--grpc`: its fields are skipped, only the status and metadata count.
#[derive(Clone, PartialEq, prost::Message)]
struct Answer {}

/// A connection of the closed loop.
enum Conn {
    Http(Sender),
    Grpc(tonic::client::Grpc<tonic::transport::Channel>),
}

async fn open(cfg: &Config) -> Result<Conn, BoxError> {
    if !cfg.grpc {
        return Ok(Conn::Http(connect(cfg).await?));
    }
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cfg.authority))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(Conn::Grpc(tonic::client::Grpc::new(channel)))
}

/// Sends one request with `key` on `conn` and reads the whole answer: (status or gRPC code,
/// replayed).
async fn exchange(
    cfg: &Config,
    conn: &mut Conn,
    key: Option<&str>,
) -> Result<(u16, bool), BoxError> {
    let grpc = match conn {
        Conn::Http(sender) => return send(sender, request(cfg, key)?).await,
        Conn::Grpc(grpc) => grpc,
    };
    let mut req = tonic::Request::new(CreatePaymentRequest {
        amount: "100.00".to_owned(),
        currency: "EUR".to_owned(),
        customer_id: "cus_1".to_owned(),
        order_id: format!("ord_{}", key.unwrap_or_default()),
    });
    if let Some(k) = key {
        req.metadata_mut().insert(
            tonic::metadata::MetadataKey::from_bytes(cfg.key_header.as_str().as_bytes())?,
            k.parse()?,
        );
    }
    grpc.ready().await?;
    let path = cfg.path.parse()?;
    let codec = tonic_prost::ProstCodec::<CreatePaymentRequest, Answer>::default();
    let replayed = |m: &tonic::metadata::MetadataMap| {
        m.get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    };
    Ok(match grpc.unary(req, path, codec).await {
        Ok(res) => (0, replayed(res.metadata())),
        // No answer: the connection failed.
        Err(status) if status.code() == tonic::Code::Unknown && status.source().is_some() => {
            return Err(status.into());
        }
        Err(status) => (status.code() as u16, replayed(status.metadata())),
    })
}

async fn connect(cfg: &Config) -> Result<Sender, BoxError> {
    let stream = TcpStream::connect((cfg.host.as_str(), cfg.port)).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn request(cfg: &Config, key: Option<&str>) -> Result<Request<Full<Bytes>>, BoxError> {
    request_to(cfg, &cfg.path, key)
}

fn request_to(
    cfg: &Config,
    path: &str,
    key: Option<&str>,
) -> Result<Request<Full<Bytes>>, BoxError> {
    let body = match key {
        Some(k) => cfg.body.join(k),
        None => cfg.body.join(""),
    };
    let mut req = Request::builder()
        .method(cfg.method.clone())
        .uri(path)
        .header(HOST, cfg.authority.as_str())
        .header(CONTENT_TYPE, "application/json");
    if let Some(k) = key {
        req = req.header(cfg.key_header.clone(), k);
    }
    for (name, value) in &cfg.headers {
        req = req.header(name, value);
    }
    Ok(req.body(Full::new(Bytes::from(body)))?)
}

/// Sends one request and reads the whole answer: (status, replayed).
async fn send(sender: &mut Sender, req: Request<Full<Bytes>>) -> Result<(u16, bool), BoxError> {
    sender.ready().await?;
    let res = sender.send_request(req).await?;
    let status = res.status().as_u16();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    res.into_body().collect().await?;
    Ok((status, replayed))
}

/// One connection's closed loop until `end`; counts what starts at or after `from`.
async fn run_connection(cfg: Arc<Config>, id: usize, from: Instant, end: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
    let mut recent: Vec<String> = Vec::with_capacity(64);
    let mut next_recent = 0;
    let mut seq = 0u64;
    let mut sender = None;
    while Instant::now() < end {
        let key = match cfg.mix {
            Mix::None => None,
            Mix::Replay => Some(cfg.replay_key.clone()),
            Mix::Fresh => {
                seq += 1;
                Some(format!("{}-{id}-{seq}", cfg.prefix))
            }
            Mix::Dup(p) => {
                if !recent.is_empty() && rng.next() % 100 < u64::from(p) {
                    Some(recent[(rng.next() % recent.len() as u64) as usize].clone())
                } else {
                    seq += 1;
                    let k = format!("{}-{id}-{seq}", cfg.prefix);
                    if recent.len() < 64 {
                        recent.push(k.clone());
                    } else {
                        recent[next_recent] = k.clone();
                        next_recent = (next_recent + 1) % 64;
                    }
                    Some(k)
                }
            }
        };
        let s = match sender.as_mut() {
            Some(s) => s,
            None => match open(&cfg).await {
                Ok(s) => sender.insert(s),
                Err(_) => {
                    if Instant::now() >= from {
                        tally.io_errors += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let start = Instant::now();
        let result = exchange(&cfg, s, key.as_deref()).await;
        let done = Instant::now();
        tally.sent += 1;
        let counted = start >= from && done <= end;
        match result {
            Ok((status, replayed)) => {
                if counted {
                    tally.latencies_ns.push((done - start).as_nanos() as u64);
                    *tally.status.entry(status).or_default() += 1;
                    tally.replayed += u64::from(replayed);
                }
            }
            Err(_) => {
                sender = None;
                if counted {
                    tally.io_errors += 1;
                }
            }
        }
    }
    tally
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e3
}

async fn run(cfg: Config) -> Result<(), BoxError> {
    let cfg = Arc::new(cfg);
    if cfg.mix == Mix::Replay {
        let mut conn = open(&cfg).await?;
        let (status, _) = exchange(&cfg, &mut conn, Some(&cfg.replay_key)).await?;
        if !success(&cfg, status) {
            let status = status_name(&cfg, status);
            return Err(format!("seeding the replayed key: status {status}").into());
        }
    }
    let from = Instant::now() + cfg.warmup;
    let end = from + cfg.duration;
    let tasks: Vec<_> = (0..cfg.connections)
        .map(|id| tokio::spawn(run_connection(cfg.clone(), id, from, end)))
        .collect();
    let mut tally = Tally::default();
    for t in tasks {
        tally.merge(t.await?);
    }
    let mut lat = tally.latencies_ns;
    lat.sort_unstable();
    let requests = lat.len() as u64;
    let secs = cfg.duration.as_secs_f64();
    let rps = requests as f64 / secs;
    let errors = tally
        .status
        .iter()
        .filter(|(s, _)| !success(&cfg, **s))
        .map(|(_, n)| n)
        .sum::<u64>()
        + tally.io_errors;
    let mean = if requests == 0 {
        0.0
    } else {
        lat.iter().sum::<u64>() as f64 / requests as f64 / 1e3
    };
    let (p50, p90, p99) = (
        percentile(&lat, 0.50),
        percentile(&lat, 0.90),
        percentile(&lat, 0.99),
    );
    let max = lat.last().map_or(0.0, |&m| m as f64 / 1e3);
    if cfg.json {
        let status: serde_json::Map<String, serde_json::Value> = tally
            .status
            .iter()
            .map(|(s, n)| (status_name(&cfg, *s), (*n).into()))
            .collect();
        let out = serde_json::json!({
            "url": format!("http://{}{}", cfg.authority, cfg.path),
            "mix": cfg.mix.name(),
            "connections": cfg.connections,
            "duration_s": secs,
            "requests": requests,
            "sent": tally.sent,
            "rps": rps,
            "errors": errors,
            "io_errors": tally.io_errors,
            "status": status,
            "replayed": tally.replayed,
            "p50_us": p50,
            "p90_us": p90,
            "p99_us": p99,
            "max_us": max,
            "mean_us": mean,
        });
        println!("{out}");
    } else {
        println!(
            "{} {}{}  mix {}  connections {}  duration {:.1}s  warmup {:.1}s",
            cfg.method,
            cfg.authority,
            cfg.path,
            cfg.mix.name(),
            cfg.connections,
            secs,
            cfg.warmup.as_secs_f64()
        );
        println!(
            "requests  {requests}  ({rps:.1}/s), replayed {}",
            tally.replayed
        );
        let statuses: Vec<String> = tally
            .status
            .iter()
            .map(|(s, n)| format!("{}: {n}", status_name(&cfg, *s)))
            .collect();
        println!(
            "errors    {errors}  (status {}; io {})",
            statuses.join(", "),
            tally.io_errors
        );
        println!(
            "latency   p50 {p50:.1} us  p90 {p90:.1} us  p99 {p99:.1} us  max {max:.1} us  mean {mean:.1} us"
        );
    }
    Ok(())
}

/// One request on `sender`, timed: (status and replayed, or the failure; start; end).
type Timed = (Result<(u16, bool), BoxError>, Instant, Instant);

/// Opens the connections a burst lacks, all at once.
async fn fill(cfg: &Arc<Config>, senders: &mut [Option<Sender>]) -> Result<(), BoxError> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, slot) in senders.iter().enumerate() {
        if slot.is_none() {
            let cfg = cfg.clone();
            tasks.spawn(async move { (i, connect(&cfg).await) });
        }
    }
    while let Some(done) = tasks.join_next().await {
        let (i, sender) = done?;
        senders[i] = Some(sender.map_err(|e| format!("opening connection {i}: {e}"))?);
    }
    Ok(())
}

/// The numbers of the JSON object at `--stats`, or nothing without the flag.
async fn read_stats(cfg: &Config) -> Result<BTreeMap<String, f64>, BoxError> {
    let Some(path) = &cfg.stats else {
        return Ok(BTreeMap::new());
    };
    let mut sender = connect(cfg).await?;
    let req = Request::builder()
        .uri(path.as_str())
        .header(HOST, cfg.authority.as_str())
        .body(Full::new(Bytes::new()))?;
    sender.ready().await?;
    let res = sender.send_request(req).await?;
    if !res.status().is_success() {
        return Err(format!("GET {path}: status {}", res.status()).into());
    }
    let body = res.into_body().collect().await?.to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&body)?;
    Ok(value
        .as_object()
        .ok_or_else(|| format!("GET {path}: not a JSON object"))?
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
        .collect())
}

/// What one burst measured.
struct Burst {
    wall: Duration,
    tally: Tally,
    /// `--stats` after minus before.
    stats: BTreeMap<String, f64>,
}

/// What a burst sends: the subject (`--url`, `--burst-keys`, `--stats`) or the baseline
/// (`--baseline`, distinct keys, no stats).
#[derive(Clone, Copy)]
struct Target<'a> {
    path: &'a str,
    one_key: bool,
    stats: bool,
}

/// One burst: every request built and its connection ready, then all released at once.
async fn burst(
    cfg: &Arc<Config>,
    senders: &mut [Option<Sender>],
    id: &str,
    target: Target<'_>,
) -> Result<Burst, BoxError> {
    fill(cfg, senders).await?;
    let n = senders.len();
    let before = if target.stats {
        read_stats(cfg).await?
    } else {
        BTreeMap::new()
    };
    let gate = Arc::new(tokio::sync::Barrier::new(n + 1));
    let mut tasks = Vec::with_capacity(n);
    for (i, slot) in senders.iter_mut().enumerate() {
        let key = if target.one_key {
            format!("{}-{id}", cfg.prefix)
        } else {
            format!("{}-{id}-{i}", cfg.prefix)
        };
        let req = request_to(cfg, target.path, Some(&key))?;
        let mut sender = slot.take().ok_or("a connection is missing")?;
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let ready = sender.ready().await;
            gate.wait().await;
            let start = Instant::now();
            let result = match ready {
                Ok(()) => send(&mut sender, req).await,
                Err(e) => Err(e.into()),
            };
            let timed: Timed = (result, start, Instant::now());
            (sender, timed)
        }));
    }
    gate.wait().await;
    let released = Instant::now();
    let mut tally = Tally::default();
    let mut last = released;
    for (slot, task) in senders.iter_mut().zip(tasks) {
        let (sender, (result, start, done)) = task.await?;
        last = last.max(done);
        match result {
            Ok((status, replayed)) => {
                *slot = Some(sender);
                tally.latencies_ns.push((done - start).as_nanos() as u64);
                *tally.status.entry(status).or_default() += 1;
                tally.replayed += u64::from(replayed);
            }
            Err(_) => tally.io_errors += 1,
        }
    }
    let after = if target.stats {
        read_stats(cfg).await?
    } else {
        BTreeMap::new()
    };
    let stats = after
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v - before.get(k)?)))
        .collect();
    Ok(Burst {
        wall: last - released,
        tally,
        stats,
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

/// A burst's figures: (req/s, p50 µs, p99 µs, max µs).
fn figures(b: &Burst) -> (f64, f64, f64, f64) {
    let mut lat = b.tally.latencies_ns.clone();
    lat.sort_unstable();
    let secs = b.wall.as_secs_f64();
    let rps = if secs > 0.0 {
        lat.len() as f64 / secs
    } else {
        0.0
    };
    let max = lat.last().map_or(0.0, |&m| m as f64 / 1e3);
    (rps, percentile(&lat, 0.50), percentile(&lat, 0.99), max)
}

/// `--burst`: one unmeasured burst (unless `--warmup 0`), then `--repeat` measured ones; with
/// `--baseline`, each paired with a burst on the baseline, before it or after it in turn.
async fn run_bursts(cfg: Config, n: usize) -> Result<(), BoxError> {
    let cfg = Arc::new(cfg);
    let mut senders: Vec<Option<Sender>> = (0..n).map(|_| None).collect();
    let subject = Target {
        path: &cfg.path,
        one_key: cfg.burst_one_key,
        stats: true,
    };
    let base = cfg.baseline.as_deref().map(|path| Target {
        path,
        one_key: false,
        stats: false,
    });
    let ids = (!cfg.warmup.is_zero())
        .then(|| "w".to_owned())
        .into_iter()
        .chain((0..cfg.repeat).map(|r| format!("b{r}")));
    let mut bursts = Vec::with_capacity(cfg.repeat);
    for (i, id) in ids.enumerate() {
        let mut paired = None;
        if let Some(base) = base.filter(|_| i % 2 == 0) {
            paired = Some(burst(&cfg, &mut senders, &format!("{id}-base"), base).await?);
        }
        let b = burst(&cfg, &mut senders, &id, subject).await?;
        if let Some(base) = base.filter(|_| i % 2 == 1) {
            paired = Some(burst(&cfg, &mut senders, &format!("{id}-base"), base).await?);
        }
        if id != "w" {
            bursts.push((b, paired));
        }
    }
    let mut total = Tally::default();
    let mut per_burst = Vec::new();
    let (mut rps, mut wall, mut p50, mut p99, mut max) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut base_rps, mut rps_x, mut p99_x) = (vec![], vec![], vec![]);
    let mut stats: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (b, paired) in bursts {
        let (r, q50, q99, m) = figures(&b);
        let secs = b.wall.as_secs_f64();
        let mut x = serde_json::json!({
            "wall_ms": secs * 1e3,
            "rps": r,
            "p50_us": q50,
            "p99_us": q99,
            "max_us": m,
            "stats": b.stats,
        });
        if let Some(pb) = &paired {
            let (br, _, b99, _) = figures(pb);
            x["baseline_rps"] = br.into();
            x["baseline_p99_us"] = b99.into();
            base_rps.push(br);
            if br > 0.0 && b99 > 0.0 {
                rps_x.push(r / br);
                p99_x.push(q99 / b99);
            }
        }
        rps.push(r);
        wall.push(secs * 1e3);
        p50.push(q50);
        p99.push(q99);
        max.push(m);
        for (k, v) in &b.stats {
            stats.entry(k.clone()).or_default().push(*v);
        }
        per_burst.push(x);
        total.merge(b.tally);
    }
    let requests = total.latencies_ns.len() as u64;
    let errors = total
        .status
        .iter()
        .filter(|(s, _)| !(200..300).contains(*s))
        .map(|(_, n)| n)
        .sum::<u64>()
        + total.io_errors;
    let keys = if cfg.burst_one_key { "one" } else { "distinct" };
    let stats_median: BTreeMap<String, f64> =
        stats.into_iter().map(|(k, v)| (k, median(v))).collect();
    let (rps, wall, p50, p99, max) = (
        median(rps),
        median(wall),
        median(p50),
        median(p99),
        median(max),
    );
    if cfg.json {
        let status: serde_json::Map<String, serde_json::Value> = total
            .status
            .iter()
            .map(|(s, n)| (s.to_string(), (*n).into()))
            .collect();
        let out = serde_json::json!({
            "url": format!("http://{}{}", cfg.authority, cfg.path),
            "burst": n,
            "keys": keys,
            "repeat": cfg.repeat,
            "requests": requests,
            "rps": rps,
            "wall_ms": wall,
            "p50_us": p50,
            "p99_us": p99,
            "max_us": max,
            "errors": errors,
            "io_errors": total.io_errors,
            "status": status,
            "replayed": total.replayed,
            "stats": stats_median,
            "baseline": cfg.baseline,
            "baseline_rps": base.map(|_| median(base_rps.clone())),
            "rps_x_baseline": base.map(|_| median(rps_x.clone())),
            "p99_x_baseline": base.map(|_| median(p99_x.clone())),
            "bursts": per_burst,
        });
        println!("{out}");
    } else {
        println!(
            "{} {}{}  burst {n}  keys {keys}  repeat {}  (medians over bursts)",
            cfg.method, cfg.authority, cfg.path, cfg.repeat
        );
        println!("burst     wall {wall:.1} ms  ({rps:.1} req/s)");
        let statuses: Vec<String> = total
            .status
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        println!(
            "answers   {requests}, replayed {}; errors {errors} (status {}; io {})",
            total.replayed,
            statuses.join(", "),
            total.io_errors
        );
        println!("latency   p50 {p50:.1} us  p99 {p99:.1} us  max {max:.1} us");
        if let Some(path) = &cfg.baseline {
            println!(
                "baseline  {path}: {:.1} req/s; req/s x{:.2}, p99 x{:.2} (per pair of bursts)",
                median(base_rps),
                median(rps_x),
                median(p99_x)
            );
        }
        for (k, v) in &stats_median {
            println!(
                "stats     {k} {v} per burst ({:.2} per request)",
                v / n as f64
            );
        }
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let cfg = config()?;
    let runtime = if cfg.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads)
            .enable_all()
            .build()?
    };
    match cfg.burst {
        Some(n) => runtime.block_on(run_bursts(cfg, n)),
        None => runtime.block_on(run(cfg)),
    }
}
