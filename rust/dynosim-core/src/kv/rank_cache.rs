//! A rank's block KV cache in the form its memory allows: indexed by identity
//! ([`IdentityCache`]) while the workload's identities are few next to the cache, otherwise
//! slots found through an index ([`KvCache`]). Both give the same hits, counts, evictions and
//! eviction order, so the choice cannot reach a result; the "slots" a holder keeps are the
//! form's own (identities in the first).

use super::blocks::{KvCache, PrefixHit};
use super::by_identity::IdentityCache;
use super::occupancy::Occupancy;
use super::slot_index::dense_budget;
use crate::block_ids::BlockId;

// A tag then the form, in C layout: both forms keep their counts first, so `counts()` reads
// them at one offset in either arm and compiles to no branch (it is read on per-token paths).
#[derive(Debug, Clone)]
#[repr(C, u8)]
pub enum RankCache {
    ByIdentity(IdentityCache),
    BySlot(KvCache),
}

/// Run `$body` on whichever form `$cache` takes, bound to `$c`.
macro_rules! on_form {
    ($cache:expr, $c:ident => $body:expr) => {
        match $cache {
            RankCache::ByIdentity($c) => $body,
            RankCache::BySlot($c) => $body,
        }
    };
}

// The block operations are called out of line: each form's loops, inlined into the scheduler
// twice over (once a form), would make its per-token paths too large to inline themselves.
impl RankCache {
    /// Whether a cache of `capacity` blocks over `ids` identities, whose holders take one
    /// block at most `holders` times, one of `caches` block caches in its replay, is kept by
    /// identity: its arrays within its share of the dense budget of the slot index, its counts
    /// within their 2 bytes.
    pub fn by_identity(capacity: u32, ids: u64, holders: u32, caches: u32) -> bool {
        IdentityCache::holds(capacity, holders)
            && IdentityCache::bytes(capacity, ids) <= dense_budget(capacity, caches)
    }

    /// A cache of `capacity` blocks for identities below `ids`, whose holders take one block
    /// at most `holders` times, one of `caches` block caches in its replay.
    pub fn new(capacity: u32, ids: BlockId, holders: u32, caches: u32) -> Self {
        if Self::by_identity(capacity, u64::from(ids), holders, caches) {
            RankCache::ByIdentity(IdentityCache::new(capacity, ids))
        } else {
            RankCache::BySlot(KvCache::new(capacity, ids, caches))
        }
    }

    /// Its counts, and the identities it evicted when it keeps them.
    #[inline]
    pub fn counts(&self) -> &Occupancy {
        on_form!(self, c => c.counts())
    }

    #[inline]
    pub fn counts_mut(&mut self) -> &mut Occupancy {
        on_form!(self, c => c.counts_mut())
    }

    #[cfg(debug_assertions)]
    pub fn refcounts(&self) -> Vec<u32> {
        on_form!(self, c => c.refcounts())
    }

    #[inline(never)]
    pub fn lookup(&self, ids: &[BlockId]) -> PrefixHit {
        on_form!(self, c => c.lookup(ids))
    }

    #[inline(never)]
    pub fn acquire_all(&mut self, ids: &[BlockId], out: &mut Vec<u32>) {
        on_form!(self, c => c.acquire_all(ids, out))
    }

    #[inline(never)]
    pub fn allocate(&mut self, n: u32) {
        on_form!(self, c => c.allocate(n))
    }

    #[inline(never)]
    pub fn register_all(&mut self, ids: &[BlockId], out: &mut Vec<u32>) -> u32 {
        on_form!(self, c => c.register_all(ids, out))
    }

    #[inline(never)]
    pub fn release(&mut self, held: &[u32], private: u32) {
        on_form!(self, c => c.release(held, private))
    }
}
