//! The discrete-event replay of a workload on a cluster: aggregated workers, or prefill and
//! decode workers joined by KV transfers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::block_ids::{BlockId, BlockIds};
use crate::config::{FirstToken, Role, ServingMode, SimConfig, TransferSizing};
use crate::error::{Result, SimError};
use crate::event_queue::EventQueue;
use crate::offload::{Onboard, Tiers};
use crate::report::{Counters, Records, Report, Status, TimeSeries};
use crate::router::Router;
use crate::scheduler::Scheduler;
use crate::timing::StepTimer;
use crate::transfer::Transport;
use crate::workload::Workload;

/// Something that happens at an instant of the virtual clock. Session starts come from the
/// `Dispatcher`, and transfers finish inside the `Transport`.
#[derive(Debug, Clone, Copy)]
enum Event {
    PassEnd {
        worker: u32,
    },
    /// A later turn of a session is sent.
    Send {
        request: u32,
    },
}

/// Mixed into the router seed for decode routing.
const DECODE_STREAM: u64 = 0xD1B5_4A32_D192_ED03;

/// A prefill that finished and waits for its decode worker to reserve blocks.
#[derive(Debug, Clone, Copy)]
struct Handoff {
    request: u32,
    src: u32,
    src_handle: u32,
}

/// A KV transfer on its way.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    handoff: Handoff,
    dst: u32,
    dst_handle: u32,
}

/// A worker: `ranks` consecutive data-parallel ranks that pass in lockstep.
#[derive(Debug, Clone)]
struct Worker {
    first_rank: usize,
    ranks: usize,
    /// The rank the next request of this worker goes to (round robin).
    next_rank: usize,
    busy: bool,
    /// When the pass in flight ends (ms), while `busy`.
    pass_end_ms: f64,
}

impl Worker {
    fn ranks(&self) -> std::ops::Range<usize> {
        self.first_rank..self.first_rank + self.ranks
    }

    fn pick_rank(&mut self) -> usize {
        let r = self.first_rank + self.next_rank;
        self.next_rank = (self.next_rank + 1) % self.ranks;
        r
    }
}

/// The workers and what joins them. Prefill workers come first, then decode workers; in
/// aggregated mode every worker is aggregated and `num_prefill` is 0. Ranks are numbered the
/// same way, and every rank has its own KV-transfer link.
struct Cluster {
    ranks: Vec<Scheduler>,
    workers: Vec<Worker>,
    num_prefill: usize,
    num_prefill_ranks: usize,
    /// Workers whose state changed at this instant and may start a pass, deduplicated.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    router: Router,
    decode_router: Router,
    /// Per decode rank, handoffs waiting for a block reservation, FIFO.
    pending: Vec<std::collections::VecDeque<Handoff>>,
    transport: Transport,
    in_flight: Vec<Option<InFlight>>,
    sizing: TransferSizing,
    kv_bytes_per_token: f64,
    /// The first token counts when the KV lands (else after the first decode pass, and decode
    /// workers reserve blocks only between passes).
    first_token_on_arrival: bool,
    /// KV offload tiers, when configured.
    tiers: Option<Tiers>,
    /// Scratch: block identities a rank's G1 evicted.
    evicted: Vec<BlockId>,
    /// Scratch: requests to look up in the offload tiers.
    heads: Vec<u32>,
    /// Sessions or the closed loop send requests when others end (a pass ending no request
    /// can start one that does, so then every pass end can lead to a send).
    ends_send: bool,
    /// Arrivals, pass ends and transfer ends processed.
    events: u64,
}

