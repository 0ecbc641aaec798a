//! A rank's block KV cache kept in arrays indexed by block identity, with a least-recently-used
//! order made of runs of consecutive identities: the same cache as [`KvCache`] (same hits,
//! counts, evictions and eviction order) in the form used when the workload's identities are
//! few enough for two 2-byte entries each.
//!
//! A prompt's block identities come in long stretches of consecutive numbers (the conversation
//! trace: about 70 blocks a stretch), and a request names, holds and releases them stretch by
//! stretch. Indexed by identity, each block's state is one read in a sequential sweep, with no
//! identity→slot index, no slot table and no spare list, and a release queues one LRU entry per
//! stretch instead of one per block. Its two entries take 2 bytes each: smaller arrays are
//! faster to sweep and to map in than any per-block instruction saved.
//!
//! [`KvCache`]: super::blocks::KvCache

use super::blocks::PrefixHit;
use super::occupancy::Occupancy;
use crate::block_ids::BlockId;

/// Runs queued beyond twice the inactive blocks before the queue is compacted, at least (few
/// in the tests, so their short runs compact often).
const LRU_SLACK: usize = if cfg!(test) { 2 } else { 64 };

/// Bytes kept per identity of the workload (state and run number).
pub const BYTES_PER_ID: u64 = 4;
/// Run numbers (2 bytes): before they run out the queue is compacted and its runs numbered
/// again from 0.
const RUN_NUMBERS: usize = 1 << 16;
/// The most references one block may take (its state is the count plus one, in 2 bytes).
pub const MAX_REFERENCES: u32 = u16::MAX as u32 - 1;
/// Bytes the LRU queue may take per block of capacity: 12-byte entries, up to twice the
/// capacity queued plus one release's worth before a compaction, as many popped ones kept,
/// in a vector that doubles (12 entries a block at most, 144 bytes; rounded up).
pub const QUEUE_BYTES_PER_BLOCK: u64 = 160;

/// One release's stretch of blocks that became inactive, least recent first: identities
/// `top`, `top - 1`, ... (a request's blocks in block order have ascending identities within a
/// stretch, and a release makes its last block the least recent).
#[derive(Debug, Clone, Copy)]
struct Run {
    top: BlockId,
    len: u32,
    /// Its number: a block is queued in this run while it is inactive and `run_of` names it.
    number: u16,
}

/// The cache of one rank, by identity. "Slots" handed out are the identities themselves.
// C layout with the counts first, as `KvCache` (see there).
#[derive(Debug, Clone)]
#[repr(C)]
pub struct IdentityCache {
    counts: Occupancy,
    /// By identity: 0 when not cached, else its reference count plus one (1: inactive).
    state: Vec<u16>,
    /// By identity: the number of the last run it was queued in.
    run_of: Vec<u16>,
    /// Inactive blocks by runs, least recent first from `head` on. Entries whose blocks were
    /// taken again or evicted are skipped when popped (their blocks' state or run differs).
    lru: Vec<Run>,
    head: usize,
    /// The number the next run takes, below `run_numbers` (`RUN_NUMBERS`; fewer in tests).
    next_run: usize,
    run_numbers: usize,
}

impl IdentityCache {
    /// Whether a cache of `capacity` blocks whose holders take one block at most `holders`
    /// times can be kept by identity (its run numbers and reference counts fit 2 bytes).
    pub fn holds(capacity: u32, holders: u32) -> bool {
        (capacity as usize) < RUN_NUMBERS && holders <= MAX_REFERENCES
    }

    /// A cache of `capacity` blocks for identities below `ids`, whose holders take each block
    /// at most `MAX_REFERENCES` times in all (see `holds`). Its arrays are zeroed pages,
    /// mapped as identities are first touched.
    pub fn new(capacity: u32, ids: BlockId) -> Self {
        Self::with_run_numbers(capacity, ids, RUN_NUMBERS)
    }

    /// `new` with `run_numbers` run numbers (more than the capacity).
    fn with_run_numbers(capacity: u32, ids: BlockId, run_numbers: usize) -> Self {
        assert!(
            (capacity as usize) < run_numbers,
            "a cache by identity of {capacity} blocks needs more than {run_numbers} run \
             numbers: such a capacity takes the cache by slot (`RankCache::new`)"
        );
        IdentityCache {
            counts: Occupancy::new(capacity),
            state: vec![0; ids as usize],
            run_of: vec![0; ids as usize],
            lru: Vec::new(),
            head: 0,
            next_run: 0,
            run_numbers,
        }
    }

