//! The bounded wait of an in-flight duplicate ([`HandlerConfig::wait`]): a request that finds its
//! key held by an attempt of the same request waits, up to the bound, for that attempt to end,
//! and is then answered what a retry would be (the replay, most often) instead of `409`.
//!
//! The rule: a waiter learns that the attempt ended in one of two ways, whichever comes first,
//! and then claims again as a retry would; it never reads an answer any other way.
//!
//! * An attempt of this process ends: [`Waiters::wake`], when its record is settled (stored,
//!   released or abandoned), wakes the waiters of its key at once. While the key is held here
//!   ([`Waiters::hold`]), a waiter claims again only once a second (in case the holder lost the
//!   key to another process): one claim more than without a wait for a handler under a
//!   second.
//! * An attempt of another process ends: nothing here hears of it, so a waiter claims again on
//!   a backed-off schedule (25 ms, doubling, at most 250 ms apart). That costs a claim
//!   statement per try: about 10 over a 2-second bound.
//!
//! The waiters of a handle (and of its clones) are counted, and capped
//! ([`Idem::with_max_waiters`](super::Idem::with_max_waiters)): a duplicate over the cap is
//! answered `409` at once, as without a wait. A waiter whose request is dropped (the client hung
//! up) leaves nothing behind: its count and its entry go with it.
//!
//! [`HandlerConfig::wait`]: super::HandlerConfig::wait

use core::time::Duration;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::key::ScopedKey;

/// The first pause between two claims of a waiter.
pub(crate) const FIRST_POLL: Duration = Duration::from_millis(25);
/// The longest pause between two claims of a waiter.
const MAX_POLL: Duration = Duration::from_millis(250);
/// The pause between two claims of a waiter whose key an attempt of this process holds.
const HELD_POLL: Duration = Duration::from_secs(1);

/// The waiters of one handle: per key that someone waits on or that an attempt of this process
/// holds, a wake-up; and the count of waiters.
#[derive(Debug)]
pub(crate) struct Waiters {
    keys: Mutex<HashMap<[u8; 32], Entry>>,
    waiting: AtomicUsize,
    cap: usize,
}

/// One key's wake-up, its waiters, and the attempts of this process that hold the key (none,
/// or one; two for a moment when a retry of this process took over an attempt of this
/// process). Both counts change under the map's lock: the entry goes when both are zero.
#[derive(Debug, Default)]
struct Entry {
    notify: Arc<Notify>,
    waiters: usize,
    holders: usize,
}

impl Waiters {
    /// At most `cap` waiters at once.
    pub(crate) fn new(cap: usize) -> Self {
        Waiters {
            keys: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
            cap,
        }
    }

    /// The most waiters at once.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// The requests waiting now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A place among the waiters of `key`, or `None` over the cap.
    pub(crate) fn enter(self: &Arc<Self>, key: &ScopedKey) -> Option<Waiter> {
        let admitted = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            return None;
        }
        let hash = *key.hash();
        let notify = {
            let mut keys = self.lock();
            let entry = keys.entry(hash).or_default();
            entry.waiters += 1;
            entry.notify.clone()
        };
        Some(Waiter {
            waiters: self.clone(),
            hash,
            notify,
        })
    }

    /// An attempt of this process holds `key`: its waiters wait for [`Waiters::wake`] alone.
    /// Each `hold` is ended by one `wake`.
    pub(crate) fn hold(&self, key: &ScopedKey) {
        self.lock().entry(*key.hash()).or_default().holders += 1;
    }

    /// Wakes the waiters of `key`, and ends a [`Waiters::hold`]: the attempt of this process
    /// has settled its record.
    pub(crate) fn wake(&self, key: &ScopedKey) {
        let notify = {
            let mut keys = self.lock();
            let Some(entry) = keys.get_mut(key.hash()) else {
                return;
            };
            entry.holders = entry.holders.saturating_sub(1);
            if entry.holders == 0 && entry.waiters == 0 {
                keys.remove(key.hash());
                return;
            }
            entry.notify.clone()
        };
        // Outside the lock: waking thousands of waiters takes a while.
        notify.notify_waiters();
    }

    /// Whether an attempt of this process holds the key of `hash`.
    fn held_here(&self, hash: &[u8; 32]) -> bool {
        self.lock().get(hash).is_some_and(|e| e.holders > 0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One request waiting for the attempt that holds its key.
#[derive(Debug)]
pub(crate) struct Waiter {
    waiters: Arc<Waiters>,
    hash: [u8; 32],
    notify: Arc<Notify>,
}

impl Waiter {
    /// Waits until the key's attempt in this process settles, `poll` has passed (then doubled,
    /// up to 250 ms) unless the key is held in this process, or `deadline`, whichever is first;
    /// `false` once `deadline` has passed (do not claim again), unless the attempt settled
    /// during the claim this pause follows: that claim may have read the record just before,
    /// and one claim more answers with what the attempt left instead of `409`.
    ///
    /// Call it with the wake-up armed before the claim it follows: [`Waiter::armed`].
    pub(crate) async fn pause(
        &self,
        mut armed: Armed<'_>,
        poll: &mut Duration,
        deadline: Instant,
    ) -> bool {
        let now = Instant::now();
        if now >= deadline {
            return armed.fired();
        }
        let until = if self.waiters.held_here(&self.hash) {
            // Woken by the holder as it settles; claimed again now and then all the same, in
            // case the holder lost the key to another process and settles late.
            (now + HELD_POLL).min(deadline)
        } else {
            let until = (now + *poll).min(deadline);
            *poll = (*poll * 2).min(MAX_POLL);
            until
        };
        let _ = tokio::time::timeout_at(until, armed.0).await;
        true
    }

    /// The wake-up of the key, armed now: a settlement that happens from here on (during the
    /// claim that follows, say) is not missed by the next [`Waiter::pause`].
    pub(crate) fn armed(&self) -> Armed<'_> {
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        Armed(notified)
    }
}

/// A wake-up armed before a claim ([`Waiter::armed`]).
pub(crate) struct Armed<'a>(core::pin::Pin<Box<tokio::sync::futures::Notified<'a>>>);