impl Cluster {
    /// The cluster `config` describes, serving `workload`; `ends_send`: sessions or the closed
    /// loop are on.
    fn new(config: &SimConfig, workload: &Workload, ends_send: bool) -> Result<Self> {
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
            let size = config.role(role).0.block_size;
            if !tables.iter().any(|t| t.block_size() == size) {
                let first = tables.last().map_or(0, |t| t.end());
                tables.push(Arc::new(BlockIds::new(workload, size, first)?));
            }
        }
        let ids_end = tables.last().map_or(0, |t| t.end());
        for &(role, count) in &pools {
            let (engine, timing) = config.role(role);
            let table = tables.iter().find(|t| t.block_size() == engine.block_size);
            let table = table.expect("a table per block size");
            let kv_tokens = u64::from(engine.num_gpu_blocks) * u64::from(engine.block_size);
            let dp = engine.data_parallel_size as usize;
            for _ in 0..count {
                workers.push(Worker {
                    first_rank: ranks.len(),
                    ranks: dp,
                    next_rank: 0,
                    busy: false,
                    pass_end_ms: f64::NAN,
                });
                for _ in 0..dp {
                    let timer = StepTimer::new(timing.clone(), kv_tokens);
                    ranks.push(Scheduler::new(role, engine.clone(), timer, table.clone()));
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
        let block_sizes: Vec<u32> = ranks.iter().map(Scheduler::block_size).collect();
        let tiers = Tiers::new(config, &block_sizes, ids_end)?;
        if tiers.is_some() {
            for rank in &mut ranks {
                rank.record_evictions();
            }
        }
        Ok(Cluster {
            dirty: Vec::with_capacity(n),
            is_dirty: vec![false; n],
            router: Router::new(c.router, c.router_seed, c.overlap_weight),
            // A stream of its own, so decode choices do not shift prefill choices.
            decode_router: Router::new(c.router, c.router_seed ^ DECODE_STREAM, c.overlap_weight),
            pending: vec![Default::default(); num_decode_ranks],
            transport: Transport::new(&config.kv_transfer, num_prefill_ranks, num_decode_ranks)?,
            in_flight: Vec::new(),
            sizing: config.kv_transfer.sizing(),
            kv_bytes_per_token: config.kv_transfer.bytes_per_token(),
            first_token_on_arrival: config.kv_transfer.first_token() == FirstToken::KvArrival,
            tiers,
            evicted: Vec::new(),
            heads: Vec::new(),
            ends_send,
            events: 0,
            ranks,
            workers,
            num_prefill,
            num_prefill_ranks,
        })
    }

    fn disaggregated(&self) -> bool {
        self.num_prefill > 0
    }

    fn touch(&mut self, w: usize) {
        if !self.is_dirty[w] {
            self.is_dirty[w] = true;
            self.dirty.push(w as u32);
        }
    }

    /// The rank among `pool` (a range of workers) that `router` sends request `i` to.
    fn route(
        router: &mut Router,
        workers: &mut [Worker],
        ranks: &[Scheduler],
        pool: std::ops::Range<usize>,
        workload: &Workload,
        i: usize,
    ) -> usize {
        if router.needs_caches() {
            let first = workers[pool.start].first_rank;
            let last = workers[pool.end - 1].ranks().end;
            let ids = ranks[first].block_ids();
            let prompt_blocks = workload.input_length[i].div_ceil(ids.block_size());
            let candidates = ranks[first..last]
                .iter()
                .map(|r| (r.cache(), r.waiting_blocks()));
            first + router.route_by_cache(ids.of(i), prompt_blocks, candidates)
        } else {
            let w = pool.start + router.route(pool.len());
            workers[w].pick_rank()
        }
    }

    /// Send request `i` at `now`: it arrives (TTFT counts from here).
    fn send(&mut self, workload: &Workload, i: usize, now: f64, records: &mut Records) {
        self.events += 1;
        records.arrival_ms[i] = now;
        self.arrive(workload, i, records);
    }

    /// Offload tiers: hand what rank `r`'s G1 evicted since the last call to its G2.
    fn offload_evicted(&mut self, r: usize) {
        let Some(tiers) = &mut self.tiers else {
            return;
        };
        self.evicted.clear();
        self.ranks[r].drain_evicted_into(&mut self.evicted);
        if !self.evicted.is_empty() {
            tiers.offload(r, &self.evicted);
        }
    }

    /// Offload tiers: look up the requests rank `rank` could admit next in G2/G3; those whose
    /// blocks right after the G1 prefix hit are there, and that G1 can hold now, leave the queue
    /// while the blocks are onboarded (just before they would be admitted, so the blocks are
    /// still there when they are).
    fn onboard_heads(&mut self, rank: usize, now: f64, records: &mut Records) -> Result<()> {
        let Some(tiers) = &mut self.tiers else {
            return Ok(());
        };
        let mut heads = std::mem::take(&mut self.heads);
        self.ranks[rank].take_unchecked_heads(&mut heads);
        for &handle in &heads {
            let sched = &mut self.ranks[rank];
            let ids = sched.prompt_ids(handle);
            let hit = sched.cache().lookup(ids);
            let g1 = hit.blocks as usize;
            let (k2, k3) = tiers.lookup(rank, &ids[g1..]);
            let i = sched.request_of(handle);
            records.g1_hit_blocks[i] = hit.blocks;
            records.g2_hit_blocks[i] = k2;
            records.g3_hit_blocks[i] = k3;
            if k2 + k3 == 0 {
                continue;
            }
            if !sched.hold_for_onboard(handle, hit, k2 + k3) {
                tiers.counters.onboards_skipped += 1;
                continue;
            }
            sched.unqueue(handle);
            let ids = sched.prompt_ids(handle);
            let (a, b) = (g1 + k2 as usize, g1 + (k2 + k3) as usize);
            tiers.start_onboard(now, rank, handle, i as u32, &ids[g1..a], &ids[a..b])?;
            records.onboard_start_ms[i] = now;
        }
        self.heads = heads;
        // Holding blocks may have evicted others.
        self.offload_evicted(rank);
        Ok(())
    }

    /// Offload tiers: request `o` is onboarded at `now` and queues first on its rank.
    fn onboard_done(&mut self, o: Onboard, now: f64, records: &mut Records) {
        records.onboard_end_ms[o.request as usize] = now;
        self.ranks[o.rank as usize].finish_onboard(o.handle);
        self.touch(self.worker_of(o.rank as usize));
    }

    /// Route arriving request `i`: reject it if it can never be served, else queue it.
    fn arrive(&mut self, workload: &Workload, i: usize, records: &mut Records) {
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
                self.ranks[rank].enqueue(workload, i);
                self.touch(w);
            }
        }
    }

