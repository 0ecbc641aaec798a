//! KV offload tiers: per rank a G2 pool in host memory and a G3 pool on disk
//! (per rank, or one pool shared by the cluster), fed by evictions and read back by onboarding.
//!
//! Each tier is a `KvCache` used as an LRU set of block identities. Blocks evicted from G1 go
//! to G2 and count as there at once (the evicting pass is never delayed); blocks evicted from G2
//! go to G3 likewise; blocks evicted from G3 are dropped. A block a lower tier already holds is
//! only made most recent there (no bytes move). Onboarding copies blocks up: the copy in G2 or
//! G3 stays where it is.
//!
//! Onboarding flows share one `LinkNetwork` (the allocator of KV transfers): per rank a G2->G1
//! link, and per rank or for the shared pool a G3->G2 link. A G3 hit stages through G2, so its
//! flow crosses both and runs at the max-min rate of both. Offloads are counted (blocks, bytes)
//! but move no flow: the G1->G2 and G2->G3 links they would ride carry nothing else, and the
//! blocks count as in the lower tier at once, so their timing could change no result.

use crate::block_ids::BlockId;
use crate::config::{OffloadConfig, SimConfig};
use crate::error::Result;
use crate::kv::KvCache;
use crate::links::{FlowId, LinkNetwork};
use crate::transfer::gbps_to_bytes_per_ms;

/// A request held on `rank` while its blocks come up from G2/G3.
#[derive(Debug, Clone, Copy)]
pub struct Onboard {
    pub rank: u32,
    /// The request's handle in its rank's scheduler.
    pub handle: u32,
    pub request: u32,
    flows_left: u32,
}

/// Blocks and bytes the tiers moved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierCounters {
    /// Blocks copied G1 -> G2 and G2 -> G3 (new to the lower tier).
    pub offloaded_g2_blocks: u64,
    pub offloaded_g3_blocks: u64,
    /// Blocks copied up to G1 from G2, and from G3 through G2.
    pub onboarded_g2_blocks: u64,
    pub onboarded_g3_blocks: u64,
    /// Blocks evicted from the last tier and lost.
    pub dropped_blocks: u64,
    pub offload_bytes: f64,
    pub onboard_bytes: f64,
    /// Requests that found blocks in G2/G3 but could not hold room in G1 for them at queueing.
    pub onboards_skipped: u64,
    /// Max-min rate solves of the tier links.
    pub rate_recomputations: u64,
}

/// The G2/G3 tiers of every rank and their links.
pub struct Tiers {
    g2: Vec<KvCache>,
    /// Empty (no G3), one shared pool, or one per rank.
    g3: Vec<KvCache>,
    net: LinkNetwork,
    num_ranks: usize,
    /// Bytes of one block of each rank.
    block_bytes: Vec<f64>,
    shared: bool,
    onboards: Vec<Onboard>,
    spare_onboards: Vec<u32>,
    /// The onboard of each flow by flow id.
    flow_onboard: Vec<u32>,
    done: Vec<FlowId>,
    scratch: Vec<BlockId>,
    pub counters: TierCounters,
}

impl Tiers {
    /// The tiers `config` asks for over ranks with the given tokens per block, for block
    /// identities below `ids`, or `None`.
    pub fn new(config: &SimConfig, block_sizes: &[u32], ids: BlockId) -> Result<Option<Self>> {
        let o: &OffloadConfig = &config.offload;
        let Some(g2_blocks) = o.g2_blocks else {
            return Ok(None);
        };
        let n = block_sizes.len();
        let per_token = config.kv_transfer.bytes_per_token();
        let mut g2: Vec<KvCache> = (0..n).map(|_| KvCache::new(g2_blocks, ids)).collect();
        for c in &mut g2 {
            c.record_evictions();
        }
        let g3: Vec<KvCache> = match o.g3_blocks {
            None => Vec::new(),
            Some(b) if o.g3_shared => vec![KvCache::new(b, ids)],
            Some(b) => (0..n).map(|_| KvCache::new(b, ids)).collect(),
        };
        let g12 = gbps_to_bytes_per_ms(o.g1_g2_gbps);
        let g23 = gbps_to_bytes_per_ms(o.g2_g3_gbps);
        let mut caps = vec![g12; n];
        caps.extend(std::iter::repeat_n(g23, g3.len()));
        Ok(Some(Tiers {
            g2,
            net: LinkNetwork::new(caps)?,
            num_ranks: n,
            block_bytes: block_sizes
                .iter()
                .map(|&b| f64::from(b) * per_token)
                .collect(),
            shared: g3.len() == 1,
            g3,
            onboards: Vec::new(),
            spare_onboards: Vec::new(),
            flow_onboard: Vec::new(),
            done: Vec::new(),
            scratch: Vec::new(),
            counters: TierCounters::default(),
        }))
    }

    /// The rank's G2->G1 link.
    fn onboard_link(rank: usize) -> usize {
        rank
    }

    fn g3_index(&self, rank: usize) -> usize {
        if self.shared {
            0
        } else {
            rank
        }
    }

    /// The G3->G2 link of the rank's G3 pool.
    fn up_link(&self, rank: usize) -> usize {
        self.num_ranks + self.g3_index(rank)
    }

