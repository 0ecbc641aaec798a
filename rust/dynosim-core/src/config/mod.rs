//! Typed simulation settings, one file per section. Defaults live here and only here: the
//! Python layer reads them through `default_config_json` instead of repeating them, and value
//! ranges are checked here only.

mod cluster;
mod engine;
mod kv_transfer;
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
pub use offload::OffloadConfig;
pub use report::{ReportConfig, SlaConfig};
pub use resolved::{Resolved, RoleView, TransferView};
pub use timing::{AicTiming, FixedTiming, OpTables, PolynomialTiming, TableTiming, TimingConfig};

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
        self.validate_aic_layouts()?;
        self.kv_transfer.validate()?;
        self.sla.validate()?;
        positive("report.sample_interval_ms", self.report.sample_interval_ms)?;
        self.offload.validate(self.kv_transfer.bytes_per_token())
    }

    /// `validate`, and that every role the replay runs has a timing model the simulator
    /// prices itself: an `aic` section must be resolved into its `table` first.
    pub fn check_replayable(&self) -> Result<()> {
        self.validate()?;
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

    /// AIC's tables are for one layout: an `aic` timing section must have the TP and DP of the
    /// engine it times, in every role that runs it.
    fn validate_aic_layouts(&self) -> Result<()> {
        for (role, _) in self.roles() {
            let (engine, timing) = self.role(role);
            let TimingConfig::Aic(aic) = timing else {
                continue;
            };
            let (engine_path, timing_path) = self.role_paths(role);
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

pub(crate) fn at_least_one(field: &str, value: u32) -> Result<()> {
    if value >= 1 {
        Ok(())
    } else {
        Err(SimError::config(
            field,
            format!("must be >= 1, got {value}"),
        ))
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
