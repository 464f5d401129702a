//! A minimal HTTP/1.1 client over raw TCP, one request per connection (`Connection: close`), that
//! can also give up half-way: hang up before the body is sent, some time after the request, or
//! after the answer without reading it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// `Retry-After` in seconds.
    pub fn retry_after(&self) -> Option<u64> {
        self.header("retry-after").and_then(|v| v.parse().ok())
    }

    /// The slug of a problem document's `type`, after its last `/` or `#` (`in-progress`, ...):
    /// the example sets its own base (`.../problems/<slug>`), idem's default is
    /// `...index.html#<slug>`.
    pub fn problem(&self) -> Option<String> {
        let doc: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let ty = doc.get("type")?.as_str()?;
        Some(ty.rsplit(['/', '#']).next().unwrap_or(ty).to_owned())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Why no answer came.
#[derive(Debug)]
pub enum Failure {
    /// The connection was refused (the process is down).
    Connect(std::io::Error),
    /// The connection broke, or closed without a complete answer (the process was killed).
    Broken(String),
    /// No answer within the client's timeout.
    Timeout,
}

/// The bytes of a request; `body` is JSON.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: chaos\r\nConnection: close\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        req.push_str("Content-Type: application/json\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or(""));
    req.into_bytes()
}

/// Sends `raw` on a fresh connection and reads the answer, within `timeout`.
pub async fn exchange(
    addr: SocketAddr,
    raw: &[u8],
    timeout: Duration,
) -> Result<Response, Failure> {
    let go = async {
        let stream = TcpStream::connect(addr).await.map_err(Failure::Connect)?;
        exchange_on(stream, raw).await
    };
    tokio::time::timeout(timeout, go)
        .await
        .unwrap_or(Err(Failure::Timeout))
}

/// Sends `raw` on `stream` (connected already) and reads the answer.
pub async fn exchange_on(mut stream: TcpStream, raw: &[u8]) -> Result<Response, Failure> {
    stream.write_all(raw).await.map_err(broken)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.map_err(broken)?;
    parse(&answer).ok_or_else(|| {
        Failure::Broken(format!(
            "incomplete answer: {:?}",
            String::from_utf8_lossy(&answer)
        ))
    })
}

/// Where a client hangs up.
#[derive(Debug, Clone, Copy)]
pub enum Cut {
    /// The head and half of the body are sent, then the connection is closed: the handler
    /// never runs (its body never arrives).
    MidRequest,
    /// The whole request is sent; the connection is closed this many milliseconds later (before,
    /// during or after the handler's effect, depending on its processing time).
    After(u64),
    /// The whole answer is awaited, then dropped unread (the client crashed before it processed
    /// it).
    AfterAnswer,
}

/// Sends `raw` and hangs up as `cut` says. `Ok` when the server could be reached.
pub async fn hang_up(
    addr: SocketAddr,
    raw: &[u8],
    cut: Cut,
    timeout: Duration,
) -> Result<(), Failure> {
    let go = async {
        let mut stream = TcpStream::connect(addr).await.map_err(Failure::Connect)?;
        match cut {
            Cut::MidRequest => {
                let head = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let part = head + (raw.len() - head) / 2;
                stream.write_all(&raw[..part]).await.map_err(broken)?;
            }
            Cut::After(ms) => {
                stream.write_all(raw).await.map_err(broken)?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Cut::AfterAnswer => {
                stream.write_all(raw).await.map_err(broken)?;
                let mut sink = Vec::new();
                stream.read_to_end(&mut sink).await.map_err(broken)?;
            }
        }
        drop(stream);
        Ok(())
    };
    tokio::time::timeout(timeout, go)
        .await
        .unwrap_or(Err(Failure::Timeout))
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect(e) => write!(f, "connection refused: {e}"),
            Failure::Broken(e) => write!(f, "connection broken: {e}"),
            Failure::Timeout => write!(f, "no answer in time"),
        }
    }
}

fn broken(e: std::io::Error) -> Failure {
    Failure::Broken(e.to_string())
}

/// Parses a complete answer; `None` when it is cut short.
fn parse(raw: &[u8]) -> Option<Response> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    for line in lines {
        let (n, v) = line.split_once(':')?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(rest.len());
        if rest.len() < len {
            return None;
        }
        rest[..len].to_vec()
    };
    Some(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&data[..eol]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(eol + 2..eol + 2 + size)?);
        data = data.get(eol + 4 + size..)?;
    }
}
