//! The TCP proxy of the failover runs: a virtual IP in front of a service, or the network of a
//! replication link.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy: in front of a service it stands for a virtual IP ([`switch`](Self::switch)
/// points it at another server and cuts every connection to the old one, as a moved address
/// does); on a replication link it is the network between primary and replica, which can
/// [`stall`](Self::stall) (nothing forwarded, every connection left open) and be
/// [`cut`](Self::cut) (every connection dropped with the bytes in flight, as when the
/// primary's machine dies).
///
/// With a `marker`, only the connections whose client sent it stall (on a Redis master, the
/// replica's link, which sends `PSYNC`; its clients share the address and never do).
pub struct Proxy {
    pub addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    stalled: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        Self::start_marking(target, None).await
    }

    pub async fn start_marking(target: SocketAddr, marker: Option<&'static [u8]>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target = Arc::new(Mutex::new(target));
        let stalled = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let (to, flag, conns) = (target.clone(), stalled.clone(), live.clone());
        tokio::spawn(async move {
            while let Ok((downstream, _)) = listener.accept().await {
                let upstream = *to.lock().unwrap();
                let link = Link {
                    stalled: flag.clone(),
                    marker,
                    marked: Arc::new(AtomicBool::new(marker.is_none())),
                };
                let relay = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = downstream.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, link.clone(), true), pipe(sr, cw, link, false));
                });
                let mut conns = conns.lock().unwrap();
                conns.retain(|c| !c.is_finished());
                conns.push(relay);
            }
        });
        Proxy {
            addr,
            target,
            stalled,
            live,
        }
    }

    pub fn stall(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::SeqCst);
    }

    pub fn cut(&self) {
        for relay in self.live.lock().unwrap().drain(..) {
            relay.abort();
        }
    }

    pub fn switch(&self, to: SocketAddr) {
        *self.target.lock().unwrap() = to;
        self.cut();
    }
}

/// One connection through a [`Proxy`]: whether it stalls with the proxy.
#[derive(Clone)]
struct Link {
    stalled: Arc<AtomicBool>,
    marker: Option<&'static [u8]>,
    /// The client sent the marker (always, without one).
    marked: Arc<AtomicBool>,
}

/// Forwards `from` to `to` (`upstream`: from the client), holding what it read while the link
/// stalls.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    link: Link,
    upstream: bool,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let (true, Some(marker)) = (upstream, link.marker)
            && buf[..n].windows(marker.len()).any(|w| w == marker)
        {
            link.marked.store(true, Ordering::SeqCst);
        }
        while link.stalled.load(Ordering::SeqCst) && link.marked.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
