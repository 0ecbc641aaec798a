//! Which slot of a block cache holds a block identity.
//!
//! Identities are dense (0 to the workload's count), so an array indexed by identity finds a
//! slot in one read; but a cache holds at most its capacity of identities while a workload
//! names millions, and such an array costs every rank memory for every block of the workload
//! (32 ranks replaying 5 million requests: gigabytes). So the array is used while it is small
//! next to the cache ([`DENSE_BYTES_PER_BLOCK`] per cache block, or [`DENSE_BYTES_MIN`]) and
//! the replay's caches' arrays together stay within [`DENSE_BYTES_ALL`]; past that an
//! open-addressing hash table (linear probing, backward-shift deletion) whose size follows the
//! identities held, at about a third of the array's speed on lookups. Neither is iterated, so
//! the choice cannot reach a result.

use crate::block_ids::BlockId;
use crate::prefetch;

/// Bytes of dense index allowed per block of cache capacity.
pub const DENSE_BYTES_PER_BLOCK: u64 = 512;
/// Bytes of dense index a cache is allowed at least (16 MiB), until its share of
/// [`DENSE_BYTES_ALL`] is smaller.
pub const DENSE_BYTES_MIN: u64 = 16 << 20;
/// Bytes the dense arrays of all of one replay's block caches may take together (256 MiB):
/// each is a share of it. A replay touches nearly every page of its arrays, so they cost
/// page faults and memory in proportion to ranks times the workload's identities: 512 ranks
/// over a million requests took 9 GB and most of their time faulting pages in.
pub const DENSE_BYTES_ALL: u64 = 256 << 20;

/// Marks a free entry of the hash table (identities are below `BlockId::MAX`).
const EMPTY: BlockId = BlockId::MAX;

/// Entries a hash table starts with.
const MIN_ENTRIES: usize = 16;

/// The slot of each identity a cache holds.
#[derive(Debug, Clone)]
pub enum SlotIndex {
    /// Slot plus one by identity (0: not held), 2 bytes an entry while slots fit.
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
    Hashed(HashedSlots),
}

/// Bytes the hash table takes per identity held, at most: 8-byte entries, at most half
/// full, doubling as it grows.
pub const HASHED_BYTES_PER_HELD: u64 = 32;

/// Which index a cache of `capacity` blocks over `ids` identities, one of `caches` in its
/// replay, takes: the bytes of one entry of a dense array, or `None` for the hash table.
fn dense_entry_bytes(capacity: u32, ids: u64, caches: u32) -> Option<u64> {
    let entry_bytes = if capacity < u32::from(u16::MAX) { 2 } else { 4 };
    (ids * entry_bytes <= dense_budget(capacity, caches)).then_some(entry_bytes)
}

/// Bytes an array indexed by identity may take for a cache of `capacity` blocks, one of
/// `caches` block caches in its replay (its share of [`DENSE_BYTES_ALL`]).
pub fn dense_budget(capacity: u32, caches: u32) -> u64 {
    let own = DENSE_BYTES_MIN.max(DENSE_BYTES_PER_BLOCK * u64::from(capacity));
    own.min(DENSE_BYTES_ALL / u64::from(caches.max(1)))
}

/// The most bytes the index of a cache of `capacity` blocks over `ids` identities, one of
/// `caches` in its replay, takes, of which at most `held` are in the cache at once.
pub fn index_bytes(capacity: u32, ids: u64, held: u64, caches: u32) -> u64 {
    match dense_entry_bytes(capacity, ids, caches) {
        Some(entry) => ids * entry,
        None => held * HASHED_BYTES_PER_HELD,
    }
}

/// Reading and naming slots in one form of the index: a loop over many blocks matches the
/// form once ([`SlotIndex::with_form`]) and runs on it directly.
pub trait Slots {
    /// The slot of `id`, if held (a dense form may give a stale one: see [`SlotIndex::get`]).
    fn get(&self, id: BlockId) -> Option<u32>;
    /// Map `id` to `slot`.
    fn insert(&mut self, id: BlockId, slot: u32);
    /// `id` left its slot (see [`SlotIndex::forget`]).
    fn forget(&mut self, id: BlockId);
}