    /// The most bytes a cache of `capacity` blocks over `ids` identities takes.
    pub fn bytes(capacity: u32, ids: u64) -> u64 {
        BYTES_PER_ID * ids + QUEUE_BYTES_PER_BLOCK * u64::from(capacity)
    }

    /// Its counts, and the identities it evicted when it keeps them.
    pub fn counts(&self) -> &Occupancy {
        &self.counts
    }

    pub fn counts_mut(&mut self) -> &mut Occupancy {
        &mut self.counts
    }

    /// Each identity's reference count (the scheduler's debug checks).
    #[cfg(debug_assertions)]
    pub fn refcounts(&self) -> Vec<u32> {
        self.state
            .iter()
            .map(|&s| u32::from(s).saturating_sub(1))
            .collect()
    }

    /// The longest run of leading blocks of `ids` the cache holds.
    pub fn lookup(&self, ids: &[BlockId]) -> PrefixHit {
        let mut hit = PrefixHit {
            blocks: 0,
            inactive: 0,
        };
        for &id in ids {
            let s = self.state[id as usize];
            if s == 0 {
                break;
            }
            hit.blocks += 1;
            hit.inactive += u32::from(s == 1);
        }
        hit
    }

    /// Take a reference on each of `ids` (a prefix `lookup` found), appending them to `out`.
    /// A block taken while inactive leaves the LRU order: its queued entry no longer matches
    /// its state.
    pub fn acquire_all(&mut self, ids: &[BlockId], out: &mut Vec<u32>) {
        let state = self.state.as_mut_slice();
        let mut reused = 0;
        for &id in ids {
            let s = &mut state[id as usize];
            debug_assert!(*s > 0, "acquire follows lookup");
            debug_assert!(
                u32::from(*s) <= MAX_REFERENCES,
                "identity {id}: too many references"
            );
            reused += u32::from(*s == 1);
            *s += 1;
        }
        out.extend_from_slice(ids);
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

    /// Give each of `ids` in turn its identity now that its block is full, appending the ones
    /// named to `out`; returns how many were named. A block whose identity another request
    /// cached first stays private.
    pub fn register_all(&mut self, ids: &[BlockId], out: &mut Vec<u32>) -> u32 {
        let before = out.len();
        let mut rest = ids;
        while !rest.is_empty() {
            let (stretch, after) = rest.split_at(stretch::<false>(rest));
            let states = self.states(stretch);
            // Nearly always none of a stretch is cached: one test and one fill for all.
            if states.iter().fold(0, |any, &s| any | s) == 0 {
                states.fill(2);
                out.extend_from_slice(stretch);
            } else {
                for (s, &id) in states.iter_mut().zip(stretch) {
                    if *s == 0 {
                        *s = 2;
                        out.push(id);
                    }
                }
            }
            rest = after;
        }
        (out.len() - before) as u32
    }

    /// Drop a request's references: `held` in block order and `private` unnamed blocks.
    /// Later blocks become least recent first, so eviction trims prefixes from their tail;
    /// consecutive identities that become inactive together are queued as one run.
    pub fn release(&mut self, held: &[u32], private: u32) {
        self.counts.active -= private;
        self.tidy_lru(held.len());
        let mut freed = 0;
        // The run being built: pushed when a block breaks it.
        let mut open: Option<Run> = None;
        let mut rest = held;
        // Stretch by stretch from the last block back; a stretch's identities are distinct,
        // so its references can all be dropped before any is read.
        while !rest.is_empty() {
            let (before, stretch) = rest.split_at(rest.len() - stretch::<true>(rest));
            rest = before;
            let states = self.states(stretch);
            states.iter_mut().for_each(|s| *s -= 1);
            // Nearly always the whole stretch became inactive: it joins the open run (or
            // starts one) at once.
            if states.iter().fold(true, |all, &s| all & (s == 1)) {
                let (low, len) = (stretch[0], stretch.len() as u32);
                let top = low + (len - 1);
                let number = self.join_run(&mut open, top, len);
                self.run_of[low as usize..=top as usize].fill(number);
                freed += len;
                continue;
            }
            for &id in stretch.iter().rev() {
                if self.state[id as usize] != 1 {
                    continue;
                }
                freed += 1;
                self.run_of[id as usize] = self.join_run(&mut open, id, 1);
            }
        }
        self.lru.extend(open);
        self.counts.active -= freed;
        self.counts.inactive += freed;
    }

    /// Queue the `len` blocks `top`, `top - 1`, ... as the next least recent after the run
    /// being built (`open`): they extend it when they continue its identities, else it is
    /// queued and they start the next. Returns the number of their run.
    #[inline(always)]
    fn join_run(&mut self, open: &mut Option<Run>, top: BlockId, len: u32) -> u16 {
        match open {
            Some(run) if run.top.wrapping_sub(run.len) == top => {
                run.len += len;
                run.number
            }
            _ => {
                self.lru.extend(open.take());
                let number = self.next_run as u16;
                self.next_run += 1;
                *open = Some(Run { top, len, number });
                number
            }
        }
    }

    /// The states of the consecutive identities `stretch`, as one slice.
    #[inline(always)]
    fn states(&mut self, stretch: &[BlockId]) -> &mut [u16] {
        let low = stretch[0] as usize;
        &mut self.state[low..low + stretch.len()]
    }

    /// Before a release that may queue up to `pushes` runs: keep only the live stretches of
    /// the queued runs once the runs outnumber the inactive blocks twice over (plus a slack),
    /// or once the run numbers would run out (numbering them again from 0), or drop the popped
    /// runs once they are most of the queue.
    #[inline(always)]
    fn tidy_lru(&mut self, pushes: usize) {
        let queued = self.lru.len() - self.head;
        if self.next_run + pushes >= self.run_numbers {
            self.compact_lru(true);
            debug_assert!(self.next_run + pushes < self.run_numbers);
        } else if queued >= 2 * self.counts.inactive as usize + LRU_SLACK {
            self.compact_lru(false);
        } else if self.head > LRU_SLACK && self.head >= queued {
            self.lru.drain(..self.head);
            self.head = 0;
        }
    }

    /// Replace the queued runs by their live stretches, in order, and with `renumber` number
    /// them again from 0. Afterwards no more runs are queued than inactive blocks, so at least
    /// as many runs are pushed again before the next compaction. Every inactive block is in
    /// one live stretch, so renumbering names each one's run anew, and a stretch holds only
    /// blocks released into it: a number given again never matches a block it did not queue.
    /// The runs kept and one release's pushes are at most the capacity's blocks (inactive and
    /// active), fewer than the run numbers.
    #[cold]
    #[inline(never)]
    fn compact_lru(&mut self, renumber: bool) {
        let mut kept: Vec<Run> = Vec::with_capacity(self.counts.inactive as usize);
        for run in &self.lru[self.head..] {
            let mut open: Option<Run> = None;
            for id in (0..run.len).map(|j| run.top.wrapping_sub(j)) {
                let live = self.state[id as usize] == 1 && self.run_of[id as usize] == run.number;
                match &mut open {
                    Some(o) if live => o.len += 1,
                    Some(_) => kept.extend(open.take()),
                    None if live => {
                        open = Some(Run {
                            top: id,
                            len: 1,
                            number: run.number,
                        })
                    }
                    None => {}
                }
            }
            kept.extend(open);
        }
        if renumber {
            for (number, run) in kept.iter_mut().enumerate() {
                run.number = number as u16;
                let low = (run.top + 1 - run.len) as usize;
                self.run_of[low..=run.top as usize].fill(run.number);
            }
            self.next_run = kept.len();
        }
        self.lru = kept;
        self.head = 0;
    }

    /// Evict the `n` least recently used inactive blocks.
    fn evict(&mut self, mut n: u32) {
        self.counts.inactive -= n;
        self.counts.evictions += u64::from(n);
        while n > 0 {
            let run = self
                .lru
                .get_mut(self.head)
                .expect("an inactive block to evict");
            // The run's next blocks, least recent first (descending identities).
            let k = run.len.min(n);
            let low = run.top + 1 - k;
            let range = low as usize..=run.top as usize;
            let states = &mut self.state[range.clone()];
            let runs = &self.run_of[range];
            let number = run.number;
            // Nearly always every one of them is still queued in this run: all go at once.
            let live = states
                .iter()
                .zip(runs)
                .fold(true, |all, (&s, &r)| all & (s == 1) & (r == number));
            if live {
                states.fill(0);
                n -= k;
                if self.counts.record_evicted {
                    self.counts.evicted.extend((low..=run.top).rev());
                }
                run.top = low.wrapping_sub(1);
                run.len -= k;
            } else {
                while run.len > 0 && n > 0 {
                    let id = run.top;
                    run.top = id.wrapping_sub(1);
                    run.len -= 1;
                    let s = &mut self.state[id as usize];
                    if *s == 1 && self.run_of[id as usize] == number {
                        *s = 0;
                        n -= 1;
                        if self.counts.record_evicted {
                            self.counts.evicted.push(id);
                        }
                    }
                }
            }
            if run.len == 0 {
                self.head += 1;
            }
        }
    }
}

/// How many identities `ids` (not empty) starts with that count up by one from its first or,
/// `FROM_END`, ends with that count up by one to its last.
#[inline(always)]
fn stretch<const FROM_END: bool>(ids: &[BlockId]) -> usize {
    let n = ids.len();
    // The identity k places in from the chosen end, and the one a stretch has there.
    let at = |k: usize| if FROM_END { ids[n - 1 - k] } else { ids[k] };
    let origin = at(0);
    let expected = |k: usize| {
        if FROM_END {
            origin.wrapping_sub(k as u32)
        } else {
            origin.wrapping_add(k as u32)
        }
    };
    let mut k = 1;
    // Eight at a time, a test the compiler makes one vector comparison: the eight from k
    // places in, in slice order, count up by one from `base`.
    while k + 8 <= n {
        let (start, base) = if FROM_END {
            (n - k - 8, origin.wrapping_sub(k as u32 + 7))
        } else {
            (k, origin.wrapping_add(k as u32))
        };
        let chunk = &ids[start..start + 8];
        if !(0..8u32)
            .zip(chunk)
            .fold(true, |all, (j, &id)| all & (id == base.wrapping_add(j)))
        {
            break;
        }
        k += 8;
    }
    while k < n && at(k) == expected(k) {
        k += 1;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvCache;
    use proptest::prelude::*;

    const IDS: BlockId = 40;

    /// Allocate and name `ids` as a request's prefill does; returns what it holds.
    fn fill(cache: &mut IdentityCache, ids: &[BlockId]) -> Vec<u32> {
        cache.allocate(ids.len() as u32);
        let mut held = Vec::new();
        assert_eq!(cache.register_all(ids, &mut held), ids.len() as u32);
        held
    }

    #[test]
    fn stretches_are_found_from_either_end() {
        assert_eq!(stretch::<false>(&[4]), 1);
        assert_eq!(stretch::<true>(&[4]), 1);
        assert_eq!(stretch::<false>(&[4, 5, 6, 9, 10]), 3);
        // Past the eight-at-a-time test: 0..=11 then a break.
        let ids: Vec<BlockId> = (0..12).chain([3]).collect();
        assert_eq!(stretch::<false>(&ids), 12);
        assert_eq!(stretch::<true>(&ids), 1);
        let ids: Vec<BlockId> = [7, 2].into_iter().chain(20..31).collect();
        assert_eq!(stretch::<true>(&ids), 11);
        // 17 in a row: two eight-at-a-time steps, then one by one.
        let ids: Vec<BlockId> = (3..20).collect();
        assert_eq!((stretch::<false>(&ids), stretch::<true>(&ids)), (17, 17));
        assert_eq!(stretch::<true>(&[5, 6]), 2);
        assert_eq!(stretch::<true>(&[6, 5]), 1);
    }

    #[test]
    fn a_release_queues_its_tail_first_as_one_run() {
        let mut c = IdentityCache::new(4, IDS);
        c.counts_mut().record_evictions();
        let held = fill(&mut c, &[10, 11, 12]);
        c.release(&held, 0);
        // One run: 12, 11, 10 (least recent first).
        assert_eq!(c.lru.len(), 1);
        assert_eq!((c.counts().active(), c.counts().inactive()), (0, 3));
        // 1 free block, so 3 new ones evict 2: the tail, 12 then 11.
        c.allocate(3);
        let mut evicted = Vec::new();
        c.counts_mut().drain_evicted_into(&mut evicted);
        assert_eq!(evicted, [12, 11]);
        assert_eq!(c.lookup(&[10, 11]).blocks, 1);
        assert_eq!(c.counts().evictions(), 2);
    }

    #[test]
    fn a_block_taken_again_leaves_its_run() {
        let mut c = IdentityCache::new(4, IDS);
        c.counts_mut().record_evictions();
        let held = fill(&mut c, &[1, 2, 3, 4]);
        c.release(&held, 0);
        // A later request takes the prefix 1, 2 again: the run 4, 3, 2, 1 now has 4, 3 live.
        let mut again = Vec::new();
        assert_eq!(
            c.lookup(&[1, 2, 7]),
            PrefixHit {
                blocks: 2,
                inactive: 2
            }
        );
        c.acquire_all(&[1, 2], &mut again);
        assert_eq!(again, [1, 2]);
        // Two more blocks, none free: the two least recent inactive ones go, 4 then 3.
        c.allocate(2);
        let mut evicted = Vec::new();
        c.counts_mut().drain_evicted_into(&mut evicted);
        assert_eq!(evicted, [4, 3]);
        assert_eq!(
            (
                c.counts().active(),
                c.counts().inactive(),
                c.counts().available()
            ),
            (4, 0, 0)
        );
    }

    #[test]
    fn runs_are_numbered_again_before_the_numbers_run_out() {
        // 8 run numbers, capacity 4: nine requests of one new block each, each released at
        // once, queue nine runs; the eighth release finds the numbers about to run out and
        // numbers the live runs again from 0 first. Blocks 0..=4 are evicted on the way.
        let mut c = IdentityCache::with_run_numbers(4, IDS, 8);
        c.counts_mut().record_evictions();
        for id in 0..9 {
            let held = fill(&mut c, &[id]);
            c.release(&held, 0);
        }
        // Blocks 5..=8 are cached, least recent first 5, 6, 7, 8, across the renumbering.
        // Taking 6 and three new blocks evicts 5, 7 and 8.
        assert!(c.next_run < 8);
        let mut held = Vec::new();
        c.acquire_all(&[6], &mut held);
        c.allocate(3);
        let mut evicted = Vec::new();
        c.counts_mut().drain_evicted_into(&mut evicted);
        assert_eq!(evicted, [0, 1, 2, 3, 4, 5, 7, 8]);
    }

    /// Prompts made of stretches of consecutive identities (as a trace's are), some shared
    /// between prompts, some overlapping, with single identities between.
    fn prompts() -> impl Strategy<Value = Vec<Vec<BlockId>>> {
        let piece = prop_oneof![
            3 => (0..IDS - 12, 1u32..12).prop_map(|(a, n)| (a..a + n).collect::<Vec<_>>()),
            1 => (0..IDS).prop_map(|a| vec![a]),
        ];
        let prompt = prop::collection::vec(piece, 0..4)
            .prop_map(|pieces| pieces.concat().into_iter().take(16).collect::<Vec<_>>());
        prop::collection::vec(prompt, 1..=5)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Admit { r: usize, extra: u32 },
        Fill { r: usize, k: usize },
        Grow { r: usize, n: u32 },
        Release { r: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..5, 0u32..3).prop_map(|(r, extra)| Op::Admit { r, extra }),
            3 => (0usize..5, 1usize..16).prop_map(|(r, k)| Op::Fill { r, k }),
            1 => (0usize..5, 1u32..4).prop_map(|(r, n)| Op::Grow { r, n }),
            3 => (0usize..5).prop_map(|r| Op::Release { r }),
        ]
    }

    /// What a request holds in each cache (their "slots" differ), and its progress.
    #[derive(Debug, Default)]
    struct Held {
        by_slot: Vec<u32>,
        by_id: Vec<u32>,
        private: u32,
        named: usize,
    }

    proptest! {
        /// Requests admitted, filled, grown and released in random order leave the cache by
        /// identity exactly where the cache by slot is: the same hits for every prompt and
        /// identity, the same counts, and the same blocks evicted in the same order.
        #[test]
        fn agrees_with_the_cache_by_slot(
            capacity in 1u32..40,
            prompts in prompts(),
            ops in prop::collection::vec(op(), 1..120),
        ) {
            let mut slot = KvCache::new(capacity, IDS, 1);
            // 64 run numbers: the short runs of the test number their runs again often.
            let mut id = IdentityCache::with_run_numbers(capacity, IDS, 64);
            slot.counts_mut().record_evictions();
            id.counts_mut().record_evictions();
            let mut held: Vec<Option<Held>> = prompts.iter().map(|_| None).collect();
            for op in ops {
                match op {
                    Op::Admit { r, extra } => {
                        let r = r % prompts.len();
                        let prompt = &prompts[r];
                        if held[r].is_some() {
                            continue;
                        }
                        let hit = slot.lookup(prompt);
                        prop_assert_eq!(id.lookup(prompt), hit);
                        let need = (prompt.len() as u32 - hit.blocks) + extra;
                        if slot.counts().available() < hit.inactive + need {
                            continue;
                        }
                        let mut h = Held::default();
                        let prefix = &prompt[..hit.blocks as usize];
                        slot.acquire_all(prefix, &mut h.by_slot);
                        id.acquire_all(prefix, &mut h.by_id);
                        slot.allocate(need);
                        id.allocate(need);
                        (h.private, h.named) = (need, prefix.len());
                        held[r] = Some(h);
                    }
                    Op::Fill { r, k } => {
                        let r = r % prompts.len();
                        let Some(h) = held[r].as_mut() else { continue };
                        let end = (h.named + k).min(prompts[r].len());
                        let ids = &prompts[r][h.named..end];
                        let named = slot.register_all(ids, &mut h.by_slot);
                        prop_assert_eq!(id.register_all(ids, &mut h.by_id), named);
                        prop_assert_eq!(h.by_id.len(), h.by_slot.len());
                        h.private -= named;
                        h.named = end;
                    }
                    Op::Grow { r, n } => {
                        let r = r % prompts.len();
                        let Some(h) = held[r].as_mut() else { continue };
                        if slot.counts().available() < n {
                            continue;
                        }
                        slot.allocate(n);
                        id.allocate(n);
                        h.private += n;
                    }
                    Op::Release { r } => {
                        let r = r % prompts.len();
                        let Some(h) = held[r].take() else { continue };
                        slot.release(&h.by_slot, h.private);
                        id.release(&h.by_id, h.private);
                        // The queue stays bounded by the inactive blocks: it held fewer than
                        // twice them (plus the slack) before, compacted if not, and each run
                        // pushed holds at least one block freed.
                        let queued = id.lru.len() - id.head;
                        prop_assert!(queued <= 2 * id.counts().inactive() as usize + LRU_SLACK);
                    }
                }
                prop_assert_eq!(
                    (id.counts().active(), id.counts().inactive(), id.counts().available(), id.counts().evictions()),
                    (slot.counts().active(), slot.counts().inactive(), slot.counts().available(), slot.counts().evictions())
                );
                for prompt in &prompts {
                    prop_assert_eq!(id.lookup(prompt), slot.lookup(prompt), "prompt {:?}", prompt);
                }
                for b in 0..IDS {
                    prop_assert_eq!(id.lookup(&[b]), slot.lookup(&[b]), "id {}", b);
                }
                let (mut a, mut b) = (Vec::new(), Vec::new());
                id.counts_mut().drain_evicted_into(&mut a);
                slot.counts_mut().drain_evicted_into(&mut b);
                prop_assert_eq!(a, b);
            }
            // Everything released: then the whole cache can be taken, evicting every block in
            // the same order.
            for h in held.iter_mut().filter_map(Option::take) {
                slot.release(&h.by_slot, h.private);
                id.release(&h.by_id, h.private);
            }
            slot.allocate(capacity);
            id.allocate(capacity);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            id.counts_mut().drain_evicted_into(&mut a);
            slot.counts_mut().drain_evicted_into(&mut b);
            prop_assert_eq!(a, b);
            prop_assert_eq!(id.counts().evictions(), slot.counts().evictions());
        }
    }
}
