//! KV offload tiers: G2 host memory per rank and G3 disk, per rank or one pool for the cluster.

use serde::{Deserialize, Serialize};

use super::limits::{count, positive_within, MAX_BLOCKS, MAX_GBPS, MIN_GBPS};
use super::{Result, SimError};

/// Whether a G3 tier's link carries reads and writes on one capacity or on one each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Duplex {
    /// One capacity (`g2_g3_gbps`) that offloads (G2 -> G3) and onboards (G3 -> G2) share max-min
    /// fairly, as a storage service's bandwidth is shared by its reads and writes.
    Half,
    /// A capacity per direction, as on a PCIe link.
    Full,
}

/// What an offload (a copy down a tier) costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffloadWrites {
    /// A copy is a flow on its tier link; the block is a hit in the lower tier only once it lands.
    Flows,
    /// A copy takes no time and no bandwidth: the block is in the lower tier at once (the model
    /// before offloads cost anything, kept for comparison).
    Free,
}

/// What a request does with prompt blocks whose copy down to a tier is still in flight. The
/// engines modelled recompute them; waiting is kept for comparison (under a write backlog it
/// holds requests, their sequence slots and G1 blocks, behind copies they do not need).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlight {
    /// Waits for the copy to land, then onboards the block.
    Wait,
    /// Counts the block as a miss and recomputes it (and every block after it): a tier offers
    /// a block only once its copy has landed, as KVBM registers a block in a pool, and LMCache
    /// lists a key, only once it is stored.
    Recompute,
}

/// KV offload tiers: blocks evicted from a rank's GPU cache (G1) are copied to its G2, blocks
/// evicted from G2 to G3; a prefix found there is copied back up before the request is admitted.
/// No G2 size: no tiers, and the replay is exactly the G1-only one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OffloadConfig {
    /// G2 (host memory) blocks of each rank; unset: no offload tiers.
    pub g2_blocks: Option<u32>,
    /// G3 (disk) blocks of each rank, or of the one cluster pool with `g3_shared`; needs G2.
    pub g3_blocks: Option<u32>,
    /// One G3 pool (and its link) shared by every rank (`cluster_shared`).
    pub g3_shared: bool,
    /// Each rank's G1<->G2 (PCIe) link, per direction: it is full duplex (GB/s, 1e9 bytes/s).
    pub g1_g2_gbps: f64,
    /// Each rank's G2<->G3 link, or the shared pool's (GB/s): with `g3_duplex: half` the one
    /// capacity reads and writes share, with `full` each direction's.
    pub g2_g3_gbps: f64,
    /// Onboards (G2 -> G1) and offloads (G1 -> G2) on their own rates; unset: `g1_g2_gbps`.
    pub g1_g2_read_gbps: Option<f64>,
    pub g1_g2_write_gbps: Option<f64>,
    /// G3 reads (onboards) and writes (offloads): with `full` each direction's capacity, with
    /// `half` a cap on each direction's flows within the shared capacity; unset: `g2_g3_gbps`.
    pub g2_g3_read_gbps: Option<f64>,
    pub g2_g3_write_gbps: Option<f64>,
    pub g3_duplex: Duplex,
    /// Whether offloads are flows that take time and bandwidth (`flows`) or free (`free`).
    pub writes: OffloadWrites,
    /// A request finding prompt blocks still in flight down: `recompute` them (the default)
    /// or `wait` for them.
    pub in_flight: InFlight,
}

impl Default for OffloadConfig {
    fn default() -> Self {
        OffloadConfig {
            g2_blocks: None,
            g3_blocks: None,
            g3_shared: false,
            g1_g2_gbps: 14.0,
            g2_g3_gbps: 7.0,
            g1_g2_read_gbps: None,
            g1_g2_write_gbps: None,
            g2_g3_read_gbps: None,
            g2_g3_write_gbps: None,
            g3_duplex: Duplex::Half,
            writes: OffloadWrites::Flows,
            in_flight: InFlight::Recompute,
        }
    }
}

