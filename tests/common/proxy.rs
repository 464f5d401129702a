//! A TCP proxy between a pool and a database server that can **stall**: while stalled it stops
//! forwarding in both directions and leaves every connection open, as a network partition or a
//! frozen server does (nothing is refused, nothing answers). New connections are accepted and
//! wait too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy; dropped, it stops accepting (open connections end with their peers).
pub struct StallProxy {
    pub addr: SocketAddr,
    stalled: Arc<AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl StallProxy {
    /// A proxy to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> StallProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stalled = Arc::new(AtomicBool::new(false));
        let flag = stalled.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, flag) = (upstream.clone(), flag.clone());
                tokio::spawn(async move {
                    wait_while(&flag).await;
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, flag.clone()), pipe(sr, cw, flag));
                });
            }
        });
        StallProxy {
            addr,
            stalled,
            accept,
        }
    }

    /// Stops (`true`) or resumes (`false`) forwarding.
    pub fn stall(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::SeqCst);
    }

    /// `url` with its `host:port` replaced by the proxy's address.
    pub fn url_for(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (auth, rest) = rest.split_once('@').unwrap();
        let path = rest.find('/').map_or("", |i| &rest[i..]);
        format!("{scheme}://{auth}@{}{path}", self.addr)
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The `host:port` of `url`.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap().to_owned()
}

async fn wait_while(stalled: &AtomicBool) {
    while stalled.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        wait_while(&stalled).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Read before the stall began: held back until it ends.
        wait_while(&stalled).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
