//! The cluster: serving mode, worker counts, routing, arrival pace and the closed loop.

use serde::{Deserialize, Serialize};

/// Whether every worker serves whole requests, or prompts and decodes run on separate pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServingMode {
    /// `num_workers` workers each prefill and decode their requests.
    Aggregated,
    /// `num_prefill_workers` prefill, then the KV moves to one of `num_decode_workers`.
    Disaggregated,
}

/// How requests are spread over workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouterMode {
    /// Workers in turn.
    RoundRobin,
    /// Uniformly at random, seeded by `router_seed`.
    Random,
    /// The lowest overlap_weight x (prompt blocks it must prefill) + its active blocks.
    KvAware,
}

/// The cluster: its workers, and how the trace is played.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    pub mode: ServingMode,
    /// Workers in aggregated mode.
    pub num_workers: u32,
    /// Prefill workers in disaggregated mode.
    pub num_prefill_workers: u32,
    /// Decode workers in disaggregated mode.
    pub num_decode_workers: u32,
    /// Divides every inter-arrival gap of the trace (2.0 plays it twice as fast).
    pub arrival_speedup_ratio: f64,
    pub router: RouterMode,
    /// Seed of the `random` router.
    pub router_seed: u64,
    /// Weight of the blocks to prefill against active blocks in the `kv_aware` cost.
    pub overlap_weight: f64,
    /// Closed loop: at most this many sessions in flight (a request without a session is a
    /// session of one turn); the next starts when one ends, ignoring trace timestamps.
    pub concurrency: Option<u32>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            mode: ServingMode::Aggregated,
            num_workers: 4,
            num_prefill_workers: 1,
            num_decode_workers: 1,
            arrival_speedup_ratio: 1.0,
            router: RouterMode::RoundRobin,
            router_seed: 0,
            overlap_weight: 1.0,
            concurrency: None,
        }
    }
}
