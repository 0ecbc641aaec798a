//! The cluster under replay: its workers and their ranks, the routers, the KV transfers
//! between prefill and decode ranks, and the offload tiers; what each event does to them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::block_ids::{BlockId, BlockIds, TraceChains};
use crate::config::{Backend, FirstToken, Role, ServingMode, SimConfig, TransferSizing};
use crate::error::{Result, SimError};
use crate::explain::{PartNames, RankBreakdown};
use crate::min_heap::MinHeap;
use crate::offload::{Onboard, Tiers};
use crate::prepared::PreparedWorkload;
use crate::report::Records;
use crate::router::Router;
use crate::scheduler::Scheduler;
use crate::timing::{PassShape, StepTimer};
use crate::transfer::Transport;
use crate::workload::Workload;

/// Mixed into the router seed for decode routing.
const DECODE_STREAM: u64 = 0xD1B5_4A32_D192_ED03;

/// A prefill that finished and waits for its decode worker to reserve blocks.
#[derive(Debug, Clone, Copy)]
struct Handoff {
    request: u32,
    src: u32,
    src_handle: u32,
}

/// A KV transfer on its way (and, on a decode rank with offload tiers, the onboard of the
/// prompt blocks its tiers hold).
#[derive(Debug, Clone, Copy)]
struct InFlight {
    handoff: Handoff,
    dst: u32,
    dst_handle: u32,
    /// The transfer and the onboard, of those still under way.
    parts_left: u8,
}

/// A worker: `ranks` consecutive data-parallel ranks that pass in lockstep.
#[derive(Debug, Clone)]
pub(super) struct Worker {
    pub(super) first_rank: usize,
    ranks: usize,
    pub(super) busy: bool,
    /// When the pass in flight ends (ms), while `busy`; set by `Cluster::set_pass_end`.
    pub(super) pass_end_ms: f64,
}

impl Worker {
    pub(super) fn ranks(&self) -> std::ops::Range<usize> {
        self.first_rank..self.first_rank + self.ranks
    }

    /// The rank of this worker a request goes to: the least loaded as vLLM's data-parallel
    /// balancer scores load (`Scheduler::load_score`), ties to the lowest rank. `handed(r)`
    /// counts requests already sent to rank `r` that it has not taken in yet (handoffs waiting
    /// for a block reservation).
    fn pick_rank(&self, ranks: &[Scheduler], handed: impl Fn(usize) -> Handed) -> usize {
        self.ranks()
            .min_by_key(|&r| ranks[r].load_score(handed(r).requests))
            .expect("a worker has at least one rank")
    }
}

/// Requests sent to a rank that it has not taken in yet, and their prompt blocks there.
#[derive(Debug, Clone, Copy, Default)]
struct Handed {
    requests: u64,
    blocks: u64,
}

/// The workers and what joins them. Prefill workers come first, then decode workers; in
/// aggregated mode every worker is aggregated and `num_prefill` is 0. Ranks are numbered the
/// same way; in disaggregated mode every rank has its own KV-transfer link (a send link on a
/// prefill rank, a receive link on a decode rank).
pub(super) struct Cluster {
    pub(super) ranks: Vec<Scheduler>,
    pub(super) workers: Vec<Worker>,
    pub(super) num_prefill: usize,
    num_prefill_ranks: usize,
    /// Workers whose state changed at this instant and may start a pass, deduplicated.
    pub(super) dirty: Vec<u32>,
    pub(super) is_dirty: Vec<bool>,
    router: Router,
    decode_router: Router,
    /// Per decode rank, handoffs waiting for a block reservation, FIFO, and the prompt blocks
    /// they will need there.
    pending: Vec<std::collections::VecDeque<Handoff>>,
    pending_blocks: Vec<u64>,
    pub(super) transport: Transport,
    in_flight: Vec<Option<InFlight>>,
    sizing: TransferSizing,
    kv_bytes_per_token: f64,
    /// The first token counts when the KV lands (else after the first decode pass, and decode
    /// workers reserve blocks only between passes).
    pub(super) first_token_on_arrival: bool,
    /// KV offload tiers, when configured.
    pub(super) tiers: Option<Tiers>,
    /// Scratch: block identities a rank's G1 evicted.
    evicted: Vec<BlockId>,
    /// Scratch: requests to look up in the offload tiers.
    heads: Vec<u32>,
    /// Scratch: the (request, handle) pairs a prefill rank's pass finished.
    handoffs: Vec<(u32, u32)>,
    /// Sessions or the closed loop send requests when others end (a pass ending no request
    /// can start one that does, so then every pass end can lead to a send).
    ends_send: bool,
    /// The busy workers whose pass end can reach another worker (`reaches_others`), keyed by
    /// (pass end ms, worker): what `horizon` reads instead of scanning every worker. Kept only
    /// when some can (`keeps_pass_ends`).
    pass_ends: MinHeap,
    /// Arrivals, pass ends and transfer ends processed.
    pub(super) events: u64,
    /// Scratch: the shapes of the passes a grouped pass's ranks start, and each rank's tokens.
    shapes: Vec<(usize, PassShape)>,
    lockstep_tokens: Vec<u64>,
}

