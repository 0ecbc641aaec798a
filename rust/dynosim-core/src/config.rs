//! Typed simulation settings. Defaults live here and only here: the Python layer reads them
//! through `default_config_json` instead of repeating them.

use serde::{Deserialize, Serialize};

use crate::error::{Result, SimError};

/// Which running request a KV-cache shortage preempts (its blocks are released and it is
/// recomputed from the start later). Only requests admitted after the one that needs the block
/// are candidates (else it yields itself), so the oldest running request always progresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptionMode {
    /// The most recently admitted running request (vLLM's behaviour).
    Lifo,
    /// The earliest admitted of the candidates.
    Fifo,
}

/// One worker's vLLM-like engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV blocks of one worker's GPU cache.
    pub num_gpu_blocks: u32,
    /// Most requests running at once on a worker.
    pub max_num_seqs: u32,
    /// Token budget of one forward pass.
    pub max_num_batched_tokens: u32,
    /// Let a long prompt take the remaining budget in pieces across passes.
    pub enable_chunked_prefill: bool,
    pub preemption_mode: PreemptionMode,
    /// GPUs one rank spans (tensor parallelism); part of the timing key and the GPU count.
    pub tensor_parallel_size: u32,
    /// Ranks in one worker, each with its own scheduler and `num_gpu_blocks` of KV cache,
    /// passing in lockstep: a grouped pass ends when the slowest rank ends.
    pub data_parallel_size: u32,
}

impl EngineConfig {
    /// GPUs one worker occupies: TP x DP.
    pub fn gpus_per_worker(&self) -> u32 {
        self.tensor_parallel_size * self.data_parallel_size
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            block_size: 64,
            num_gpu_blocks: 16384,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            enable_chunked_prefill: true,
            preemption_mode: PreemptionMode::Lifo,
            tensor_parallel_size: 1,
            data_parallel_size: 1,
        }
    }
}

/// Dynamo mocker's uncalibrated step-time polynomial (SPEC section 4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolynomialTiming {
    /// Divides every step time.
    pub speedup_ratio: f64,
    /// Divides decode step times on top of `speedup_ratio`.
    pub decode_speedup_ratio: f64,
}

impl Default for PolynomialTiming {
    fn default() -> Self {
        PolynomialTiming {
            speedup_ratio: 1.0,
            decode_speedup_ratio: 1.0,
        }
    }
}

/// Constant step times, for hand-checkable cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedTiming {
    /// Cost of a pass that prefills at least one uncached token (ms).
    pub prefill_ms: f64,
    /// Cost of a pass that decodes at least one request (ms).
    pub decode_ms: f64,
}

/// Measured step times on grids (from a profile or AIConfigurator), interpolated bilinearly
/// and extrapolated linearly past the edges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableTiming {
    /// Axis: uncached prompt tokens prefilled in one pass, strictly increasing.
    pub prefill_tokens: Vec<f64>,
    /// Axis: requests prefilling in that pass, strictly increasing.
    pub prefill_batch: Vec<f64>,
    /// Pass latency (ms), `[tokens][batch]`.
    pub prefill_ms: Vec<Vec<f64>>,
    /// Axis: requests decoding in one pass, strictly increasing.
    pub decode_batch: Vec<f64>,
    /// Axis: mean KV tokens per decoding request (this step's token included).
    pub decode_context: Vec<f64>,
    /// Step latency (ms), `[batch][context]`.
    pub decode_ms: Vec<Vec<f64>>,
}

