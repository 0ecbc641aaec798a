//! What the time series record: the cluster's state between two event instants.
//!
//! The state is kept, not re-read: the replay loop hands over the workers whose state may have
//! changed at an instant (its dirty list), only their columns are read again, and the series
//! hear only of the columns that changed. An instant then costs what changed at it, not the
//! cluster's size. Debug builds check the kept state against a full read at every instant.

use super::cluster::Cluster;
use crate::time_series::{Shape, TimeSeries};

/// Records the cluster's state over the virtual clock into bounded buckets, and each worker's
/// busy time exactly.
pub(super) struct Sampler {
    pub(super) series: TimeSeries,
    /// Time each worker spent running passes (ms).
    pub(super) busy_ms: Vec<f64>,
    last_ms: f64,
    workers: usize,
    /// The state now, every series' columns in order: queued, running, KV blocks per worker,
    /// busy per worker, then link and tier columns.
    values: Vec<f64>,
    /// Columns that may have changed since the series last observed them, and a flag per column.
    changed: Vec<usize>,
    is_changed: Vec<bool>,
    /// Each worker's waiting and running requests, as last read.
    queued: Vec<u64>,
    running: Vec<u64>,
    queued_total: u64,
    running_total: u64,
    /// Each link's use as last read, whether it has been read, and scratch for the links whose
    /// use may have changed since (`Transport::take_link_changes`).
    links: Vec<f64>,
    links_read: bool,
    links_changed: Vec<usize>,
    /// The tier links' use, and the tiers' state it was read at.
    tier_links: Vec<f64>,
    tier_links_read_at: Option<u64>,
}

impl Sampler {
    pub(super) fn new(interval_ms: f64, cluster: &Cluster) -> Self {
        let workers = cluster.workers.len();
        let mut names = vec![
            ("queued", Shape::Scalar),
            ("running", Shape::Scalar),
            ("kv_blocks_used", Shape::Columns(workers)),
            ("busy", Shape::Columns(workers)),
        ];
        let links = cluster.transport.num_links();
        if links > 0 {
            names.push(("link_utilization", Shape::Columns(links)));
        }
        if let Some(tiers) = &cluster.tiers {
            names.extend([
                ("g2_blocks_used", Shape::Scalar),
                ("g3_blocks_used", Shape::Scalar),
                ("onboarding", Shape::Scalar),
            ]);
            names.extend(tiers.link_kinds().iter().map(|&k| (k, Shape::Scalar)));
        }
        let series = TimeSeries::new(interval_ms, names);
        let columns = series.columns();
        let mut sampler = Sampler {
            series,
            busy_ms: vec![0.0; workers],
            last_ms: 0.0,
            workers,
            values: Vec::with_capacity(columns),
            changed: Vec::with_capacity(columns),
            is_changed: vec![false; columns],
            queued: vec![0; workers],
            running: vec![0; workers],
            queued_total: 0,
            running_total: 0,
            links: vec![0.0; links],
            links_read: false,
            links_changed: Vec::new(),
            tier_links: Vec::new(),
            tier_links_read_at: None,
        };
        sampler.values = sampler.read_all(cluster);
        for w in 0..workers {
            (sampler.queued[w], sampler.running[w]) = Self::requests_of(cluster, w);
        }
        (sampler.queued_total, sampler.running_total) =
            (sampler.queued.iter().sum(), sampler.running.iter().sum());
        sampler
    }

    /// Worker `w`'s (waiting, running) requests, all its ranks.
    #[inline]
    fn requests_of(cluster: &Cluster, w: usize) -> (u64, u64) {
        let (mut queued, mut running) = (0, 0);
        for rank in &cluster.ranks[cluster.workers[w].ranks()] {
            queued += rank.waiting_len() as u64;
            running += rank.running_len() as u64;
        }
        (queued, running)
    }

    /// KV blocks in use on worker `w`, all its ranks.
    #[inline]
    fn blocks_of(cluster: &Cluster, w: usize) -> u32 {
        let ranks = &cluster.ranks[cluster.workers[w].ranks()];
        ranks.iter().map(|r| r.active_blocks()).sum()
    }

    /// Column `k` holds `v` now. Bits are compared, not values: a link read as -0.0 is kept as
    /// read, as the series would have seen it read afresh.
    fn set(&mut self, k: usize, v: f64) {
        if self.values[k].to_bits() != v.to_bits() {
            self.values[k] = v;
            if !self.is_changed[k] {
                self.is_changed[k] = true;
                self.changed.push(k);
            }
        }
    }