impl Cluster {
    /// The cluster `config` describes, serving `workload` (whose block identities `prepared`
    /// holds, when given); `ends_send`: sessions or the closed loop are on.
    pub(super) fn new(
        config: &SimConfig,
        workload: &Workload,
        prepared: Option<&PreparedWorkload>,
        ends_send: bool,
    ) -> Result<Self> {
        let c = &config.cluster;
        let pools: Vec<(Role, usize)> = match c.mode {
            ServingMode::Aggregated => vec![(Role::Aggregated, c.num_workers as usize)],
            ServingMode::Disaggregated => vec![
                (Role::Prefill, c.num_prefill_workers as usize),
                (Role::Decode, c.num_decode_workers as usize),
            ],
        };
        let (mut ranks, mut workers) = (Vec::new(), Vec::new());
        let (mut num_prefill, mut num_prefill_ranks) = (0, 0);
        // Block identities once per block size, in one identity space (a shared G3 pool holds
        // blocks of both sizes).
        let mut tables: Vec<Arc<BlockIds>> = Vec::new();
        for &(role, _) in &pools {
            let size = config.role(role).0.block_size();
            if !tables.iter().any(|t| t.block_size() == size) {
                let first = tables.last().map_or(0, |t| t.end());
                tables.push(match prepared {
                    Some(p) => p.block_ids(size, first)?,
                    None => Arc::new(BlockIds::new(workload, size, first)?),
                });
            }
        }
        let ids_end = tables.last().map_or(0, |t| t.end());
        let caches = config.block_caches();
        // The SGLang flavour's radix cache compares prompts by their trace prefix chains.
        let chains = pools
            .iter()
            .any(|&(role, _)| config.role(role).0.backend == Backend::Sglang)
            .then(|| match prepared {
                Some(p) => p.trace_chains(),
                None => Arc::new(TraceChains::new(workload)),
            });
        for &(role, count) in &pools {
            let (engine, timing) = config.role(role);
            let table = tables
                .iter()
                .find(|t| t.block_size() == engine.block_size());
            let table = table.expect("a table per block size");
            let kv_tokens = u64::from(engine.num_gpu_blocks) * u64::from(engine.block_size());
            let dp = engine.data_parallel_size as usize;
            for _ in 0..count {
                workers.push(Worker {
                    first_rank: ranks.len(),
                    ranks: dp,
                    busy: false,
                    pass_end_ms: f64::NAN,
                });
                for _ in 0..dp {
                    let timer = StepTimer::new(timing.clone(), kv_tokens)
                        .with_graph_sizes(engine.cuda_graph_sizes());
                    ranks.push(Scheduler::new(
                        role,
                        engine,
                        timer,
                        table.clone(),
                        chains.as_ref(),
                        caches,
                    )?);
                }
            }
            if role == Role::Prefill {
                (num_prefill, num_prefill_ranks) = (workers.len(), ranks.len());
            }
        }
        let num_decode_ranks = if num_prefill > 0 {
            ranks.len() - num_prefill_ranks
        } else {
            0
        };
        let n = workers.len();
        let block_sizes: Vec<u32> = ranks.iter().map(|r| r.block_size()).collect();
        let first_decode_rank = if num_prefill > 0 {
            num_prefill_ranks
        } else {
            ranks.len()
        };
        let tiers = Tiers::new(config, &block_sizes, first_decode_rank, ids_end)?;
        if tiers.is_some() {
            for rank in &mut ranks {
                rank.record_evictions();
            }
        }
        if config.report.explain {
            for rank in &mut ranks {
                rank.explain();
            }
        }
        Ok(Cluster {
            dirty: Vec::with_capacity(n),
            is_dirty: vec![false; n],
            router: Router::new(c.router, c.router_seed, c.overlap_weight),
            // A stream of its own, so decode choices do not shift prefill choices.
            decode_router: Router::new(c.router, c.router_seed ^ DECODE_STREAM, c.overlap_weight),
            pending: vec![Default::default(); num_decode_ranks],
            pending_blocks: vec![0; num_decode_ranks],
            transport: Transport::new(&config.kv_transfer, num_prefill_ranks, num_decode_ranks)?,
            in_flight: Vec::new(),
            sizing: config.kv_transfer.sizing(),
            kv_bytes_per_token: config.kv_transfer.bytes_per_token(),
            first_token_on_arrival: config.kv_transfer.first_token() == FirstToken::KvArrival,
            tiers,
            evicted: Vec::new(),
            heads: Vec::new(),
            handoffs: Vec::new(),
            ends_send,
            pass_ends: {
                let mut heap = MinHeap::default();
                heap.ensure(n);
                heap
            },
            events: 0,
            shapes: Vec::new(),
            lockstep_tokens: Vec::new(),
            ranks,
            workers,
            num_prefill,
            num_prefill_ranks,
        })
    }

