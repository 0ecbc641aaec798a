//! KV offload tiers: G2 host memory per rank and G3 disk, per rank or one pool for the cluster.

use serde::{Deserialize, Serialize};

use super::limits::{count, positive_within, MAX_BLOCKS, MAX_GBPS, MIN_GBPS};
use super::{Result, SimError};

/// KV offload tiers: blocks evicted from a rank's GPU cache (G1) go to its G2, blocks evicted
/// from G2 to G3; a prefix found there is copied back up before the request is admitted. No G2
/// size: no tiers, and the replay is exactly the G1-only one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OffloadConfig {
    /// G2 (host memory) blocks of each rank; unset: no offload tiers.
    pub g2_blocks: Option<u32>,
    /// G3 (disk) blocks of each rank, or of the one cluster pool with `g3_shared`; needs G2.
    pub g3_blocks: Option<u32>,
    /// One G3 pool (and its G3->G2 link) shared by every rank (`cluster_shared`).
    pub g3_shared: bool,
    /// Each rank's G1<->G2 link per direction (GB/s, 1e9 bytes/s). Onboarding (G2->G1) runs on
    /// it; offloads are counted but move no flow (nothing else shares their direction, and
    /// offloaded blocks count as in the lower tier at once).
    pub g1_g2_gbps: f64,
    /// Each rank's G2<->G3 link, or the shared pool's, per direction (GB/s); G3 hits come up on
    /// it.
    pub g2_g3_gbps: f64,
}

impl Default for OffloadConfig {
    fn default() -> Self {
        OffloadConfig {
            g2_blocks: None,
            g3_blocks: None,
            g3_shared: false,
            g1_g2_gbps: 14.0,
            g2_g3_gbps: 7.0,
        }
    }
}

impl OffloadConfig {
    /// Whether the tiers exist.
    pub fn enabled(&self) -> bool {
        self.g2_blocks.is_some()
    }

    /// Check the section; `kv_bytes_per_token` sizes block moves (0: not given).
    pub(super) fn validate(&self, kv_bytes_per_token: f64) -> Result<()> {
        positive_within("offload.g1_g2_gbps", self.g1_g2_gbps, MIN_GBPS, MAX_GBPS)?;
        positive_within("offload.g2_g3_gbps", self.g2_g3_gbps, MIN_GBPS, MAX_GBPS)?;
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
        if self.enabled() && kv_bytes_per_token <= 0.0 {
            return Err(SimError::config(
                "offload",
                "needs kv_transfer.kv_bytes_per_token (or kv_shape) to size block moves",
            ));
        }
        Ok(())
    }
}
