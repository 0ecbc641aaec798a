//! Typed simulation settings, one file per section. Defaults live here and only here: the
//! Python layer reads them through `default_config_json` instead of repeating them, and value
//! ranges are checked here only.

mod cluster;
mod engine;
mod kv_transfer;
pub mod limits;
mod offload;
mod report;
mod resolved;
mod timing;

use serde::{Deserialize, Serialize};

use crate::error::{Result, SimError};
pub use cluster::{ClusterConfig, RouterMode, ServingMode};
pub use engine::{
    Backend, CapacityScheduler, EngineConfig, FlavourDefaults, FlavourSettings, PreemptionMode,
    SchedulePolicy, SglangSettings, TrtllmSettings, VllmSettings,
};
pub use kv_transfer::{FirstToken, KvShape, KvTransferConfig, LinkModel, TransferSizing};
pub use offload::{Duplex, InFlight, OffloadConfig, OffloadWrites};
pub use report::{ReportConfig, SlaConfig};
pub use resolved::{Resolved, RoleView, TransferView};
pub use timing::{
    AicTiming, FixedTiming, MixedDecodeAttention, OpTables, PolynomialTiming, TableTiming,
    TimingConfig,
};

/// Settings of one role in disaggregated mode; each one given replaces the shared `engine` or
/// `timing` section as a whole for that role.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleConfig {
    pub engine: Option<EngineConfig>,
    pub timing: Option<TimingConfig>,
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

impl SimConfig {
    /// Parse a JSON document; missing fields take their defaults, unknown ones are errors.
    /// A document that cannot be read names the dotted path of the field at fault.
    pub fn from_json(text: &str) -> Result<Self> {
        let config: SimConfig = parse_json(text, "")?;
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
        limits::count("cluster.num_workers", c.num_workers, limits::MAX_WORKERS)?;
        limits::count(
            "cluster.num_prefill_workers",
            c.num_prefill_workers,
            limits::MAX_WORKERS,
        )?;
        limits::count(
            "cluster.num_decode_workers",
            c.num_decode_workers,
            limits::MAX_WORKERS,
        )?;
        limits::positive_within(
            "cluster.arrival_speedup_ratio",
            c.arrival_speedup_ratio,
            limits::MIN_RATIO,
            limits::MAX_RATIO,
        )?;
        if !(c.overlap_weight.is_finite()
            && (0.0..=limits::MAX_OVERLAP_WEIGHT).contains(&c.overlap_weight))
        {
            return Err(SimError::config(
                "cluster.overlap_weight",
                format!(
                    "must be a finite number from 0 to {:e}, got {}",
                    limits::MAX_OVERLAP_WEIGHT,
                    limits::number(c.overlap_weight)
                ),
            ));
        }
        if let Some(n) = c.concurrency {
            limits::count("cluster.concurrency", n, limits::MAX_CONCURRENCY)?;
        }
        engine::validate_engine("engine", &self.engine)?;
        timing::validate_timing("timing", &self.timing)?;
        for (name, role) in [("prefill", &self.prefill), ("decode", &self.decode)] {
            if let Some(e) = &role.engine {
                engine::validate_engine(&format!("{name}.engine"), e)?;
            }
            if let Some(t) = &role.timing {
                timing::validate_timing(&format!("{name}.timing"), t)?;
            }
        }
        self.validate_cluster_size()?;
        self.validate_aic_layouts()?;
        // Links and tiers need the KV bytes of a token; an aic section names the model they
        // come from, and `check_replayable` refuses aic sections, so a replay always has them.
        let model_named = self
            .roles()
            .iter()
            .any(|&(role, _)| matches!(self.role(role).1, TimingConfig::Aic(_)));
        self.kv_transfer.validate(model_named)?;
        self.sla.validate()?;
        positive("report.sample_interval_ms", self.report.sample_interval_ms)?;
        self.offload
            .validate(self.kv_transfer.bytes_per_token(), model_named)
    }

