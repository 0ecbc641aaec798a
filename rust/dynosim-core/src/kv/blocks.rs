//! One rank's block KV cache (each data-parallel rank of a worker has its own): full blocks are
//! shared by prefix identity, inactive ones stay cached until the least recently used is evicted.
//!
//! Capacity is counted, not placed: a block is active (held by at least one running request),
//! inactive (cached, reusable, evictable) or free. Blocks a request holds privately (its partial
//! last block, generated tokens, duplicates of a block another request cached first) are counted
//! in `active` without an identity.

use super::occupancy::Occupancy;
use super::slot_index::{SlotIndex, Slots, WithForm};
use crate::block_ids::BlockId;

/// The identity of a spare slot (identities are below `BlockId::MAX`).
const NO_ID: BlockId = BlockId::MAX;

#[derive(Debug, Clone)]
struct Slot {
    id: BlockId,
    refcount: u32,
    /// Bumped whenever the slot leaves the LRU order: an entry of `lru` is live while it
    /// carries its slot's stamp. Kept across reuse, so an old entry never comes alive again
    /// (stale entries are dropped long before a stamp could wrap: see `compact_lru`).
    stamp: u32,
}

impl Slot {
    /// Leave the LRU order: its queued entry no longer carries the slot's stamp.
    #[inline(always)]
    fn unlink(&mut self) {
        self.stamp = self.stamp.wrapping_add(1);
    }

    /// Take a reference; whether the block was inactive (it then leaves the LRU order).
    #[inline(always)]
    fn take(&mut self) -> bool {
        let inactive = self.refcount == 0;
        if inactive {
            self.unlink();
        }
        self.refcount += 1;
        inactive
    }
}

/// Stale LRU entries allowed beyond the live ones before they are dropped, at least (few in
/// the tests, so their short runs drop them often).
const LRU_SLACK: usize = if cfg!(test) { 2 } else { 64 };

/// Slots a new cache reserves at most; it grows past them as blocks are used.
const RESERVED_SLOTS: u32 = 1 << 16;

/// The cache of one worker. Slot indices handed out stay valid until the caller releases them.
// C layout with the counts first, as `IdentityCache`: a `RankCache` then finds them at one
// offset whatever its form, and reading them takes no branch.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct KvCache {
    counts: Occupancy,
    slot_of: SlotIndex,
    slots: Vec<Slot>,
    /// Slots without an identity, the last spared on top.
    spare: Vec<u32>,
    /// Inactive slots, least recently used first from `lru_head` on, as (slot, stamp): a slot
    /// leaving the order only bumps its stamp, and popping skips entries whose stamp is stale.
    /// A queue read in order costs evictions no pointer chasing through cold slots, as a
    /// linked list did.
    lru: Vec<(u32, u32)>,
    lru_head: usize,
}

/// What the cache holds of a prompt's leading blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixHit {
    /// Leading blocks found (active or inactive).
    pub blocks: u32,
    /// Of those, how many are inactive: reusing them costs capacity again.
    pub inactive: u32,
}

impl KvCache {
    /// A cache of `capacity` blocks for identities below `ids`, one of `caches` block caches
    /// in its replay (they share the memory of the identity indexes: see [`SlotIndex::new`]).
    pub fn new(capacity: u32, ids: BlockId, caches: u32) -> Self {
        KvCache {
            counts: Occupancy::new(capacity),
            slot_of: SlotIndex::new(capacity, ids, caches),
            // Slots are created as blocks are first used: reserving a huge cache's whole
            // capacity up front would take memory its replay may never touch.
            slots: Vec::with_capacity(capacity.min(RESERVED_SLOTS) as usize),
            spare: Vec::new(),
            lru: Vec::new(),
            lru_head: 0,
        }
    }

    /// Its counts, and the identities it evicted when it keeps them.
    pub fn counts(&self) -> &Occupancy {
        &self.counts
    }

    pub fn counts_mut(&mut self) -> &mut Occupancy {
        &mut self.counts
    }

    /// Use as an LRU set of identities: for each of `ids` in turn, name it as the most recent
    /// inactive block (evicting the least recent when full), or, if it is already cached, make
    /// it the most recent. Returns how many were new. Needs a cache with no active blocks.
    pub fn insert_or_touch_all(&mut self, ids: &[BlockId]) -> u32 {
        self.insert_or_touch_each(ids, |_| {})
    }

    /// `insert_or_touch_all`, calling `new_block(slot)` with the slot each block new to the set
    /// takes (below the capacity; a slot keeps its block until that is evicted).
    pub fn insert_or_touch_each(&mut self, ids: &[BlockId], mut new_block: impl FnMut(u32)) -> u32 {
        debug_assert_eq!(
            self.counts.active, 0,
            "an LRU set holds inactive blocks only"
        );
        let mut new = 0;
        for &id in ids {
            if let Some(slot) = self.find(id) {
                if !self.is_most_recent(slot) {
                    self.slots[slot as usize].unlink();
                    self.push_back(slot);
                }
                continue;
            }
            let index = if self.counts.inactive == self.counts.capacity {
                // The evicted block's slot takes the new one.
                let slot = self.pop_lru();
                self.counts.evictions += 1;
                self.slots[slot as usize].id = id;
                self.slot_of.insert(id, slot);
                slot
            } else {
                self.counts.inactive += 1;
                self.name_slot(id, 0)
            };
            self.push_back(index);
            new_block(index);
            new += 1;
        }
        new
    }