impl OffloadConfig {
    /// Without tiers the section's other settings do nothing: one that differs from its
    /// default is a mistake, named (a G3 without G2 is refused by `validate`).
    pub(super) fn no_setting_without_tiers(&self) -> Result<()> {
        if self.enabled() {
            return Ok(());
        }
        let d = OffloadConfig::default();
        let changed = [
            ("offload.g1_g2_gbps", self.g1_g2_gbps != d.g1_g2_gbps),
            ("offload.g2_g3_gbps", self.g2_g3_gbps != d.g2_g3_gbps),
            ("offload.g1_g2_read_gbps", self.g1_g2_read_gbps.is_some()),
            ("offload.g1_g2_write_gbps", self.g1_g2_write_gbps.is_some()),
            ("offload.g2_g3_read_gbps", self.g2_g3_read_gbps.is_some()),
            ("offload.g2_g3_write_gbps", self.g2_g3_write_gbps.is_some()),
            ("offload.g3_duplex", self.g3_duplex != d.g3_duplex),
            ("offload.writes", self.writes != d.writes),
            ("offload.in_flight", self.in_flight != d.in_flight),
        ];
        match changed.iter().find(|(_, set)| *set) {
            Some((field, _)) => Err(SimError::config(
                field,
                "applies to the offload tiers, and there are none: set offload.g2_blocks \
                 (--g2-blocks) to have them, or leave it at its default",
            )),
            None => Ok(()),
        }
    }

    /// Whether the tiers exist.
    pub fn enabled(&self) -> bool {
        self.g2_blocks.is_some()
    }

    /// G1<->G2 rates (GB/s): (read = G2 -> G1, write = G1 -> G2).
    pub fn g1_g2_rates(&self) -> (f64, f64) {
        (
            self.g1_g2_read_gbps.unwrap_or(self.g1_g2_gbps),
            self.g1_g2_write_gbps.unwrap_or(self.g1_g2_gbps),
        )
    }

    /// G2<->G3 rates (GB/s): (read = G3 -> G2, write = G2 -> G3).
    pub fn g2_g3_rates(&self) -> (f64, f64) {
        (
            self.g2_g3_read_gbps.unwrap_or(self.g2_g3_gbps),
            self.g2_g3_write_gbps.unwrap_or(self.g2_g3_gbps),
        )
    }

    /// Check the section; `kv_bytes_per_token` sizes block moves (0: not given, which a named
    /// model fills in before a replay when `model_named`, as for KV transfers).
    pub(super) fn validate(&self, kv_bytes_per_token: f64, model_named: bool) -> Result<()> {
        positive_within("offload.g1_g2_gbps", self.g1_g2_gbps, MIN_GBPS, MAX_GBPS)?;
        positive_within("offload.g2_g3_gbps", self.g2_g3_gbps, MIN_GBPS, MAX_GBPS)?;
        for (name, value) in [
            ("offload.g1_g2_read_gbps", self.g1_g2_read_gbps),
            ("offload.g1_g2_write_gbps", self.g1_g2_write_gbps),
            ("offload.g2_g3_read_gbps", self.g2_g3_read_gbps),
            ("offload.g2_g3_write_gbps", self.g2_g3_write_gbps),
        ] {
            if let Some(v) = value {
                positive_within(name, v, MIN_GBPS, MAX_GBPS)?;
            }
        }
        if let Some(n) = self.g2_blocks {
            count("offload.g2_blocks", n, MAX_BLOCKS)?;
        }
        if let Some(n) = self.g3_blocks {
            count("offload.g3_blocks", n, MAX_BLOCKS)?;
            if self.g2_blocks.is_none() {
                return Err(SimError::config(
                    "offload.g3_blocks",
                    "needs offload.g2_blocks: G3 is fed by blocks evicted from G2",
                ));
            }
        }
        if self.g3_shared && self.g3_blocks.is_none() {
            return Err(SimError::config(
                "offload.g3_shared",
                "needs offload.g3_blocks (the size of the shared pool)",
            ));
        }
        if self.enabled() && kv_bytes_per_token <= 0.0 && !model_named {
            return Err(SimError::config(
                "offload",
                "needs kv_transfer.kv_bytes_per_token (or kv_shape, or roles timed by an aic \
                 section, whose model gives it) to size block moves",
            ));
        }
        Ok(())
    }
}