    /// `validate`, no setting the replay would not read, and that every role the replay runs
    /// has a timing model the simulator prices itself: an `aic` section must be resolved into
    /// its `table` first.
    pub fn check_replayable(&self) -> Result<()> {
        self.validate()?;
        self.check_no_idle_settings()?;
        for (role, _) in self.roles() {
            if let TimingConfig::Aic(_) = self.role(role).1 {
                return Err(SimError::config(
                    self.role_paths(role).1,
                    "aic timing is priced from tables that dynosim's Python layer builds with \
                     AIConfigurator; replace it by its table section (model: table) to replay",
                ));
            }
        }
        Ok(())
    }

    /// A setting the replay would not read is a mistake, named: a role's own section in
    /// aggregated mode, a tier setting without tiers. Checked on the configuration that runs,
    /// not on every document: a file's role sections or tier rates may be completed by the
    /// serving mode or the G2 size another source (a flag) gives.
    fn check_no_idle_settings(&self) -> Result<()> {
        if self.cluster.mode == ServingMode::Aggregated {
            for (name, role) in [("prefill", &self.prefill), ("decode", &self.decode)] {
                let given = [
                    ("engine", role.engine.is_some()),
                    ("timing", role.timing.is_some()),
                ];
                if let Some((section, _)) = given.iter().find(|(_, set)| *set) {
                    return Err(SimError::config(
                        &format!("{name}.{section}"),
                        "a role's own section applies to disaggregated serving, and \
                         cluster.mode is aggregated: move its settings to the shared section, \
                         or set cluster.mode: disaggregated",
                    ));
                }
            }
        }
        self.offload.no_setting_without_tiers()
    }