    /// The slot of cached block `id`, if it is cached.
    pub fn slot(&self, id: BlockId) -> Option<u32> {
        self.find(id)
    }

    /// Each slot's reference count, by slot: what the holders' slot lists must add up to, slot
    /// by slot (the scheduler's debug checks).
    #[cfg(debug_assertions)]
    pub fn refcounts(&self) -> Vec<u32> {
        self.slots.iter().map(|s| s.refcount).collect()
    }

    /// The longest run of leading blocks of `ids` the cache holds. The index entries of the
    /// blocks after it are asked for on the way out: a request that takes this rank names
    /// them as its prefill computes them (or its KV arrives), and identities new to the rank
    /// have cold entries. A lookup that only scores the rank (KV-aware routing) asks in vain,
    /// yet asking here measured faster than asking where a request takes the rank, even then.
    pub fn lookup(&self, ids: &[BlockId]) -> PrefixHit {
        let mut hit = PrefixHit {
            blocks: 0,
            inactive: 0,
        };
        for &id in ids {
            match self.find(id) {
                Some(slot) => {
                    hit.blocks += 1;
                    if self.slots[slot as usize].refcount == 0 {
                        hit.inactive += 1;
                    }
                }
                None => break,
            }
        }
        self.slot_of.prefetch(&ids[hit.blocks as usize..]);
        hit
    }

    /// Take a reference on the cached block `id` (found by `lookup`), returning its slot.
    pub fn acquire(&mut self, id: BlockId) -> u32 {
        let slot = self.find(id).expect("acquire follows lookup");
        if self.slots[slot as usize].take() {
            self.counts.inactive -= 1;
            self.counts.active += 1;
        }
        slot
    }

    /// `acquire` each of `ids` (a prefix `lookup` found) in turn, appending their slots to
    /// `out`. The index's form is matched once for all of them and the counts moved once.
    // Inline: most prompts find nothing cached, and skip the call.
    #[inline]
    pub fn acquire_all(&mut self, ids: &[BlockId], out: &mut Vec<u32>) {
        if !ids.is_empty() {
            self.acquire_run(ids, out);
        }
    }

