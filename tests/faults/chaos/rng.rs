//! A small seeded generator (splitmix64): the chaos is random, its seed printed.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator of its own for each task, drawn from one seed.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next())
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }
}

/// The run's seed: `IDEM_CHAOS_SEED`, or the clock's nanoseconds (printed with every tally so
/// that a failing run's choices can be drawn again).
pub fn seed() -> u64 {
    static SEED: AtomicU64 = AtomicU64::new(0);
    let seed = SEED.load(Ordering::Relaxed);
    if seed != 0 {
        return seed;
    }
    let seed = std::env::var("IDEM_CHAOS_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    SEED.store(seed, Ordering::Relaxed);
    seed
}