    /// Start a grouped pass on idle worker `w`: every rank with work plans its pass, and the
    /// group ends when the slowest rank ends. Returns the group's duration (ms), if any rank
    /// scheduled anything.
    fn start_pass(&mut self, w: usize, now: f64, records: &mut Records) -> Result<Option<f64>> {
        let mut longest: Option<f64> = None;
        for r in self.workers[w].ranks() {
            self.onboard_heads(r, now, records)?;
            let rank = &mut self.ranks[r];
            if !rank.has_work() {
                continue;
            }
            let planned = rank.start_pass(now, records);
            self.offload_evicted(r);
            let rank = &self.ranks[r];
            match planned {
                Some(ms) => longest = Some(longest.map_or(ms, |l: f64| l.max(ms))),
                // The queue head waits for blocks tied to transfers; their end touches us.
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
        self.workers[w].busy = longest.is_some();
        Ok(longest)
    }

    /// The grouped pass of worker `w` ended; a prefill worker's finished prompts go to decode
    /// workers.
    fn pass_end(&mut self, w: usize, now: f64, workload: &Workload, records: &mut Records) {
        self.workers[w].busy = false;
        self.touch(w);
        for r in self.workers[w].ranks() {
            if !self.ranks[r].is_busy() {
                continue;
            }
            self.ranks[r].finish_pass(now, records);
            if w >= self.num_prefill {
                continue;
            }
            let handoffs: Vec<(u32, u32)> = self.ranks[r].take_handoffs().collect();
            let all = self.workers.len();
            for (request, src_handle) in handoffs {
                let dst_rank = Self::route(
                    &mut self.decode_router,
                    &mut self.workers,
                    &self.ranks,
                    self.num_prefill..all,
                    workload,
                    request as usize,
                );
                let d = self.worker_of(dst_rank);
                records.decode_worker[request as usize] = (d - self.num_prefill) as i32;
                self.pending[dst_rank - self.num_prefill_ranks].push_back(Handoff {
                    request,
                    src: r as u32,
                    src_handle,
                });
                self.touch(d);
            }
        }
    }

    /// Start the transfers decode worker `w`'s ranks have room for, in arrival order.
    fn reserve(
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
                let r = h.request as usize;
                let tokens = match self.sizing {
                    TransferSizing::FullPrompt => workload.input_length[r],
                    TransferSizing::DestinationMissing => workload.input_length[r] - cached,
                };
                let bytes = f64::from(tokens) * self.kv_bytes_per_token;
                records.transfer_bytes[r] = bytes;
                records.transfer_start_ms[r] = now;
                let id = self.transport.start(now, h.src as usize, d, bytes)? as usize;
                if id >= self.in_flight.len() {
                    self.in_flight.resize(id + 1, None);
                }
                self.in_flight[id] = Some(InFlight {
                    handoff: h,
                    dst: rank as u32,
                    dst_handle,
                });
            }
            self.offload_evicted(rank);
        }
        Ok(())
    }

