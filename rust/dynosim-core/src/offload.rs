//! KV offload tiers: per rank a G2 pool in host memory and a G3 pool on disk
//! (per rank, or one pool shared by the cluster), fed by evictions and read back by onboarding.
//!
//! Each tier is a `KvCache` used as an LRU set of block identities. The blocks one G1 eviction
//! sends down are copied to G2 as one flow (one batch, as Dynamo's KVBM batches its offloads),
//! and what that pushes out of G2 is copied to G3 as another; what G3 pushes out is dropped.
//! Each rank copies one batch at a time per direction, the others queued in order (an engine's
//! offload queue): a read of a tier shares its link with the copies in flight, not with the
//! whole backlog. A block takes its room in the lower tier when its copy is queued, and is a
//! hit there once the copy lands; one pushed out of G2 before its copy landed goes on to G3 all
//! the same (it streams through host memory). A block a lower tier already holds is only made
//! most recent there (no bytes move). With `writes: free` copies take no time and no bandwidth.
//!
//! Onboarding copies blocks up (the copy below stays): G2 hits over the rank's G2->G1 link, G3
//! hits through G2, so their flow crosses the G3 link and the G2->G1 link at the max-min rate of
//! both. A hit ends at the first block still in flight down, and the request recomputes the rest
//! (`in_flight: recompute`): KVBM offers a block only once it is registered in the lower pool,
//! LMCache a key once it is stored. With `in_flight: wait` the request waits for those copies to
//! land and then onboards them.
//!
//! Links, all on one `LinkNetwork` (the allocator of KV transfers): per rank G2->G1 (reads) and
//! G1->G2 (writes), the PCIe link being full duplex; per G3 pool one link that reads and writes
//! share (`g3_duplex: half`), or one per direction (`full`).

use crate::block_ids::BlockId;
use crate::config::{Duplex, InFlight, OffloadConfig, OffloadWrites, SimConfig};
use crate::error::{Result, SimError};
use crate::kv::KvCache;
use crate::links::{FlowId, LinkNetwork};
use crate::transfer::gbps_to_bytes_per_ms;

/// No batch.
const NONE: u32 = u32::MAX;

/// A request held on `rank` while its blocks come up from G2/G3.
#[derive(Debug, Clone, Copy)]
pub struct Onboard {
    pub rank: u32,
    /// The request's handle in its rank's scheduler.
    pub handle: u32,
    pub request: u32,
    /// Decode ranks: the KV transfer bringing the rest of the prompt (`u64::MAX`: none).
    transfer: u64,
    /// Offload copies it waits for before its flows start.
    waits: u32,
    flows_left: u32,
    g2_bytes: f64,
    g3_bytes: f64,
}

impl Onboard {
    /// On a decode rank, the KV transfer bringing the prompt blocks the tiers do not hold: the
    /// request is active once both have landed.
    pub fn transfer(&self) -> Option<u64> {
        (self.transfer != u64::MAX).then_some(self.transfer)
    }
}

/// A tier flow's kind: the direction and the tier, the rows of the report's table of flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// G1 -> G2.
    OffloadG2 = 0,
    /// G2 -> G3.
    OffloadG3 = 1,
    /// G2 -> G1.
    OnboardG2 = 2,
    /// G3 -> G2 -> G1.
    OnboardG3 = 3,
}

/// What the flows of one lane moved.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LaneStats {
    pub flows: u64,
    pub bytes: f64,
    /// Flows that landed before the replay ended, and the sum of their durations, start to
    /// landing (ms); 0 for free copies.
    pub landed: u64,
    pub flow_ms: f64,
}

/// Blocks and bytes the tiers moved for the ranks of one role.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierCounters {
    /// Blocks copied G1 -> G2 and G2 -> G3 (new to the lower tier).
    pub offloaded_g2_blocks: u64,
    pub offloaded_g3_blocks: u64,
    /// Blocks copied up to G1 from G2, and from G3 through G2.
    pub onboarded_g2_blocks: u64,
    pub onboarded_g3_blocks: u64,
    /// Blocks evicted from G2 with no G3 to go to (G3's own drops are counted at the end).
    pub dropped_blocks: u64,
    pub offload_bytes: f64,
    pub onboard_bytes: f64,
    /// Requests that found blocks in G2/G3 but no room in G1 to hold them when first looked
    /// up (each is looked up again before later passes while it waits).
    pub onboards_skipped: u64,
    /// Onboards started (each request's G2 and G3 blocks together).
    pub onboards: u64,
    /// Decode ranks: prompt blocks found in G1, G2, G3 when KV is reserved (queueing ranks keep
    /// theirs per request).
    pub hit_blocks: [u64; 3],
    /// With `in_flight: recompute`, lookups whose hit a copy still in flight cut short, and
    /// the blocks they lost.
    pub hits_cut_by_copies: u64,
    pub blocks_lost_to_copies: u64,
    /// Onboards that waited for offload copies still in flight, and the sum of their waits (ms).
    pub onboards_delayed: u64,
    pub offload_wait_ms: f64,
    /// Per `Lane`.
    pub lanes: [LaneStats; 4],
}