    /// The ranks (each a scheduler) and GPUs of every pool the replay runs stay within their
    /// limits; products are computed with checked arithmetic, so no count wraps around.
    fn validate_cluster_size(&self) -> Result<()> {
        let (mut ranks, mut gpus) = (0u64, 0u64);
        for (role, workers) in self.roles() {
            let engine = self.role(role).0;
            let engine_path = self.role_paths(role).0;
            let workers_path = match role {
                Role::Aggregated => "cluster.num_workers",
                Role::Prefill => "cluster.num_prefill_workers",
                Role::Decode => "cluster.num_decode_workers",
            };
            let dp = format!("{engine_path}.data_parallel_size");
            let tp = format!("{engine_path}.tensor_parallel_size");
            let w = (workers_path, u64::from(workers));
            let d = (dp.as_str(), u64::from(engine.data_parallel_size));
            let t = (tp.as_str(), u64::from(engine.tensor_parallel_size));
            ranks += limits::product(workers_path, &[w, d], limits::MAX_RANKS, "ranks")?;
            gpus += limits::product(workers_path, &[w, t, d], limits::MAX_GPUS, "GPUs")?;
        }
        // Both pools together (each alone is within the limit, so the sums cannot overflow).
        for (total, max, unit) in [
            (ranks, limits::MAX_RANKS, "ranks"),
            (gpus, limits::MAX_GPUS, "GPUs"),
        ] {
            if total > max {
                return Err(SimError::config(
                    "cluster",
                    format!(
                        "the prefill and decode pools have {} {unit} together, more than the \
                         limit of {}",
                        limits::thousands(total),
                        limits::thousands(max)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// AIC's tables are for one layout and one serving engine: an `aic` timing section must
    /// have the TP and DP of the engine it times, in every role that runs it, and price that
    /// engine's backend (its own `backend`, when set, is the engine's; unset, it follows the
    /// engine, so the roles sharing it must run one backend).
    fn validate_aic_layouts(&self) -> Result<()> {
        let mut followed: Option<(&str, &str, Backend)> = None;
        for (role, _) in self.roles() {
            let (engine, timing) = self.role(role);
            let TimingConfig::Aic(aic) = timing else {
                continue;
            };
            let (engine_path, timing_path) = self.role_paths(role);
            match aic.backend {
                Some(b) if b != engine.backend => {
                    return Err(SimError::config(
                        &format!("{timing_path}.backend"),
                        format!(
                            "{} differs from {engine_path}.backend={}; the engine simulated and \
                             the engine AIC's data measured are one, set both to the same value \
                             (or leave {timing_path}.backend unset to follow the engine)",
                            b.name(),
                            engine.backend.name()
                        ),
                    ));
                }
                Some(_) => {}
                None => match followed {
                    Some((timing, path, b)) if timing == timing_path && b != engine.backend => {
                        return Err(SimError::config(
                            &format!("{timing_path}.backend"),
                            format!(
                                "unset, so it follows the engine it times, but {path}.backend={} \
                                 and {engine_path}.backend={} differ; set it, or give each role \
                                 its own timing",
                                b.name(),
                                engine.backend.name()
                            ),
                        ));
                    }
                    _ => followed = Some((timing_path, engine_path, engine.backend)),
                },
            }
            for (name, ours, engine_name, theirs) in [
                (
                    "tp",
                    aic.tp,
                    "tensor_parallel_size",
                    engine.tensor_parallel_size,
                ),
                (
                    "dp",
                    aic.dp,
                    "data_parallel_size",
                    engine.data_parallel_size,
                ),
            ] {
                if ours != theirs {
                    return Err(SimError::config(
                        &format!("{timing_path}.{name}"),
                        format!(
                            "{ours} differs from {engine_path}.{engine_name}={theirs}; AIC's \
                             tables are for one layout, set both to the same value"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The part a worker plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Prefills and decodes its requests.
    Aggregated,
    /// Prefills, then hands the KV to a decode worker.
    Prefill,
    /// Decodes requests whose KV arrived from a prefill worker.
    Decode,
}

impl Role {
    /// The role's name as configurations and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Aggregated => "aggregated",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

pub(crate) fn positive(field: &str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SimError::config(
            field,
            format!("must be a finite number > 0, got {value}"),
        ))
    }
}

/// A JSON document of settings read as a `T` at dotted path `section` ("": the whole
/// configuration); an error names the dotted path of the field at fault.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(text: &str, section: &str) -> Result<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| format_error(e, section))
}

/// A document serde could not read, as the dotted path of the field at fault below `section`
/// (list items as `[i]`) and serde's message without the position in the internal JSON.
fn format_error(err: serde_path_to_error::Error<serde_json::Error>, section: &str) -> SimError {
    let path = err.path().to_string();
    let text = err.inner().to_string();
    let message = match text.rsplit_once(" at line ") {
        Some((message, _)) => message,
        None => &text,
    };
    // serde names Rust's integer types; say what they mean.
    let message = message
        .replace("expected u32", "expected an integer from 0 to 4294967295")
        .replace(
            "expected u64",
            "expected an integer from 0 to 18446744073709551615",
        );
    // A field's path starts at a key of the document; anything else (not an object, broken
    // JSON) is the document's fault.
    use serde_path_to_error::Segment;
    let mut segments = err.path().iter();
    let named = matches!(segments.next(), Some(Segment::Map { .. }))
        && !segments.any(|s| matches!(s, Segment::Unknown));
    match (named, section) {
        (true, "") => SimError::config(&path, message),
        (true, _) => SimError::config(&format!("{section}.{path}"), message),
        (false, "") => SimError::ConfigFormat(message),
        (false, _) => SimError::config(section, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_caches_count_every_ranks_cache_and_tier() {
        let mut config = SimConfig::from_json(
            r#"{"cluster": {"mode": "disaggregated", "num_prefill_workers": 2,
                "num_decode_workers": 3}, "engine": {"data_parallel_size": 2}}"#,
        )
        .unwrap();
        // (2 + 3) workers of 2 ranks.
        assert_eq!(config.block_caches(), 10);
        config.offload.g2_blocks = Some(100);
        assert_eq!(config.block_caches(), 20);
        config.offload.g3_blocks = Some(1_000);
        assert_eq!(config.block_caches(), 30);
        config.offload.g3_shared = true;
        assert_eq!(config.block_caches(), 21);
    }

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
        assert_eq!(
            err.to_string(),
            "engine.block_size: must be between 1 and 65,536, got 0"
        );
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
        assert!(
            matches!(err, SimError::Config { ref field, ref message }
                if field == "engine.blok_size" && message.contains("unknown field")),
            "{err}"
        );
    }

    /// Every document error names its dotted path, whatever serde or a range check found.
    #[test]
    fn unreadable_values_name_their_dotted_path() {
        for (doc, expected) in [
            (
                r#"{"cluster": {"num_workers": -1}}"#,
                "cluster.num_workers: invalid value: integer `-1`, expected an integer from 0 \
                 to 4294967295",
            ),
            (
                r#"{"engine": {"max_num_seqs": -1}}"#,
                "engine.max_num_seqs: invalid value: integer `-1`, expected an integer from 0 \
                 to 4294967295",
            ),
            (
                r#"{"offload": {"g2_blocks": -5}}"#,
                "offload.g2_blocks: invalid value: integer `-5`, expected an integer from 0 to \
                 4294967295",
            ),
            (
                r#"{"cluster": {"router_seed": -1}}"#,
                "cluster.router_seed: invalid value: integer `-1`, expected an integer from 0 \
                 to 18446744073709551615",
            ),
            (
                r#"{"engine": {"num_gpu_blocks": 1099511627776}}"#,
                "engine.num_gpu_blocks: invalid value: integer `1099511627776`, expected an \
                 integer from 0 to 4294967295",
            ),
            (
                r#"{"cluster": {"num_workers": true}}"#,
                "cluster.num_workers: invalid type: boolean `true`, expected an integer from 0 \
                 to 4294967295",
            ),
            (
                r#"{"decode": {"engine": {"block_size": "x"}}}"#,
                "decode.engine.block_size: invalid type: string \"x\", expected an integer \
                 from 0 to 4294967295",
            ),
        ] {
            let err = SimConfig::from_json(doc).unwrap_err();
            assert_eq!(err.to_string(), expected, "{doc}");
        }
        // A tagged section: serde reads it whole, so the path is the section's.
        let err = SimConfig::from_json(r#"{"timing": {"speedup_ratio": 0}}"#).unwrap_err();
        assert_eq!(err.to_string(), "timing: missing field `model`");
        // What is not an object of sections names no field.
        for doc in ["{not json", "[1]", "3"] {
            let err = SimConfig::from_json(doc).unwrap_err();
            assert!(matches!(err, SimError::ConfigFormat(_)), "{doc}: {err}");
        }
    }

    /// Sizes past their limits are refused naming the field and the limit, before anything is
    /// allocated; products of sizes are checked without wrapping.
    #[test]
    fn sizes_past_their_limits_name_field_and_limit() {
        for (doc, expected) in [
            (
                r#"{"engine": {"num_gpu_blocks": 4000000000}}"#,
                "engine.num_gpu_blocks: must be between 1 and 1,000,000,000, got 4000000000",
            ),
            (
                r#"{"cluster": {"num_workers": 100000000}}"#,
                "cluster.num_workers: must be between 1 and 16,384, got 100000000",
            ),
            (
                r#"{"cluster": {"num_workers": 2147483648}}"#,
                "cluster.num_workers: must be between 1 and 16,384, got 2147483648",
            ),
            (
                r#"{"engine": {"tensor_parallel_size": 65536}}"#,
                "engine.tensor_parallel_size: must be between 1 and 1,024, got 65536",
            ),
            // 16,384 x 1,024 x 1 = 16,777,216 GPUs.
            (
                r#"{"cluster": {"num_workers": 16384}, "engine": {"tensor_parallel_size": 1024}}"#,
                "cluster.num_workers: cluster.num_workers 16,384 x engine.tensor_parallel_size \
                 1,024 x engine.data_parallel_size 1 = 16,777,216 GPUs, more than the limit of \
                 10,000,000",
            ),
            // 16,384 x DP 2 = 32,768 ranks.
            (
                r#"{"cluster": {"num_workers": 16384}, "engine": {"data_parallel_size": 2}}"#,
                "cluster.num_workers: cluster.num_workers 16,384 x engine.data_parallel_size 2 \
                 = 32,768 ranks, more than the limit of 16,384",
            ),
            (
                r#"{"cluster": {"mode": "disaggregated", "num_prefill_workers": 10000,
                    "num_decode_workers": 10000}}"#,
                "cluster: the prefill and decode pools have 20,000 ranks together, more than \
                 the limit of 16,384",
            ),
            // 100,000,000 x 64 = 6.4e9 tokens, past 2^32 - 1.
            (
                r#"{"engine": {"num_gpu_blocks": 100000000}}"#,
                "engine.num_gpu_blocks: engine.num_gpu_blocks 100,000,000 x engine.block_size \
                 64 = 6,400,000,000 tokens per rank, more than the limit of 4,294,967,295",
            ),
            (
                r#"{"cluster": {"mode": "disaggregated"}, "prefill": {"engine": {"block_size": 65537}}}"#,
                "prefill.engine.block_size: must be between 1 and 65,536, got 65537",
            ),
            (
                r#"{"kv_transfer": {"kv_bytes_per_token": 1e308}}"#,
                "kv_transfer.kv_bytes_per_token: must be at most 1e9, got 1e308",
            ),
            (
                r#"{"kv_transfer": {"bandwidth_gbps": 1e300, "kv_bytes_per_token": 2}}"#,
                "kv_transfer.bandwidth_gbps: must be at most 1e6, got 1e300",
            ),
            (
                r#"{"offload": {"g2_blocks": 1, "g1_g2_gbps": 1e7}}"#,
                "offload.g1_g2_gbps: must be at most 1e6, got 1e7",
            ),
            // 10,000 layers x 2 x 65,536 heads x 65,536 dims x 16 bytes = 1.37e15.
            (
                r#"{"kv_transfer": {"kv_shape": {"num_layers": 10000, "num_kv_heads": 65536,
                    "head_dim": 65536, "dtype_bytes": 16}}}"#,
                "kv_transfer.kv_shape: gives 1.37438953472e15 KV bytes per token, more than \
                 the limit of 1e9",
            ),
            (
                r#"{"cluster": {"concurrency": 0}}"#,
                "cluster.concurrency: must be between 1 and 100,000,000, got 0",
            ),
            // Settings whose products or sums of passes would overflow to infinity.
            (
                r#"{"timing": {"model": "fixed", "prefill_ms": 1e300, "decode_ms": 1}}"#,
                "timing.prefill_ms: must be at most 1e9, got 1e300",
            ),
            (
                r#"{"timing": {"speedup_ratio": 1e-300, "model": "polynomial"}}"#,
                "timing.speedup_ratio: must be at least 1e-6, got 1e-300",
            ),
            (
                r#"{"cluster": {"arrival_speedup_ratio": 1e300}}"#,
                "cluster.arrival_speedup_ratio: must be at most 1e6, got 1e300",
            ),
            (
                r#"{"kv_transfer": {"bandwidth_gbps": 1e-300, "kv_bytes_per_token": 2}}"#,
                "kv_transfer.bandwidth_gbps: must be at least 1e-6, got 1e-300",
            ),
            (
                r#"{"cluster": {"overlap_weight": 1e308}}"#,
                "cluster.overlap_weight: must be a finite number from 0 to 1e6, got 1e308",
            ),
        ] {
            let err = SimConfig::from_json(doc).unwrap_err();
            assert_eq!(err.to_string(), expected, "{doc}");
        }
        // At the limits themselves the configuration is valid: 65,536 x 65,535 < 2^32 tokens.
        SimConfig::from_json(
            r#"{"cluster": {"num_workers": 16384},
                "engine": {"block_size": 65536, "num_gpu_blocks": 65535}}"#,
        )
        .unwrap();
    }
    #[test]
    fn aic_timing_needs_the_tp_of_the_engine_it_times() {
        let aic =
            r#"{"model": "aic", "model_name": "Qwen/Qwen3-32B", "system": "h200_sxm", "tp": 2}"#;
        let ok = format!(r#"{{"engine": {{"tensor_parallel_size": 2}}, "timing": {aic}}}"#);
        let config = SimConfig::from_json(&ok).unwrap();
        // Accepted as data, but the replay needs its tables.
        let err = config.check_replayable().unwrap_err().to_string();
        assert!(
            err.starts_with("timing: aic timing is priced from tables"),
            "{err}"
        );
        let err = SimConfig::from_json(&format!(r#"{{"timing": {aic}}}"#)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "timing.tp: 2 differs from engine.tensor_parallel_size=1; AIC's tables are for one \
             layout, set both to the same value"
        );
        // A role's own engine is the one its (shared) timing times.
        let disagg = format!(
            r#"{{"cluster": {{"mode": "disaggregated"}}, "engine": {{"tensor_parallel_size": 2}},
                "decode": {{"engine": {{"tensor_parallel_size": 4}}}}, "timing": {aic}}}"#
        );
        let err = SimConfig::from_json(&disagg).unwrap_err().to_string();
        assert!(
            err.contains("differs from decode.engine.tensor_parallel_size=4"),
            "{err}"
        );
    }

    #[test]
    fn a_named_model_may_leave_the_kv_bytes_of_links_and_tiers_to_it() {
        let links = r#""kv_transfer": {"bandwidth_gbps": 25}"#;
        let tiers = r#""offload": {"g2_blocks": 8}"#;
        let aic = r#""timing": {"model": "aic", "model_name": "Qwen/Qwen3-32B", "system": "s"}"#;
        let disagg = r#""cluster": {"mode": "disaggregated"}"#;
        for needs in [format!("{disagg}, {links}"), tiers.to_string()] {
            // Without a model, the bytes are required...
            let err = SimConfig::from_json(&format!("{{{needs}}}")).unwrap_err();
            assert!(err.to_string().contains("kv_bytes_per_token"), "{err}");
            // ...with one, the Python layer fills them in; a replay still needs them there
            // (it refuses aic sections, which the Python layer replaces by tables).
            let config = SimConfig::from_json(&format!("{{{needs}, {aic}}}")).unwrap();
            let err = config.check_replayable().unwrap_err().to_string();
            assert!(err.starts_with("timing: aic timing is priced"), "{err}");
        }
    }

    #[test]
    fn aic_timing_prices_the_backend_of_the_engine_it_times() {
        let aic = r#"{"model": "aic", "model_name": "Qwen/Qwen3-32B", "system": "h200_sxm""#;
        let with = |engine: &str, backend: &str| {
            SimConfig::from_json(&format!(
                r#"{{"engine": {{{engine}}}, "timing": {aic}{backend}}}}}"#
            ))
        };
        // Unset, it follows the engine; set, it must be the engine's.
        with(r#""backend": "trtllm""#, "").unwrap();
        with(r#""backend": "trtllm""#, r#", "backend": "trtllm""#).unwrap();
        let err = with("", r#", "backend": "trtllm""#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "timing.backend: trtllm differs from engine.backend=vllm; the engine simulated and \
             the engine AIC's data measured are one, set both to the same value (or leave \
             timing.backend unset to follow the engine)"
        );
        // A shared section follows one engine: roles with two backends need their own.
        let err = SimConfig::from_json(&format!(
            r#"{{"cluster": {{"mode": "disaggregated"}}, "timing": {aic}}},
                "decode": {{"engine": {{"backend": "trtllm"}}}}}}"#
        ))
        .unwrap_err();
        assert!(
            err.to_string().starts_with(
                "timing.backend: unset, so it follows the engine it times, but \
                 engine.backend=vllm and decode.engine.backend=trtllm differ"
            ),
            "{err}"
        );
    }

    #[test]
    fn resolved_view_names_where_each_role_setting_came_from() {
        let config = SimConfig::from_json(
            r#"{"cluster": {"mode": "disaggregated", "num_prefill_workers": 3,
                            "num_decode_workers": 2},
                "engine": {"tensor_parallel_size": 2, "data_parallel_size": 2},
                "decode": {"engine": {"tensor_parallel_size": 4}},
                "kv_transfer": {"bandwidth_gbps": 8, "kv_shape": {"num_layers": 2,
                    "num_kv_heads": 4, "head_dim": 8, "dtype_bytes": 2}}}"#,
        )
        .unwrap();
        let r = config.resolved();
        let paths: Vec<_> = r
            .roles
            .iter()
            .map(|v| (v.role, v.engine_path, v.timing_path))
            .collect();
        assert_eq!(
            paths,
            [
                (Role::Prefill, "engine", "timing"),
                (Role::Decode, "decode.engine", "timing")
            ]
        );
        // 3 prefill workers x (TP 2 x DP 2) + 2 decode workers x (TP 4 x DP 1).
        assert_eq!((r.num_workers, r.num_gpus), (5, 20));
        let k = &r.kv_transfer;
        // 2 layers x 2 (K, V) x 4 heads x 8 dims x 2 bytes = 256 bytes per token.
        assert_eq!(k.bytes_per_token, Some(256.0));
        assert_eq!((k.send_gbps, k.recv_gbps), (Some(8.0), Some(8.0)));
        assert_eq!(k.link_model, Some(LinkModel::MaxMin));
        assert_eq!(SimConfig::default().resolved().kv_transfer.link_model, None);
    }

    /// A shape handed in on its own is checked before its product is taken, which would wrap.
    #[test]
    fn a_shape_on_its_own_is_checked_before_its_bytes() {
        let max = u32::MAX;
        let doc = format!(
            r#"{{"num_layers": {max}, "num_kv_heads": {max}, "head_dim": {max}, "dtype_bytes": 2}}"#
        );
        let err = KvShape::from_json(&doc)
            .unwrap()
            .checked_bytes_per_token("kv_shape", 1)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "kv_shape.num_layers: must be between 1 and 10,000, got 4294967295"
        );
        let err = KvShape::from_json(r#"{"num_layers": -1}"#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("kv_shape.num_layers: invalid value: integer `-1`"),
            "{err}"
        );
        let shape = KvShape::from_json(
            r#"{"num_layers": 2, "num_kv_heads": 2, "head_dim": 2, "dtype_bytes": 2}"#,
        )
        .unwrap();
        for tp in [-1, 0, 1 << 40] {
            let err = shape.checked_bytes_per_token("kv_shape", tp).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("tp: must be between 1 and 1,024, got {tp}")
            );
        }
        // 2 layers x 2 (K, V) x 2 heads x 2 dims x 2 bytes.
        assert_eq!(shape.checked_bytes_per_token("kv_shape", 1), Ok(32));
    }

    #[test]
    fn kv_bytes_per_token_split_by_tensor_parallelism() {
        let shape = KvShape {
            num_layers: 64,
            num_kv_heads: 8,
            head_dim: 128,
            dtype_bytes: 2,
            latent: false,
        };
        // 64 x 2 x 8 x 128 x 2 = 262,144; TP 2 halves the heads; TP 16 keeps one head per GPU.
        assert_eq!(shape.bytes_per_token(1), 262_144);
        assert_eq!(shape.bytes_per_token(2), 131_072);
        assert_eq!(shape.bytes_per_token(16), 32_768);
        // A 576-wide latent on 61 layers in fp8: 61 x 576 x 1 on every GPU.
        let latent = KvShape {
            num_layers: 61,
            num_kv_heads: 1,
            head_dim: 576,
            dtype_bytes: 1,
            latent: true,
        };
        assert_eq!(latent.bytes_per_token(8), 35_136);
    }
}