impl TableTiming {
    fn validate(&self, section: &str) -> Result<()> {
        for (name, axis) in [
            ("prefill_tokens", &self.prefill_tokens),
            ("prefill_batch", &self.prefill_batch),
            ("decode_batch", &self.decode_batch),
            ("decode_context", &self.decode_context),
        ] {
            let field = format!("{section}.{name}");
            if axis.is_empty() {
                return Err(SimError::config(&field, "needs at least one point"));
            }
            for (i, &v) in axis.iter().enumerate() {
                if !v.is_finite() || v < 0.0 {
                    return Err(SimError::config(
                        &format!("{field}[{i}]"),
                        format!("must be finite and >= 0, got {v}"),
                    ));
                }
                if i > 0 && v <= axis[i - 1] {
                    return Err(SimError::config(
                        &format!("{field}[{i}]"),
                        format!(
                            "axis must be strictly increasing, got {v} after {}",
                            axis[i - 1]
                        ),
                    ));
                }
            }
        }
        for (name, grid, rows, cols) in [
            (
                "prefill_ms",
                &self.prefill_ms,
                &self.prefill_tokens,
                &self.prefill_batch,
            ),
            (
                "decode_ms",
                &self.decode_ms,
                &self.decode_batch,
                &self.decode_context,
            ),
        ] {
            let field = format!("{section}.{name}");
            if grid.len() != rows.len() {
                return Err(SimError::config(
                    &field,
                    format!(
                        "needs {} rows (one per axis point), got {}",
                        rows.len(),
                        grid.len()
                    ),
                ));
            }
            for (i, row) in grid.iter().enumerate() {
                if row.len() != cols.len() {
                    return Err(SimError::config(
                        &format!("{field}[{i}]"),
                        format!("needs {} values, got {}", cols.len(), row.len()),
                    ));
                }
                if let Some((j, v)) = row
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
                {
                    return Err(SimError::config(
                        &format!("{field}[{i}][{j}]"),
                        format!("must be a finite latency >= 0 ms, got {v}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The GPU step-time model of a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum TimingConfig {
    Polynomial(PolynomialTiming),
    Fixed(FixedTiming),
    Table(TableTiming),
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig::Polynomial(PolynomialTiming::default())
    }
}

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

/// Settings of one role in disaggregated mode; each one given replaces the shared `engine` or
/// `timing` section as a whole for that role.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleConfig {
    pub engine: Option<EngineConfig>,
    pub timing: Option<TimingConfig>,
}

/// How a transfer's rate is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkModel {
    /// Transfers share each prefill worker's send link and each decode worker's receive link
    /// max-min fairly.
    MaxMin,
    /// Every transfer runs at the full bandwidth, as if links were never shared (Dynamo's model).
    LineRate,
}

/// Which prompt tokens a KV transfer moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferSizing {
    /// The whole prompt.
    FullPrompt,
    /// Only the prompt blocks the decode worker does not already cache.
    DestinationMissing,
}

/// When a disaggregated request's first token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstToken {
    /// When its KV lands on the decode worker (SPEC section 5).
    KvArrival,
    /// At the end of the decode worker's first pass that includes the request; the decode
    /// worker also reserves blocks only between passes (Dynamo's mocker).
    FirstDecodePass,
}

/// The KV geometry of a model, from which the bytes of one token's KV follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvShape {
    pub num_layers: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    /// Bytes per KV element (2 for bf16/fp16, 1 for fp8).
    pub dtype_bytes: u32,
}

impl KvShape {
    /// layers x 2 (K and V) x kv heads x head dim x dtype bytes.
    pub fn bytes_per_token(&self) -> f64 {
        2.0 * f64::from(self.num_layers)
            * f64::from(self.num_kv_heads)
            * f64::from(self.head_dim)
            * f64::from(self.dtype_bytes)
    }
}

/// KV-cache transfers from prefill to decode workers (disaggregated mode).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvTransferConfig {
    /// Each prefill worker's sending link (GB/s, 1e9 bytes/s). Unset: transfers are instant.
    pub bandwidth_gbps: Option<f64>,
    /// Each decode worker's receiving link (GB/s); unset: `bandwidth_gbps`.
    pub decode_bandwidth_gbps: Option<f64>,
    /// Unset: `max_min` whenever a bandwidth is set.
    pub link_model: Option<LinkModel>,
    pub sizing: Option<TransferSizing>,
    /// Unset: `kv_arrival`.
    pub first_token: Option<FirstToken>,
    /// KV bytes of one token; or give `kv_shape`.
    pub kv_bytes_per_token: Option<f64>,
    pub kv_shape: Option<KvShape>,
}

impl KvTransferConfig {
    pub fn sizing(&self) -> TransferSizing {
        self.sizing.unwrap_or(TransferSizing::FullPrompt)
    }

    pub fn first_token(&self) -> FirstToken {
        self.first_token.unwrap_or(FirstToken::KvArrival)
    }

    pub fn link_model(&self) -> LinkModel {
        self.link_model.unwrap_or(LinkModel::MaxMin)
    }

    /// Bytes of one token's KV (0 when neither it nor a shape is given).
    pub fn bytes_per_token(&self) -> f64 {
        match (&self.kv_bytes_per_token, &self.kv_shape) {
            (Some(b), _) => *b,
            (None, Some(shape)) => shape.bytes_per_token(),
            (None, None) => 0.0,
        }
    }
}

/// Service-level thresholds for goodput; an unset threshold is not checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlaConfig {
    /// Time to first token limit (ms).
    pub ttft_ms: Option<f64>,
    /// Limit on a request's mean inter-token latency, i.e. its TPOT (ms).
    pub itl_ms: Option<f64>,
    /// End-to-end latency limit (ms).
    pub e2e_ms: Option<f64>,
}

/// What the report records besides per-request metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportConfig {
    /// Interval of the time series (queue depth, running requests, KV blocks) in ms.
    pub sample_interval_ms: f64,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            sample_interval_ms: 1000.0,
        }
    }
}