/// What the tiers did: per role (the ranks requests queue on, and decode ranks), and the rate
/// solves of the tier links.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierTotals {
    pub queueing: TierCounters,
    pub decode: TierCounters,
    /// Blocks evicted from G3 and lost, all ranks.
    pub g3_dropped_blocks: u64,
    pub rate_recomputations: u64,
    /// Bytes the tier links delivered over their capacity for the replay's duration, averaged
    /// over the links of each kind: G1->G2, G2->G1 (G2 hits and G3 hits staging through G2),
    /// G2->G3, G3->G2 (with a half-duplex G3 link the last two are its one shared use). 0 with
    /// free copies for the copies' directions.
    pub link_utilization: [f64; 4],
}

/// Blocks copied down by one flow, and the onboards waiting for it.
#[derive(Debug, Default)]
struct Batch {
    waiters: Vec<u32>,
    /// Its rank's queue of copies down (`Tiers::queued`), its place in it (from 1), its bytes,
    /// and when it was queued.
    queue: u32,
    seq: u32,
    bytes: f64,
    queued_ms: f64,
}

/// What a tier flow is.
#[derive(Debug, Clone, Copy)]
enum Owner {
    Offload(u32),
    Onboard(u32),
}

#[derive(Debug, Clone, Copy)]
struct FlowInfo {
    owner: Owner,
    lane: Lane,
    /// Whose counters: 0 queueing ranks, 1 decode ranks.
    side: u8,
    start_ms: f64,
}

/// The G2/G3 tiers of every rank and their links.
pub struct Tiers {
    g2: Vec<KvCache>,
    /// Empty (no G3), one shared pool, or one per rank.
    g3: Vec<KvCache>,
    net: LinkNetwork,
    /// Bytes per ms of each link of `net`.
    capacity: Vec<f64>,
    num_ranks: usize,
    /// Ranks from here on are decode ranks (their counters are kept apart).
    first_decode_rank: usize,
    /// Bytes of one block of each rank.
    block_bytes: Vec<f64>,
    shared: bool,
    costed: bool,
    /// Blocks in flight down are misses (`in_flight: recompute`).
    landed_only: bool,
    duplex: Duplex,
    /// Per-flow caps of G3 reads and writes on a half-duplex link.
    g3_caps: (Option<f64>, Option<f64>),

    /// Per pool (G2 of each rank, then each G3 pool) and slot, the copy that brought the slot's
    /// block, as its queue (high 32 bits) and place in it, or 0: the block is in flight while
    /// that place is after the queue's last landed one. A slot taken by a new block gets its
    /// copy's mark; a landed copy's marks need no clearing.
    landing: Vec<Vec<u64>>,
    batches: Vec<Batch>,
    spare_batches: Vec<u32>,
    /// Per rank and direction down (G1 -> G2, then G2 -> G3), the batches waiting for the copy
    /// in flight to land, and whether one is in flight: one copy at a time per rank and
    /// direction, in order (an engine's offload queue, AISimulate's transfer lanes).
    queued: Vec<std::collections::VecDeque<u32>>,
    /// Per queue: the batch in flight (`NONE`: none), the last place given, the last landed.
    copying: Vec<u32>,
    last_seq: Vec<u32>,
    landed_seq: Vec<u32>,
    onboards: Vec<Onboard>,
    spare_onboards: Vec<u32>,
    /// Per flow id.
    flows: Vec<FlowInfo>,
    done: Vec<FlowId>,
    scratch: Vec<BlockId>,
    counters: [TierCounters; 2],
}