    pub(super) fn disaggregated(&self) -> bool {
        self.num_prefill > 0
    }

    /// Whether any worker's pass end can reach another (`horizon`): in an aggregated replay
    /// whose request ends send nothing, none can.
    fn keeps_pass_ends(&self) -> bool {
        self.disaggregated() || self.ends_send
    }

    /// Whether worker `k`'s pass end can reach another worker: a prefill worker hands requests
    /// over, a decode worker with handoffs waiting may start transfers, and when request ends
    /// send requests any pass end may lead to one.
    fn reaches_others(&self, k: usize) -> bool {
        k < self.num_prefill
            || self.ends_send
            || (self.disaggregated()
                && self.workers[k]
                    .ranks()
                    .any(|r| !self.pending[r - self.num_prefill_ranks].is_empty()))
    }

    /// Worker `w`'s pass in flight ends at `end_ms`.
    pub(super) fn set_pass_end(&mut self, w: usize, end_ms: f64) {
        self.workers[w].pass_end_ms = end_ms;
        self.keep_pass_end(w);
    }

    /// Worker `k`'s entry in `pass_ends` after its pass, busy flag or handoffs changed.
    fn keep_pass_end(&mut self, k: usize) {
        if !self.keeps_pass_ends() {
            return;
        }
        if self.workers[k].busy && self.reaches_others(k) {
            self.pass_ends
                .set(k as u32, (self.workers[k].pass_end_ms, k as u64));
        } else {
            self.pass_ends.remove(k as u32);
        }
    }

    /// Blocks of request `i`'s prompt in rank `rank`'s blocks.
    fn prompt_blocks(&self, rank: usize, workload: &Workload, i: u32) -> u64 {
        let block = self.ranks[rank].block_ids().block_size();
        u64::from(workload.input_length[i as usize].div_ceil(block))
    }

    fn touch(&mut self, w: usize) {
        if !self.is_dirty[w] {
            self.is_dirty[w] = true;
            self.dirty.push(w as u32);
        }
    }

    /// The rank among `pool` (a range of workers) that `router` sends request `i` to;
    /// `handed(r)`: what was sent to rank `r` and waits to be taken in, counted as queued there.
    fn route(
        router: &mut Router,
        workers: &mut [Worker],
        ranks: &[Scheduler],
        pool: std::ops::Range<usize>,
        workload: &Workload,
        i: usize,
        handed: impl Fn(usize) -> Handed,
    ) -> usize {
        if router.needs_caches() {
            let first = workers[pool.start].first_rank;
            let last = workers[pool.end - 1].ranks().end;
            let ids = ranks[first].block_ids();
            let prompt_blocks = workload.input_length[i].div_ceil(ids.block_size());
            let prompt = ids.of(i);
            let candidates = (first..last).map(|r| {
                (
                    ranks[r].prefix_hit(i, prompt).blocks,
                    ranks[r].active_blocks(),
                    ranks[r].waiting_blocks() + handed(r).blocks,
                )
            });
            first + router.route_by_cache(prompt_blocks, candidates)
        } else {
            let w = pool.start + router.route(pool.len());
            workers[w].pick_rank(ranks, handed)
        }
    }