    /// `acquire_all` of a prefix of at least one block.
    #[inline(never)]
    fn acquire_run(&mut self, ids: &[BlockId], out: &mut Vec<u32>) {
        struct Acquire<'a> {
            slots: &'a mut [Slot],
            ids: &'a [BlockId],
            out: &'a mut Vec<u32>,
        }
        impl WithForm for Acquire<'_> {
            /// Blocks taken out of the inactive ones.
            type Output = u32;
            fn run<S: Slots>(self, index: &mut S) -> u32 {
                let Acquire { slots, ids, out } = self;
                let mut reused = 0;
                out.extend(ids.iter().map(|&id| {
                    let slot = find_in(index, slots, id).expect("acquire follows lookup");
                    reused += u32::from(slots[slot as usize].take());
                    slot
                }));
                reused
            }
        }
        let reused = self.slot_of.with_form(Acquire {
            slots: &mut self.slots,
            ids,
            out,
        });
        self.counts.inactive -= reused;
        self.counts.active += reused;
    }

    /// Hand out `n` private blocks, evicting least recently used inactive ones as needed.
    /// The caller checks `available() >= n` first.
    pub fn allocate(&mut self, n: u32) {
        debug_assert!(n <= self.counts.available());
        let free = self.counts.free();
        if n > free {
            self.evict(n - free);
        }
        self.counts.active += n;
    }

    /// Give identity `id` to one of the caller's private blocks now that it is full. Returns
    /// its slot, or `None` when another request cached the same content first (the block then
    /// stays private).
    #[inline(always)]
    pub fn register(&mut self, id: BlockId) -> Option<u32> {
        let mut spared = self.spare.len();
        let named = register_in(
            &mut self.slot_of,
            &mut self.slots,
            (&self.spare, &mut spared),
            id,
        );
        self.spare.truncate(spared);
        named
    }

    /// `register` each of `ids` in turn, appending the slots named to `slots`; returns how
    /// many were named (the others stay private). The index's form is matched once for all
    /// of them, not twice a block.
    pub fn register_all(&mut self, ids: &[BlockId], slots: &mut Vec<u32>) -> u32 {
        struct Register<'a> {
            slots: &'a mut Vec<Slot>,
            spare: &'a mut Vec<u32>,
            ids: &'a [BlockId],
            out: &'a mut Vec<u32>,
        }
        impl WithForm for Register<'_> {
            type Output = ();
            fn run<S: Slots>(self, index: &mut S) {
                let Register {
                    slots,
                    spare,
                    ids,
                    out,
                } = self;
                // Names take spare slots from the top, so the slots named are the spares
                // taken, in reverse: they are copied out as one run at the end, and the loop
                // reads and writes no list but the table and the index. The table does not
                // grow while spares last (nearly always once the cache has filled): borrowed
                // as a slice, its length stays in a register.
                let table = slots.as_mut_slice();
                let mut tops = spare.iter().rev();
                let mut done = 0;
                for &id in ids {
                    if find_in(index, table, id).is_none() {
                        let Some(&slot) = tops.next() else {
                            break;
                        };
                        (table[slot as usize].id, table[slot as usize].refcount) = (id, 1);
                        index.insert(id, slot);
                    }
                    done += 1;
                }
                let top = tops.len();
                out.extend(spare[top..].iter().rev());
                spare.truncate(top);
                // No spare left (the cache is filling for the first time): the rest take new
                // slots, one a block.
                for &id in &ids[done..] {
                    out.extend(register_in(index, slots, (&[], &mut 0), id));
                }
            }
        }
        let before = slots.len();
        self.slot_of.with_form(Register {
            slots: &mut self.slots,
            spare: &mut self.spare,
            ids,
            out: slots,
        });
        (slots.len() - before) as u32
    }

    /// Drop a request's references: `slots` in block order and `private` unnamed blocks.
    /// Later blocks become least recent first, so eviction trims prefixes from their tail.
    pub fn release(&mut self, slots: &[u32], private: u32) {
        self.counts.active -= private;
        // The queue is tidied once for the whole release, not once per block: tidying drops
        // stale entries only, so when it runs never changes the order of the live ones.
        self.tidy_lru();
        // Every block released gets an entry, last block first, appended as one counted run
        // (no branch and no length check per block). A block another request still holds
        // gets an entry already stale (its slot's stamp minus one, a stamp the slot had and
        // does not get again), which eviction skips as it skips any stale entry.
        let table = &mut self.slots;
        let mut freed = 0;
        self.lru.extend(slots.iter().rev().map(|&slot| {
            let s = &mut table[slot as usize];
            s.refcount -= 1;
            let held = s.refcount != 0;
            freed += u32::from(!held);
            (slot, s.stamp.wrapping_sub(u32::from(held)))
        }));
        // The blocks no request holds any more, counted once.
        self.counts.active -= freed;
        self.counts.inactive += freed;
    }

    /// Evict the `n` least recently used inactive blocks, the index's form matched once for
    /// all of them.
    fn evict(&mut self, n: u32) {
        struct Evict<'a> {
            lru: Lru<'a>,
            spare: &'a mut Vec<u32>,
            n: u32,
        }
        impl WithForm for Evict<'_> {
            /// Entries left in the queue after the evictions.
            type Output = usize;
            fn run<S: Slots>(self, index: &mut S) -> usize {
                let Evict { mut lru, spare, n } = self;
                // Slots spared are written by position: a push would check and store the
                // length per block.
                let spared = spare.len();
                spare.resize(spared + n as usize, 0);
                for top in &mut spare[spared..] {
                    let slot = lru.pop(index);
                    lru.slots[slot as usize].id = NO_ID;
                    *top = slot;
                }
                lru.queue.len()
            }
        }
        let lru = Lru {
            queue: self.lru[self.lru_head..].iter(),
            slots: &mut self.slots,
            evicted: self
                .counts
                .record_evicted
                .then_some(&mut self.counts.evicted),
        };
        let left = self.slot_of.with_form(Evict {
            lru,
            spare: &mut self.spare,
            n,
        });
        self.lru_head = self.lru.len() - left;
        self.counts.inactive -= n;
        self.counts.evictions += u64::from(n);
    }

    /// Evict the least recently used inactive block and return its slot, now nameless; the
    /// caller reuses or spares the slot and counts the block out of `inactive` and into
    /// `evictions`.
    #[inline(always)]
    fn pop_lru(&mut self) -> u32 {
        let mut lru = Lru {
            queue: self.lru[self.lru_head..].iter(),
            slots: &mut self.slots,
            evicted: self
                .counts
                .record_evicted
                .then_some(&mut self.counts.evicted),
        };
        let slot = lru.pop(&mut self.slot_of);
        self.lru_head = self.lru.len() - lru.queue.len();
        slot
    }

    /// A slot (a spare one if any) holding the absent identity `id`, findable by it.
    #[inline(always)]
    fn name_slot(&mut self, id: BlockId, refcount: u32) -> u32 {
        let mut spared = self.spare.len();
        let named = name_in(
            &mut self.slot_of,
            &mut self.slots,
            (&self.spare, &mut spared),
            id,
            refcount,
        );
        self.spare.truncate(spared);
        named
    }

    #[inline]
    fn find(&self, id: BlockId) -> Option<u32> {
        find_in(&self.slot_of, &self.slots, id)
    }

    /// Make inactive `slot` the most recently used.
    #[inline(always)]
    fn push_back(&mut self, slot: u32) {
        self.tidy_lru();
        self.lru.push((slot, self.slots[slot as usize].stamp));
    }

    /// Drop the LRU queue's stale entries once they outnumber the live ones (plus a slack),
    /// or move it to the front once mostly popped, before entries are pushed.
    #[inline(always)]
    fn tidy_lru(&mut self) {
        let queued = self.lru.len() - self.lru_head;
        // Stale entries allowed past the live ones: a quarter of the capacity, so a cache whose
        // blocks are mostly held (few live entries) does not compact every few releases.
        let slack = LRU_SLACK.max(self.counts.capacity as usize / 4);
        if queued >= 2 * self.counts.inactive as usize + slack {
            self.compact_lru();
        } else if self.lru_head >= 4 * queued + slack {
            // Mostly popped: move the queue to the front, no stamp read (each entry moved
            // after four or more were popped).
            self.lru.drain(..self.lru_head);
            self.lru_head = 0;
        }
    }

    /// Drop the popped and stale entries of the LRU queue, keeping the live ones in order. Run
    /// when at most about half the queued entries are live, so each stale entry is read about
    /// once; a few times the capacity of stale entries at most pile up between runs (a release
    /// checks once, then pushes up to a capacity of entries), each bump of a stamp or release
    /// of a block still held making one, so no stamp wraps onto a stale entry.
    #[cold]
    #[inline(never)]
    fn compact_lru(&mut self) {
        let slots = &self.slots;
        let mut live = 0;
        for k in self.lru_head..self.lru.len() {
            let (slot, stamp) = self.lru[k];
            if slots[slot as usize].stamp == stamp {
                self.lru[live] = (slot, stamp);
                live += 1;
            }
        }
        self.lru.truncate(live);
        self.lru_head = 0;
    }

    /// Whether inactive `slot` is the most recently used.
    fn is_most_recent(&self, slot: u32) -> bool {
        self.lru.len() > self.lru_head
            && self.lru.last() == Some(&(slot, self.slots[slot as usize].stamp))
    }
}