    fn start(&mut self, now: f64, links: &[usize], bytes: f64, onboard: u32) -> Result<()> {
        let id = self.net.start_flow(now, links, bytes, None)?.0 as usize;
        if id >= self.flow_onboard.len() {
            self.flow_onboard.resize(id + 1, 0);
        }
        self.flow_onboard[id] = onboard;
        Ok(())
    }

    /// Offload the blocks G1 of `rank` evicted (`evicted`, least recent first): new ones to
    /// G2, and what that pushes out of G2 to G3.
    pub fn offload(&mut self, rank: usize, evicted: &[BlockId]) {
        let moved = self.g2[rank].insert_or_touch_all(evicted);
        let bb = self.block_bytes[rank];
        self.counters.offloaded_g2_blocks += u64::from(moved);
        self.counters.offload_bytes += f64::from(moved) * bb;
        if !self.g2[rank].has_evicted() {
            return;
        }
        let mut pushed = std::mem::take(&mut self.scratch);
        pushed.clear();
        self.g2[rank].drain_evicted_into(&mut pushed);
        if self.g3.is_empty() {
            self.counters.dropped_blocks += pushed.len() as u64;
        } else {
            let g = self.g3_index(rank);
            let moved = self.g3[g].insert_or_touch_all(&pushed);
            self.counters.offloaded_g3_blocks += u64::from(moved);
            self.counters.offload_bytes += f64::from(moved) * bb;
        }
        self.scratch = pushed;
    }

    /// Of `ids` (the prompt blocks after the G1 prefix hit), how many leading ones G2 of
    /// `rank` holds, and how many of the following ones G3 holds.
    pub fn lookup(&self, rank: usize, ids: &[BlockId]) -> (u32, u32) {
        let k2 = self.g2[rank].lookup(ids).blocks;
        let k3 = match self.g3.get(self.g3_index(rank)) {
            Some(g3) => g3.lookup(&ids[k2 as usize..]).blocks,
            None => 0,
        };
        (k2, k3)
    }

    /// Start onboarding to `rank` at `now` the blocks `lookup` found: `g2` (in G2) then `g3`
    /// (in G3) of request `request` (scheduler handle `handle`). The request is done when
    /// `pop_finished` returns it.
    pub fn start_onboard(
        &mut self,
        now: f64,
        rank: usize,
        handle: u32,
        request: u32,
        g2: &[BlockId],
        g3: &[BlockId],
    ) -> Result<()> {
        // A hit is a use: make the blocks the most recent of their tier.
        self.g2[rank].insert_or_touch_all(g2);
        let g = self.g3_index(rank);
        if !g3.is_empty() {
            self.g3[g].insert_or_touch_all(g3);
        }
        let onboard = Onboard {
            rank: rank as u32,
            handle,
            request,
            flows_left: u32::from(!g2.is_empty()) + u32::from(!g3.is_empty()),
        };
        let k = match self.spare_onboards.pop() {
            Some(k) => {
                self.onboards[k as usize] = onboard;
                k
            }
            None => {
                self.onboards.push(onboard);
                (self.onboards.len() - 1) as u32
            }
        };
        let bb = self.block_bytes[rank];
        let down = Self::onboard_link(rank);
        if !g2.is_empty() {
            let bytes = g2.len() as f64 * bb;
            self.counters.onboarded_g2_blocks += g2.len() as u64;
            self.counters.onboard_bytes += bytes;
            self.start(now, &[down], bytes, k)?;
        }
        if !g3.is_empty() {
            let bytes = g3.len() as f64 * bb;
            self.counters.onboarded_g3_blocks += g3.len() as u64;
            self.counters.onboard_bytes += bytes;
            let up = self.up_link(rank);
            self.start(now, &[up, down], bytes, k)?;
        }
        Ok(())
    }

    /// When the next tier flow finishes (ms), if any is in flight.
    pub fn next_finish_ms(&mut self) -> Result<Option<f64>> {
        Ok(self.net.next_finish_ms()?)
    }

    /// Append every onboard whose last flow finished by `now`, in (finish time, flow id) order.
    pub fn pop_finished(&mut self, now: f64, out: &mut Vec<Onboard>) -> Result<()> {
        self.net.pop_finished_into(now, &mut self.done)?;
        for f in &self.done {
            let k = self.flow_onboard[f.0 as usize];
            let o = &mut self.onboards[k as usize];
            o.flows_left -= 1;
            if o.flows_left == 0 {
                out.push(*o);
                self.spare_onboards.push(k);
            }
        }
        Ok(())
    }

    /// Blocks G2 holds, all ranks.
    pub fn g2_used(&self) -> u32 {
        self.g2.iter().map(KvCache::inactive).sum()
    }

    /// Blocks G3 holds, all ranks (or the shared pool).
    pub fn g3_used(&self) -> u32 {
        self.g3.iter().map(KvCache::inactive).sum()
    }

    /// The counters, with the blocks dropped from G3 and the rate solves filled in.
    pub fn finish(&self) -> TierCounters {
        let mut c = self.counters.clone();
        c.dropped_blocks += self.g3.iter().map(KvCache::evictions).sum::<u64>();
        c.rate_recomputations = self.net.recomputations();
        c
    }
}