impl Tiers {
    /// The tiers `config` asks for over ranks with the given tokens per block (decode ranks
    /// from `first_decode_rank` on), for block identities below `ids`, or `None`.
    pub fn new(
        config: &SimConfig,
        block_sizes: &[u32],
        first_decode_rank: usize,
        ids: BlockId,
    ) -> Result<Option<Self>> {
        let o: &OffloadConfig = &config.offload;
        let Some(g2_blocks) = o.g2_blocks else {
            return Ok(None);
        };
        let n = block_sizes.len();
        let caches = config.block_caches();
        let per_token = config.kv_transfer.bytes_per_token();
        let mut g2: Vec<KvCache> = (0..n)
            .map(|_| KvCache::new(g2_blocks, ids, caches))
            .collect();
        for c in &mut g2 {
            c.counts_mut().record_evictions();
        }
        let g3: Vec<KvCache> = match o.g3_blocks {
            None => Vec::new(),
            Some(b) if o.g3_shared => vec![KvCache::new(b, ids, caches)],
            Some(b) => (0..n).map(|_| KvCache::new(b, ids, caches)).collect(),
        };
        let (read12, write12) = o.g1_g2_rates();
        let (read23, write23) = o.g2_g3_rates();
        let mut caps = vec![gbps_to_bytes_per_ms(read12); n];
        caps.extend(std::iter::repeat_n(gbps_to_bytes_per_ms(write12), n));
        let m = g3.len();
        let g3_caps = match o.g3_duplex {
            Duplex::Half => {
                caps.extend(std::iter::repeat_n(gbps_to_bytes_per_ms(o.g2_g3_gbps), m));
                // A direction's own rate caps its flows only where it is below the shared one.
                let cap = |r: f64| (r < o.g2_g3_gbps).then(|| gbps_to_bytes_per_ms(r));
                (cap(read23), cap(write23))
            }
            Duplex::Full => {
                caps.extend(std::iter::repeat_n(gbps_to_bytes_per_ms(read23), m));
                caps.extend(std::iter::repeat_n(gbps_to_bytes_per_ms(write23), m));
                (None, None)
            }
        };
        Ok(Some(Tiers {
            g2,
            net: LinkNetwork::new(caps.clone())?,
            capacity: caps,
            num_ranks: n,
            first_decode_rank,
            block_bytes: block_sizes
                .iter()
                .map(|&b| f64::from(b) * per_token)
                .collect(),
            shared: m == 1,
            costed: o.writes == OffloadWrites::Flows,
            landed_only: o.in_flight == InFlight::Recompute,
            duplex: o.g3_duplex,
            g3_caps,
            landing: (0..n + m)
                .map(|p| {
                    vec![
                        0;
                        if p < n {
                            g2_blocks
                        } else {
                            o.g3_blocks.unwrap_or(0)
                        } as usize
                    ]
                })
                .collect(),
            g3,
            batches: Vec::new(),
            spare_batches: Vec::new(),
            queued: vec![Default::default(); 2 * n],
            copying: vec![NONE; 2 * n],
            last_seq: vec![0; 2 * n],
            landed_seq: vec![0; 2 * n],
            onboards: Vec::new(),
            spare_onboards: Vec::new(),
            flows: Vec::new(),
            done: Vec::new(),
            scratch: Vec::new(),
            counters: Default::default(),
        }))
    }

    fn side(&self, rank: usize) -> usize {
        usize::from(rank >= self.first_decode_rank)
    }

    fn g3_index(&self, rank: usize) -> usize {
        if self.shared {
            0
        } else {
            rank
        }
    }

    /// The rank's G2->G1 link.
    fn read12(rank: usize) -> usize {
        rank
    }

    /// The rank's G1->G2 link.
    fn write12(&self, rank: usize) -> usize {
        self.num_ranks + rank
    }

    /// The G3->G2 link of G3 pool `g`.
    fn read23(&self, g: usize) -> usize {
        2 * self.num_ranks + g
    }

    /// The G2->G3 link of G3 pool `g`: the read link when reads and writes share one.
    fn write23(&self, g: usize) -> usize {
        match self.duplex {
            Duplex::Half => self.read23(g),
            Duplex::Full => 2 * self.num_ranks + self.g3.len() + g,
        }
    }

    fn start_flow(
        &mut self,
        now: f64,
        links: &[usize],
        bytes: f64,
        cap: Option<f64>,
        info: FlowInfo,
    ) -> Result<()> {
        let id = self.net.start_flow(now, links, bytes, cap)?.0 as usize;
        if id >= self.flows.len() {
            self.flows.resize(id + 1, info);
        }
        self.flows[id] = info;
        let lane = &mut self.counters[usize::from(info.side)].lanes[info.lane as usize];
        lane.flows += 1;
        lane.bytes += bytes;
        Ok(())
    }