    /// Whether worker `w`'s plain decode passes touch nothing but itself, so they can run
    /// without the event loop (`Scheduler::run_plain_decodes`): one rank, not a prefill worker,
    /// no handoffs waiting for it, no onboarding from offload tiers under way (plain passes
    /// neither look requests up in the tiers nor evict blocks to them).
    fn runs_alone(&self, w: usize) -> bool {
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
    fn horizon(&mut self, w: usize, next_send: f64) -> Result<f64> {
        // A tier flow ending reaches only the rank it onboards to (not `w`: it onboards
        // nothing), unless that rank then hands requests over or ends one others wait for.
        let tiers = match &mut self.tiers {
            Some(tiers) if self.num_prefill > 0 || self.ends_send => tiers.next_finish_ms()?,
            _ => None,
        };
        let mut horizon = [Some(next_send), self.transport.next_finish_ms()?, tiers]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        for (k, worker) in self.workers.iter().enumerate() {
            let matters = k < self.num_prefill
                || self.ends_send
                || (self.disaggregated()
                    && worker
                        .ranks()
                        .any(|r| !self.pending[r - self.num_prefill_ranks].is_empty()));
            if k != w && worker.busy && matters {
                horizon = horizon.min(worker.pass_end_ms);
            }
        }
        Ok(horizon)
    }

    /// The worker owning rank `r`.
    fn worker_of(&self, r: usize) -> usize {
        self.workers
            .partition_point(|w| w.first_rank + w.ranks <= r)
    }

    /// Transfer `id` finished at `now`: the decode rank activates the request, the prefill
    /// rank releases its copy.
    fn transfer_done(&mut self, id: u64, now: f64, records: &mut Records) -> Result<()> {
        let f = self.in_flight[id as usize].take().ok_or_else(|| {
            SimError::Internal(format!("transfer {id} finished twice or never started"))
        })?;
        records.transfer_end_ms[f.handoff.request as usize] = now;
        let (dst, src) = (f.dst as usize, f.handoff.src as usize);
        self.ranks[dst].activate_remote(f.dst_handle, now, self.first_token_on_arrival, records);
        self.ranks[src].release_handoff(f.handoff.src_handle);
        self.touch(self.worker_of(dst));
        self.touch(self.worker_of(src));
        Ok(())
    }
}

/// Decides when each request is sent: at its timestamp (open loop), when a slot frees (closed
/// loop), or, for a later turn of a session, when the previous turn ends plus its delay.
struct Dispatcher {
    /// Row timestamps from 0, divided by the arrival speedup (ms).
    timestamps: Vec<f64>,
    /// Think time before each later turn (ms, NaN: the timestamp gap), speedup applied.
    delay_ms: Option<Vec<f64>>,
    next_turn: Vec<u32>,
    follows: Vec<bool>,
    /// The next row that starts a session (or stands alone) and is not sent yet.
    cursor: usize,
    concurrency: Option<u32>,
    active_sessions: u32,
    /// When the later turns already scheduled are sent, as `f64::to_bits` of times >= 0 (which
    /// order like the times), earliest on top.
    sends_ms: BinaryHeap<Reverse<u64>>,
}

impl Dispatcher {
    fn new(workload: &Workload, config: &SimConfig) -> Self {
        let t0 = workload.arrival_ms.first().copied().unwrap_or(0.0);
        let speedup = config.cluster.arrival_speedup_ratio;
        let (next_turn, follows) = workload.session_turns();
        let mut d = Dispatcher {
            timestamps: workload
                .arrival_ms
                .iter()
                .map(|&t| (t - t0) / speedup)
                .collect(),
            delay_ms: workload
                .delay_ms
                .map(|d| d.iter().map(|&x| x / speedup).collect()),
            next_turn,
            follows,
            cursor: 0,
            concurrency: config.cluster.concurrency,
            active_sessions: 0,
            sends_ms: BinaryHeap::new(),
        };
        d.skip_follow_ups();
        d
    }