impl Armed<'_> {
    /// Whether the wake-up came already (without waiting for it).
    fn fired(&mut self) -> bool {
        let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
        self.0.as_mut().poll(&mut cx).is_ready()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut keys = self.waiters.lock();
        if let Some(entry) = keys.get_mut(&self.hash) {
            entry.waiters -= 1;
            if entry.waiters == 0 && entry.holders == 0 {
                keys.remove(&self.hash);
            }
        }
        drop(keys);
        self.waiters.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> ScopedKey {
        ScopedKey::new::<&str>(&[], "op", k).unwrap()
    }

    #[test]
    fn the_cap_is_kept_and_a_dropped_waiter_leaves_nothing() {
        let waiters = Arc::new(Waiters::new(2));
        let a = waiters.enter(&key("a")).unwrap();
        let b = waiters.enter(&key("a")).unwrap();
        assert!(waiters.enter(&key("b")).is_none(), "over the cap");
        assert_eq!(waiters.waiting(), 2);
        drop(a);
        assert_eq!(waiters.lock().len(), 1, "b still waits on `a`");
        drop(b);
        assert_eq!((waiters.waiting(), waiters.lock().len()), (0, 0));
        assert!(waiters.enter(&key("b")).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_during_the_claim_is_not_missed() {
        let waiters = Arc::new(Waiters::new(8));
        let waiter = waiters.enter(&key("a")).unwrap();
        let armed = waiter.armed();
        // The attempt settles while the waiter's claim is on its way.
        waiters.wake(&key("a"));
        let started = Instant::now();
        let mut poll = FIRST_POLL;
        assert!(
            waiter
                .pause(armed, &mut poll, started + Duration::from_secs(5))
                .await
        );
        assert_eq!(Instant::now(), started, "woken at once, not at the poll");
    }

    /// The attempt settles while the waiter's last claim before the bound is on its way: one
    /// claim more (its answer is the replay), not a `409` at the bound. Without a settlement, the
    /// bound is the end.
    #[tokio::test(start_paused = true)]
    async fn a_wake_up_during_the_last_claim_gets_one_claim_more() {
        let waiters = Arc::new(Waiters::new(8));
        let waiter = waiters.enter(&key("a")).unwrap();
        let deadline = Instant::now() + Duration::from_millis(100);
        let mut poll = FIRST_POLL;
        let armed = waiter.armed();
        tokio::time::advance(Duration::from_millis(150)).await;
        assert!(
            !waiter.pause(armed, &mut poll, deadline).await,
            "no wake-up"
        );
        let armed = waiter.armed();
        waiters.wake(&key("a"));
        assert!(waiter.pause(armed, &mut poll, deadline).await);
        // Fired once: the next pause past the bound is the end again.
        let armed = waiter.armed();
        assert!(!waiter.pause(armed, &mut poll, deadline).await);
    }

    #[tokio::test(start_paused = true)]
    async fn polls_back_off_and_stop_at_the_deadline() {
        let waiters = Arc::new(Waiters::new(8));
        let waiter = waiters.enter(&key("a")).unwrap();
        let start = Instant::now();
        let deadline = start + Duration::from_millis(600);
        let (mut pauses, mut poll) = (Vec::new(), FIRST_POLL);
        loop {
            let before = Instant::now();
            let armed = waiter.armed();
            if !waiter.pause(armed, &mut poll, deadline).await {
                break;
            }
            pauses.push((Instant::now() - before).as_millis());
        }
        assert_eq!(pauses, [25, 50, 100, 200, 225]);
    }
}