/// KV offload tiers (SPEC section 6): G2 host memory per rank and G3 disk, per rank or one pool
/// for the whole cluster. No G2 size: no tiers, and the replay is exactly the G1-only one.
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
}

/// Everything a replay needs besides the workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    pub cluster: ClusterConfig,
    pub engine: EngineConfig,
    pub timing: TimingConfig,
    /// Disaggregated mode: the prefill role's own engine / timing.
    pub prefill: RoleConfig,
    /// Disaggregated mode: the decode role's own engine / timing.
    pub decode: RoleConfig,
    pub kv_transfer: KvTransferConfig,
    pub sla: SlaConfig,
    pub report: ReportConfig,
    pub offload: OffloadConfig,
}

fn positive(field: &str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SimError::config(
            field,
            format!("must be a finite number > 0, got {value}"),
        ))
    }
}

fn at_least_one(field: &str, value: u32) -> Result<()> {
    if value >= 1 {
        Ok(())
    } else {
        Err(SimError::config(
            field,
            format!("must be >= 1, got {value}"),
        ))
    }
}

impl SimConfig {
    /// Parse a JSON document; missing fields take their defaults, unknown ones are errors.
    pub fn from_json(text: &str) -> Result<Self> {
        let config: SimConfig =
            serde_json::from_str(text).map_err(|e| SimError::ConfigFormat(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration as canonical JSON (field order fixed by the struct definitions).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("configuration serialises")
    }

    /// The engine and timing a role runs with (its own settings, else the shared ones).
    pub fn role(&self, role: Role) -> (&EngineConfig, &TimingConfig) {
        let own = match role {
            Role::Aggregated => return (&self.engine, &self.timing),
            Role::Prefill => &self.prefill,
            Role::Decode => &self.decode,
        };
        (
            own.engine.as_ref().unwrap_or(&self.engine),
            own.timing.as_ref().unwrap_or(&self.timing),
        )
    }

    /// Check every value range; the error names the dotted field path and the value.
    pub fn validate(&self) -> Result<()> {
        let c = &self.cluster;
        at_least_one("cluster.num_workers", c.num_workers)?;
        at_least_one("cluster.num_prefill_workers", c.num_prefill_workers)?;
        at_least_one("cluster.num_decode_workers", c.num_decode_workers)?;
        positive("cluster.arrival_speedup_ratio", c.arrival_speedup_ratio)?;
        if !(c.overlap_weight.is_finite() && c.overlap_weight >= 0.0) {
            return Err(SimError::config(
                "cluster.overlap_weight",
                format!("must be a finite number >= 0, got {}", c.overlap_weight),
            ));
        }
        if let Some(n) = c.concurrency {
            at_least_one("cluster.concurrency", n)?;
        }
        validate_engine("engine", &self.engine)?;
        validate_timing("timing", &self.timing)?;
        for (name, role) in [("prefill", &self.prefill), ("decode", &self.decode)] {
            if let Some(e) = &role.engine {
                validate_engine(&format!("{name}.engine"), e)?;
            }
            if let Some(t) = &role.timing {
                validate_timing(&format!("{name}.timing"), t)?;
            }
        }
        self.validate_kv_transfer()?;
        for (field, value) in [
            ("sla.ttft_ms", self.sla.ttft_ms),
            ("sla.itl_ms", self.sla.itl_ms),
            ("sla.e2e_ms", self.sla.e2e_ms),
        ] {
            if let Some(v) = value {
                positive(field, v)?;
            }
        }
        positive("report.sample_interval_ms", self.report.sample_interval_ms)?;
        self.validate_offload()
    }

    fn validate_offload(&self) -> Result<()> {
        let o = &self.offload;
        positive("offload.g1_g2_gbps", o.g1_g2_gbps)?;
        positive("offload.g2_g3_gbps", o.g2_g3_gbps)?;
        if let Some(n) = o.g2_blocks {
            at_least_one("offload.g2_blocks", n)?;
        }
        if let Some(n) = o.g3_blocks {
            at_least_one("offload.g3_blocks", n)?;
            if o.g2_blocks.is_none() {
                return Err(SimError::config(
                    "offload.g3_blocks",
                    "needs offload.g2_blocks: G3 is fed by blocks evicted from G2",
                ));
            }
        }
        if o.g3_shared && o.g3_blocks.is_none() {
            return Err(SimError::config(
                "offload.g3_shared",
                "needs offload.g3_blocks (the size of the shared pool)",
            ));
        }
        if o.enabled() && self.kv_transfer.bytes_per_token() <= 0.0 {
            return Err(SimError::config(
                "offload",
                "needs kv_transfer.kv_bytes_per_token (or kv_shape) to size block moves",
            ));
        }
        Ok(())
    }

    fn validate_kv_transfer(&self) -> Result<()> {
        let k = &self.kv_transfer;
        if let Some(b) = k.bandwidth_gbps {
            positive("kv_transfer.bandwidth_gbps", b)?;
        }
        if let Some(b) = k.decode_bandwidth_gbps {
            positive("kv_transfer.decode_bandwidth_gbps", b)?;
            if k.bandwidth_gbps.is_none() {
                return Err(SimError::config(
                    "kv_transfer.decode_bandwidth_gbps",
                    "needs kv_transfer.bandwidth_gbps (the prefill side) as well",
                ));
            }
        }
        if k.link_model.is_some() && k.bandwidth_gbps.is_none() {
            return Err(SimError::config(
                "kv_transfer.link_model",
                "needs kv_transfer.bandwidth_gbps; without a bandwidth transfers are instant",
            ));
        }
        if let Some(b) = k.kv_bytes_per_token {
            positive("kv_transfer.kv_bytes_per_token", b)?;
        }
        if let Some(shape) = &k.kv_shape {
            at_least_one("kv_transfer.kv_shape.num_layers", shape.num_layers)?;
            at_least_one("kv_transfer.kv_shape.num_kv_heads", shape.num_kv_heads)?;
            at_least_one("kv_transfer.kv_shape.head_dim", shape.head_dim)?;
            at_least_one("kv_transfer.kv_shape.dtype_bytes", shape.dtype_bytes)?;
        }
        match (k.kv_bytes_per_token.is_some(), k.kv_shape.is_some()) {
            (true, true) => Err(SimError::config(
                "kv_transfer.kv_bytes_per_token",
                "give either kv_bytes_per_token or kv_shape, not both",
            )),
            (false, false) if k.bandwidth_gbps.is_some() => Err(SimError::config(
                "kv_transfer.kv_bytes_per_token",
                "required with a bandwidth (or give kv_transfer.kv_shape)",
            )),
            _ => Ok(()),
        }
    }
}

/// The part a worker plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Prefills and decodes its requests.
    Aggregated,
    /// Prefills, then hands the KV to a decode worker.
    Prefill,
    /// Decodes requests whose KV arrived from a prefill worker.
    Decode,
}

fn validate_engine(section: &str, e: &EngineConfig) -> Result<()> {
    at_least_one(&format!("{section}.block_size"), e.block_size)?;
    at_least_one(&format!("{section}.num_gpu_blocks"), e.num_gpu_blocks)?;
    at_least_one(&format!("{section}.max_num_seqs"), e.max_num_seqs)?;
    at_least_one(
        &format!("{section}.max_num_batched_tokens"),
        e.max_num_batched_tokens,
    )?;
    at_least_one(
        &format!("{section}.tensor_parallel_size"),
        e.tensor_parallel_size,
    )?;
    at_least_one(
        &format!("{section}.data_parallel_size"),
        e.data_parallel_size,
    )
}

fn validate_timing(section: &str, t: &TimingConfig) -> Result<()> {
    match t {
        TimingConfig::Polynomial(p) => {
            positive(&format!("{section}.speedup_ratio"), p.speedup_ratio)?;
            positive(
                &format!("{section}.decode_speedup_ratio"),
                p.decode_speedup_ratio,
            )
        }
        TimingConfig::Fixed(f) => {
            positive(&format!("{section}.prefill_ms"), f.prefill_ms)?;
            positive(&format!("{section}.decode_ms"), f.decode_ms)
        }
        TimingConfig::Table(t) => t.validate(section),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_document_gives_defaults() {
        assert_eq!(SimConfig::from_json("{}").unwrap(), SimConfig::default());
    }

    #[test]
    fn round_trips_through_json() {
        let config = SimConfig::default();
        assert_eq!(SimConfig::from_json(&config.to_json()).unwrap(), config);
    }

    #[test]
    fn bad_values_name_their_field() {
        let err = SimConfig::from_json(r#"{"engine": {"block_size": 0}}"#).unwrap_err();
        assert_eq!(err.to_string(), "engine.block_size: must be >= 1, got 0");
        let err = SimConfig::from_json(
            r#"{"timing": {"model": "fixed", "prefill_ms": -1, "decode_ms": 1}}"#,
        )
        .unwrap_err();
        assert!(err
            .to_string()
            .starts_with("timing.prefill_ms: must be a finite number > 0"));
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = SimConfig::from_json(r#"{"engine": {"blok_size": 3}}"#).unwrap_err();
        assert!(matches!(err, SimError::ConfigFormat(ref m) if m.contains("blok_size")));
    }
}