impl Slots for Vec<u16> {
    #[inline(always)]
    fn get(&self, id: BlockId) -> Option<u32> {
        u32::from(self[id as usize]).checked_sub(1)
    }

    #[inline(always)]
    fn insert(&mut self, id: BlockId, slot: u32) {
        // Slots are below the capacity, below u16::MAX - 1 here.
        self[id as usize] = (slot + 1) as u16;
    }

    #[inline(always)]
    fn forget(&mut self, _: BlockId) {}
}

impl Slots for Vec<u32> {
    #[inline(always)]
    fn get(&self, id: BlockId) -> Option<u32> {
        self[id as usize].checked_sub(1)
    }

    #[inline(always)]
    fn insert(&mut self, id: BlockId, slot: u32) {
        self[id as usize] = slot + 1;
    }

    #[inline(always)]
    fn forget(&mut self, _: BlockId) {}
}

impl Slots for HashedSlots {
    #[inline(always)]
    fn get(&self, id: BlockId) -> Option<u32> {
        HashedSlots::get(self, id)
    }

    #[inline(always)]
    fn insert(&mut self, id: BlockId, slot: u32) {
        HashedSlots::insert(self, id, slot)
    }

    #[inline(always)]
    fn forget(&mut self, id: BlockId) {
        self.remove(id)
    }
}

impl Slots for SlotIndex {
    #[inline(always)]
    fn get(&self, id: BlockId) -> Option<u32> {
        SlotIndex::get(self, id)
    }

    #[inline(always)]
    fn insert(&mut self, id: BlockId, slot: u32) {
        SlotIndex::insert(self, id, slot)
    }

    #[inline(always)]
    fn forget(&mut self, id: BlockId) {
        SlotIndex::forget(self, id)
    }
}

/// A function run on whichever form a [`SlotIndex`] takes.
pub trait WithForm {
    type Output;
    fn run<S: Slots>(self, slots: &mut S) -> Self::Output;
}

impl SlotIndex {
    /// Run `f` on this index's form, matched once.
    #[inline(always)]
    pub fn with_form<F: WithForm>(&mut self, f: F) -> F::Output {
        match self {
            SlotIndex::Narrow(v) => f.run(v),
            SlotIndex::Wide(v) => f.run(v),
            SlotIndex::Hashed(h) => f.run(h),
        }
    }

    /// The index of a cache of `capacity` blocks over identities below `ids`, one of `caches`
    /// block caches in its replay.
    pub fn new(capacity: u32, ids: BlockId, caches: u32) -> Self {
        match dense_entry_bytes(capacity, u64::from(ids), caches) {
            None => SlotIndex::Hashed(HashedSlots::default()),
            Some(2) => SlotIndex::Narrow(vec![0; ids as usize]),
            Some(_) => SlotIndex::Wide(vec![0; ids as usize]),
        }
    }

    /// The slot of `id`, if held; after [`SlotIndex::forget`] a dense index may still give
    /// the slot `id` last had (the cache checks that the slot still holds `id`).
    #[inline(always)]
    pub fn get(&self, id: BlockId) -> Option<u32> {
        match self {
            SlotIndex::Narrow(v) => v.get(id),
            SlotIndex::Wide(v) => v.get(id),
            SlotIndex::Hashed(h) => h.get(id),
        }
    }

    /// Map `id` to `slot`.
    #[inline(always)]
    pub fn insert(&mut self, id: BlockId, slot: u32) {
        match self {
            SlotIndex::Narrow(v) => Slots::insert(v, id, slot),
            SlotIndex::Wide(v) => Slots::insert(v, id, slot),
            SlotIndex::Hashed(h) => h.insert(id, slot),
        }
    }