    /// Send request `i` at `now`: it arrives (TTFT counts from here).
    pub(super) fn send(&mut self, workload: &Workload, i: usize, now: f64, records: &mut Records) {
        self.events += 1;
        records.arrival_ms[i] = now;
        self.arrive(workload, i, now, records);
    }

    /// Offload tiers: copy what rank `r`'s G1 evicted since the last call down to its G2 at
    /// `now`.
    fn offload_evicted(&mut self, r: usize, now: f64) -> Result<()> {
        let Some(tiers) = &mut self.tiers else {
            return Ok(());
        };
        self.evicted.clear();
        self.ranks[r].drain_evicted_into(&mut self.evicted);
        if !self.evicted.is_empty() {
            tiers.offload(now, r, &self.evicted)?;
        }
        Ok(())
    }

    /// Offload tiers: look up the requests rank `rank` could admit next in G2/G3; those whose
    /// blocks right after the G1 prefix hit are there, and that G1 can hold now, leave the queue
    /// while the blocks are onboarded (just before they would be admitted, so the blocks are
    /// still there when they are). One whose hit G1 cannot hold now is looked up again before
    /// the next pass, as vLLM asks its connector again at every step a request waits.
    fn onboard_heads(&mut self, rank: usize, now: f64, records: &mut Records) -> Result<()> {
        // Decode ranks take their prompts from KV transfers (and from their tiers at
        // reservation, `reserve`): a request preempted there recomputes from what G1 holds.
        if self.disaggregated() && rank >= self.num_prefill_ranks {
            return Ok(());
        }
        let Some(tiers) = &mut self.tiers else {
            return Ok(());
        };
        let mut heads = std::mem::take(&mut self.heads);
        self.ranks[rank].take_unchecked_heads(&mut heads);
        for &handle in &heads {
            let sched = &mut self.ranks[rank];
            let ids = sched.reusable_ids(handle);
            let i = sched.request_of(handle);
            let hit = sched.prefix_hit(i, ids);
            let g1 = hit.blocks as usize;
            let (k2, k3) = tiers.lookup(rank, &ids[g1..]);
            // A request is looked up again only after G1 had no room for the hit it found:
            // count it skipped once.
            let again = records.g2_hit_blocks[i] + records.g3_hit_blocks[i] > 0;
            records.g1_hit_blocks[i] = hit.blocks;
            records.g2_hit_blocks[i] = k2;
            records.g3_hit_blocks[i] = k3;
            if k2 + k3 == 0 {
                continue;
            }
            if !sched.hold_for_onboard(handle, hit, k2 + k3) {
                if !again {
                    tiers.skip_onboard(rank);
                }
                continue;
            }
            sched.unqueue(handle);
            let ids = sched.reusable_ids(handle);
            let (a, b) = (g1 + k2 as usize, g1 + (k2 + k3) as usize);
            let (g2, g3) = (&ids[g1..a], &ids[a..b]);
            tiers.start_onboard(now, rank, handle, i as u32, None, g2, g3)?;
            records.onboard_start_ms[i] = now;
        }
        self.heads = heads;
        // Holding blocks may have evicted others.
        self.offload_evicted(rank, now)
    }

    /// Offload tiers: request `o` is onboarded at `now`: it queues first on its rank, or on a
    /// decode rank it is active once its KV transfer has landed too.
    pub(super) fn onboard_done(
        &mut self,
        o: Onboard,
        now: f64,
        records: &mut Records,
    ) -> Result<()> {
        if let Some(id) = o.transfer() {
            return self.part_done(id, now, records);
        }
        records.onboard_end_ms[o.request as usize] = now;
        self.ranks[o.rank as usize].finish_onboard(o.handle);
        self.touch(self.worker_of(o.rank as usize));
        Ok(())
    }

