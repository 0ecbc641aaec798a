//! The command line: a trace, a topology, the engine of each role and the KV transfers.
//!
//! Engine flags without a prefix set every role; in disaggregated mode `--prefill.FLAG` and
//! `--decode.FLAG` set one role's (the prefix keeps `--decode.decode-speedup-ratio` readable).
//! An engine setting not given keeps AISimulate's default for the role's backend.

use std::path::PathBuf;

use aisimulate_core::engine::{Backend, G3Scope, PreemptionMode, TransferTimingMode};
use serde::de::DeserializeOwned;

pub const USAGE: &str = "\
usage: dynosim-aisim TRACE [--trace-block-size TOKENS] [--arrival-speedup R] [--concurrency N]
         [--mode aggregated|disaggregated] [--workers N]
         [--prefill-workers N] [--decode-workers N]
         [--kv-bytes-per-token BYTES] [--kv-bandwidth-gbps GB/s]
         [--kv-recv-bandwidth-gbps GB/s] [--kv-sizing full_prompt|destination_missing]
         [ENGINE FLAGS] [--prefill.ENGINE FLAG ...] [--decode.ENGINE FLAG ...]
         [OFFLOAD FLAGS] [--per-request FILE.jsonl]
engine flags: --backend vllm|trtllm|sglang, --block-size TOKENS, --num-gpu-blocks N,
         --max-num-seqs N, --max-num-batched-tokens TOKENS, --chunked-prefill true|false,
         --preemption-mode lifo|fifo, --speedup-ratio R, --decode-speedup-ratio R,
         --tensor-parallel-size N
offload flags (every rank): --kv-cache-bytes-per-token BYTES, --host-blocks N,
         --d2h-gbps GB/s, --h2d-gbps GB/s, --g3-blocks N, --g3-scope worker_local|cluster_shared,
         --g3-read-gbps GB/s, --g3-write-gbps GB/s, --g3-shared-read-gbps GB/s,
         --g3-shared-write-gbps GB/s (G3's: 0 or not given, no limit)
Replays a Mooncake JSONL trace with AISimulate (aisimulate-core, round robin, polynomial timing)
and prints its summary as one JSON object. Exit status: 0 done, 2 bad arguments, 1 failed replay.";

/// One role's engine settings; `None` keeps AISimulate's default for the backend.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineArgs {
    pub backend: Option<Backend>,
    pub block_size: Option<usize>,
    pub num_gpu_blocks: Option<usize>,
    pub max_num_seqs: Option<usize>,
    pub max_num_batched_tokens: Option<usize>,
    pub chunked_prefill: Option<bool>,
    pub preemption_mode: Option<PreemptionMode>,
    pub speedup_ratio: Option<f64>,
    pub decode_speedup_ratio: Option<f64>,
    pub tensor_parallel_size: Option<u32>,
}

impl EngineArgs {
    /// These settings, with `fallback`'s where these have none.
    pub fn or(&self, fallback: &EngineArgs) -> EngineArgs {
        EngineArgs {
            backend: self.backend.or(fallback.backend),
            block_size: self.block_size.or(fallback.block_size),
            num_gpu_blocks: self.num_gpu_blocks.or(fallback.num_gpu_blocks),
            max_num_seqs: self.max_num_seqs.or(fallback.max_num_seqs),
            max_num_batched_tokens: self
                .max_num_batched_tokens
                .or(fallback.max_num_batched_tokens),
            chunked_prefill: self.chunked_prefill.or(fallback.chunked_prefill),
            preemption_mode: self.preemption_mode.or(fallback.preemption_mode),
            speedup_ratio: self.speedup_ratio.or(fallback.speedup_ratio),
            decode_speedup_ratio: self.decode_speedup_ratio.or(fallback.decode_speedup_ratio),
            tensor_parallel_size: self.tensor_parallel_size.or(fallback.tensor_parallel_size),
        }
    }