    /// Ask for the entries of `ids` to be loaded into the cache ahead of naming them (a dense
    /// index only: its entries for identities new to the rank are cold). A prompt's identities
    /// run in consecutive stretches, and 16 entries of either dense form fit in a 64-byte
    /// line: 16 consecutive identities span at most two lines, those of the first and the
    /// last, so asking for those two of every 16 covers a stretch without reading each.
    #[inline]
    pub fn prefetch(&self, ids: &[BlockId]) {
        fn each<T>(v: &[T], ids: &[BlockId]) {
            for group in ids.chunks(16) {
                prefetch::prefetch(v, group[0] as usize);
                prefetch::prefetch(v, group[group.len() - 1] as usize);
            }
        }
        match self {
            SlotIndex::Narrow(v) => each(v, ids),
            SlotIndex::Wide(v) => each(v, ids),
            SlotIndex::Hashed(_) => {}
        }
    }

    /// `id` left its slot. A hash table removes it (its size follows the identities held); a
    /// dense array keeps the stale entry, as clearing it would cost an eviction a cache miss
    /// into an array over the whole workload, and the slot's own identity tells it stale.
    #[inline(always)]
    pub fn forget(&mut self, id: BlockId) {
        if let SlotIndex::Hashed(h) = self {
            h.remove(id);
        }
    }
}

/// An open-addressing table from identity to slot, at most half full.
#[derive(Debug, Clone)]
pub struct HashedSlots {
    /// (identity, slot) pairs side by side: a probe reads one cache line.
    entries: Vec<(BlockId, u32)>,
    len: usize,
    /// 64 minus log2 of the table size: the hash's top bits pick the home entry.
    shift: u32,
}

impl Default for HashedSlots {
    fn default() -> Self {
        Self::with_entries(MIN_ENTRIES)
    }
}

impl HashedSlots {
    fn with_entries(entries: usize) -> Self {
        debug_assert!(entries.is_power_of_two());
        HashedSlots {
            entries: vec![(EMPTY, 0); entries],
            len: 0,
            shift: 64 - entries.trailing_zeros(),
        }
    }

