//! The discrete-event replay of a workload on a cluster: aggregated workers, or prefill and
//! decode workers joined by KV transfers.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::{Role, ServingMode, SimConfig, TransferSizing};
use crate::error::{Result, SimError};
use crate::event_queue::EventQueue;
use crate::report::{Counters, Records, Report, Status, TimeSeries};
use crate::router::Router;
use crate::scheduler::Scheduler;
use crate::timing::StepTimer;
use crate::transfer::Transport;
use crate::workload::Workload;

/// Something that happens at an instant of the virtual clock. Arrivals come from the sorted
/// workload instead, and transfers finish inside the `Transport`.
#[derive(Debug, Clone, Copy)]
enum Event {
    PassEnd { worker: u32 },
}

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

/// The workers and what joins them. Prefill workers come first, then decode workers; in
/// aggregated mode every worker is aggregated and `num_prefill` is 0.
struct Cluster {
    workers: Vec<Scheduler>,
    num_prefill: usize,
    /// Workers whose state changed at this instant and may start a pass, deduplicated.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    router: Router,
    decode_router: Router,
    /// Per decode worker, handoffs waiting for a block reservation, FIFO.
    pending: Vec<std::collections::VecDeque<Handoff>>,
    transport: Transport,
    in_flight: Vec<Option<InFlight>>,
    sizing: TransferSizing,
    kv_bytes_per_token: f64,
}

