//! One worker's engine settings: which serving engine (flavour) it models, its KV cache, batch
//! limits and layout, and the scheduling settings of its flavour.
//!
//! A setting only some flavours have is optional: unset means the flavour's default, and the
//! defaults of every flavour live in `FlavourDefaults::of` below and nowhere else. Setting one
//! the chosen flavour does not have (vLLM's `preemption_mode` on a TensorRT-LLM engine) is an
//! error naming the setting and the flavour.

use serde::{Deserialize, Deserializer, Serialize};

use super::limits::{
    count, product, MAX_BATCHED_TOKENS, MAX_BLOCKS, MAX_BLOCK_SIZE, MAX_NUM_SEQS, MAX_PARALLEL,
    MAX_RANK_TOKENS,
};
use super::{positive, Result, SimError};

/// A serving engine: the scheduler dynosim models for a worker, and the engine whose measured
/// kernels AIConfigurator prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Trtllm,
    #[default]
    Vllm,
    Sglang,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Trtllm => "trtllm",
            Backend::Vllm => "vllm",
            Backend::Sglang => "sglang",
        }
    }
}

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

/// TensorRT-LLM's capacity scheduler: which requests a pass may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityScheduler {
    /// Admit a request only if the blocks of its whole prompt and maximum output fit besides
    /// what running requests will still need; never preempt.
    GuaranteedNoEvict,
    /// Admit while the next pass fits; pause the latest-started request when it does not.
    MaxUtilization,
}

/// SGLang's order of the waiting queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulePolicy {
    /// Arrival order.
    Fcfs,
    /// Longest cached prefix first.
    Lpm,
}

/// KV blocks of a rank whose configuration does not say (and whose model and GPU do not
/// either): uncalibrated.
const DEFAULT_NUM_GPU_BLOCKS: u32 = 16_384;

/// `num_gpu_blocks` as read: `null` is unset, which is the default.
fn blocks_or_default<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.unwrap_or(DEFAULT_NUM_GPU_BLOCKS))
}

/// One worker's engine. Settings shared by every flavour come first; the optional ones belong
/// to the flavours named in their comments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// The serving engine modelled (and whose data an `aic` timing section prices).
    pub backend: Backend,
    /// Tokens per KV block (all flavours; default by flavour).
    pub block_size: Option<u32>,
    /// KV blocks of one rank's GPU cache (each of a worker's `data_parallel_size` ranks has
    /// its own). Unset (`null` or absent): `DEFAULT_NUM_GPU_BLOCKS`; the Python layer sets it
    /// first from the role's model and GPU when its timing names them.
    #[serde(deserialize_with = "blocks_or_default")]
    pub num_gpu_blocks: u32,
    /// Share of a GPU's memory the engine takes for weights, activations and KV cache (vLLM's
    /// `gpu_memory_utilization`): what the Python layer sizes `num_gpu_blocks` from.
    pub gpu_memory_utilization: f64,
    /// Most requests running at once on one rank (each of a worker's ranks has its own).
    pub max_num_seqs: u32,
    /// GPUs one rank spans (tensor parallelism); part of the timing key and the GPU count.
    pub tensor_parallel_size: u32,
    /// Ranks in one worker, each with its own scheduler and `num_gpu_blocks` of KV cache,
    /// passing in lockstep: a grouped pass ends when the slowest rank ends.
    pub data_parallel_size: u32,
    /// vLLM: token budget of one forward pass.
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM: let a long prompt take the remaining budget in pieces across passes.
    pub enable_chunked_prefill: Option<bool>,
    /// vLLM: which running request a KV shortage preempts.
    pub preemption_mode: Option<PreemptionMode>,
    /// vLLM: form each pass while the one before it runs (vLLM's async scheduling, its default
    /// since 0.11.1): a request reaching a busy rank waits for the pass already formed.
    pub async_scheduling: Option<bool>,
    /// vLLM: admit a waiting request only if blocks for its whole prompt are free (vLLM 0.19's
    /// `scheduler_reserve_full_isl`), not just for its first chunk.
    pub scheduler_reserve_full_isl: Option<bool>,
    /// vLLM: run every pass without CUDA graphs; with them (the default) a pass of at most
    /// the largest captured size computes as many tokens as the captured size it is padded to.
    pub enforce_eager: Option<bool>,
    /// TensorRT-LLM: token budget of one forward pass (generation tokens counted first).
    pub max_num_tokens: Option<u32>,
    /// TensorRT-LLM: the capacity scheduler's policy.
    pub capacity_scheduler: Option<CapacityScheduler>,
    /// TensorRT-LLM: let a context (prompt) larger than the remaining budget run in chunks;
    /// off, a whole context must fit the budget of one pass.
    pub enable_chunked_context: Option<bool>,
    /// SGLang: tokens per page of the radix prefix cache.
    pub page_size: Option<u32>,
    /// SGLang: most prompt tokens one request prefills in a pass (longer prompts are chunked).
    pub chunked_prefill_size: Option<u32>,
    /// SGLang: most prompt tokens of one prefill batch.
    pub max_prefill_tokens: Option<u32>,
    /// SGLang: order of the waiting queue.
    pub schedule_policy: Option<SchedulePolicy>,
    /// SGLang: scales the reservation for running requests' future tokens (higher: admit
    /// fewer).
    pub schedule_conservativeness: Option<f64>,
    /// SGLang: the new-token ratio's starting value, before `schedule_conservativeness` scales
    /// it.
    pub init_new_token_ratio: Option<f64>,
    /// SGLang: the ratio's floor as a share of its (scaled) starting value.
    pub min_new_token_ratio_factor: Option<f64>,
    /// SGLang: decode steps over which the ratio decays from its start to its floor.
    pub new_token_ratio_decay_steps: Option<u32>,
    /// SGLang: cap on the remaining output tokens a running request reserves for.
    pub clip_max_new_tokens: Option<u32>,
}