    fn skip_follow_ups(&mut self) {
        while self.cursor < self.follows.len() && self.follows[self.cursor] {
            self.cursor += 1;
        }
    }

    /// Open loop: when the next session starts (ms), if one is left.
    fn next_start_ms(&self) -> Option<f64> {
        match self.concurrency {
            None => self.timestamps.get(self.cursor).copied(),
            Some(_) => None,
        }
    }

    /// When the next later turn already scheduled is sent (ms).
    fn next_send_ms(&self) -> Option<f64> {
        self.sends_ms.peek().map(|t| f64::from_bits(t.0))
    }

    /// The earliest scheduled later turn is being sent.
    fn sending(&mut self) {
        self.sends_ms.pop();
    }

    /// Rows that start a session at `now`: those due in open loop, or as many as free slots
    /// allow in closed loop.
    fn starts(&mut self, now: f64, out: &mut Vec<u32>) {
        while self.cursor < self.timestamps.len() {
            let go = match self.concurrency {
                None => self.timestamps[self.cursor] <= now,
                Some(limit) => self.active_sessions < limit,
            };
            if !go {
                break;
            }
            self.active_sessions += 1;
            out.push(self.cursor as u32);
            self.cursor += 1;
            self.skip_follow_ups();
        }
    }

    /// Request `i` ended at `now`: schedule its session's next turn, or free its slot.
    fn finished(&mut self, i: usize, now: f64, queue: &mut EventQueue<Event>) {
        let next = self.next_turn[i];
        if next == u32::MAX {
            self.active_sessions -= 1;
            return;
        }
        let n = next as usize;
        let delay = self.delay_ms.as_ref().map_or(f64::NAN, |d| d[n]);
        let wait = if delay.is_nan() {
            self.timestamps[n] - self.timestamps[i]
        } else {
            delay
        };
        queue.push(now + wait, Event::Send { request: next });
        self.sends_ms.push(Reverse((now + wait).to_bits()));
    }
}

/// Replay `workload` under `config`. `progress`, when given, is kept equal to the number of
/// requests finished (completed or rejected) so another thread can show progress.
pub fn replay(
    workload: &Workload,
    config: &SimConfig,
    progress: Option<&AtomicU64>,
) -> Result<Report> {
    run(workload, config, progress, true)
}

/// `replay`; `chain_plain_passes: false` sends every pass through the event loop (the tests
/// check that chaining changes nothing).
fn run(
    workload: &Workload,
    config: &SimConfig,
    progress: Option<&AtomicU64>,
    chain_plain_passes: bool,
) -> Result<Report> {
    config.check_replayable()?;
    workload.validate()?;
    let ends_send = workload.session.is_some() || config.cluster.concurrency.is_some();
    let mut cluster = Cluster::new(config, workload, ends_send)?;
    let mut dispatcher = Dispatcher::new(workload, config);
    // Arrival times are known up front only for open-loop session starts.
    let arrivals: Vec<f64> = (0..workload.len())
        .map(|i| match config.cluster.concurrency {
            None if !dispatcher.follows[i] => dispatcher.timestamps[i],
            _ => f64::NAN,
        })
        .collect();
    let mut records = Records::new(arrivals, workload.input_length, workload.output_length);
    if cluster.tiers.is_some() {
        records.enable_tiers();
    }
    let mut onboarded: Vec<Onboard> = Vec::new();
    let mut sampler = Sampler::new(config.report.sample_interval_ms, cluster.workers.len());
    let mut queue: EventQueue<Event> = EventQueue::default();
    let mut counters = Counters::default();
    let mut finished_transfers: Vec<u64> = Vec::new();
    let mut to_send: Vec<u32> = Vec::new();
    let mut done: Vec<u32> = Vec::new();
    let mut new_passes: Vec<u32> = Vec::new();
    let mut now = 0.0_f64;
    let mut started = false;

    loop {
        let next = [
            dispatcher.next_start_ms(),
            queue.peek_time(),
            cluster.transport.next_finish_ms()?,
            match &mut cluster.tiers {
                Some(tiers) => tiers.next_finish_ms()?,
                None => None,
            },
        ];
        let t = next.into_iter().flatten().reduce(f64::min);
        // The closed loop starts at 0 with no event before it (once: an empty workload ends).
        let Some(t) = t.or((!started).then_some(0.0)) else {
            break;
        };
        started = true;
        now = t;
        sampler.record_until(now, &cluster, false);
        // Onboards that end now queue first, ahead of what arrives now; flows start after.
        if let Some(tiers) = &mut cluster.tiers {
            onboarded.clear();
            tiers.pop_finished(now, &mut onboarded)?;
            for &o in &onboarded {
                cluster.events += 1;
                cluster.onboard_done(o, now, &mut records);
            }
        }
        dispatcher.starts(now, &mut to_send);
        for i in to_send.drain(..) {
            cluster.send(workload, i as usize, now, &mut records);
        }
        while let Some(event) = queue.pop_due(now) {
            match event {
                Event::PassEnd { worker } => {
                    cluster.events += 1;
                    cluster.pass_end(worker as usize, now, workload, &mut records);
                }
                Event::Send { request } => {
                    dispatcher.sending();
                    cluster.send(workload, request as usize, now, &mut records);
                }
            }
        }
        finished_transfers.clear();
        cluster
            .transport
            .pop_finished(now, &mut finished_transfers)?;
        for &id in &finished_transfers {
            cluster.events += 1;
            cluster.transfer_done(id, now, &mut records)?;
        }
        // Ends free closed-loop slots and release later session turns; what they send can
        // itself be rejected at once, so repeat until nothing more ends.
        while !records.just_finished.is_empty() {
            std::mem::swap(&mut done, &mut records.just_finished);
            for &i in &done {
                dispatcher.finished(i as usize, now, &mut queue);
            }
            done.clear();
            dispatcher.starts(now, &mut to_send);
            for i in to_send.drain(..) {
                cluster.send(workload, i as usize, now, &mut records);
            }
        }
        // Ascending worker order keeps event insertion, hence tie-breaking, deterministic.
        cluster.dirty.sort_unstable();
        for k in 0..cluster.dirty.len() {
            let w = cluster.dirty[k] as usize;
            cluster.is_dirty[w] = false;
            let between_passes = !cluster.workers[w].busy || cluster.first_token_on_arrival;
            if cluster.disaggregated() && w >= cluster.num_prefill && between_passes {
                cluster.reserve(w, now, workload, &mut records)?;
            }
            if cluster.workers[w].busy {
                continue;
            }
            if let Some(ms) = cluster.start_pass(w, now, &mut records)? {
                cluster.workers[w].pass_end_ms = now + ms;
                new_passes.push(w as u32);
            }
        }
        cluster.dirty.clear();
        // Chain only once every worker has started what it starts now: their pass ends bound
        // the horizon.
        for &w in &new_passes {
            let w = w as usize;
            if chain_plain_passes && cluster.runs_alone(w) {
                let next_send = [dispatcher.next_start_ms(), dispatcher.next_send_ms()]
                    .into_iter()
                    .flatten()
                    .fold(f64::INFINITY, f64::min);
                let horizon = cluster.horizon(w, next_send)?;
                let end = cluster.workers[w].pass_end_ms;
                let rank = &mut cluster.ranks[cluster.workers[w].first_rank];
                let (last_end, passes) = rank.run_plain_decodes(now, end, horizon, &mut records);
                cluster.workers[w].pass_end_ms = last_end;
                cluster.events += passes;
            }
            let end = cluster.workers[w].pass_end_ms;
            queue.push(end, Event::PassEnd { worker: w as u32 });
        }
        new_passes.clear();
        if let Some(p) = progress {
            p.store(records.finished as u64, Ordering::Relaxed);
        }
    }
    sampler.record_until(now, &cluster, true);

    if let Some(i) = records
        .status
        .iter()
        .position(|&s| s == Status::Pending as u8)
    {
        return Err(SimError::Internal(format!(
            "request {i} neither completed nor was rejected"
        )));
    }
    for w in &cluster.ranks {
        counters.passes += w.passes();
        counters.preemptions += w.preemptions();
        counters.evictions += w.cache().evictions();
    }
    counters.events = cluster.events;
    counters.rate_recomputations = cluster.transport.recomputations();
    counters.link_utilization = cluster.transport.utilization(now);
    counters.tiers = cluster.tiers.as_ref().map(Tiers::finish);
    Ok(Report::build(
        records,
        sampler.series,
        counters,
        now,
        config,
    ))
}

/// Samples cluster state on a fixed grid of the virtual clock.
struct Sampler {
    series: TimeSeries,
    next_ms: f64,
}

impl Sampler {
    fn new(interval_ms: f64, num_workers: usize) -> Self {
        Sampler {
            series: TimeSeries {
                interval_ms,
                num_workers,
                ..TimeSeries::default()
            },
            next_ms: 0.0,
        }
    }