impl Cluster {
    fn new(config: &SimConfig) -> Result<Self> {
        let c = &config.cluster;
        let (roles, num_prefill, num_decode) = match c.mode {
            ServingMode::Aggregated => (vec![Role::Aggregated; c.num_workers as usize], 0, 0),
            ServingMode::Disaggregated => {
                let (p, d) = (
                    c.num_prefill_workers as usize,
                    c.num_decode_workers as usize,
                );
                let mut roles = vec![Role::Prefill; p];
                roles.extend(std::iter::repeat_n(Role::Decode, d));
                (roles, p, d)
            }
        };
        let workers: Vec<Scheduler> = roles
            .iter()
            .map(|&role| {
                let (engine, timing) = config.role(role);
                let kv_tokens = u64::from(engine.num_gpu_blocks) * u64::from(engine.block_size);
                Scheduler::new(
                    role,
                    engine.clone(),
                    StepTimer::new(timing.clone(), kv_tokens),
                )
            })
            .collect();
        let n = workers.len();
        Ok(Cluster {
            workers,
            num_prefill,
            dirty: Vec::with_capacity(n),
            is_dirty: vec![false; n],
            router: Router::new(c.router, if num_prefill > 0 { num_prefill } else { n }),
            decode_router: Router::new(c.router, num_decode.max(1)),
            pending: vec![Default::default(); num_decode],
            transport: Transport::new(&config.kv_transfer, num_prefill, num_decode)?,
            in_flight: Vec::new(),
            sizing: config.kv_transfer.sizing(),
            kv_bytes_per_token: config.kv_transfer.bytes_per_token(),
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

    /// Route arriving request `i`: reject it if it can never be served, else queue it.
    fn arrive(&mut self, workload: &Workload, i: usize, records: &mut Records) {
        let w = self.router.route();
        records.worker[i] = w as i32;
        let (prompt, output) = (workload.input_length[i], workload.output_length[i]);
        // In disaggregated mode the decode pool must be able to hold it too (all decode
        // workers share one configuration).
        let verdict = self.workers[w].never_fits(prompt, output).or_else(|| {
            self.disaggregated()
                .then(|| self.workers[self.num_prefill].never_fits(prompt, output))
                .flatten()
        });
        match verdict {
            Some(reason) => records.reject(i, reason),
            None => {
                self.workers[w].enqueue(workload, i);
                self.touch(w);
            }
        }
    }

    /// A pass ended on worker `w`; a prefill worker's finished prompts go to decode workers.
    fn pass_end(&mut self, w: usize, now: f64, records: &mut Records) {
        self.workers[w].finish_pass(now, records);
        self.touch(w);
        if w < self.num_prefill {
            let handoffs: Vec<(u32, u32)> = self.workers[w].take_handoffs().collect();
            for (request, src_handle) in handoffs {
                let d = self.decode_router.route();
                records.decode_worker[request as usize] = d as i32;
                self.pending[d].push_back(Handoff {
                    request,
                    src: w as u32,
                    src_handle,
                });
                self.touch(self.num_prefill + d);
            }
        }
    }

    /// Start the transfers decode worker `d` has room for, in arrival order.
    fn reserve(
        &mut self,
        d: usize,
        now: f64,
        workload: &Workload,
        records: &mut Records,
    ) -> Result<()> {
        let worker = &mut self.workers[self.num_prefill + d];
        while let Some(&h) = self.pending[d].front() {
            let Some((dst_handle, cached)) = worker.reserve_remote(workload, h.request as usize)
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
                dst: d as u32,
                dst_handle,
            });
        }
        Ok(())
    }

    /// Transfer `id` finished at `now`: the decode worker activates the request, the prefill
    /// worker releases its copy.
    fn transfer_done(&mut self, id: u64, now: f64, records: &mut Records) -> Result<()> {
        let f = self.in_flight[id as usize].take().ok_or_else(|| {
            SimError::Internal(format!("transfer {id} finished twice or never started"))
        })?;
        records.transfer_end_ms[f.handoff.request as usize] = now;
        let d = self.num_prefill + f.dst as usize;
        self.workers[d].activate_remote(f.dst_handle, now, records);
        self.workers[f.handoff.src as usize].release_handoff(f.handoff.src_handle);
        self.touch(d);
        self.touch(f.handoff.src as usize);
        Ok(())
    }
}

/// Replay `workload` under `config`. `progress`, when given, is kept equal to the number of
/// requests finished (completed or rejected) so another thread can show progress.
pub fn replay(
    workload: &Workload,
    config: &SimConfig,
    progress: Option<&AtomicU64>,
) -> Result<Report> {
    config.validate()?;
    workload.validate()?;
    let n = workload.len();
    let mut cluster = Cluster::new(config)?;
    let t0 = workload.arrival_ms.first().copied().unwrap_or(0.0);
    let speedup = config.cluster.arrival_speedup_ratio;
    let arrivals: Vec<f64> = workload
        .arrival_ms
        .iter()
        .map(|&t| (t - t0) / speedup)
        .collect();
    let mut records = Records::new(arrivals, workload.input_length, workload.output_length);
    let mut sampler = Sampler::new(config.report.sample_interval_ms, cluster.workers.len());
    let mut queue: EventQueue<Event> = EventQueue::default();
    let mut counters = Counters::default();
    let mut finished_transfers: Vec<u64> = Vec::new();
    let mut next_arrival = 0usize;
    let mut now = 0.0_f64;

    loop {
        let next = [
            records.arrival_ms.get(next_arrival).copied(),
            queue.peek_time(),
            cluster.transport.next_finish_ms()?,
        ];
        let Some(t) = next.into_iter().flatten().reduce(f64::min) else {
            break;
        };
        now = t;
        sampler.record_until(now, &cluster.workers, false);
        while next_arrival < n && records.arrival_ms[next_arrival] <= now {
            counters.events += 1;
            cluster.arrive(workload, next_arrival, &mut records);
            next_arrival += 1;
        }
        while let Some(Event::PassEnd { worker }) = queue.pop_due(now) {
            counters.events += 1;
            cluster.pass_end(worker as usize, now, &mut records);
        }
        finished_transfers.clear();
        cluster
            .transport
            .pop_finished(now, &mut finished_transfers)?;
        for &id in &finished_transfers {
            counters.events += 1;
            cluster.transfer_done(id, now, &mut records)?;
        }
        // Ascending worker order keeps event insertion, hence tie-breaking, deterministic.
        cluster.dirty.sort_unstable();
        for k in 0..cluster.dirty.len() {
            let w = cluster.dirty[k] as usize;
            cluster.is_dirty[w] = false;
            if cluster.disaggregated() && w >= cluster.num_prefill {
                cluster.reserve(w - cluster.num_prefill, now, workload, &mut records)?;
            }
            let worker = &mut cluster.workers[w];
            if worker.is_busy() || !worker.has_work() {
                continue;
            }
            match worker.start_pass(now, &mut records) {
                Some(ms) => queue.push(now + ms, Event::PassEnd { worker: w as u32 }),
                // The queue head waits for blocks tied to transfers; their end touches us.
                None if worker.awaits_transfers() => {}
                // Otherwise every running request needs at least one token, the budget is at
                // least one, and an empty worker admits its queue head (it fits an empty cache).
                None => {
                    return Err(SimError::Internal(format!(
                        "worker {w} scheduled nothing at {now} ms with {} waiting and {} running",
                        worker.waiting_len(),
                        worker.running_len()
                    )));
                }
            }
        }
        cluster.dirty.clear();
        if let Some(p) = progress {
            p.store(records.finished as u64, Ordering::Relaxed);
        }
    }
    sampler.record_until(now, &cluster.workers, true);

    if let Some(i) = records
        .status
        .iter()
        .position(|&s| s == Status::Pending as u8)
    {
        return Err(SimError::Internal(format!(
            "request {i} neither completed nor was rejected"
        )));
    }
    for w in &cluster.workers {
        counters.passes += w.passes();
        counters.preemptions += w.preemptions();
        counters.evictions += w.cache().evictions();
    }
    counters.rate_recomputations = cluster.transport.recomputations();
    counters.link_utilization = cluster.transport.utilization(now);
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
    fn record_until(&mut self, now: f64, workers: &[Scheduler], inclusive: bool) {
        while self.next_ms < now || (inclusive && self.next_ms <= now) {
            let s = &mut self.series;
            s.time_ms.push(self.next_ms);
            s.queued
                .push(workers.iter().map(|w| w.waiting_len() as u32).sum());
            s.running
                .push(workers.iter().map(|w| w.running_len() as u32).sum());
            s.kv_blocks_used
                .extend(workers.iter().map(|w| w.cache().active()));
            self.next_ms = s.time_ms.len() as f64 * s.interval_ms;
        }
    }
}
