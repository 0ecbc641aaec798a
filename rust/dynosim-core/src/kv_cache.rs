//! One worker's block KV cache: full blocks are shared by prefix identity, inactive ones stay
//! cached until the least recently used is evicted.
//!
//! Capacity is counted, not placed: a block is active (held by at least one running request),
//! inactive (cached, reusable, evictable) or free. Blocks a request holds privately (its partial
//! last block, generated tokens, duplicates of a block another request cached first) are counted
//! in `active` without an identity.

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Slot {
    hash: u64,
    refcount: u32,
    // LRU links, meaningful while refcount == 0.
    prev: u32,
    next: u32,
}

/// The cache of one worker. Slot indices handed out stay valid until the caller releases them.
#[derive(Debug, Clone)]
pub struct KvCache {
    capacity: u32,
    active: u32,
    inactive: u32,
    /// Slot indices keyed by their block identity. Identities are already uniform 64-bit
    /// mixes, so they serve as their own hash, and the table stays small (4 bytes an entry).
    by_hash: HashTable<u32>,
    slots: Vec<Slot>,
    spare_slots: Vec<u32>,
    lru_head: u32,
    lru_tail: u32,
    evictions: u64,
    /// Identities of evicted blocks, oldest first, kept only once `record_evictions` is called
    /// (the offload tiers read them; a cache without tiers pays nothing).
    record_evicted: bool,
    evicted: Vec<u64>,
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
    pub fn new(capacity: u32) -> Self {
        KvCache {
            capacity,
            active: 0,
            inactive: 0,
            // Never more named blocks than the capacity: size once, never rehash.
            by_hash: HashTable::with_capacity(capacity as usize),
            slots: Vec::with_capacity(capacity as usize),
            spare_slots: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            evictions: 0,
            record_evicted: false,
            evicted: Vec::new(),
        }
    }

    /// From now on keep the identity of every evicted block for `drain_evicted_into`.
    pub fn record_evictions(&mut self) {
        self.record_evicted = true;
    }

