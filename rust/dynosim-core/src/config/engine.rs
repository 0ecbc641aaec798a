//! One worker's engine settings: KV cache, batch limits, chunked prefill, preemption, ranks.

use serde::{Deserialize, Serialize};

use super::limits::{
    count, product, MAX_BATCHED_TOKENS, MAX_BLOCKS, MAX_BLOCK_SIZE, MAX_NUM_SEQS, MAX_PARALLEL,
    MAX_RANK_TOKENS,
};
use super::Result;

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

/// Check the engine section at dotted path `section`.
pub(super) fn validate_engine(section: &str, e: &EngineConfig) -> Result<()> {
    for (name, value, max) in [
        ("block_size", e.block_size, MAX_BLOCK_SIZE),
        ("num_gpu_blocks", e.num_gpu_blocks, MAX_BLOCKS),
        ("max_num_seqs", e.max_num_seqs, MAX_NUM_SEQS),
        (
            "max_num_batched_tokens",
            e.max_num_batched_tokens,
            MAX_BATCHED_TOKENS,
        ),
        ("tensor_parallel_size", e.tensor_parallel_size, MAX_PARALLEL),
        ("data_parallel_size", e.data_parallel_size, MAX_PARALLEL),
    ] {
        count(&format!("{section}.{name}"), value, max)?;
    }
    // A rank's token positions (prompt plus output) are 32-bit.
    let blocks = format!("{section}.num_gpu_blocks");
    product(
        &blocks,
        &[
            (&blocks, u64::from(e.num_gpu_blocks)),
            (&format!("{section}.block_size"), u64::from(e.block_size)),
        ],
        MAX_RANK_TOKENS,
        "tokens per rank",
    )?;
    Ok(())
}