    /// Route request `i`, arriving at `now`: reject it if it can never be served, else queue
    /// it.
    fn arrive(&mut self, workload: &Workload, i: usize, now: f64, records: &mut Records) {
        let front = if self.disaggregated() {
            self.num_prefill
        } else {
            self.workers.len()
        };
        let rank = Self::route(
            &mut self.router,
            &mut self.workers,
            &self.ranks,
            0..front,
            workload,
            i,
            |_| Handed::default(),
        );
        let w = self.worker_of(rank);
        records.worker[i] = w as i32;
        let (prompt, output) = (workload.input_length[i], workload.output_length[i]);
        // In disaggregated mode the decode pool must be able to hold it too (all decode
        // ranks share one configuration).
        let verdict = self.ranks[rank].never_fits(prompt, output).or_else(|| {
            self.disaggregated()
                .then(|| self.ranks[self.num_prefill_ranks].never_fits(prompt, output))
                .flatten()
        });
        match verdict {
            Some(reason) => records.reject(i, reason),
            None => {
                self.ranks[rank].enqueue(workload, i, now);
                self.touch(w);
            }
        }
    }

    /// Start a grouped pass on idle worker `w`: every rank with work plans its pass, and the
    /// group ends when the slowest rank ends. A worker of several data-parallel ranks passes
    /// in lockstep: each rank's price counts what the group makes it compute (a rank without
    /// work runs a dummy pass). Returns the group's duration (ms), if any rank scheduled
    /// anything.
    pub(super) fn start_pass(
        &mut self,
        w: usize,
        now: f64,
        records: &mut Records,
    ) -> Result<Option<f64>> {
        let mut shapes = std::mem::take(&mut self.shapes);
        shapes.clear();
        for r in self.workers[w].ranks() {
            self.onboard_heads(r, now, records)?;
            let rank = &mut self.ranks[r];
            if !rank.has_work() {
                continue;
            }
            let planned = rank.start_pass(now, records);
            self.offload_evicted(r, now)?;
            let rank = &self.ranks[r];
            match planned {
                Some(shape) => shapes.push((r, shape)),
                // The queue head waits for blocks tied to KV transfers or onboarding; their end
                // touches us.
                None if rank.awaits_transfers() => {}
                // Otherwise every running request needs at least one token, the budget is at
                // least one, and an empty rank admits its queue head (it fits an empty cache).
                None => {
                    return Err(SimError::Internal(format!(
                        "rank {r} of worker {w} scheduled nothing at {now} ms with {} waiting \
                         and {} running",
                        rank.waiting_len(),
                        rank.running_len()
                    )));
                }
            }
        }
        let worker = &self.workers[w];
        let lockstep = (worker.ranks > 1 && !shapes.is_empty()).then(|| {
            let tokens = &mut self.lockstep_tokens;
            tokens.clear();
            tokens.resize(worker.ranks, 0);
            for (r, shape) in &shapes {
                tokens[r - worker.first_rank] =
                    shape.prefill_tokens + u64::from(shape.decode_requests);
            }
            self.ranks[worker.first_rank].timer().lockstep(tokens)
        });
        let mut longest: Option<f64> = None;
        for (r, shape) in &shapes {
            let ms = self.ranks[*r].price_pass(shape, lockstep.as_ref(), now);
            longest = Some(longest.map_or(ms, |l: f64| l.max(ms)));
        }
        self.shapes = shapes;
        self.workers[w].busy = longest.is_some();
        Ok(longest)
    }

    /// The grouped pass of worker `w` ended; a prefill worker's finished prompts go to decode
    /// workers.
    pub(super) fn pass_end(
        &mut self,
        w: usize,
        now: f64,
        workload: &Workload,
        records: &mut Records,
    ) {
        self.workers[w].busy = false;
        self.keep_pass_end(w);
        self.touch(w);
        for r in self.workers[w].ranks() {
            if !self.ranks[r].is_busy() {
                continue;
            }
            self.ranks[r].finish_pass(now, records);
            if w >= self.num_prefill {
                continue;
            }
            let mut handoffs = std::mem::take(&mut self.handoffs);
            handoffs.extend(self.ranks[r].take_handoffs());
            let all = self.workers.len();
            for &(request, src_handle) in &handoffs {
                let (pending, pending_blocks) = (&self.pending, &self.pending_blocks);
                let first_decode = self.num_prefill_ranks;
                let dst_rank = Self::route(
                    &mut self.decode_router,
                    &mut self.workers,
                    &self.ranks,
                    self.num_prefill..all,
                    workload,
                    request as usize,
                    |rank| Handed {
                        requests: pending[rank - first_decode].len() as u64,
                        blocks: pending_blocks[rank - first_decode],
                    },
                );
                let d = self.worker_of(dst_rank);
                records.decode_worker[request as usize] = (d - self.num_prefill) as i32;
                let k = dst_rank - self.num_prefill_ranks;
                self.pending_blocks[k] += self.prompt_blocks(dst_rank, workload, request);
                self.pending[k].push_back(Handoff {
                    request,
                    src: r as u32,
                    src_handle,
                });
                self.keep_pass_end(d);
                self.touch(d);
            }
            handoffs.clear();
            self.handoffs = handoffs;
        }
    }