/// The parts of a [`KvCache`] an eviction reads and writes besides its index.
struct Lru<'a> {
    /// The queue from its head on: popping steps the iterator, which needs no bounds check
    /// per entry; the caller writes the new head back (the queue's length minus what is
    /// left).
    queue: std::slice::Iter<'a, (u32, u32)>,
    slots: &'a mut [Slot],
    /// Where evicted identities are kept, when they are.
    evicted: Option<&'a mut Vec<BlockId>>,
}

impl Lru<'_> {
    /// [`KvCache::pop_lru`] on one form of the index.
    #[inline(always)]
    fn pop(&mut self, index: &mut impl Slots) -> u32 {
        let slot = loop {
            let &(slot, stamp) = self.queue.next().expect("an inactive block to evict");
            if self.slots[slot as usize].stamp == stamp {
                break slot;
            }
        };
        let id = self.slots[slot as usize].id;
        debug_assert_eq!(find_in(index, self.slots, id), Some(slot));
        index.forget(id);
        if let Some(evicted) = self.evicted.as_deref_mut() {
            evicted.push(id);
        }
        slot
    }
}

/// The slot holding `id` by `index`, if cached: a dense index may name the slot `id` last
/// had, so the slot's identity is checked.
#[inline(always)]
fn find_in(index: &impl Slots, slots: &[Slot], id: BlockId) -> Option<u32> {
    index.get(id).filter(|&slot| slots[slot as usize].id == id)
}

/// A slot (a spare one if any) holding the absent identity `id`, findable by it in `index`.
/// The spare slots are `spare.0[..*spare.1]`, the last on top: one taken lowers the count,
/// and the caller truncates the list to it.
#[inline(always)]
fn name_in(
    index: &mut impl Slots,
    slots: &mut Vec<Slot>,
    (spare, spared): (&[u32], &mut usize),
    id: BlockId,
    refcount: u32,
) -> u32 {
    let top = spared.checked_sub(1).map(|top| {
        *spared = top;
        spare[top]
    });
    let named = match top {
        Some(i) => {
            let slot = &mut slots[i as usize];
            (slot.id, slot.refcount) = (id, refcount);
            i
        }
        None => {
            slots.push(Slot {
                id,
                refcount,
                stamp: 0,
            });
            (slots.len() - 1) as u32
        }
    };
    index.insert(id, named);
    named
}