    /// Copy `ids` (least recent first) down `lane` into pool `pool` (`cache`) from `rank` at
    /// `now`: those new to it take their room at once and travel as one copy, queued behind
    /// the rank's copies down that direction; they are hits there once it lands (at once with
    /// free copies). Those it holds are made most recent. Returns how many were new.
    fn copy_down(
        &mut self,
        now: f64,
        rank: usize,
        pool: usize,
        lane: Lane,
        ids: &[BlockId],
    ) -> Result<u32> {
        let side = self.side(rank);
        let cache = if pool < self.num_ranks {
            &mut self.g2[pool]
        } else {
            &mut self.g3[pool - self.num_ranks]
        };
        if !self.costed {
            let moved = cache.insert_or_touch_all(ids);
            self.counters[side].lanes[lane as usize].bytes +=
                f64::from(moved) * self.block_bytes[rank];
            return Ok(moved);
        }
        let q = 2 * rank + usize::from(lane == Lane::OffloadG3);
        let seq = self.last_seq[q] + 1;
        let mark = ((q as u64) << 32) | u64::from(seq);
        let marks = &mut self.landing[pool];
        let moved = cache.insert_or_touch_each(ids, |slot| marks[slot as usize] = mark);
        if moved == 0 {
            return Ok(0);
        }
        self.last_seq[q] = seq;
        let b = match self.spare_batches.pop() {
            Some(b) => b,
            None => {
                self.batches.push(Batch::default());
                (self.batches.len() - 1) as u32
            }
        };
        let batch = &mut self.batches[b as usize];
        batch.queue = q as u32;
        batch.seq = seq;
        batch.bytes = f64::from(moved) * self.block_bytes[rank];
        batch.queued_ms = now;
        if self.copying[q] == NONE {
            self.copying[q] = b;
            self.start_copy(now, b)?;
        } else {
            self.queued[q].push_back(b);
        }
        Ok(moved)
    }

    /// Start the flow of batch `b` at `now`; its time counts from when it was queued.
    fn start_copy(&mut self, now: f64, b: u32) -> Result<()> {
        let batch = &self.batches[b as usize];
        let q = batch.queue as usize;
        let rank = q / 2;
        let (lane, link, cap) = if q % 2 == 0 {
            (Lane::OffloadG2, self.write12(rank), None)
        } else {
            let link = self.write23(self.g3_index(rank));
            (Lane::OffloadG3, link, self.g3_caps.1)
        };
        let info = FlowInfo {
            owner: Owner::Offload(b),
            lane,
            side: self.side(rank) as u8,
            start_ms: batch.queued_ms,
        };
        self.start_flow(now, &[link], batch.bytes, cap, info)
    }

    /// Offload at `now` the blocks G1 of `rank` evicted (`evicted`, least recent first): new
    /// ones to G2, and what that pushes out of G2 to G3.
    pub fn offload(&mut self, now: f64, rank: usize, evicted: &[BlockId]) -> Result<()> {
        let side = self.side(rank);
        let bb = self.block_bytes[rank];
        let moved = self.copy_down(now, rank, rank, Lane::OffloadG2, evicted)?;
        self.counters[side].offloaded_g2_blocks += u64::from(moved);
        self.counters[side].offload_bytes += f64::from(moved) * bb;
        if !self.g2[rank].counts().has_evicted() {
            return Ok(());
        }
        let mut pushed = std::mem::take(&mut self.scratch);
        pushed.clear();
        self.g2[rank].counts_mut().drain_evicted_into(&mut pushed);
        if self.g3.is_empty() {
            self.counters[side].dropped_blocks += pushed.len() as u64;
        } else {
            let g = self.g3_index(rank);
            let pool = self.num_ranks + g;
            let moved = self.copy_down(now, rank, pool, Lane::OffloadG3, &pushed)?;
            self.counters[side].offloaded_g3_blocks += u64::from(moved);
            self.counters[side].offload_bytes += f64::from(moved) * bb;
        }
        self.scratch = pushed;
        Ok(())
    }

    /// Of `ids` (the prompt blocks after the G1 prefix hit), how many leading ones G2 of
    /// `rank` holds, and how many of the following ones G3 holds: landed or in flight, or with
    /// `in_flight: recompute` landed only (the hit ends at the first block in flight).
    pub fn lookup(&mut self, rank: usize, ids: &[BlockId]) -> (u32, u32) {
        let g = self.g3_index(rank);
        let mut k2 = self.g2[rank].lookup(ids).blocks;
        let mut k3 = match self.g3.get(g) {
            Some(g3) => g3.lookup(&ids[k2 as usize..]).blocks,
            None => 0,
        };
        if self.landed_only && k2 + k3 > 0 {
            let found = k2 + k3;
            let landed = |pool: usize, ids: &[BlockId]| {
                ids.iter()
                    .take_while(|&&id| self.copy_in_flight(pool, id).is_none())
                    .count() as u32
            };
            let l2 = landed(rank, &ids[..k2 as usize]);
            if l2 < k2 {
                (k2, k3) = (l2, 0);
            } else if k3 > 0 {
                k3 = landed(self.num_ranks + g, &ids[k2 as usize..(k2 + k3) as usize]);
            }
            if k2 + k3 < found {
                let c = &mut self.counters[self.side(rank)];
                c.hits_cut_by_copies += 1;
                c.blocks_lost_to_copies += u64::from(found - k2 - k3);
            }
        }
        (k2, k3)
    }