    /// Start the transfers decode worker `w`'s ranks have room for, in arrival order.
    pub(super) fn reserve(
        &mut self,
        w: usize,
        now: f64,
        workload: &Workload,
        records: &mut Records,
    ) -> Result<()> {
        for rank in self.workers[w].ranks() {
            let d = rank - self.num_prefill_ranks;
            while let Some(&h) = self.pending[d].front() {
                let Some((dst_handle, cached)) =
                    self.ranks[rank].reserve_remote(workload, h.request as usize)
                else {
                    break;
                };
                self.pending[d].pop_front();
                self.pending_blocks[d] -= self.prompt_blocks(rank, workload, h.request);
                let r = h.request as usize;
                // With destination-missing sizing, prompt blocks the decode rank's tiers hold
                // come up from them while the transfer brings the rest (with the full prompt
                // on its way, reading them would gain nothing).
                let bs = self.ranks[rank].block_size();
                let (g1, k2, k3) = match &mut self.tiers {
                    Some(tiers) if self.sizing == TransferSizing::DestinationMissing => {
                        let g1 = cached / bs;
                        let ids = self.ranks[rank].block_ids().of(r);
                        let (k2, k3) = tiers.lookup(rank, &ids[g1 as usize..]);
                        tiers.count_hits(rank, [g1, k2, k3]);
                        (g1, k2, k3)
                    }
                    _ => (0, 0, 0),
                };
                let prompt = workload.input_length[r];
                let tokens = match self.sizing {
                    TransferSizing::FullPrompt => prompt,
                    TransferSizing::DestinationMissing => {
                        // The decode rank holds the union of its G1 prefix and the tier blocks
                        // after its last full G1 block: a radix cache's prefix can end inside
                        // a block the tiers hold whole, so the two overlap. Both lie within
                        // the prompt.
                        let held = cached.max((g1 + k2 + k3) * bs);
                        debug_assert!(held <= prompt, "{held} of {prompt} tokens held");
                        prompt - held
                    }
                };
                let bytes = f64::from(tokens) * self.kv_bytes_per_token;
                records.transfer_bytes[r] = bytes;
                records.transfer_start_ms[r] = now;
                let id = self.transport.start(now, h.src as usize, d, bytes)?;
                let onboard = k2 + k3 > 0;
                if let (Some(tiers), true) = (&mut self.tiers, onboard) {
                    let ids = self.ranks[rank].block_ids().of(r);
                    let (a, b) = ((g1 + k2) as usize, (g1 + k2 + k3) as usize);
                    let (g2, g3) = (&ids[g1 as usize..a], &ids[a..b]);
                    tiers.start_onboard(now, rank, dst_handle, h.request, Some(id), g2, g3)?;
                }
                let id = id as usize;
                if id >= self.in_flight.len() {
                    self.in_flight.resize(id + 1, None);
                }
                self.in_flight[id] = Some(InFlight {
                    handoff: h,
                    dst: rank as u32,
                    dst_handle,
                    parts_left: 1 + u8::from(onboard),
                });
            }
            self.offload_evicted(rank, now)?;
        }
        self.keep_pass_end(w);
        Ok(())
    }

    /// Whether worker `w`'s plain decode passes touch nothing but itself, so they can run
    /// without the event loop (`Scheduler::run_plain_decodes`): one rank, not a prefill worker,
    /// no handoffs waiting for it, no onboarding from offload tiers under way (plain passes
    /// neither look requests up in the tiers nor evict blocks to them).
    pub(super) fn runs_alone(&self, w: usize) -> bool {
        let worker = &self.workers[w];
        worker.ranks == 1
            && !self.ranks[worker.first_rank].is_onboarding()
            && w >= self.num_prefill
            && (!self.disaggregated()
                || self.pending[worker.first_rank - self.num_prefill_ranks].is_empty())
    }

