//! What a block cache counts whatever its form: its capacity, the blocks requests hold
//! (active) and the cached ones no request holds (inactive, reusable, evictable), the
//! evictions, and, once asked, the identities evicted in order (the offload tiers read them).

use crate::block_ids::BlockId;

#[derive(Debug, Clone)]
pub struct Occupancy {
    pub(super) capacity: u32,
    pub(super) active: u32,
    pub(super) inactive: u32,
    pub(super) evictions: u64,
    /// Identities of evicted blocks, oldest first, kept only once `record_evictions` is
    /// called (a cache without tiers pays nothing).
    pub(super) record_evicted: bool,
    pub(super) evicted: Vec<BlockId>,
}

impl Occupancy {
    /// An empty cache of `capacity` blocks.
    pub(super) fn new(capacity: u32) -> Self {
        Occupancy {
            capacity,
            active: 0,
            inactive: 0,
            evictions: 0,
            record_evicted: false,
            evicted: Vec::new(),
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Blocks held by running requests.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// Cached blocks no request holds.
    pub fn inactive(&self) -> u32 {
        self.inactive
    }

    /// Blocks that can be handed out now (free plus evictable).
    pub fn available(&self) -> u32 {
        self.capacity - self.active
    }

    /// Blocks neither held nor cached.
    pub(super) fn free(&self) -> u32 {
        self.capacity - self.active - self.inactive
    }

    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// From now on keep the identity of every evicted block for `drain_evicted_into`.
    pub fn record_evictions(&mut self) {
        self.record_evicted = true;
    }

    /// Whether evicted identities are kept (`record_evictions`).
    pub fn records_evictions(&self) -> bool {
        self.record_evicted
    }

    /// Whether evictions are waiting for `drain_evicted_into`.
    pub fn has_evicted(&self) -> bool {
        !self.evicted.is_empty()
    }

    /// Move the identities of the blocks evicted since the last call, in eviction order (least
    /// recent first), to the end of `out`.
    pub fn drain_evicted_into(&mut self, out: &mut Vec<BlockId>) {
        out.append(&mut self.evicted);
    }
}