    /// Start onboarding to `rank` at `now` the blocks `lookup` found: `g2` (in G2) then `g3`
    /// (in G3) of request `request` (scheduler handle `handle`; on a decode rank, `transfer`
    /// brings the rest): at once, or when the copies down of those still in flight land. The
    /// onboard is done when `pop_finished` returns it.
    #[allow(clippy::too_many_arguments)]
    pub fn start_onboard(
        &mut self,
        now: f64,
        rank: usize,
        handle: u32,
        request: u32,
        transfer: Option<u64>,
        g2: &[BlockId],
        g3: &[BlockId],
    ) -> Result<()> {
        // A hit is a use: make the blocks the most recent of their tier.
        self.g2[rank].insert_or_touch_all(g2);
        let g = self.g3_index(rank);
        if !g3.is_empty() {
            self.g3[g].insert_or_touch_all(g3);
        }
        let bb = self.block_bytes[rank];
        let k = match self.spare_onboards.pop() {
            Some(k) => k,
            None => {
                self.onboards.push(Onboard {
                    rank: 0,
                    handle: 0,
                    request: 0,
                    transfer: u64::MAX,
                    waits: 0,
                    flows_left: 0,
                    g2_bytes: 0.0,
                    g3_bytes: 0.0,
                });
                (self.onboards.len() - 1) as u32
            }
        };
        let mut waits = 0;
        for (pool, ids) in [(rank, g2), (self.num_ranks + g, g3)] {
            for &id in ids {
                if let Some(b) = self.copy_in_flight(pool, id) {
                    let waiters = &mut self.batches[b as usize].waiters;
                    if waiters.last() != Some(&k) {
                        waiters.push(k);
                        waits += 1;
                    }
                }
            }
        }
        self.onboards[k as usize] = Onboard {
            rank: rank as u32,
            handle,
            request,
            transfer: transfer.unwrap_or(u64::MAX),
            waits,
            flows_left: 0,
            g2_bytes: g2.len() as f64 * bb,
            g3_bytes: g3.len() as f64 * bb,
        };
        let c = &mut self.counters[self.side(rank)];
        c.onboards += 1;
        c.onboarded_g2_blocks += g2.len() as u64;
        c.onboarded_g3_blocks += g3.len() as u64;
        c.onboard_bytes += (g2.len() + g3.len()) as f64 * bb;
        if waits > 0 {
            // The wait is added back when the last copy lands (`land`).
            c.onboards_delayed += 1;
            c.offload_wait_ms -= now;
            return Ok(());
        }
        self.start_onboard_flows(now, k)
    }

    /// Start the flows of onboard `k`, whose blocks are all landed.
    fn start_onboard_flows(&mut self, now: f64, k: u32) -> Result<()> {
        let o = self.onboards[k as usize];
        let rank = o.rank as usize;
        let side = self.side(rank) as u8;
        let down = Self::read12(rank);
        let info = |lane| FlowInfo {
            owner: Owner::Onboard(k),
            lane,
            side,
            start_ms: now,
        };
        self.onboards[k as usize].flows_left =
            u32::from(o.g2_bytes > 0.0) + u32::from(o.g3_bytes > 0.0);
        if o.g2_bytes > 0.0 {
            self.start_flow(now, &[down], o.g2_bytes, None, info(Lane::OnboardG2))?;
        }
        if o.g3_bytes > 0.0 {
            let up = self.read23(self.g3_index(rank));
            let cap = self.g3_caps.0;
            self.start_flow(now, &[up, down], o.g3_bytes, cap, info(Lane::OnboardG3))?;
        }
        Ok(())
    }

    /// When the next tier flow finishes (ms), if any is in flight.
    pub fn next_finish_ms(&mut self) -> Result<Option<f64>> {
        Ok(self.net.next_finish_ms()?)
    }

    /// Land every copy down that finished by `now` (starting the onboards that waited only for
    /// it), and append every onboard whose last flow finished by `now`, in (finish time, flow
    /// id) order.
    pub fn pop_finished(&mut self, now: f64, out: &mut Vec<Onboard>) -> Result<()> {
        let mut done = std::mem::take(&mut self.done);
        self.net.pop_finished_into(now, &mut done)?;
        for f in &done {
            let info = self.flows[f.0 as usize];
            let lane = &mut self.counters[usize::from(info.side)].lanes[info.lane as usize];
            lane.landed += 1;
            lane.flow_ms += now - info.start_ms;
            match info.owner {
                Owner::Onboard(k) => {
                    let o = &mut self.onboards[k as usize];
                    o.flows_left -= 1;
                    if o.flows_left == 0 {
                        out.push(*o);
                        self.spare_onboards.push(k);
                    }
                }
                Owner::Offload(b) => self.land(now, b)?,
            }
        }
        self.done = done;
        Ok(())
    }

    /// Requests waiting for their blocks to come up from G2/G3, all ranks.
    pub fn onboarding(&self) -> usize {
        self.onboards.len() - self.spare_onboards.len()
    }