    /// Move the identities of the blocks evicted since the last call, in eviction order (least
    /// recent first), to the end of `out`.
    pub fn drain_evicted_into(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.evicted);
    }

    /// Whether evictions are waiting for `drain_evicted_into`.
    pub fn has_evicted(&self) -> bool {
        !self.evicted.is_empty()
    }

    /// Whether the cache names block `hash`.
    pub fn contains(&self, hash: u64) -> bool {
        self.find(hash).is_some()
    }

    /// Use as an LRU set of identities: name `hash` as the most recent inactive block (evicting
    /// the least recent when full), or, if it is already cached, make it the most recent.
    /// Returns whether it was new. Needs a cache with no active blocks.
    pub fn insert_or_touch(&mut self, hash: u64) -> bool {
        debug_assert_eq!(self.active, 0, "an LRU set holds inactive blocks only");
        if let Some(slot) = self.find(hash) {
            self.unlink(slot);
            self.push_back(slot);
            return false;
        }
        // Two table operations per new block (evict one, name one): tiers move millions.
        if self.inactive == self.capacity {
            self.evict_lru();
        }
        let index = self.name_slot(hash, 0);
        self.inactive += 1;
        self.push_back(index);
        true
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

    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The longest run of leading `hashes` the cache holds.
    pub fn lookup(&self, hashes: &[u64]) -> PrefixHit {
        let mut hit = PrefixHit {
            blocks: 0,
            inactive: 0,
        };
        for h in hashes {
            match self.find(*h) {
                Some(slot) => {
                    hit.blocks += 1;
                    if self.slots[slot as usize].refcount == 0 {
                        hit.inactive += 1;
                    }
                }
                None => break,
            }
        }
        hit
    }

    /// Take a reference on the cached block `hash` (found by `lookup`), returning its slot.
    pub fn acquire(&mut self, hash: u64) -> u32 {
        let slot = self.find(hash).expect("acquire follows lookup");
        if self.slots[slot as usize].refcount == 0 {
            self.unlink(slot);
            self.inactive -= 1;
            self.active += 1;
        }
        self.slots[slot as usize].refcount += 1;
        slot
    }

    /// Hand out `n` private blocks, evicting least recently used inactive ones as needed.
    /// The caller checks `available() >= n` first.
    pub fn allocate(&mut self, n: u32) {
        debug_assert!(n <= self.available());
        let free = self.capacity - self.active - self.inactive;
        for _ in free..n {
            self.evict_lru();
        }
        self.active += n;
    }

    /// Give identity `hash` to one of the caller's private blocks now that it is full. Returns
    /// its slot, or `None` when another request cached the same content first (the block then
    /// stays private).
    pub fn register(&mut self, hash: u64) -> Option<u32> {
        // One probe finds the identity or the place to name it.
        let slots = &self.slots;
        let entry = self.by_hash.entry(
            hash,
            |&i| slots[i as usize].hash == hash,
            |&i| slots[i as usize].hash,
        );
        let Entry::Vacant(vacant) = entry else {
            return None;
        };
        let index = Self::fill_slot(&mut self.slots, &mut self.spare_slots, hash, 1);
        vacant.insert(index);
        Some(index)
    }

    /// Drop a request's references: `slots` in block order and `private` unnamed blocks.
    /// Later blocks become least recent first, so eviction trims prefixes from their tail.
    pub fn release(&mut self, slots: &[u32], private: u32) {
        self.active -= private;
        for &slot in slots.iter().rev() {
            let s = &mut self.slots[slot as usize];
            s.refcount -= 1;
            if s.refcount == 0 {
                self.active -= 1;
                self.inactive += 1;
                self.push_back(slot);
            }
        }
    }

    fn evict_lru(&mut self) {
        let slot = self.lru_head;
        debug_assert_ne!(slot, NIL, "eviction with no inactive block");
        self.unlink(slot);
        let hash = self.slots[slot as usize].hash;
        if let Ok(entry) = self.by_hash.find_entry(hash, |&i| i == slot) {
            entry.remove();
        }
        self.spare_slots.push(slot);
        self.inactive -= 1;
        self.evictions += 1;
        if self.record_evicted {
            self.evicted.push(hash);
        }
    }

    /// A slot (a spare one if any) holding the absent identity `hash`, findable by it.
    fn name_slot(&mut self, hash: u64, refcount: u32) -> u32 {
        let index = Self::fill_slot(&mut self.slots, &mut self.spare_slots, hash, refcount);
        self.by_hash
            .insert_unique(hash, index, |&i| self.slots[i as usize].hash);
        index
    }

    /// A slot (a spare one if any) holding `hash`, not yet findable by it.
    fn fill_slot(slots: &mut Vec<Slot>, spare: &mut Vec<u32>, hash: u64, refcount: u32) -> u32 {
        let slot = Slot {
            hash,
            refcount,
            prev: NIL,
            next: NIL,
        };
        match spare.pop() {
            Some(i) => {
                slots[i as usize] = slot;
                i
            }
            None => {
                slots.push(slot);
                (slots.len() - 1) as u32
            }
        }
    }

    fn find(&self, hash: u64) -> Option<u32> {
        self.by_hash
            .find(hash, |&i| self.slots[i as usize].hash == hash)
            .copied()
    }

    fn push_back(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.prev = self.lru_tail;
        s.next = NIL;
        if self.lru_tail == NIL {
            self.lru_head = slot;
        } else {
            self.slots[self.lru_tail as usize].next = slot;
        }
        self.lru_tail = slot;
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = {
            let s = &self.slots[slot as usize];
            (s.prev, s.next)
        };
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cache a request's blocks as the engine does: allocate, then name each full block.
    fn fill(cache: &mut KvCache, hashes: &[u64]) -> Vec<u32> {
        cache.allocate(hashes.len() as u32);
        hashes.iter().map(|&h| cache.register(h).unwrap()).collect()
    }

    #[test]
    fn released_blocks_stay_cached_until_evicted() {
        let mut c = KvCache::new(4);
        let a = fill(&mut c, &[1, 2, 3]);
        assert_eq!((c.active(), c.available()), (3, 1));
        c.release(&a, 0);
        assert_eq!((c.active(), c.inactive(), c.available()), (0, 3, 4));
        assert_eq!(
            c.lookup(&[1, 2, 3, 9]),
            PrefixHit {
                blocks: 3,
                inactive: 3
            }
        );
        // Two new private blocks: one free, one evicted; the tail block (3) goes first.
        c.allocate(2);
        assert_eq!(c.evictions(), 1);
        assert_eq!(c.lookup(&[1, 2, 3]).blocks, 2);
    }

    #[test]
    fn shared_blocks_are_counted_once() {
        let mut c = KvCache::new(8);
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
        assert_eq!(c.active(), 2);
        c.release(&a, 0);
        assert_eq!((c.active(), c.inactive()), (2, 0));
        c.release(&b, 0);
        assert_eq!((c.active(), c.inactive()), (0, 2));
    }

    #[test]
    fn reusing_an_inactive_block_costs_capacity_again() {
        let mut c = KvCache::new(2);
        let a = fill(&mut c, &[1, 2]);
        c.release(&a, 0);
        assert_eq!(c.available(), 2);
        c.acquire(1);
        assert_eq!((c.available(), c.inactive()), (1, 1));
    }

    #[test]
    fn duplicate_content_stays_private() {
        let mut c = KvCache::new(4);
        fill(&mut c, &[1]);
        c.allocate(1);
        assert_eq!(c.register(1), None);
        assert_eq!(c.active(), 2);
        c.release(&[], 1);
        assert_eq!(c.active(), 1);
    }

    #[test]
    fn recorded_evictions_come_out_oldest_first() {
        let mut c = KvCache::new(2);
        c.record_evictions();
        assert!(c.insert_or_touch(1));
        assert!(c.insert_or_touch(2));
        assert!(!c.insert_or_touch(1)); // 1 becomes the most recent
        assert!(c.insert_or_touch(3)); // evicts 2
        assert!(c.insert_or_touch(4)); // evicts 1
        let mut out = vec![9];
        c.drain_evicted_into(&mut out);
        assert_eq!(out, vec![9, 2, 1]);
        assert!(!c.has_evicted());
        assert_eq!((c.inactive(), c.active()), (2, 0));
        // Without recording nothing is kept.
        let mut d = KvCache::new(1);
        d.insert_or_touch(1);
        d.insert_or_touch(2);
        assert!(!d.has_evicted());
    }

    #[test]
    fn lru_order_follows_release_order() {
        let mut c = KvCache::new(3);
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
}