    /// Sets the engine flag `name` (without `--` or role prefix) from `value`; `Ok(false)`
    /// when `name` is no engine flag.
    fn set(&mut self, name: &str, value: &str) -> Result<bool, String> {
        let flag = || format!("--{name}");
        match name {
            "backend" => self.backend = Some(variant(&flag(), value)?),
            "block-size" => self.block_size = Some(number(&flag(), value)?),
            "num-gpu-blocks" => self.num_gpu_blocks = Some(number(&flag(), value)?),
            "max-num-seqs" => self.max_num_seqs = Some(number(&flag(), value)?),
            "max-num-batched-tokens" => self.max_num_batched_tokens = Some(number(&flag(), value)?),
            "chunked-prefill" => self.chunked_prefill = Some(number(&flag(), value)?),
            "preemption-mode" => self.preemption_mode = Some(variant(&flag(), value)?),
            "speedup-ratio" => self.speedup_ratio = Some(number(&flag(), value)?),
            "decode-speedup-ratio" => self.decode_speedup_ratio = Some(number(&flag(), value)?),
            "tensor-parallel-size" => self.tensor_parallel_size = Some(number(&flag(), value)?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// KV offload tiers of every rank, in AISimulate's terms: a host (G2) cache per rank with its
/// device-to-host and host-to-device bandwidths, and optionally G3 storage per worker or one
/// pool for the cluster (bandwidths per worker, and the pool's caps). None: no tiers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Offload {
    pub kv_cache_bytes_per_token: Option<usize>,
    pub host_blocks: Option<usize>,
    pub d2h_gbps: Option<f64>,
    pub h2d_gbps: Option<f64>,
    pub g3_blocks: Option<usize>,
    pub g3_scope: Option<G3Scope>,
    pub g3_read_gbps: Option<f64>,
    pub g3_write_gbps: Option<f64>,
    pub g3_shared_read_gbps: Option<f64>,
    pub g3_shared_write_gbps: Option<f64>,
}

impl Offload {
    /// Sets the offload flag `name` (without `--`) from `value`; `Ok(false)` when `name` is no
    /// offload flag.
    fn set(&mut self, name: &str, value: &str) -> Result<bool, String> {
        let flag = || format!("--{name}");
        match name {
            "kv-cache-bytes-per-token" => {
                self.kv_cache_bytes_per_token = Some(number(&flag(), value)?)
            }
            "host-blocks" => self.host_blocks = Some(number(&flag(), value)?),
            "d2h-gbps" => self.d2h_gbps = Some(number(&flag(), value)?),
            "h2d-gbps" => self.h2d_gbps = Some(number(&flag(), value)?),
            "g3-blocks" => self.g3_blocks = Some(number(&flag(), value)?),
            "g3-scope" => self.g3_scope = Some(variant(&flag(), value)?),
            "g3-read-gbps" => self.g3_read_gbps = Some(number(&flag(), value)?),
            "g3-write-gbps" => self.g3_write_gbps = Some(number(&flag(), value)?),
            "g3-shared-read-gbps" => self.g3_shared_read_gbps = Some(number(&flag(), value)?),
            "g3-shared-write-gbps" => self.g3_shared_write_gbps = Some(number(&flag(), value)?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Aggregated workers, or prefill and decode workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Aggregated { workers: usize },
    Disaggregated { prefill: usize, decode: usize },
}

/// KV transfers from prefill to decode workers (disaggregated mode), none when the bytes per
/// token or the bandwidth is unset. aisimulate-core 0.13.0 delays each by tokens x bytes per
/// token / bandwidth; its development releases share each prefill rank's send link
/// (`bandwidth_gbps`) and each decode rank's receive link (`recv_bandwidth_gbps`, by default
/// the same) max-min fairly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    pub bytes_per_token: Option<usize>,
    pub bandwidth_gbps: Option<f64>,
    pub recv_bandwidth_gbps: Option<f64>,
    pub sizing: TransferTimingMode,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub trace: PathBuf,
    /// Prompt tokens per trace hash id.
    pub trace_block_size: usize,
    /// Divides every inter-arrival gap and session delay of the trace.
    pub arrival_speedup: f64,
    /// Closed loop: at most this many sessions in flight.
    pub concurrency: Option<usize>,
    pub topology: Topology,
    pub transfer: Transfer,
    /// Flags without a role prefix (every role).
    pub engine: EngineArgs,
    pub prefill: EngineArgs,
    pub decode: EngineArgs,
    pub offload: Offload,
    pub per_request: Option<PathBuf>,
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: invalid value {value:?}"))
}

/// A snake_case name of one of AISimulate's enums (its own serde spelling).
fn variant<T: DeserializeOwned>(flag: &str, value: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(value.to_owned()))
        .map_err(|e| format!("{flag}: {e}"))
}

/// Parses the arguments after the program name; `Ok(None)` when help was asked for.
pub fn parse(argv: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
    let mut it = argv.into_iter();
    let mut trace = None;
    let mut mode: Option<String> = None;
    let mut workers = None;
    let mut prefill_workers = None;
    let mut decode_workers = None;
    let mut a = Args {
        trace: PathBuf::new(),
        trace_block_size: 512,
        arrival_speedup: 1.0,
        concurrency: None,
        topology: Topology::Aggregated { workers: 1 },
        transfer: Transfer {
            bytes_per_token: None,
            bandwidth_gbps: None,
            recv_bandwidth_gbps: None,
            sizing: TransferTimingMode::FullPrompt,
        },
        engine: EngineArgs::default(),
        prefill: EngineArgs::default(),
        decode: EngineArgs::default(),
        offload: Offload::default(),
        per_request: None,
    };
    let mut disagg_flags = Vec::new();
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        let Some(name) = arg.strip_prefix("--") else {
            if trace.replace(PathBuf::from(&arg)).is_some() {
                return Err(format!("more than one trace given: {arg}\n{USAGE}"));
            }
            continue;
        };
        let value = it
            .next()
            .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))?;
        let (role, engine_flag) = match name.split_once('.') {
            Some(("prefill", flag)) => (Some(&mut a.prefill), flag),
            Some(("decode", flag)) => (Some(&mut a.decode), flag),
            Some(_) => return Err(format!("unknown flag {arg}\n{USAGE}")),
            None => (None, name),
        };
        if let Some(role) = role {
            if !role.set(engine_flag, &value)? {
                return Err(format!("{arg}: {engine_flag} is no engine flag\n{USAGE}"));
            }
            disagg_flags.push(arg);
            continue;
        }
        if a.engine.set(name, &value)? || a.offload.set(name, &value)? {
            continue;
        }
        match name {
            "trace-block-size" => a.trace_block_size = number(&arg, &value)?,
            "arrival-speedup" => a.arrival_speedup = number(&arg, &value)?,
            "concurrency" => a.concurrency = Some(number(&arg, &value)?),
            "mode" => mode = Some(value),
            "workers" => workers = Some(number(&arg, &value)?),
            "prefill-workers" => prefill_workers = Some(number(&arg, &value)?),
            "decode-workers" => decode_workers = Some(number(&arg, &value)?),
            "kv-bytes-per-token" => a.transfer.bytes_per_token = Some(number(&arg, &value)?),
            "kv-bandwidth-gbps" => a.transfer.bandwidth_gbps = Some(number(&arg, &value)?),
            "kv-recv-bandwidth-gbps" => {
                a.transfer.recv_bandwidth_gbps = Some(number(&arg, &value)?)
            }
            "kv-sizing" => a.transfer.sizing = variant(&arg, &value)?,
            "per-request" => a.per_request = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {arg}\n{USAGE}")),
        }
        if matches!(
            name,
            "prefill-workers"
                | "decode-workers"
                | "kv-bytes-per-token"
                | "kv-bandwidth-gbps"
                | "kv-recv-bandwidth-gbps"
                | "kv-sizing"
        ) {
            disagg_flags.push(arg);
        }
    }
    a.trace = trace.ok_or_else(|| format!("no trace given\n{USAGE}"))?;
    a.topology = match mode.as_deref().unwrap_or("aggregated") {
        "aggregated" => {
            if let Some(flag) = disagg_flags.first() {
                return Err(format!("{flag}: only with --mode disaggregated"));
            }
            Topology::Aggregated {
                workers: workers.unwrap_or(1),
            }
        }
        "disaggregated" => {
            if workers.is_some() {
                return Err(
                    "--workers: counts aggregated workers; with --mode disaggregated \
                            give --prefill-workers and --decode-workers"
                        .to_owned(),
                );
            }
            Topology::Disaggregated {
                prefill: prefill_workers.unwrap_or(1),
                decode: decode_workers.unwrap_or(1),
            }
        }
        other => {
            return Err(format!(
                "--mode: expected aggregated or disaggregated, got {other:?}"
            ))
        }
    };
    let o = &a.offload;
    if o.host_blocks.is_none() && *o != Offload::default() {
        return Err("the offload flags need --host-blocks (the G2 tier)".to_owned());
    }
    if !(a.arrival_speedup.is_finite() && a.arrival_speedup > 0.0) {
        return Err(format!(
            "--arrival-speedup: must be a positive number, got {}",
            a.arrival_speedup
        ));
    }
    Ok(Some(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(str::to_owned)).map(|a| a.expect("not --help"))
    }

    #[test]
    fn role_flags_override_shared_ones() {
        let a = args(
            "t.jsonl --mode disaggregated --prefill-workers 2 --decode-workers 3 \
             --num-gpu-blocks 100 --decode.num-gpu-blocks 50 --decode.decode-speedup-ratio 2 \
             --kv-bytes-per-token 8 --kv-bandwidth-gbps 2.5 --kv-recv-bandwidth-gbps 1.5 \
             --kv-sizing destination_missing",
        )
        .unwrap();
        assert_eq!(
            a.topology,
            Topology::Disaggregated {
                prefill: 2,
                decode: 3
            }
        );
        assert_eq!(a.prefill.or(&a.engine).num_gpu_blocks, Some(100));
        let decode = a.decode.or(&a.engine);
        assert_eq!(decode.num_gpu_blocks, Some(50));
        assert_eq!(decode.decode_speedup_ratio, Some(2.0));
        assert_eq!(a.transfer.bytes_per_token, Some(8));
        assert_eq!(a.transfer.bandwidth_gbps, Some(2.5));
        assert_eq!(a.transfer.recv_bandwidth_gbps, Some(1.5));
        assert_eq!(a.transfer.sizing, TransferTimingMode::DestinationMissing);
    }

    #[test]
    fn offload_flags_set_every_rank_s_tiers() {
        let a = args(
            "t.jsonl --host-blocks 100 --d2h-gbps 14 --h2d-gbps 12 --kv-cache-bytes-per-token 8 \
             --g3-blocks 1000 --g3-scope cluster_shared --g3-read-gbps 0 --g3-shared-read-gbps 7",
        )
        .unwrap();
        let o = a.offload;
        assert_eq!(
            (o.host_blocks, o.d2h_gbps, o.h2d_gbps),
            (Some(100), Some(14.0), Some(12.0))
        );
        assert_eq!(
            (o.g3_blocks, o.g3_scope),
            (Some(1000), Some(G3Scope::ClusterShared))
        );
        assert_eq!(
            (o.g3_read_gbps, o.g3_shared_read_gbps),
            (Some(0.0), Some(7.0))
        );
        assert_eq!(o.kv_cache_bytes_per_token, Some(8));
    }

    #[test]
    fn bad_flags_are_named() {
        let err = |line| args(line).unwrap_err();
        assert!(err("t.jsonl --backend tgi").starts_with("--backend: unknown variant `tgi`"));
        assert!(err("t.jsonl --workers x").starts_with("--workers: invalid value \"x\""));
        assert!(err("t.jsonl --decode.num-gpu-blocks 5")
            .starts_with("--decode.num-gpu-blocks: only with --mode disaggregated"));
        assert!(err("t.jsonl --prefill.workers 5").starts_with("--prefill.workers: workers is no"));
        assert!(err("t.jsonl --arrival-speedup 0").starts_with("--arrival-speedup: must be"));
        assert!(err("--workers 2").starts_with("no trace given"));
        assert!(err("t.jsonl --g3-blocks 5").starts_with("the offload flags need --host-blocks"));
        assert!(err("t.jsonl --g3-scope pool").starts_with("--g3-scope: unknown variant `pool`"));
        assert_eq!(parse(["t.jsonl".to_owned(), "--help".to_owned()]), Ok(None));
    }
}