    /// The next instant (ms) anything outside worker `w` can reach it: a request sent
    /// (`next_send`), a KV transfer or offload-tier flow ending, or the pass end of another
    /// worker that hands requests over (prefill), may start transfers (a decode worker with
    /// handoffs waiting), or, when request ends send requests, may lead to one.
    pub(super) fn horizon(&mut self, w: usize, next_send: f64) -> Result<f64> {
        // A tier flow ending reaches only the rank it onboards to (not `w`: it onboards
        // nothing), unless that rank then hands requests over or ends one others wait for, or
        // it is a decode rank (which may be `w`) receiving part of a prompt from its tiers.
        let reaches = self.keeps_pass_ends();
        let tiers = match &mut self.tiers {
            Some(tiers) if reaches => tiers.next_finish_ms()?,
            _ => None,
        };
        let horizon = [Some(next_send), self.transport.next_finish_ms()?, tiers]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        if !reaches {
            return Ok(horizon);
        }
        let others = self
            .pass_ends
            .peek_except(w as u32)
            .map_or(f64::INFINITY, |(_, ms, _)| ms);
        debug_assert_eq!(
            others.to_bits(),
            self.scanned_pass_ends(w).to_bits(),
            "kept pass ends differ from a scan of the workers"
        );
        Ok(horizon.min(others))
    }

    /// The earliest pass end of a busy worker other than `w` that reaches others, found by
    /// reading every worker: the reference `pass_ends` is checked against in debug builds.
    fn scanned_pass_ends(&self, w: usize) -> f64 {
        (0..self.workers.len())
            .filter(|&k| k != w && self.workers[k].busy && self.reaches_others(k))
            .map(|k| self.workers[k].pass_end_ms)
            .fold(f64::INFINITY, f64::min)
    }

    /// An explained replay: each rank's passes, and the parts each role's prices split into.
    pub(super) fn explained(&self) -> Option<(Vec<RankBreakdown>, PartNames)> {
        let mut parts = BTreeMap::new();
        let mut ranks = Vec::with_capacity(self.ranks.len());
        for (w, worker) in self.workers.iter().enumerate() {
            let (role, index) = match (self.disaggregated(), w < self.num_prefill) {
                (false, _) => (Role::Aggregated, w),
                (true, true) => (Role::Prefill, w),
                (true, false) => (Role::Decode, w - self.num_prefill),
            };
            for r in worker.ranks() {
                let rank = &self.ranks[r];
                parts
                    .entry(role.name())
                    .or_insert_with(|| rank.timer().part_names());
                ranks.push(RankBreakdown {
                    role: role.name(),
                    worker: index as u32,
                    dp_rank: (r - worker.first_rank) as u32,
                    passes: rank.explained()?,
                });
            }
        }
        Some((ranks, parts))
    }

    /// The worker owning rank `r`.
    fn worker_of(&self, r: usize) -> usize {
        self.workers
            .partition_point(|w| w.first_rank + w.ranks <= r)
    }

    /// Transfer `id` finished at `now`: the prefill rank releases its copy, and the decode
    /// rank activates the request unless its tiers are still onboarding part of it.
    pub(super) fn transfer_done(&mut self, id: u64, now: f64, records: &mut Records) -> Result<()> {
        let f = self.in_flight[id as usize].ok_or_else(|| {
            SimError::Internal(format!("transfer {id} finished twice or never started"))
        })?;
        records.transfer_end_ms[f.handoff.request as usize] = now;
        let src = f.handoff.src as usize;
        self.ranks[src].release_handoff(f.handoff.src_handle);
        self.touch(self.worker_of(src));
        self.part_done(id, now, records)
    }

    /// The transfer or the decode-side onboard of transfer `id`'s request finished at `now`;
    /// the request is active once both have.
    fn part_done(&mut self, id: u64, now: f64, records: &mut Records) -> Result<()> {
        let slot = &mut self.in_flight[id as usize];
        let f = slot.as_mut().ok_or_else(|| {
            SimError::Internal(format!("transfer {id} finished twice or never started"))
        })?;
        f.parts_left -= 1;
        if f.parts_left > 0 {
            return Ok(());
        }
        let f = slot.take().expect("checked above");
        let dst = f.dst as usize;
        self.ranks[dst].activate_remote(f.dst_handle, now, self.first_token_on_arrival, records);
        self.touch(self.worker_of(dst));
        Ok(())
    }
}