    /// Read again the workers whose state may have changed at this instant (`cluster.dirty`):
    /// no other worker's queue, running requests, blocks or busy flag changed.
    pub(super) fn refresh(&mut self, cluster: &Cluster) {
        let workers = self.workers;
        for &w in &cluster.dirty {
            let w = w as usize;
            let (queued, running) = Self::requests_of(cluster, w);
            self.queued_total = self.queued_total - self.queued[w] + queued;
            self.running_total = self.running_total - self.running[w] + running;
            (self.queued[w], self.running[w]) = (queued, running);
            self.set(2 + w, f64::from(Self::blocks_of(cluster, w)));
            self.set(
                2 + workers + w,
                f64::from(u8::from(cluster.workers[w].busy)),
            );
        }
        self.set(0, self.queued_total as f64);
        self.set(1, self.running_total as f64);
        #[cfg(debug_assertions)]
        {
            let all = self.read_all(cluster);
            let n = 2 + 2 * workers;
            assert_eq!(
                self.values[..n],
                all[..n],
                "kept state differs from a full read"
            );
        }
    }

    /// Record the state that held from the last call until `now` (ms): the state between two
    /// event instants is constant, so it is read before the events at `now` change it.
    pub(super) fn record_until(&mut self, now: f64, cluster: &mut Cluster) {
        if now <= self.last_ms {
            return;
        }
        self.advance(now, cluster);
        self.changed.sort_unstable();
        self.series
            .observe_changed(now, &self.values, &self.changed);
        for &k in &self.changed {
            self.is_changed[k] = false;
        }
        self.changed.clear();
    }

    /// Close the series at the replay's end `now` (ms) with the final state.
    pub(super) fn finish(&mut self, now: f64, cluster: &mut Cluster) {
        self.advance(now, cluster);
        debug_assert_eq!(self.values, self.read_all(cluster));
        self.series.finish(now, &self.values);
    }

    /// Count the busy time up to `now` and read the link and tier columns, which change with
    /// flows rather than with workers.
    fn advance(&mut self, now: f64, cluster: &mut Cluster) {
        let span = now - self.last_ms;
        self.last_ms = now;
        let busy = &self.values[2 + self.workers..2 + 2 * self.workers];
        for (total, &b) in self.busy_ms.iter_mut().zip(busy) {
            *total += b * span;
        }
        let mut k = 2 + 2 * self.workers;
        if !self.links.is_empty() {
            // Only the links a transfer started or finished on, or whose rates were solved
            // again, are read again: the others' use is as last read.
            let transport = &mut cluster.transport;
            let mut changed = std::mem::take(&mut self.links_changed);
            transport.take_link_changes(&mut changed);
            if !self.links_read {
                self.links_read = true;
                changed.clear();
                changed.extend(0..self.links.len());
            }
            for &j in &changed {
                self.links[j] = transport.link_utilization(j);
                self.set(k + j, self.links[j]);
            }
            self.links_changed = changed;
            #[cfg(debug_assertions)]
            {
                let mut all = vec![0.0; self.links.len()];
                transport.link_utilization_now(&mut all);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&self.links),
                    bits(&all),
                    "kept link use differs from a read"
                );
            }
            k += self.links.len();
        }
        if let Some(tiers) = &cluster.tiers {
            self.set(k, f64::from(tiers.g2_used()));
            self.set(k + 1, f64::from(tiers.g3_used()));
            self.set(k + 2, tiers.onboarding() as f64);
            k += 3;
            let at = tiers.version();
            if self.tier_links_read_at != Some(at) {
                self.tier_links.clear();
                tiers.link_use_now(&mut self.tier_links);
                self.tier_links_read_at = Some(at);
                for j in 0..self.tier_links.len() {
                    self.set(k + j, self.tier_links[j]);
                }
            }
        }
    }

    /// The whole state read afresh (link and tier columns as last read): the reference the
    /// kept state is checked against, and the state at the start.
    fn read_all(&self, cluster: &Cluster) -> Vec<f64> {
        let workers = self.workers;
        let mut v = vec![0.0; 2 + 2 * workers];
        let (mut queued, mut running) = (0, 0);
        for w in 0..workers {
            let (q, r) = Self::requests_of(cluster, w);
            (queued, running) = (queued + q, running + r);
            v[2 + w] = f64::from(Self::blocks_of(cluster, w));
            v[2 + workers + w] = f64::from(u8::from(cluster.workers[w].busy));
        }
        v[0] = queued as f64;
        v[1] = running as f64;
        v.extend_from_slice(&self.links);
        if let Some(tiers) = &cluster.tiers {
            v.push(f64::from(tiers.g2_used()));
            v.push(f64::from(tiers.g3_used()));
            v.push(tiers.onboarding() as f64);
            match self.tier_links_read_at {
                Some(_) => v.extend_from_slice(&self.tier_links),
                None => v.extend(tiers.link_kinds().iter().map(|_| 0.0)),
            }
        }
        v
    }
}