    /// Record the (unchanged) state at every grid time before `now` (up to and including it
    /// when `inclusive`): the state between two event instants is constant.
    fn record_until(&mut self, now: f64, cluster: &Cluster, inclusive: bool) {
        let ranks = &cluster.ranks;
        while self.next_ms < now || (inclusive && self.next_ms <= now) {
            let s = &mut self.series;
            s.time_ms.push(self.next_ms);
            s.queued
                .push(ranks.iter().map(|r| r.waiting_len() as u32).sum());
            s.running
                .push(ranks.iter().map(|r| r.running_len() as u32).sum());
            s.kv_blocks_used.extend(
                cluster
                    .workers
                    .iter()
                    .map(|w| w.ranks().map(|r| ranks[r].cache().active()).sum::<u32>()),
            );
            if let Some(tiers) = &cluster.tiers {
                s.g2_blocks_used.push(tiers.g2_used());
                s.g3_blocks_used.push(tiers.g3_used());
            }
            self.next_ms = s.time_ms.len() as f64 * s.interval_ms;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Everything a replay reports except the inter-token mean and spread, whose sums depend
    /// on the order workers push their gaps in.
    fn observed(report: &Report) -> String {
        let r = &report.records;
        let mut summary: serde_json::Value =
            serde_json::from_str(&report.summary_json()).expect("summary is JSON");
        let itl = &mut summary["itl_ms"];
        itl["mean"] = serde_json::Value::Null;
        itl["std"] = serde_json::Value::Null;
        format!(
            "{:?}",
            (
                (&r.first_admit_ms, &r.first_token_ms, &r.second_token_ms),
                (
                    &r.last_token_ms,
                    &r.reused_tokens,
                    &r.worker,
                    &r.decode_worker
                ),
                (&r.transfer_start_ms, &r.transfer_end_ms, &r.status),
                (&r.preemptions, &report.timeseries.kv_blocks_used),
                summary.to_string(),
            )
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Chaining plain decode passes outside the event loop gives the replay the loop gives.
        #[test]
        fn chained_passes_change_nothing(
            rows in prop::collection::vec((0u32..60, 1u32..700, 1u32..200, 0u64..6), 1..40),
            sessions in 0usize..4,
            concurrency in prop::option::of(1u32..4),
            workers in 1u32..4,
            dp in 1u32..3,
            disaggregated in any::<bool>(),
            kv_aware in any::<bool>(),
            block_size in 2u32..24,
            num_gpu_blocks in 60u32..400,
            max_num_seqs in 1u32..9,
            (fifo, line_rate, first_decode_pass) in any::<(bool, bool, bool)>(),
            tiers in prop::option::of((1u32..64, prop::option::of(1u32..128), any::<bool>())),
        ) {
            let tbs = 32;
            let (mut arrival, mut input, mut output) = (vec![], vec![], vec![]);
            let (mut offsets, mut ids) = (vec![0u64], vec![]);
            let mut t = 0.0;
            for (k, &(gap, prompt, out, family)) in rows.iter().enumerate() {
                t += f64::from(gap);
                arrival.push(t);
                input.push(prompt);
                output.push(out);
                // Requests of one family share a prefix; the rest of each prompt is its own.
                for b in 0..u64::from(prompt.div_ceil(tbs)) {
                    ids.push(if b < 3 { family * 1000 + b } else { 1_000_000 * (k as u64 + 1) + b });
                }
                offsets.push(ids.len() as u64);
            }
            // Request k is a turn of session k % sessions (sessions first appear in order).
            let session: Vec<i64> = (0..rows.len()).map(|k| (k % sessions.max(1)) as i64).collect();
            let delay: Vec<f64> = (0..rows.len())
                .map(|k| if k < sessions || k % 2 == 0 { f64::NAN } else { (k % 7) as f64 })
                .collect();
            let with_sessions = sessions > 0;
            let workload = Workload {
                arrival_ms: &arrival,
                input_length: &input,
                output_length: &output,
                hash_offsets: &offsets,
                hash_ids: &ids,
                trace_block_size: tbs,
                session: with_sessions.then_some(&session[..]),
                delay_ms: with_sessions.then_some(&delay[..]),
            };
            let offload = tiers.map_or(String::new(), |(g2, g3, shared)| {
                let g3 = g3.map_or(String::new(), |g3| format!(r#","g3_blocks":{g3},"g3_shared":{shared}"#));
                format!(r#","offload":{{"g2_blocks":{g2}{g3},"g1_g2_gbps":0.01,"g2_g3_gbps":0.005}}"#)
            });
            let closed = concurrency.map_or(String::new(), |c| format!(r#","concurrency":{c}"#));
            let mode = if disaggregated {
                format!(r#""mode":"disaggregated","num_prefill_workers":{workers},"num_decode_workers":{workers}"#)
            } else {
                format!(r#""num_workers":{workers}"#)
            };
            let router = if kv_aware { "kv_aware" } else { "round_robin" };
            let preemption = if fifo { "fifo" } else { "lifo" };
            let link = if line_rate { "line_rate" } else { "max_min" };
            let first_token = if first_decode_pass { "first_decode_pass" } else { "kv_arrival" };
            let config = SimConfig::from_json(&format!(
                r#"{{"cluster":{{{mode},"router":"{router}"{closed}}},
                    "engine":{{"block_size":{block_size},"num_gpu_blocks":{num_gpu_blocks},
                               "max_num_batched_tokens":256,"data_parallel_size":{dp},
                               "max_num_seqs":{max_num_seqs},"preemption_mode":"{preemption}"}},
                    "kv_transfer":{{"kv_bytes_per_token":100000,"bandwidth_gbps":1,
                                    "link_model":"{link}","first_token":"{first_token}"}},
                    "report":{{"sample_interval_ms":50}}{offload}}}"#
            ))
            .unwrap();
            let chained = run(&workload, &config, None, true).unwrap();
            let stepped = run(&workload, &config, None, false).unwrap();
            prop_assert_eq!(observed(&chained), observed(&stepped));
            let (a, b) = (chained.summary.itl_ms.mean, stepped.summary.itl_ms.mean);
            prop_assert!(a.zip(b).is_none_or(|(a, b)| (a - b).abs() <= 1e-9 * b.abs()));
        }
    }
}