/// Every setting of one flavour with its default.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlavourDefaults {
    pub block_size: u32,
    #[serde(flatten)]
    pub settings: FlavourSettings,
}

/// The scheduling settings of one flavour, each set.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum FlavourSettings {
    Vllm(VllmSettings),
    Trtllm(TrtllmSettings),
    Sglang(SglangSettings),
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VllmSettings {
    pub max_num_batched_tokens: u32,
    pub enable_chunked_prefill: bool,
    pub preemption_mode: PreemptionMode,
    pub async_scheduling: bool,
    pub scheduler_reserve_full_isl: bool,
    pub enforce_eager: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrtllmSettings {
    pub max_num_tokens: u32,
    pub capacity_scheduler: CapacityScheduler,
    pub enable_chunked_context: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SglangSettings {
    pub page_size: u32,
    pub chunked_prefill_size: u32,
    pub max_prefill_tokens: u32,
    pub schedule_policy: SchedulePolicy,
    pub schedule_conservativeness: f64,
    pub init_new_token_ratio: f64,
    pub min_new_token_ratio_factor: f64,
    pub new_token_ratio_decay_steps: u32,
    pub clip_max_new_tokens: u32,
}

impl FlavourDefaults {
    /// The defaults of `backend`'s flavour: the engines' own defaults (vLLM's block size is
    /// Dynamo's mocker's 64; SGLang's new-token ratio starts at 0.7, decays over 600 steps to
    /// 0.14 of that and reserves for at most 4,096 remaining tokens, its environment defaults).
    pub fn of(backend: Backend) -> Self {
        match backend {
            Backend::Vllm => FlavourDefaults {
                block_size: 64,
                settings: FlavourSettings::Vllm(VllmSettings {
                    max_num_batched_tokens: 8192,
                    enable_chunked_prefill: true,
                    preemption_mode: PreemptionMode::Lifo,
                    async_scheduling: true,
                    scheduler_reserve_full_isl: true,
                    enforce_eager: false,
                }),
            },
            Backend::Trtllm => FlavourDefaults {
                block_size: 32,
                settings: FlavourSettings::Trtllm(TrtllmSettings {
                    max_num_tokens: 8192,
                    capacity_scheduler: CapacityScheduler::GuaranteedNoEvict,
                    enable_chunked_context: false,
                }),
            },
            Backend::Sglang => FlavourDefaults {
                block_size: 64,
                settings: FlavourSettings::Sglang(SglangSettings {
                    page_size: 1,
                    chunked_prefill_size: 8192,
                    max_prefill_tokens: 16384,
                    schedule_policy: SchedulePolicy::Fcfs,
                    schedule_conservativeness: 1.0,
                    init_new_token_ratio: 0.7,
                    min_new_token_ratio_factor: 0.14,
                    new_token_ratio_decay_steps: 600,
                    clip_max_new_tokens: 4096,
                }),
            },
        }
    }

    /// Every flavour's defaults as JSON, by backend name.
    pub fn all_json() -> serde_json::Value {
        let mut all = serde_json::Map::new();
        for backend in [Backend::Vllm, Backend::Sglang, Backend::Trtllm] {
            let value = serde_json::to_value(Self::of(backend)).expect("defaults serialise");
            all.insert(backend.name().to_string(), value);
        }
        serde_json::Value::Object(all)
    }
}

impl EngineConfig {
    /// GPUs one worker occupies: TP x DP.
    pub fn gpus_per_worker(&self) -> u32 {
        self.tensor_parallel_size * self.data_parallel_size
    }

    /// Tokens per KV block.
    pub fn block_size(&self) -> u32 {
        self.block_size
            .unwrap_or_else(|| FlavourDefaults::of(self.backend).block_size)
    }

    /// The vLLM flavour's settings, unset ones at their defaults.
    pub fn vllm(&self) -> VllmSettings {
        let FlavourSettings::Vllm(d) = FlavourDefaults::of(Backend::Vllm).settings else {
            unreachable!("the vllm defaults are vllm settings")
        };
        VllmSettings {
            max_num_batched_tokens: self
                .max_num_batched_tokens
                .unwrap_or(d.max_num_batched_tokens),
            enable_chunked_prefill: self
                .enable_chunked_prefill
                .unwrap_or(d.enable_chunked_prefill),
            preemption_mode: self.preemption_mode.unwrap_or(d.preemption_mode),
            async_scheduling: self.async_scheduling.unwrap_or(d.async_scheduling),
            scheduler_reserve_full_isl: self
                .scheduler_reserve_full_isl
                .unwrap_or(d.scheduler_reserve_full_isl),
            enforce_eager: self.enforce_eager.unwrap_or(d.enforce_eager),
        }
    }

    /// The TensorRT-LLM flavour's settings, unset ones at their defaults.
    pub fn trtllm(&self) -> TrtllmSettings {
        let FlavourSettings::Trtllm(d) = FlavourDefaults::of(Backend::Trtllm).settings else {
            unreachable!("the trtllm defaults are trtllm settings")
        };
        TrtllmSettings {
            max_num_tokens: self.max_num_tokens.unwrap_or(d.max_num_tokens),
            capacity_scheduler: self.capacity_scheduler.unwrap_or(d.capacity_scheduler),
            enable_chunked_context: self
                .enable_chunked_context
                .unwrap_or(d.enable_chunked_context),
        }
    }

    /// The SGLang flavour's settings, unset ones at their defaults.
    pub fn sglang(&self) -> SglangSettings {
        let FlavourSettings::Sglang(d) = FlavourDefaults::of(Backend::Sglang).settings else {
            unreachable!("the sglang defaults are sglang settings")
        };
        SglangSettings {
            page_size: self.page_size.unwrap_or(d.page_size),
            chunked_prefill_size: self.chunked_prefill_size.unwrap_or(d.chunked_prefill_size),
            max_prefill_tokens: self.max_prefill_tokens.unwrap_or(d.max_prefill_tokens),
            schedule_policy: self.schedule_policy.unwrap_or(d.schedule_policy),
            schedule_conservativeness: self
                .schedule_conservativeness
                .unwrap_or(d.schedule_conservativeness),
            init_new_token_ratio: self.init_new_token_ratio.unwrap_or(d.init_new_token_ratio),
            min_new_token_ratio_factor: self
                .min_new_token_ratio_factor
                .unwrap_or(d.min_new_token_ratio_factor),
            new_token_ratio_decay_steps: self
                .new_token_ratio_decay_steps
                .unwrap_or(d.new_token_ratio_decay_steps),
            clip_max_new_tokens: self.clip_max_new_tokens.unwrap_or(d.clip_max_new_tokens),
        }
    }

    /// The token budget of one pass: vLLM's `max_num_batched_tokens`, TensorRT-LLM's
    /// `max_num_tokens`, SGLang's `max_prefill_tokens` (what AIC sizes activations for).
    pub fn pass_token_budget(&self) -> u32 {
        match self.backend {
            Backend::Vllm => self.vllm().max_num_batched_tokens,
            Backend::Trtllm => self.trtllm().max_num_tokens,
            Backend::Sglang => self.sglang().max_prefill_tokens,
        }
    }

    /// The token counts a vLLM engine captures CUDA graphs for (none with `enforce_eager`, or
    /// for another flavour), ascending, as vLLM's defaults derive them: 1, 2, 4, every 8 up to
    /// 248, then every 16, up to the largest, min(2 x max_num_seqs, 512, max_num_batched_tokens).
    pub fn cuda_graph_sizes(&self) -> Vec<u32> {
        if self.backend != Backend::Vllm || self.vllm().enforce_eager {
            return Vec::new();
        }
        let largest = (2 * self.max_num_seqs)
            .min(512)
            .min(self.vllm().max_num_batched_tokens);
        [1, 2, 4]
            .into_iter()
            .chain((8..256).step_by(8))
            .chain((256..=512).step_by(16))
            .filter(|&s| s <= largest)
            .collect()
    }

    /// This engine with every setting of its flavour set (its defaults where unset).
    pub fn with_defaults(&self) -> EngineConfig {
        let mut e = EngineConfig {
            block_size: Some(self.block_size()),
            ..self.clone()
        };
        match self.backend {
            Backend::Vllm => {
                let s = self.vllm();
                e.max_num_batched_tokens = Some(s.max_num_batched_tokens);
                e.enable_chunked_prefill = Some(s.enable_chunked_prefill);
                e.preemption_mode = Some(s.preemption_mode);
                e.async_scheduling = Some(s.async_scheduling);
                e.scheduler_reserve_full_isl = Some(s.scheduler_reserve_full_isl);
                e.enforce_eager = Some(s.enforce_eager);
            }
            Backend::Trtllm => {
                let s = self.trtllm();
                e.max_num_tokens = Some(s.max_num_tokens);
                e.capacity_scheduler = Some(s.capacity_scheduler);
                e.enable_chunked_context = Some(s.enable_chunked_context);
            }
            Backend::Sglang => {
                let s = self.sglang();
                e.page_size = Some(s.page_size);
                e.chunked_prefill_size = Some(s.chunked_prefill_size);
                e.max_prefill_tokens = Some(s.max_prefill_tokens);
                e.schedule_policy = Some(s.schedule_policy);
                e.schedule_conservativeness = Some(s.schedule_conservativeness);
                e.init_new_token_ratio = Some(s.init_new_token_ratio);
                e.min_new_token_ratio_factor = Some(s.min_new_token_ratio_factor);
                e.new_token_ratio_decay_steps = Some(s.new_token_ratio_decay_steps);
                e.clip_max_new_tokens = Some(s.clip_max_new_tokens);
            }
        }
        e
    }

    /// The optional settings that are set, by name, with the flavour each belongs to.
    fn flavour_settings_set(&self) -> [(&'static str, Backend, bool); 18] {
        use Backend::{Sglang, Trtllm, Vllm};
        [
            (
                "max_num_batched_tokens",
                Vllm,
                self.max_num_batched_tokens.is_some(),
            ),
            (
                "enable_chunked_prefill",
                Vllm,
                self.enable_chunked_prefill.is_some(),
            ),
            ("preemption_mode", Vllm, self.preemption_mode.is_some()),
            ("async_scheduling", Vllm, self.async_scheduling.is_some()),
            (
                "scheduler_reserve_full_isl",
                Vllm,
                self.scheduler_reserve_full_isl.is_some(),
            ),
            ("enforce_eager", Vllm, self.enforce_eager.is_some()),
            ("max_num_tokens", Trtllm, self.max_num_tokens.is_some()),
            (
                "capacity_scheduler",
                Trtllm,
                self.capacity_scheduler.is_some(),
            ),
            (
                "enable_chunked_context",
                Trtllm,
                self.enable_chunked_context.is_some(),
            ),
            ("page_size", Sglang, self.page_size.is_some()),
            (
                "chunked_prefill_size",
                Sglang,
                self.chunked_prefill_size.is_some(),
            ),
            (
                "max_prefill_tokens",
                Sglang,
                self.max_prefill_tokens.is_some(),
            ),
            ("schedule_policy", Sglang, self.schedule_policy.is_some()),
            (
                "schedule_conservativeness",
                Sglang,
                self.schedule_conservativeness.is_some(),
            ),
            (
                "init_new_token_ratio",
                Sglang,
                self.init_new_token_ratio.is_some(),
            ),
            (
                "min_new_token_ratio_factor",
                Sglang,
                self.min_new_token_ratio_factor.is_some(),
            ),
            (
                "new_token_ratio_decay_steps",
                Sglang,
                self.new_token_ratio_decay_steps.is_some(),
            ),
            (
                "clip_max_new_tokens",
                Sglang,
                self.clip_max_new_tokens.is_some(),
            ),
        ]
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            backend: Backend::default(),
            block_size: None,
            num_gpu_blocks: DEFAULT_NUM_GPU_BLOCKS,
            gpu_memory_utilization: 0.9,
            max_num_seqs: 256,
            tensor_parallel_size: 1,
            data_parallel_size: 1,
            max_num_batched_tokens: None,
            enable_chunked_prefill: None,
            preemption_mode: None,
            async_scheduling: None,
            scheduler_reserve_full_isl: None,
            enforce_eager: None,
            max_num_tokens: None,
            capacity_scheduler: None,
            enable_chunked_context: None,
            page_size: None,
            chunked_prefill_size: None,
            max_prefill_tokens: None,
            schedule_policy: None,
            schedule_conservativeness: None,
            init_new_token_ratio: None,
            min_new_token_ratio_factor: None,
            new_token_ratio_decay_steps: None,
            clip_max_new_tokens: None,
        }
    }
}

/// Check the engine section at dotted path `section`: no setting of another flavour, and every
/// value in range.
pub(super) fn validate_engine(section: &str, e: &EngineConfig) -> Result<()> {
    for (name, flavour, set) in e.flavour_settings_set() {
        if set && flavour != e.backend {
            return Err(SimError::config(
                &format!("{section}.{name}"),
                format!(
                    "a {} setting; the {} engine ({section}.backend) has no such setting",
                    flavour.name(),
                    e.backend.name()
                ),
            ));
        }
    }
    let mut counts = vec![
        ("block_size", e.block_size(), MAX_BLOCK_SIZE),
        ("num_gpu_blocks", e.num_gpu_blocks, MAX_BLOCKS),
        ("max_num_seqs", e.max_num_seqs, MAX_NUM_SEQS),
        ("tensor_parallel_size", e.tensor_parallel_size, MAX_PARALLEL),
        ("data_parallel_size", e.data_parallel_size, MAX_PARALLEL),
    ];
    match e.backend {
        Backend::Vllm => counts.push((
            "max_num_batched_tokens",
            e.vllm().max_num_batched_tokens,
            MAX_BATCHED_TOKENS,
        )),
        Backend::Trtllm => counts.push((
            "max_num_tokens",
            e.trtllm().max_num_tokens,
            MAX_BATCHED_TOKENS,
        )),
        Backend::Sglang => {
            let s = e.sglang();
            counts.extend([
                ("page_size", s.page_size, MAX_BLOCK_SIZE),
                (
                    "chunked_prefill_size",
                    s.chunked_prefill_size,
                    MAX_BATCHED_TOKENS,
                ),
                (
                    "max_prefill_tokens",
                    s.max_prefill_tokens,
                    MAX_BATCHED_TOKENS,
                ),
                (
                    "new_token_ratio_decay_steps",
                    s.new_token_ratio_decay_steps,
                    MAX_BATCHED_TOKENS,
                ),
                (
                    "clip_max_new_tokens",
                    s.clip_max_new_tokens,
                    MAX_BATCHED_TOKENS,
                ),
            ]);
            for (name, value) in [
                ("schedule_conservativeness", s.schedule_conservativeness),
                ("init_new_token_ratio", s.init_new_token_ratio),
                ("min_new_token_ratio_factor", s.min_new_token_ratio_factor),
            ] {
                positive(&format!("{section}.{name}"), value)?;
            }
        }
    }
    for (name, value, max) in counts {
        count(&format!("{section}.{name}"), value, max)?;
    }
    let share = e.gpu_memory_utilization;
    if !(share.is_finite() && share > 0.0 && share <= 1.0) {
        return Err(SimError::config(
            &format!("{section}.gpu_memory_utilization"),
            format!("must be in (0, 1] (a share of the GPU's memory), got {share}"),
        ));
    }
    // A rank's token positions (prompt plus output) are 32-bit.
    let blocks = format!("{section}.num_gpu_blocks");
    product(
        &blocks,
        &[
            (&blocks, u64::from(e.num_gpu_blocks)),
            (&format!("{section}.block_size"), u64::from(e.block_size())),
        ],
        MAX_RANK_TOKENS,
        "tokens per rank",
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;

    #[test]
    fn a_setting_of_another_flavour_is_an_error_naming_it() {
        let err =
            SimConfig::from_json(r#"{"engine": {"backend": "trtllm", "preemption_mode": "fifo"}}"#)
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            "engine.preemption_mode: a vllm setting; the trtllm engine (engine.backend) has no \
             such setting"
        );
        let err = SimConfig::from_json(
            r#"{"cluster": {"mode": "disaggregated"},
                "decode": {"engine": {"page_size": 16}}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "decode.engine.page_size: a sglang setting; the vllm engine \
             (decode.engine.backend) has no such setting"
        );
    }

    #[test]
    fn unset_kv_blocks_are_the_default_and_the_memory_share_is_checked() {
        for text in [r#"{"engine": {"num_gpu_blocks": null}}"#, "{}"] {
            let c = SimConfig::from_json(text).unwrap();
            assert_eq!(c.engine.num_gpu_blocks, 16_384);
        }
        let given = SimConfig::from_json(r#"{"engine": {"num_gpu_blocks": 7}}"#).unwrap();
        assert_eq!(given.engine.num_gpu_blocks, 7);
        assert_eq!(SimConfig::default().engine.gpu_memory_utilization, 0.9);
        for share in ["0", "1.5", "-0.1"] {
            let text = format!(r#"{{"engine": {{"gpu_memory_utilization": {share}}}}}"#);
            let err = SimConfig::from_json(&text).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "engine.gpu_memory_utilization: must be in (0, 1] (a share of the GPU's \
                     memory), got {}",
                    share.parse::<f64>().unwrap()
                )
            );
        }
    }

    #[test]
    fn unset_settings_take_their_flavours_defaults() {
        let trt = SimConfig::from_json(r#"{"engine": {"backend": "trtllm"}}"#).unwrap();
        assert_eq!(trt.engine.block_size(), 32);
        assert_eq!(
            trt.engine.trtllm(),
            TrtllmSettings {
                max_num_tokens: 8192,
                capacity_scheduler: CapacityScheduler::GuaranteedNoEvict,
                enable_chunked_context: false,
            }
        );
        let vllm = EngineConfig::default();
        assert_eq!(vllm.block_size(), 64);
        assert_eq!(vllm.vllm().max_num_batched_tokens, 8192);
        // Filled in, the engine keeps to its own flavour's settings.
        let filled = trt.engine.with_defaults();
        assert_eq!(filled.max_num_tokens, Some(8192));
        assert_eq!(filled.max_num_batched_tokens, None);
        validate_engine("engine", &filled).unwrap();
        let sgl =
            SimConfig::from_json(r#"{"engine": {"backend": "sglang", "page_size": 4}}"#).unwrap();
        assert_eq!(sgl.engine.sglang().page_size, 4);
        assert_eq!(sgl.engine.sglang().max_prefill_tokens, 16384);
        let err = SimConfig::from_json(r#"{"engine": {"backend": "trtllm", "max_num_tokens": 0}}"#)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "engine.max_num_tokens: must be between 1 and 100,000,000, got 0"
        );
    }
}
