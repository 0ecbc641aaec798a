//! What the time series record: the cluster's state between two event instants.

use super::cluster::Cluster;
use crate::time_series::{Shape, TimeSeries};

/// Records the cluster's state over the virtual clock into bounded buckets, and each worker's
/// busy time exactly.
pub(super) struct Sampler {
    pub(super) series: TimeSeries,
    /// Time each worker spent running passes (ms).
    pub(super) busy_ms: Vec<f64>,
    last_ms: f64,
    values: Vec<f64>,
    links: Vec<f64>,
    /// The transport's state the link utilization was last read at.
    links_read_at: Option<u64>,
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
        Sampler {
            series: TimeSeries::new(interval_ms, names),
            busy_ms: vec![0.0; workers],
            last_ms: 0.0,
            values: Vec::new(),
            links: vec![0.0; links],
            links_read_at: None,
            tier_links: Vec::new(),
            tier_links_read_at: None,
        }
    }

    /// Record the state that held from the last call until `now` (ms): the state between two
    /// event instants is constant, so it is read before the events at `now` change it.
    pub(super) fn record_until(&mut self, now: f64, cluster: &Cluster) {
        if now <= self.last_ms {
            return;
        }
        self.read(cluster, now);
        self.series.observe(now, &self.values);
    }

    /// Close the series at the replay's end `now` (ms) with the final state.
    pub(super) fn finish(&mut self, now: f64, cluster: &Cluster) {
        self.read(cluster, now);
        self.series.finish(now, &self.values);
    }

    fn read(&mut self, cluster: &Cluster, now: f64) {
        let ranks = &cluster.ranks;
        let span = now - self.last_ms;
        self.last_ms = now;
        let workers = cluster.workers.len();
        let v = &mut self.values;
        // Queue, running, then a column per worker for KV blocks and for busy: one pass over
        // the workers fills all of them.
        v.resize(2 + 2 * workers, 0.0);
        let (mut queued, mut running) = (0, 0);
        for (w, worker) in cluster.workers.iter().enumerate() {
            let mut blocks = 0;
            for rank in &ranks[worker.ranks()] {
                queued += rank.waiting_len();
                running += rank.running_len();
                blocks += rank.active_blocks();
            }
            let busy = f64::from(u8::from(worker.busy));
            self.busy_ms[w] += busy * span;
            v[2 + w] = f64::from(blocks);
            v[2 + workers + w] = busy;
        }
        v[0] = queued as f64;
        v[1] = running as f64;
        if !self.links.is_empty() {
            let at = cluster.transport.version();
            if self.links_read_at != Some(at) {
                cluster.transport.link_utilization_now(&mut self.links);
                self.links_read_at = Some(at);
            }
            v.extend_from_slice(&self.links);
        }
        if let Some(tiers) = &cluster.tiers {
            v.push(f64::from(tiers.g2_used()));
            v.push(f64::from(tiers.g3_used()));
            v.push(tiers.onboarding() as f64);
            let at = tiers.version();
            if self.tier_links_read_at != Some(at) {
                self.tier_links.clear();
                tiers.link_use_now(&mut self.tier_links);
                self.tier_links_read_at = Some(at);
            }
            v.extend_from_slice(&self.tier_links);
        }
    }
}
