//! The configuration as the replay reads it: which engine and timing each role runs with (and
//! where in the document they came from), and the effective KV-transfer settings. Callers that
//! need these (the Python layer's comparisons and deployment mapping) read this view instead of
//! resolving role overrides and unset values again.

use serde::Serialize;

use super::{
    EngineConfig, FirstToken, LinkModel, Role, ServingMode, SimConfig, TimingConfig, TransferSizing,
};

/// One role of the cluster as it runs.
#[derive(Debug, Clone, Serialize)]
pub struct RoleView<'a> {
    pub role: Role,
    /// Workers of this role.
    pub workers: u32,
    pub gpus_per_worker: u32,
    /// The role's engine with every setting of its flavour set (defaults where unset).
    pub engine: EngineConfig,
    pub timing: &'a TimingConfig,
    /// Dotted paths of the sections `engine` and `timing` came from (`prefill.engine` when the
    /// role has its own, else `engine`).
    pub engine_path: &'static str,
    pub timing_path: &'static str,
}

/// KV transfers with every unset value resolved.
#[derive(Debug, Clone, Serialize)]
pub struct TransferView {
    /// Whole-model KV bytes of one token; `None` when neither a value nor a shape is given.
    pub bytes_per_token: Option<f64>,
    /// Send and receive link bandwidths (GB/s); `None`: transfers are instant.
    pub send_gbps: Option<f64>,
    pub recv_gbps: Option<f64>,
    /// `None` without a bandwidth (no links).
    pub link_model: Option<LinkModel>,
    pub sizing: TransferSizing,
    pub first_token: FirstToken,
}

/// The offload tiers' link rates with every unset value resolved (GB/s): reads go up a tier
/// (onboards), writes down (offloads).
#[derive(Debug, Clone, Serialize)]
pub struct TierRates {
    pub g1_g2_read_gbps: f64,
    pub g1_g2_write_gbps: f64,
    pub g2_g3_read_gbps: f64,
    pub g2_g3_write_gbps: f64,
}

/// The roles in use and the transfer settings of a configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved<'a> {
    pub roles: Vec<RoleView<'a>>,
    pub kv_transfer: TransferView,
    /// `None` without offload tiers.
    pub offload: Option<TierRates>,
    pub num_workers: u32,
    pub num_gpus: u32,
}

impl SimConfig {
    /// The roles this configuration's serving mode runs: aggregated, or prefill then decode.
    pub fn roles(&self) -> Vec<(Role, u32)> {
        let c = &self.cluster;
        match c.mode {
            ServingMode::Aggregated => vec![(Role::Aggregated, c.num_workers)],
            ServingMode::Disaggregated => vec![
                (Role::Prefill, c.num_prefill_workers),
                (Role::Decode, c.num_decode_workers),
            ],
        }
    }

    /// Dotted paths of the engine and timing sections `role` runs with.
    pub fn role_paths(&self, role: Role) -> (&'static str, &'static str) {
        let (own, engine, timing) = match role {
            Role::Aggregated => return ("engine", "timing"),
            Role::Prefill => (&self.prefill, "prefill.engine", "prefill.timing"),
            Role::Decode => (&self.decode, "decode.engine", "decode.timing"),
        };
        (
            if own.engine.is_some() {
                engine
            } else {
                "engine"
            },
            if own.timing.is_some() {
                timing
            } else {
                "timing"
            },
        )
    }

    /// Workers of every role together.
    pub fn num_workers(&self) -> u32 {
        self.roles().iter().map(|&(_, n)| n).sum()
    }

    /// GPUs of every worker together (TP x DP each).
    pub fn num_gpus(&self) -> u32 {
        self.roles()
            .iter()
            .map(|&(role, n)| n * self.role(role).0.gpus_per_worker())
            .sum()
    }

    /// The block caches a replay of this configuration keeps, which share the memory of their
    /// identity indexes: one per rank (every worker's data-parallel ranks), and with offload
    /// tiers a G2 per rank and the G3 pools (one per rank, or one for the cluster).
    pub fn block_caches(&self) -> u32 {
        let ranks: u32 = self
            .roles()
            .iter()
            .map(|&(role, n)| n * self.role(role).0.data_parallel_size)
            .sum();
        let o = &self.offload;
        let g2 = if o.g2_blocks.is_some() { ranks } else { 0 };
        let g3 = match o.g3_blocks {
            None => 0,
            Some(_) if o.g3_shared => 1,
            Some(_) => ranks,
        };
        ranks + g2 + g3
    }

    /// The view of this configuration the replay runs.
    pub fn resolved(&self) -> Resolved<'_> {
        let roles = self
            .roles()
            .into_iter()
            .map(|(role, workers)| {
                let (engine, timing) = self.role(role);
                let (engine_path, timing_path) = self.role_paths(role);
                RoleView {
                    role,
                    workers,
                    gpus_per_worker: engine.gpus_per_worker(),
                    engine: engine.with_defaults(),
                    timing,
                    engine_path,
                    timing_path,
                }
            })
            .collect();
        let k = &self.kv_transfer;
        let bandwidths = k.bandwidths_gbps();
        let per_token = k.bytes_per_token();
        Resolved {
            roles,
            kv_transfer: TransferView {
                bytes_per_token: (per_token > 0.0).then_some(per_token),
                send_gbps: bandwidths.map(|b| b.0),
                recv_gbps: bandwidths.map(|b| b.1),
                link_model: bandwidths.map(|_| k.link_model()),
                sizing: k.sizing(),
                first_token: k.first_token(),
            },
            offload: self.offload.enabled().then(|| {
                let (g1_g2_read_gbps, g1_g2_write_gbps) = self.offload.g1_g2_rates();
                let (g2_g3_read_gbps, g2_g3_write_gbps) = self.offload.g2_g3_rates();
                TierRates {
                    g1_g2_read_gbps,
                    g1_g2_write_gbps,
                    g2_g3_read_gbps,
                    g2_g3_write_gbps,
                }
            }),
            num_workers: self.num_workers(),
            num_gpus: self.num_gpus(),
        }
    }
}