    /// The batch whose copy of block `id` (held by pool `pool`) is still in flight, if any.
    fn copy_in_flight(&self, pool: usize, id: BlockId) -> Option<u32> {
        let cache = if pool < self.num_ranks {
            &self.g2[pool]
        } else {
            &self.g3[pool - self.num_ranks]
        };
        let slot = cache.slot(id).expect("a hit is cached");
        let mark = self.landing[pool][slot as usize];
        let (q, seq) = ((mark >> 32) as usize, mark as u32);
        let landed = self.landed_seq[q];
        if mark == 0 || seq <= landed {
            return None;
        }
        // Copies of a queue land in order: the one after the last landed is in flight.
        match seq - landed {
            1 => Some(self.copying[q]),
            k => Some(self.queued[q][k as usize - 2]),
        }
    }

    /// Batch `b` landed at `now`: its blocks are hits in their pool (those no later copy took
    /// the slot of).
    fn land(&mut self, now: f64, b: u32) -> Result<()> {
        let mut batch = std::mem::take(&mut self.batches[b as usize]);
        self.landed_seq[batch.queue as usize] = batch.seq;
        for &k in &batch.waiters {
            let o = &mut self.onboards[k as usize];
            o.waits = o.waits.checked_sub(1).ok_or_else(|| {
                SimError::Internal(format!("onboard {k} woken by a copy it did not wait for"))
            })?;
            if o.waits == 0 {
                let side = usize::from(o.rank as usize >= self.first_decode_rank);
                self.counters[side].offload_wait_ms += now;
                self.start_onboard_flows(now, k)?;
            }
        }
        batch.waiters.clear();
        let q = batch.queue as usize;
        self.batches[b as usize] = batch;
        self.spare_batches.push(b);
        match self.queued[q].pop_front() {
            Some(next) => {
                self.copying[q] = next;
                self.start_copy(now, next)
            }
            None => {
                self.copying[q] = NONE;
                Ok(())
            }
        }
    }

    /// Blocks G2 holds, all ranks.
    pub fn g2_used(&self) -> u32 {
        self.g2.iter().map(|c| c.counts().inactive()).sum()
    }

    /// Blocks G3 holds, all ranks (or the shared pool).
    pub fn g3_used(&self) -> u32 {
        self.g3.iter().map(|c| c.counts().inactive()).sum()
    }

    /// Decode ranks: count the prompt blocks a KV reservation on `rank` found in G1, G2, G3.
    pub fn count_hits(&mut self, rank: usize, hits: [u32; 3]) {
        let c = &mut self.counters[self.side(rank)];
        for (total, h) in c.hit_blocks.iter_mut().zip(hits) {
            *total += u64::from(h);
        }
    }

    /// Count a request that found blocks in the tiers of `rank` but no room in G1 for them.
    pub fn skip_onboard(&mut self, rank: usize) {
        self.counters[self.side(rank)].onboards_skipped += 1;
    }

