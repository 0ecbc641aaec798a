//! Upper bounds of the sizes a configuration may ask for. Past them a replay would exhaust
//! memory before its first event (a scheduler per rank, a slot per cached block) or overflow
//! the 32-bit counters of tokens and GPUs; no deployment comes near them. Each check names the
//! dotted field and the bound, and products of fields are bounded with checked arithmetic.

use super::{Result, SimError};

/// Workers of one pool (aggregated, prefill or decode). Each rank costs memory in proportion
/// to the trace's distinct blocks (150 kB on the bundled sample): 16,384 ranks take 2.5 GB.
pub const MAX_WORKERS: u32 = 16_384;
/// Tensor-, data- and expert-parallel sizes.
pub const MAX_PARALLEL: u32 = 1_024;
/// Data-parallel ranks of the whole cluster (workers x DP over the pools); each is a scheduler.
pub const MAX_RANKS: u64 = 16_384;
/// GPUs of the whole cluster (workers x TP x DP over the pools).
pub const MAX_GPUS: u64 = 10_000_000;
/// Tokens per KV block.
pub const MAX_BLOCK_SIZE: u32 = 65_536;
/// Blocks of one cache tier (a rank's G1 or G2, a rank's or the pool's G3).
pub const MAX_BLOCKS: u32 = 1_000_000_000;
/// Tokens one rank's GPU cache holds (num_gpu_blocks x block_size): token positions are 32-bit.
pub const MAX_RANK_TOKENS: u64 = u32::MAX as u64;
/// Requests running at once on a rank.
pub const MAX_NUM_SEQS: u32 = 1_000_000;
/// Token budget of one pass.
pub const MAX_BATCHED_TOKENS: u32 = 100_000_000;
/// Sessions in flight in the closed loop.
pub const MAX_CONCURRENCY: u32 = 100_000_000;
/// KV bytes of one token (the largest models hold about a megabyte); it keeps every transfer
/// and block move (at most 2^32 tokens each) a finite number of bytes.
pub const MAX_KV_BYTES_PER_TOKEN: f64 = 1e9;
/// Link bandwidths (GB/s): a petabyte per second, down to a kilobyte per second.
pub const MAX_GBPS: f64 = 1e6;
pub const MIN_GBPS: f64 = 1e-6;
/// Speedup ratios (arrivals, step times): a million times faster or slower at most.
pub const MAX_RATIO: f64 = 1e6;
pub const MIN_RATIO: f64 = 1e-6;
/// The latency of one pass (ms), fixed or in a table: about 11.6 days; sums of passes stay
/// finite.
pub const MAX_STEP_MS: f64 = 1e9;
/// The kv_aware router's weight of blocks to prefill: a cost stays finite.
pub const MAX_OVERLAP_WEIGHT: f64 = 1e6;
/// Layers of a `kv_shape`.
pub const MAX_LAYERS: u32 = 10_000;
/// KV heads per layer, and values per head, of a `kv_shape`.
pub const MAX_HEADS: u32 = 65_536;
/// Bytes per KV element of a `kv_shape`.
pub const MAX_DTYPE_BYTES: u32 = 16;

/// Every bound above by its name in lower case (`max_workers`), as JSON, so the Python layer
/// reads them instead of repeating them.
pub fn limits_json() -> serde_json::Value {
    serde_json::json!({
        "max_workers": MAX_WORKERS,
        "max_parallel": MAX_PARALLEL,
        "max_ranks": MAX_RANKS,
        "max_gpus": MAX_GPUS,
        "max_block_size": MAX_BLOCK_SIZE,
        "max_blocks": MAX_BLOCKS,
        "max_rank_tokens": MAX_RANK_TOKENS,
        "max_num_seqs": MAX_NUM_SEQS,
        "max_batched_tokens": MAX_BATCHED_TOKENS,
        "max_concurrency": MAX_CONCURRENCY,
        "max_kv_bytes_per_token": MAX_KV_BYTES_PER_TOKEN,
        "max_gbps": MAX_GBPS,
        "min_gbps": MIN_GBPS,
        "max_ratio": MAX_RATIO,
        "min_ratio": MIN_RATIO,
        "max_step_ms": MAX_STEP_MS,
        "max_overlap_weight": MAX_OVERLAP_WEIGHT,
        "max_layers": MAX_LAYERS,
        "max_heads": MAX_HEADS,
        "max_dtype_bytes": MAX_DTYPE_BYTES,
    })
}

/// `n` with thousands separators, as the bounds are written in messages.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `value` as a message shows it: plainly, or in exponent form when very large or small.
pub(crate) fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && magnitude.is_finite() && !(1e-4..1e16).contains(&magnitude) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// `value` of `field` lies in 1..=max.
pub(crate) fn count(field: &str, value: u32, max: u32) -> Result<()> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(SimError::config(
            field,
            format!(
                "must be between 1 and {}, got {value}",
                thousands(u64::from(max))
            ),
        ))
    }
}

/// `value` of `field` is finite, > 0 and at most `max`.
pub(crate) fn positive_at_most(field: &str, value: f64, max: f64) -> Result<()> {
    positive_within(field, value, 0.0, max)
}

/// `value` of `field` is finite, > 0, and within `min..=max`.
pub(crate) fn positive_within(field: &str, value: f64, min: f64, max: f64) -> Result<()> {
    super::positive(field, value)?;
    if value < min {
        return Err(SimError::config(
            field,
            format!("must be at least {min:e}, got {value:e}"),
        ));
    }
    if value > max {
        return Err(SimError::config(
            field,
            format!("must be at most {max:e}, got {value:e}"),
        ));
    }
    Ok(())
}

/// The product of `factors` (each a dotted field, or a description, with its value) is at most
/// `max` `unit`; the error, at `field`, spells the product out.
pub(crate) fn product(field: &str, factors: &[(&str, u64)], max: u64, unit: &str) -> Result<u64> {
    let total = factors
        .iter()
        .try_fold(1u64, |acc, &(_, v)| acc.checked_mul(v));
    match total {
        Some(total) if total <= max => Ok(total),
        _ => {
            let spelled: Vec<String> = factors
                .iter()
                .map(|(name, v)| format!("{name} {}", thousands(*v)))
                .collect();
            let total = total.map_or_else(|| "more than 2^64".into(), thousands);
            Err(SimError::config(
                field,
                format!(
                    "{} = {total} {unit}, more than the limit of {}",
                    spelled.join(" x "),
                    thousands(max)
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_are_checked_and_spelled_out() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(product("a", &[("a", 3), ("b", 4)], 12, "GPUs"), Ok(12));
        let err = product("a", &[("a", 3), ("b", 5)], 12, "GPUs").unwrap_err();
        assert_eq!(
            err.to_string(),
            "a: a 3 x b 5 = 15 GPUs, more than the limit of 12"
        );
        // u64 overflow is an error, not a wrapped product.
        let err = product("a", &[("a", u64::MAX), ("b", 2)], 12, "GPUs").unwrap_err();
        assert!(err.to_string().contains("more than 2^64"), "{err}");
    }
}