/// [`KvCache::register`] on one form of the index.
#[inline(always)]
fn register_in(
    index: &mut impl Slots,
    slots: &mut Vec<Slot>,
    spare: (&[u32], &mut usize),
    id: BlockId,
) -> Option<u32> {
    if find_in(index, slots, id).is_some() {
        return None;
    }
    Some(name_in(index, slots, spare, id, 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Cache a request's blocks as the engine does: allocate, then name each full block.
    fn fill(cache: &mut KvCache, ids: &[BlockId]) -> Vec<u32> {
        cache.allocate(ids.len() as u32);
        ids.iter().map(|&h| cache.register(h).unwrap()).collect()
    }

    #[test]
    fn released_blocks_stay_cached_until_evicted() {
        let mut c = KvCache::new(4, 64, 1);
        let a = fill(&mut c, &[1, 2, 3]);
        assert_eq!((c.counts().active(), c.counts().available()), (3, 1));
        c.release(&a, 0);
        assert_eq!(
            (
                c.counts().active(),
                c.counts().inactive(),
                c.counts().available()
            ),
            (0, 3, 4)
        );
        assert_eq!(
            c.lookup(&[1, 2, 3, 9]),
            PrefixHit {
                blocks: 3,
                inactive: 3
            }
        );
        // Two new private blocks: one free, one evicted; the tail block (3) goes first.
        c.allocate(2);
        assert_eq!(c.counts().evictions(), 1);
        assert_eq!(c.lookup(&[1, 2, 3]).blocks, 2);
    }

    #[test]
    fn shared_blocks_are_counted_once() {
        let mut c = KvCache::new(8, 64, 1);
        let a = fill(&mut c, &[1, 2]);
        let hit = c.lookup(&[1, 2, 5]);
        assert_eq!(
            hit,
            PrefixHit {
                blocks: 2,
                inactive: 0
            }
        );
        let b: Vec<u32> = [1, 2].iter().map(|&h| c.acquire(h)).collect();
        assert_eq!(c.counts().active(), 2);
        c.release(&a, 0);
        assert_eq!((c.counts().active(), c.counts().inactive()), (2, 0));
        c.release(&b, 0);
        assert_eq!((c.counts().active(), c.counts().inactive()), (0, 2));
    }

    #[test]
    fn reusing_an_inactive_block_costs_capacity_again() {
        let mut c = KvCache::new(2, 64, 1);
        let a = fill(&mut c, &[1, 2]);
        c.release(&a, 0);
        assert_eq!(c.counts().available(), 2);
        c.acquire(1);
        assert_eq!((c.counts().available(), c.counts().inactive()), (1, 1));
    }

    #[test]
    fn duplicate_content_stays_private() {
        let mut c = KvCache::new(4, 64, 1);
        fill(&mut c, &[1]);
        c.allocate(1);
        assert_eq!(c.register(1), None);
        assert_eq!(c.counts().active(), 2);
        c.release(&[], 1);
        assert_eq!(c.counts().active(), 1);
    }

    #[test]
    fn recorded_evictions_come_out_oldest_first() {
        let mut c = KvCache::new(2, 64, 1);
        c.counts_mut().record_evictions();
        assert_eq!(c.insert_or_touch_all(&[1, 2]), 2);
        assert_eq!(c.insert_or_touch_all(&[1]), 0); // 1 becomes the most recent
        assert_eq!(c.insert_or_touch_all(&[3, 4]), 2); // evicts 2, then 1
        let mut out = vec![9];
        c.counts_mut().drain_evicted_into(&mut out);
        assert_eq!(out, vec![9, 2, 1]);
        assert!(!c.counts().has_evicted());
        assert_eq!((c.counts().inactive(), c.counts().active()), (2, 0));
        // Without recording nothing is kept.
        let mut d = KvCache::new(1, 64, 1);
        d.insert_or_touch_all(&[1, 2]);
        assert!(!d.counts().has_evicted());
    }

    #[test]
    fn caches_past_65535_blocks_index_wide() {
        let ids: Vec<BlockId> = (0..70_000).collect();
        let mut c = KvCache::new(70_000, 80_000, 1);
        assert!(matches!(c.slot_of, SlotIndex::Wide(_)));
        let slots = fill(&mut c, &ids);
        assert_eq!(slots[69_999], 69_999);
        c.release(&slots, 0);
        c.allocate(2); // the request's last two blocks go first
        assert_eq!(c.lookup(&ids).blocks, 69_998);
        assert_eq!(c.lookup(&[69_998]).blocks, 0);
        assert!(matches!(
            KvCache::new(65_534, 8, 1).slot_of,
            SlotIndex::Narrow(_)
        ));
    }

    #[test]
    fn a_hashed_index_caches_what_a_dense_one_does() {
        // 16 blocks over 2^25 identities: past the 16 MiB dense budget, so hashed. The same
        // fills, releases and evictions find the same blocks as a dense cache.
        let far: BlockId = 1 << 25;
        let (mut hashed, mut dense) = (KvCache::new(16, far, 1), KvCache::new(16, 64, 1));
        assert!(matches!(hashed.slot_of, SlotIndex::Hashed(_)));
        assert!(matches!(dense.slot_of, SlotIndex::Narrow(_)));
        let all: Vec<BlockId> = (0..60).collect();
        for round in 0..12u32 {
            // Five new blocks a round: from the fourth round on, each evicts the oldest.
            let ids: Vec<BlockId> = (round * 5..round * 5 + 5).collect();
            // The hashed cache names the blocks in one `register_all` (its index's form
            // matched once), the dense one block by block.
            hashed.allocate(ids.len() as u32);
            let mut a = Vec::new();
            assert_eq!(hashed.register_all(&ids, &mut a), 5);
            let b = fill(&mut dense, &ids);
            assert_eq!(a, b);
            hashed.release(&a, 0);
            dense.release(&b, 0);
            for start in (0..60).step_by(5) {
                let prefix = &all[start..start + 5];
                assert_eq!(hashed.lookup(prefix), dense.lookup(prefix));
            }
        }
        assert_eq!(hashed.counts().evictions(), 60 - 16);
    }

    #[test]
    fn lru_order_follows_release_order() {
        let mut c = KvCache::new(3, 64, 1);
        let a = fill(&mut c, &[10]);
        let b = fill(&mut c, &[20]);
        let d = fill(&mut c, &[30]);
        c.release(&b, 0);
        c.release(&a, 0);
        c.release(&d, 0);
        c.acquire(20); // 20 becomes active again; 10 is now the least recent inactive block
        c.allocate(1);
        assert_eq!(c.lookup(&[10]).blocks, 0);
        assert_eq!(c.lookup(&[30]).blocks, 1);
    }

    // Model-based property tests: the cache against a deliberately naive reference.

    /// Block identities below this, so hits, duplicates and evictions are frequent.
    const IDS: BlockId = 24;
    /// No slot seen yet.
    const NIL: u32 = u32::MAX;

    /// A cached block of the reference model.
    #[derive(Debug, Clone)]
    struct Entry {
        id: BlockId,
        refcount: u32,
        /// The clock when it last became inactive (larger is more recent).
        released: u64,
        /// The slot the cache gave it, once seen (`NIL` before).
        slot: u32,
    }

    /// The reference: a list of cached blocks searched linearly, a count of private blocks,
    /// and eviction of the inactive block released longest ago.
    #[derive(Debug, Default)]
    struct Model {
        capacity: u32,
        entries: Vec<Entry>,
        private: u32,
        clock: u64,
        evictions: u64,
        record: bool,
        evicted: Vec<BlockId>,
    }

    impl Model {
        fn new(capacity: u32, record: bool) -> Self {
            Model {
                capacity,
                record,
                ..Model::default()
            }
        }

        fn find(&self, id: BlockId) -> Option<usize> {
            self.entries.iter().position(|e| e.id == id)
        }

        fn active(&self) -> u32 {
            self.private + self.entries.iter().filter(|e| e.refcount > 0).count() as u32
        }

        fn inactive(&self) -> u32 {
            self.entries.iter().filter(|e| e.refcount == 0).count() as u32
        }

        fn tick(&mut self) -> u64 {
            self.clock += 1;
            self.clock
        }

        fn lookup(&self, ids: &[BlockId]) -> PrefixHit {
            let mut hit = PrefixHit {
                blocks: 0,
                inactive: 0,
            };
            for &id in ids {
                let Some(i) = self.find(id) else { break };
                hit.blocks += 1;
                if self.entries[i].refcount == 0 {
                    hit.inactive += 1;
                }
            }
            hit
        }

        fn evict_one(&mut self) {
            let mut victim: Option<usize> = None;
            for i in 0..self.entries.len() {
                if self.entries[i].refcount == 0
                    && victim.is_none_or(|v| self.entries[i].released < self.entries[v].released)
                {
                    victim = Some(i);
                }
            }
            let e = self
                .entries
                .remove(victim.expect("model: eviction with no inactive block"));
            self.evictions += 1;
            if self.record {
                self.evicted.push(e.id);
            }
        }

        /// Takes a reference on cached `id`; returns its slot if known.
        fn acquire(&mut self, id: BlockId) -> u32 {
            let i = self.find(id).expect("model: acquire of an uncached block");
            self.entries[i].refcount += 1;
            self.entries[i].slot
        }

        fn allocate(&mut self, n: u32) {
            while self.capacity - self.active() - self.inactive() < n {
                self.evict_one();
            }
            self.private += n;
        }

        /// Names one private block `id`; false when `id` is cached already.
        fn register(&mut self, id: BlockId) -> bool {
            if self.find(id).is_some() {
                return false;
            }
            self.private -= 1;
            self.entries.push(Entry {
                id,
                refcount: 1,
                released: 0,
                slot: NIL,
            });
            true
        }

        /// Drops references on `ids` (block order), last block first, and `private` blocks.
        fn release(&mut self, ids: &[BlockId], private: u32) {
            self.private -= private;
            for &id in ids.iter().rev() {
                let i = self.find(id).expect("model: release of an uncached block");
                self.entries[i].refcount -= 1;
                if self.entries[i].refcount == 0 {
                    self.entries[i].released = self.tick();
                }
            }
        }

        fn insert_or_touch_all(&mut self, ids: &[BlockId]) -> u32 {
            let mut new = 0;
            for &id in ids {
                if let Some(i) = self.find(id) {
                    self.entries[i].released = self.tick();
                    continue;
                }
                if self.inactive() == self.capacity {
                    self.evict_one();
                }
                let released = self.tick();
                self.entries.push(Entry {
                    id,
                    refcount: 0,
                    released,
                    slot: NIL,
                });
                new += 1;
            }
            new
        }
    }

    /// Everything observable of the cache agrees with the model; drains recorded evictions.
    fn check_against(
        cache: &mut KvCache,
        model: &mut Model,
        prompts: &[Vec<BlockId>],
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(cache.counts().capacity(), model.capacity);
        prop_assert_eq!(cache.counts().active(), model.active());
        prop_assert_eq!(cache.counts().inactive(), model.inactive());
        prop_assert_eq!(cache.counts().available(), model.capacity - model.active());
        prop_assert!(model.active() + model.inactive() <= model.capacity);
        prop_assert_eq!(cache.counts().evictions(), model.evictions);
        // Slots are reused: a new one is made only when no spare is left, so never more than
        // the capacity exist.
        prop_assert!(cache.slots.len() <= model.capacity as usize);
        for prompt in prompts {
            prop_assert_eq!(
                cache.lookup(prompt),
                model.lookup(prompt),
                "prompt {:?}",
                prompt
            );
        }
        for id in 0..IDS {
            prop_assert_eq!(cache.lookup(&[id]), model.lookup(&[id]), "id {}", id);
        }
        prop_assert_eq!(cache.counts().has_evicted(), !model.evicted.is_empty());
        let mut got = Vec::new();
        cache.counts_mut().drain_evicted_into(&mut got);
        prop_assert_eq!(got, std::mem::take(&mut model.evicted));
        prop_assert!(!cache.counts().has_evicted());
        Ok(())
    }

    /// What a simulated request holds while admitted.
    #[derive(Debug, Default)]
    struct Held {
        /// Named blocks in block order: the cache's slots and the model's identities.
        slots: Vec<u32>,
        ids: Vec<BlockId>,
        private: u32,
        /// Prompt blocks before this are named (or stayed private as duplicates).
        named: usize,
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Admit request `r` (if not held and it fits) with `extra` blocks beyond its prompt,
        /// taking its cached prefix one `acquire` at a time or all at once.
        Admit {
            r: usize,
            extra: u32,
            single: bool,
        },
        /// Name up to `k` more of its prompt blocks, one `register` at a time or all at once.
        Fill {
            r: usize,
            k: usize,
            single: bool,
        },
        /// Take `n` more private blocks (generated tokens), if they fit.
        Grow {
            r: usize,
            n: u32,
        },
        Release {
            r: usize,
        },
        /// LRU-set use of the same cache, only while no request holds anything.
        Touch {
            ids: Vec<BlockId>,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..4, 0u32..2, any::<bool>())
                .prop_map(|(r, extra, single)| Op::Admit { r, extra, single }),
            3 => (0usize..4, 0usize..4, any::<bool>())
                .prop_map(|(r, k, single)| Op::Fill { r, k, single }),
            1 => (0usize..4, 1u32..3).prop_map(|(r, n)| Op::Grow { r, n }),
            2 => (0usize..4).prop_map(|r| Op::Release { r }),
            1 => prop::collection::vec(0..IDS, 0..5).prop_map(|ids| Op::Touch { ids }),
        ]
    }

    /// Up to four prompts, each a prefix of one of two base prompts plus a random tail, so
    /// prompts share prefixes, repeat identities and collide.
    fn request_prompts() -> impl Strategy<Value = Vec<Vec<BlockId>>> {
        let base = prop::collection::vec(0..IDS, 5);
        let request = (0usize..2, 0usize..=5, prop::collection::vec(0..IDS, 0..3));
        (
            prop::collection::vec(base, 2),
            prop::collection::vec(request, 1..=4),
        )
            .prop_map(|(bases, requests)| {
                requests
                    .into_iter()
                    .map(|(b, k, tail)| bases[b][..k].iter().copied().chain(tail).collect())
                    .collect()
            })
    }

    proptest! {
        /// Requests admitted, filled, grown and released in random order leave the cache
        /// exactly where a naive list of cached blocks with release timestamps would be.
        #[test]
        fn requests_agree_with_a_naive_model(
            capacity in 1u32..10,
            record in any::<bool>(),
            prompts in request_prompts(),
            ops in prop::collection::vec(op(), 1..100),
        ) {
            let mut cache = KvCache::new(capacity, IDS, 1);
            let mut model = Model::new(capacity, record);
            if record {
                cache.counts_mut().record_evictions();
            }
            let mut held: Vec<Option<Held>> = prompts.iter().map(|_| None).collect();
            for op in ops {
                match op {
                    Op::Admit { r, extra, single } => {
                        let r = r % prompts.len();
                        if held[r].is_some() {
                            continue;
                        }
                        let prompt = &prompts[r];
                        let hit = cache.lookup(prompt);
                        prop_assert_eq!(hit, model.lookup(prompt));
                        let need = (prompt.len() as u32 - hit.blocks) + extra;
                        if cache.counts().available() < hit.inactive + need {
                            continue;
                        }
                        let mut h = Held::default();
                        let prefix = &prompt[..hit.blocks as usize];
                        if single {
                            h.slots.extend(prefix.iter().map(|&id| cache.acquire(id)));
                        } else {
                            cache.acquire_all(prefix, &mut h.slots);
                        }
                        for (&id, &slot) in prefix.iter().zip(&h.slots) {
                            let known = model.acquire(id);
                            if known == NIL {
                                let i = model.find(id).unwrap();
                                model.entries[i].slot = slot;
                            } else {
                                prop_assert_eq!(slot, known, "acquire({})", id);
                            }
                            h.ids.push(id);
                        }
                        prop_assert_eq!(h.slots.len(), prefix.len());
                        cache.allocate(need);
                        model.allocate(need);
                        h.private = need;
                        h.named = hit.blocks as usize;
                        held[r] = Some(h);
                    }
                    Op::Fill { r, k, single } => {
                        let r = r % prompts.len();
                        let Some(h) = held[r].as_mut() else { continue };
                        let end = (h.named + k).min(prompts[r].len());
                        let ids = &prompts[r][h.named..end];
                        let before = h.slots.len();
                        if single {
                            for &id in ids {
                                if let Some(slot) = cache.register(id) {
                                    h.slots.push(slot);
                                }
                            }
                        } else {
                            let n = cache.register_all(ids, &mut h.slots);
                            prop_assert_eq!(n as usize, h.slots.len() - before);
                        }
                        let mut named = Vec::new();
                        for &id in ids {
                            if model.register(id) {
                                named.push(id);
                            }
                        }
                        prop_assert_eq!(h.slots.len() - before, named.len(), "naming {:?}", ids);
                        for (&id, &slot) in named.iter().zip(&h.slots[before..]) {
                            // A new name takes a slot no cached block holds.
                            prop_assert!(model.entries.iter().all(|e| e.slot != slot));
                            let i = model.find(id).unwrap();
                            model.entries[i].slot = slot;
                        }
                        h.ids.extend(&named);
                        h.private -= named.len() as u32;
                        h.named = end;
                    }
                    Op::Grow { r, n } => {
                        let r = r % prompts.len();
                        let Some(h) = held[r].as_mut() else { continue };
                        if cache.counts().available() < n {
                            continue;
                        }
                        cache.allocate(n);
                        model.allocate(n);
                        h.private += n;
                    }
                    Op::Release { r } => {
                        let r = r % prompts.len();
                        let Some(h) = held[r].take() else { continue };
                        cache.release(&h.slots, h.private);
                        model.release(&h.ids, h.private);
                    }
                    Op::Touch { ids } => {
                        if held.iter().any(Option::is_some) {
                            continue;
                        }
                        prop_assert_eq!(
                            cache.insert_or_touch_all(&ids),
                            model.insert_or_touch_all(&ids)
                        );
                    }
                }
                check_against(&mut cache, &mut model, &prompts)?;
            }
            // Everything released, nothing is active.
            for h in held.iter_mut() {
                if let Some(h) = h.take() {
                    cache.release(&h.slots, h.private);
                    model.release(&h.ids, h.private);
                }
            }
            prop_assert_eq!(cache.counts().active(), 0);
            check_against(&mut cache, &mut model, &prompts)?;
        }

        /// `register_all` names the same blocks into the same slots as `register` one block
        /// at a time, whether the spare slots last or run out part way (a cache filling for
        /// the first time), and leaves the same spares.
        #[test]
        fn register_all_names_like_register_one_at_a_time(
            capacity in 1u32..12,
            requests in prop::collection::vec(
                (prop::collection::vec(0..IDS, 0..8), any::<bool>()),
                1..12,
            ),
        ) {
            let mut one = KvCache::new(capacity, IDS, 1);
            let mut all = KvCache::new(capacity, IDS, 1);
            let mut held: Vec<(Vec<u32>, u32)> = Vec::new();
            for (ids, release_first) in requests {
                if release_first {
                    for (slots, private) in held.drain(..) {
                        one.release(&slots, private);
                        all.release(&slots, private);
                    }
                }
                let n = ids.len() as u32;
                if all.counts().available() < n {
                    continue;
                }
                one.allocate(n);
                all.allocate(n);
                let by_one: Vec<u32> = ids.iter().filter_map(|&id| one.register(id)).collect();
                let mut by_all = vec![u32::MAX];
                let named = all.register_all(&ids, &mut by_all);
                prop_assert_eq!(by_all[0], u32::MAX);
                prop_assert_eq!(named as usize, by_all.len() - 1);
                prop_assert_eq!(&by_all[1..], &by_one[..], "ids {:?}", ids);
                prop_assert_eq!(&all.spare, &one.spare);
                prop_assert_eq!(all.slots.len(), one.slots.len());
                held.push((by_one, n - named));
            }
        }

        /// As an LRU set (offload tiers), the cache inserts, touches and evicts exactly like
        /// a naive list ordered by last use.
        #[test]
        fn lru_set_agrees_with_a_naive_model(
            capacity in 1u32..6,
            batches in prop::collection::vec(
                (prop::collection::vec(0u32..12, 0..8), any::<bool>()),
                1..20,
            ),
        ) {
            let mut cache = KvCache::new(capacity, IDS, 1);
            let mut model = Model::new(capacity, true);
            cache.counts_mut().record_evictions();
            let mut pending = Vec::new();
            for (ids, drain) in batches {
                prop_assert_eq!(
                    cache.insert_or_touch_all(&ids),
                    model.insert_or_touch_all(&ids),
                    "batch {:?}",
                    ids
                );
                prop_assert_eq!(cache.counts().active(), 0);
                prop_assert_eq!(cache.counts().inactive(), model.inactive());
                prop_assert_eq!(cache.counts().evictions(), model.evictions);
                prop_assert!(cache.slots.len() <= capacity as usize);
                for id in 0..IDS {
                    prop_assert_eq!(cache.lookup(&[id]), model.lookup(&[id]), "id {}", id);
                }
                prop_assert_eq!(cache.lookup(&ids), model.lookup(&ids));
                // Evictions accumulate in order until drained.
                pending.append(&mut model.evicted);
                prop_assert_eq!(cache.counts().has_evicted(), !pending.is_empty());
                if drain {
                    let mut got = vec![IDS];
                    cache.counts_mut().drain_evicted_into(&mut got);
                    prop_assert_eq!(got[0], IDS);
                    prop_assert_eq!(&got[1..], &pending[..]);
                    pending.clear();
                    prop_assert!(!cache.counts().has_evicted());
                }
            }
        }
    }
}
