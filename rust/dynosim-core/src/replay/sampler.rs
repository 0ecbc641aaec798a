//! The time series of a replay: queue depth, running requests and KV blocks on a fixed grid.

use super::cluster::Cluster;
use crate::report::TimeSeries;

/// Samples cluster state on a fixed grid of the virtual clock.
pub(super) struct Sampler {
    pub(super) series: TimeSeries,
    next_ms: f64,
}

impl Sampler {
    pub(super) fn new(interval_ms: f64, num_workers: usize) -> Self {
        Sampler {
            series: TimeSeries {
                interval_ms,
                num_workers,
                ..TimeSeries::default()
            },
            next_ms: 0.0,
        }
    }

    /// The next grid time not recorded yet.
    pub(super) fn next_ms(&self) -> f64 {
        self.next_ms
    }

    /// Record the (unchanged) state at every grid time before `now` (up to and including it
    /// when `inclusive`): the state between two event instants is constant.
    pub(super) fn record_until(&mut self, now: f64, cluster: &Cluster, inclusive: bool) {
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
                    .map(|w| w.ranks().map(|r| ranks[r].active_blocks()).sum::<u32>()),
            );
            if let Some(tiers) = &cluster.tiers {
                s.g2_blocks_used.push(tiers.g2_used());
                s.g3_blocks_used.push(tiers.g3_used());
            }
            self.next_ms = s.time_ms.len() as f64 * s.interval_ms;
        }
    }
}