    /// The tier links' kinds a time series shows, by name: copies down G1->G2, reads up
    /// G2->G1, and the G3 links (one series when reads and writes share them).
    pub fn link_kinds(&self) -> &'static [&'static str] {
        match (self.g3.is_empty(), self.duplex) {
            (true, _) => &["g1_g2_link_use", "g2_g1_link_use"],
            (false, Duplex::Half) => &["g1_g2_link_use", "g2_g1_link_use", "g3_link_use"],
            (false, Duplex::Full) => &[
                "g1_g2_link_use",
                "g2_g1_link_use",
                "g2_g3_link_use",
                "g3_g2_link_use",
            ],
        }
    }

    /// The used fraction of each kind of tier link now (rate over capacity, all links of the
    /// kind together), in `link_kinds` order.
    pub fn link_use_now(&self, out: &mut Vec<f64>) {
        let (n, m) = (self.num_ranks, self.g3.len());
        let use_of = |links: std::ops::Range<usize>| {
            let capacity: f64 = self.capacity[links.clone()].iter().sum();
            let rate: f64 = links.map(|l| self.net.link_rate(l)).sum();
            if capacity > 0.0 {
                rate / capacity
            } else {
                0.0
            }
        };
        out.push(use_of(n..2 * n));
        out.push(use_of(0..n));
        if m > 0 {
            let writes = self.write23(0)..self.write23(0) + m;
            out.push(use_of(writes.clone()));
            if self.duplex == Duplex::Full {
                out.push(use_of(self.read23(0)..self.read23(0) + m));
            }
        }
    }

    /// A number that changes whenever the rates on the tier links may have.
    pub fn version(&self) -> u64 {
        self.net.version()
    }

    /// Mean used fraction of `links` over `duration_ms`.
    fn utilization(&self, links: std::ops::Range<usize>, duration_ms: f64) -> f64 {
        let capacity: f64 = self.capacity[links.clone()].iter().sum::<f64>() * duration_ms;
        let bytes: f64 = links.map(|l| self.net.link_bytes(l)).sum();
        if capacity > 0.0 {
            bytes / capacity
        } else {
            0.0
        }
    }

    /// The counters after `duration_ms` of replay, with the blocks dropped from G3, the rate
    /// solves and the links' use filled in.
    pub fn finish(&self, duration_ms: f64) -> TierTotals {
        let [queueing, decode] = self.counters.clone();
        let (n, m) = (self.num_ranks, self.g3.len());
        let reads23 = self.read23(0)..self.read23(0) + m;
        let writes23 = self.write23(0)..self.write23(0) + m;
        let mut link_utilization = [0.0; 4];
        link_utilization[Lane::OffloadG2 as usize] = self.utilization(n..2 * n, duration_ms);
        link_utilization[Lane::OnboardG2 as usize] = self.utilization(0..n, duration_ms);
        link_utilization[Lane::OffloadG3 as usize] = self.utilization(writes23, duration_ms);
        link_utilization[Lane::OnboardG3 as usize] = self.utilization(reads23, duration_ms);
        TierTotals {
            queueing,
            decode,
            g3_dropped_blocks: self.g3.iter().map(|c| c.counts().evictions()).sum(),
            rate_recomputations: self.net.recomputations(),
            link_utilization,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16e6 bytes per block (16 tokens of 1e6 bytes): 16 ms at 1 GB/s (1e6 bytes/ms).
    const BLOCK_BYTES: f64 = 16e6;

    /// Tiers over `ranks` ranks of 16-token blocks: G2 of `g2` blocks, an 8-block G3 (one shared
    /// pool with `shared`) at 1 GB/s with `duplex`, G1<->G2 at 100 GB/s (copies on it take
    /// 0.16 ms a block, so the G3 link decides the times below).
    fn tiers(ranks: usize, g2: u32, shared: bool, duplex: Duplex) -> Tiers {
        let mut c = SimConfig::default();
        c.kv_transfer.kv_bytes_per_token = Some(1e6);
        c.offload.g2_blocks = Some(g2);
        c.offload.g3_blocks = Some(8);
        c.offload.g3_shared = shared;
        c.offload.g1_g2_gbps = 100.0;
        c.offload.g2_g3_gbps = 1.0;
        c.offload.g3_duplex = duplex;
        // Requests wait for blocks in flight (the default recomputes them).
        c.offload.in_flight = InFlight::Wait;
        Tiers::new(&c, &vec![16; ranks], ranks, 100)
            .unwrap()
            .unwrap()
    }

    /// Step to the next tier flow end, landing copies; the onboards that ended then, and when.
    fn step(t: &mut Tiers) -> (f64, Vec<u32>) {
        let now = t.next_finish_ms().unwrap().expect("a flow in flight");
        let mut out = Vec::new();
        t.pop_finished(now, &mut out).unwrap();
        (now, out.iter().map(|o| o.request).collect())
    }

    /// Run until no flow is left; the end time of each onboard, by request.
    fn onboard_ends(t: &mut Tiers) -> Vec<(u32, f64)> {
        let mut ends = Vec::new();
        while t.next_finish_ms().unwrap().is_some() {
            let (now, done) = step(t);
            ends.extend(done.into_iter().map(|r| (r, now)));
        }
        ends
    }

    /// At 0 ms block 1 goes to G2 and block 2 pushes it on to G3 (lands at 16 ms on the 1 GB/s
    /// link); at 20 ms block 3 pushes block 2 to G3 (a write from 20 ms) while request 7 onboards
    /// block 1 from G3 (a read from 20 ms).
    fn write_and_read(duplex: Duplex) -> Vec<(u32, f64)> {
        let mut t = tiers(1, 1, false, duplex);
        t.offload(0.0, 0, &[1]).unwrap();
        t.offload(0.0, 0, &[2]).unwrap();
        while t.next_finish_ms().unwrap().is_some_and(|f| f <= 20.0) {
            step(&mut t);
        }
        t.offload(20.0, 0, &[3]).unwrap();
        assert_eq!(t.lookup(0, &[1]), (0, 1));
        t.start_onboard(20.0, 0, 0, 7, None, &[], &[1]).unwrap();
        onboard_ends(&mut t)
    }

    #[test]
    fn a_half_duplex_pool_shares_its_rate_between_a_write_and_a_read() {
        // Half duplex: the write of block 2 and the read of block 1 share the 1 GB/s link, 0.5
        // GB/s each: 16e6 bytes take 32 ms, so the onboard ends at 52 ms (the read also crosses
        // the 100 GB/s G2->G1 link, far from binding).
        let half = write_and_read(Duplex::Half);
        assert_eq!(half.len(), 1);
        assert!((half[0].1 - 52.0).abs() < 1e-9, "{half:?}");
        // Full duplex: each direction has its 1 GB/s: 16 ms, ending at 36 ms.
        let full = write_and_read(Duplex::Full);
        assert!((full[0].1 - 36.0).abs() < 1e-9, "{full:?}");
    }

    #[test]
    fn an_onboard_waits_for_the_copy_in_flight_then_reads_it() {
        // At 0 ms block 1 goes to G2 (0.16 ms) and block 2 pushes it to G3: 16e6 bytes on the
        // 1 GB/s G3 link land at 16 ms. At 10 ms request 5 finds block 1 in G3, in flight with
        // 6e6 bytes left: it waits 6e6 / 1e6 = 6 ms, then reads 16e6 bytes (16 ms): 32 ms.
        let mut t = tiers(1, 1, false, Duplex::Half);
        t.offload(0.0, 0, &[1]).unwrap();
        t.offload(0.0, 0, &[2]).unwrap();
        step(&mut t); // Blocks 1 and 2 land in G2 at 0.16 ms (and 1 is pushed out).
        assert_eq!(t.lookup(0, &[1]), (0, 1));
        t.start_onboard(10.0, 0, 0, 5, None, &[], &[1]).unwrap();
        let ends = onboard_ends(&mut t);
        assert_eq!(ends.len(), 1);
        assert!((ends[0].1 - 32.0).abs() < 1e-9, "{ends:?}");
        let c = &t.finish(0.0).queueing;
        assert_eq!((c.onboards, c.onboards_delayed), (1, 1));
        assert!((c.offload_wait_ms - 6.0).abs() < 1e-9);
        let down = c.lanes[Lane::OffloadG3 as usize];
        assert_eq!((down.flows, down.bytes), (1, BLOCK_BYTES));
        assert!((down.flow_ms - 16.0).abs() < 1e-9);
        let up = c.lanes[Lane::OnboardG3 as usize];
        assert_eq!((up.flows, up.bytes), (1, BLOCK_BYTES));
        assert!((up.flow_ms - 16.0).abs() < 1e-9);
    }

    #[test]
    fn a_shared_pool_is_shared_by_two_ranks() {
        // Each rank's G2 holds one block; at 0 ms rank 0 pushes block 1 and rank 1 block 11 to
        // G3. One shared 1 GB/s pool: both writes at 0.5 GB/s land at 32 ms; a pool per rank:
        // 16 ms each. Rank 1 then reads rank 0's block from the shared pool.
        let lands = |shared: bool| {
            let mut t = tiers(2, 1, shared, Duplex::Half);
            for (rank, first) in [(0, 1), (1, 11)] {
                t.offload(0.0, rank, &[first, first + 1]).unwrap();
            }
            let mut last = 0.0;
            while t.next_finish_ms().unwrap().is_some() {
                last = step(&mut t).0;
            }
            (t, last)
        };
        let (_, own) = lands(false);
        assert!((own - 16.0).abs() < 1e-9);
        let (mut t, shared) = lands(true);
        assert!((shared - 32.0).abs() < 1e-9);
        assert_eq!(t.lookup(1, &[1]), (0, 1));
        t.start_onboard(40.0, 1, 0, 3, None, &[], &[1]).unwrap();
        let ends = onboard_ends(&mut t);
        assert!((ends[0].1 - 56.0).abs() < 1e-9, "{ends:?}");
        assert_eq!(t.finish(0.0).queueing.onboards_delayed, 0);
    }

    #[test]
    fn free_copies_land_at_once() {
        let mut c = SimConfig::default();
        c.kv_transfer.kv_bytes_per_token = Some(1e6);
        c.offload.g2_blocks = Some(1);
        c.offload.g3_blocks = Some(8);
        c.offload.writes = OffloadWrites::Free;
        let mut t = Tiers::new(&c, &[16], 1, 100).unwrap().unwrap();
        t.offload(0.0, 0, &[1, 2]).unwrap();
        assert_eq!(t.next_finish_ms().unwrap(), None);
        t.start_onboard(0.0, 0, 0, 9, None, &[2], &[1]).unwrap();
        let c = &t.finish(0.0).queueing;
        assert_eq!(c.onboards_delayed, 0);
        // Bytes counted, no flow.
        assert_eq!(c.lanes[Lane::OffloadG2 as usize].flows, 0);
        assert_eq!(c.lanes[Lane::OffloadG2 as usize].bytes, 2.0 * BLOCK_BYTES);
        assert_eq!(c.lanes[Lane::OffloadG3 as usize].bytes, BLOCK_BYTES);
    }
}