    /// Identities held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// Fibonacci hashing: identities are dense and sequential, the multiply spreads them.
    #[inline(always)]
    fn home(&self, id: BlockId) -> usize {
        (u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The slot of `id`, if held.
    // Out of line: the dense arms of `SlotIndex` stay small enough to inline.
    #[inline(never)]
    pub fn get(&self, id: BlockId) -> Option<u32> {
        let mask = self.mask();
        let mut i = self.home(id);
        loop {
            let (key, slot) = self.entries[i];
            if key == id {
                return Some(slot);
            }
            if key == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Map `id` to `slot` (replacing its slot if held).
    // Out of line: the dense arms of `SlotIndex` stay small enough to inline.
    #[inline(never)]
    pub fn insert(&mut self, id: BlockId, slot: u32) {
        debug_assert_ne!(id, EMPTY);
        if 2 * (self.len + 1) > self.entries.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(id);
        loop {
            let key = self.entries[i].0;
            if key == id || key == EMPTY {
                self.len += usize::from(key == EMPTY);
                self.entries[i] = (id, slot);
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Forget `id` (nothing if not held). Later entries of its probe run move back into the
    /// gap, so every held identity stays reachable from its home without tombstones.
    // Out of line: the dense arms of `SlotIndex` stay small enough to inline.
    #[inline(never)]
    pub fn remove(&mut self, id: BlockId) {
        let mask = self.mask();
        let mut gap = self.home(id);
        loop {
            let key = self.entries[gap].0;
            if key == EMPTY {
                return;
            }
            if key == id {
                break;
            }
            gap = (gap + 1) & mask;
        }
        self.len -= 1;
        let mut j = gap;
        loop {
            j = (j + 1) & mask;
            let key = self.entries[j].0;
            if key == EMPTY {
                break;
            }
            // Entry j may fill the gap unless its home lies cyclically in (gap, j].
            let home = self.home(key);
            let stays = if gap <= j {
                gap < home && home <= j
            } else {
                gap < home || home <= j
            };
            if !stays {
                self.entries[gap] = self.entries[j];
                gap = j;
            }
        }
        self.entries[gap].0 = EMPTY;
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, Self::with_entries(self.entries.len() * 2));
        for (key, slot) in old.entries {
            if key != EMPTY {
                self.insert(key, slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn removing_from_a_probe_run_keeps_the_rest_reachable() {
        let mut t = HashedSlots::default();
        // 2,000 identities force several doublings and long runs; remove every third.
        for id in 0..2000 {
            t.insert(id, id + 7);
        }
        for id in (0..2000).step_by(3) {
            t.remove(id);
        }
        for id in 0..2000 {
            let want = (id % 3 != 0).then_some(id + 7);
            assert_eq!(t.get(id), want, "id {id}");
        }
        assert_eq!(t.len(), 2000 - 667);
    }

    #[test]
    fn the_dense_index_is_used_while_it_is_small_next_to_the_cache() {
        // 16,384 blocks: 8 MiB of 2-byte entries allowed beside the 16 MiB floor: 8M ids.
        assert!(matches!(
            SlotIndex::new(16_384, 8 << 20, 1),
            SlotIndex::Narrow(_)
        ));
        assert!(matches!(
            SlotIndex::new(16_384, (8 << 20) + 1, 1),
            SlotIndex::Hashed(_)
        ));
        // 70,000 blocks: 4-byte entries, 35.84 MB allowed: 8.96M ids.
        assert!(matches!(
            SlotIndex::new(70_000, 8_960_000, 1),
            SlotIndex::Wide(_)
        ));
        assert!(matches!(
            SlotIndex::new(70_000, 8_960_001, 1),
            SlotIndex::Hashed(_)
        ));
    }

    #[test]
    fn the_caches_of_a_replay_share_the_dense_budget() {
        // 256 MiB shared: up to 16 caches keep their own 16 MiB; 32 take 8 MiB each (4M ids of
        // 2 bytes), 512 take 512 KiB (256Ki ids).
        assert_eq!(dense_budget(16_384, 16), 16 << 20);
        assert_eq!(dense_budget(16_384, 32), 8 << 20);
        assert_eq!(dense_budget(16_384, 512), 512 << 10);
        // A large cache's own budget is capped the same way: 70,000 blocks allow 35.84 MB
        // alone, 32 MiB as one of 8.
        assert_eq!(dense_budget(70_000, 1), 35_840_000);
        assert_eq!(dense_budget(70_000, 8), 32 << 20);
        assert!(matches!(
            SlotIndex::new(16_384, 4 << 20, 32),
            SlotIndex::Narrow(_)
        ));
        assert!(matches!(
            SlotIndex::new(16_384, (4 << 20) + 1, 32),
            SlotIndex::Hashed(_)
        ));
        assert!(matches!(
            SlotIndex::new(16_384, (4 << 20) + 1, 16),
            SlotIndex::Narrow(_)
        ));
    }

    proptest! {
        /// Any sequence of inserts and removes agrees with a HashMap, and the table stays at
        /// most half full.
        #[test]
        fn agrees_with_a_hash_map(
            ops in prop::collection::vec((any::<bool>(), 0u32..300, any::<u32>()), 1..2000),
        ) {
            let mut t = HashedSlots::default();
            let mut model = HashMap::new();
            for &(insert, id, slot) in &ops {
                if insert {
                    t.insert(id, slot);
                    model.insert(id, slot);
                } else {
                    t.remove(id);
                    model.remove(&id);
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert!(2 * t.len() <= t.entries.len());
            }
            for id in 0..300 {
                prop_assert_eq!(t.get(id), model.get(&id).copied());
            }
        }
    }
}
