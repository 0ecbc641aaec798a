//! The discrete-event replay of a workload on a cluster of aggregated workers.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::SimConfig;
use crate::error::{Result, SimError};
use crate::event_queue::EventQueue;
use crate::report::{Counters, Records, Report, Status, TimeSeries};
use crate::router::Router;
use crate::scheduler::Scheduler;
use crate::timing::StepTimer;
use crate::workload::Workload;

/// Something that happens at an instant of the virtual clock (arrivals come from the sorted
/// workload instead, ahead of any event at the same instant).
#[derive(Debug, Clone, Copy)]
enum Event {
    PassEnd { worker: u32 },
}

struct Cluster {
    workers: Vec<Scheduler>,
    /// Workers whose state changed at this instant and may start a pass, deduplicated.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
}

impl Cluster {
    fn touch(&mut self, w: usize) {
        if !self.is_dirty[w] {
            self.is_dirty[w] = true;
            self.dirty.push(w as u32);
        }
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
    let num_workers = config.cluster.num_workers as usize;
    let engine = &config.engine;
    let kv_tokens = u64::from(engine.num_gpu_blocks) * u64::from(engine.block_size);
    let timer = StepTimer::new(config.timing.clone(), kv_tokens);
    let mut cluster = Cluster {
        workers: (0..num_workers)
            .map(|_| Scheduler::new(engine.clone(), timer.clone()))
            .collect(),
        dirty: Vec::with_capacity(num_workers),
        is_dirty: vec![false; num_workers],
    };
    let mut router = Router::new(config.cluster.router, num_workers);
    let t0 = workload.arrival_ms.first().copied().unwrap_or(0.0);
    let speedup = config.cluster.arrival_speedup_ratio;
    let arrivals: Vec<f64> = workload
        .arrival_ms
        .iter()
        .map(|&t| (t - t0) / speedup)
        .collect();
    let mut records = Records::new(arrivals, workload.input_length, workload.output_length);
    let mut sampler = Sampler::new(config.report.sample_interval_ms, num_workers);
    let mut queue: EventQueue<Event> = EventQueue::default();
    let mut counters = Counters::default();
    let mut next_arrival = 0usize;
    let mut now = 0.0_f64;

    loop {
        let arrival_t = records.arrival_ms.get(next_arrival).copied();
        let event_t = queue.peek_time();
        now = match (arrival_t, event_t) {
            (Some(a), Some(e)) => a.min(e),
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (None, None) => break,
        };
        sampler.record_until(now, &cluster.workers, false);
        while next_arrival < n && records.arrival_ms[next_arrival] <= now {
            let i = next_arrival;
            next_arrival += 1;
            counters.events += 1;
            let w = router.route();
            records.worker[i] = w as i32;
            let worker = &mut cluster.workers[w];
            match worker.never_fits(workload.input_length[i], workload.output_length[i]) {
                Some(reason) => records.reject(i, reason),
                None => {
                    worker.enqueue(workload, i);
                    cluster.touch(w);
                }
            }
        }
        while let Some(Event::PassEnd { worker }) = queue.pop_due(now) {
            counters.events += 1;
            cluster.workers[worker as usize].finish_pass(now, &mut records);
            cluster.touch(worker as usize);
        }
        // Ascending worker order keeps event insertion, hence tie-breaking, deterministic.
        cluster.dirty.sort_unstable();
        for k in 0..cluster.dirty.len() {
            let w = cluster.dirty[k] as usize;
            cluster.is_dirty[w] = false;
            let worker = &mut cluster.workers[w];
            if worker.is_busy() || !worker.has_work() {
                continue;
            }
            match worker.start_pass(now, &mut records) {
                Some(ms) => queue.push(now + ms, Event::PassEnd { worker: w as u32 }),
                None if worker.running_len() == 0 => {
                    return Err(SimError::Internal(format!(
                        "worker {w} stalled at {now} ms with {} waiting requests and an empty batch",
                        worker.waiting_len()
                    )));
                }
                // Running requests exist but none could be scheduled: impossible, as every
                // running request needs at least one token and the budget is at least one.
                None => {
                    return Err(SimError::Internal(format!(
                        "worker {w} scheduled nothing at {now} ms with {} running requests",
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
