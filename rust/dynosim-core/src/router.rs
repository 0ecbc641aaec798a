//! Which worker (and which of its ranks) serves a request: in turn (`round_robin`), at random
//! from a seeded generator (`random`), or where it costs least (`kv_aware`: overlap_weight x
//! prompt blocks not cached there + active blocks + queued blocks). Ties go to the lowest index.

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::config::RouterMode;

/// A routing policy with its state. Candidates are indexed 0..n; ties break to the lowest
/// index so routing is deterministic.
#[derive(Debug, Clone)]
pub enum Router {
    /// Candidates in turn.
    RoundRobin { next: usize },
    /// Uniformly at random from a seeded generator.
    Random { rng: Pcg64Mcg },
    /// The lowest `overlap_weight * blocks to prefill + active blocks`.
    KvAware { overlap_weight: f64 },
}

impl Router {
    pub fn new(mode: RouterMode, seed: u64, overlap_weight: f64) -> Self {
        match mode {
            RouterMode::RoundRobin => Router::RoundRobin { next: 0 },
            RouterMode::Random => Router::Random {
                rng: Pcg64Mcg::seed_from_u64(seed),
            },
            RouterMode::KvAware => Router::KvAware { overlap_weight },
        }
    }

    /// Whether the policy looks at the candidates' KV caches (so it routes to ranks).
    pub fn needs_caches(&self) -> bool {
        matches!(self, Router::KvAware { .. })
    }

    /// Pick one of `n` candidates without looking at their state (not for `kv_aware`).
    pub fn route(&mut self, n: usize) -> usize {
        match self {
            Router::RoundRobin { next } => {
                let w = *next % n;
                *next = w + 1;
                w
            }
            Router::Random { rng } => rng.random_range(0..n),
            Router::KvAware { .. } => unreachable!("kv_aware routes by cache (needs_caches)"),
        }
    }

    /// Pick the cache-aware cheapest candidate for a prompt of `prompt_blocks` blocks. Each
    /// candidate is (prompt blocks it caches, its active blocks, its queued load in blocks:
    /// requests routed there but not admitted yet hold no blocks, yet they will):
    /// cost = overlap_weight x (prompt blocks not cached there) + active blocks + queued blocks.
    pub fn route_by_cache(
        &mut self,
        prompt_blocks: u32,
        candidates: impl Iterator<Item = (u32, u32, u64)>,
    ) -> usize {
        let Router::KvAware { overlap_weight } = *self else {
            unreachable!("route_by_cache is for the kv_aware router");
        };
        let mut best = (f64::INFINITY, 0);
        for (i, (cached, active, queued)) in candidates.enumerate() {
            let to_prefill = prompt_blocks - cached;
            let load = f64::from(active) + queued as f64;
            let cost = overlap_weight * f64::from(to_prefill) + load;
            if cost < best.0 {
                best = (cost, i);
            }
        }
        best.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvCache;

    #[test]
    fn round_robin_cycles_in_order() {
        let mut r = Router::new(RouterMode::RoundRobin, 0, 1.0);
        let picks: Vec<usize> = (0..7).map(|_| r.route(3)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn random_is_seeded_and_covers_all() {
        let picks = |seed| {
            let mut r = Router::new(RouterMode::Random, seed, 1.0);
            (0..200).map(|_| r.route(4)).collect::<Vec<_>>()
        };
        assert_eq!(picks(7), picks(7));
        assert_ne!(picks(7), picks(8));
        assert!((0..4).all(|w| picks(7).contains(&w)));
    }

    #[test]
    fn kv_aware_prefers_cached_prefix_then_light_load() {
        let mut warm = KvCache::new(16, 16, 1);
        warm.allocate(2);
        warm.register(11).unwrap();
        warm.register(12).unwrap(); // holds the prompt's first two blocks, active
        let cold = KvCache::new(16, 16, 1);
        let mut r = Router::new(RouterMode::KvAware, 0, 1.0);
        // 4-block prompt: warm costs 2 to prefill + 2 active = 4; cold 4 + 0 = 4: a tie goes
        // to the lower index.
        let p = [11, 12, 13, 14];
        let (warm, cold) = (
            (warm.lookup(&p).blocks, warm.counts().active(), 0),
            (cold.lookup(&p).blocks, cold.counts().active(), 0),
        );
        let queued = |c: (u32, u32, u64), q| (c.0, c.1, q);
        assert_eq!(r.route_by_cache(4, [warm, cold].into_iter()), 0);
        assert_eq!(r.route_by_cache(4, [cold, warm].into_iter()), 0);
        // Weighting the prefill work more makes the cached prefix win ...
        let mut heavy = Router::new(RouterMode::KvAware, 0, 2.0);
        assert_eq!(heavy.route_by_cache(4, [cold, warm].into_iter()), 1);
        // ... unless requests already queued there outweigh it.
        assert_eq!(
            heavy.route_by_cache(4, [cold, queued(warm, 3)].into_iter()),
            0
        );
    }
}
