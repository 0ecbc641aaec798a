//! One AISimulate replay of a Mooncake trace, along the path AISimulate's own Python boundary
//! takes (`build_runtime_input` in its `src/python.rs`):
//! `Trace::from_mooncake(path, trace block size)` -> `normalize_session_starts()` ->
//! `speed_up_timing(r)` -> `WorkloadDriver::new_trace` (or `new_concurrency`) ->
//! `Replayer::new(spec, ReplayEngineFactory::new()).with_runtime_input(..)`.

use std::error::Error;
use std::time::Instant;

use aisimulate_core::engine::{
    EngineConfig, G3OffloadConfig, G3Scope, NativeHostOffloadConfig, TimingModelConfig,
};
use aisimulate_core::replay::loadgen::{Trace, WorkloadDriver};
use aisimulate_core::replay::{
    ReplayCaptureOptions, ReplayDeterminism, ReplayEngineConfig, ReplayEngineFactory, ReplayReport,
    ReplayRoleConfig, ReplayRuntimeInput, ReplaySpec, ReplayTopology, Replayer, WorkerPoolSpec,
    CURRENT_REPLAY_SPEC_VERSION,
};
use serde_json::json;

use crate::args::{Args, EngineArgs, Offload, Topology, Transfer};

pub type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// A finished replay, the engine descriptor it ran, and what it cost (ms of wall time).
pub struct Replay {
    pub report: ReplayReport,
    pub engine: ReplayEngineConfig,
    pub trace_load_ms: f64,
    pub replay_ms: f64,
}

/// One rank's engine: AISimulate's defaults for the backend (`EngineConfig::for_backend`: its
/// block size, 16384 blocks, 256 sequences, 8192 batched tokens, chunked prefill, LIFO), then
/// the given settings. Prefix caching and polynomial timing are set whatever AISimulate's
/// defaults become, as dynosim always shares prefixes and the comparison is of that model.
fn rank(
    e: &EngineArgs,
    offload: &Offload,
    transfer: Option<(&Transfer, Option<f64>)>,
) -> EngineConfig {
    let mut rank = EngineConfig::for_backend(e.backend.unwrap_or_default());
    if let Some(v) = e.block_size {
        rank.block_size = v;
    }
    if let Some(v) = e.num_gpu_blocks {
        rank.num_gpu_blocks = v;
    }
    if let Some(v) = e.max_num_seqs {
        rank.max_num_seqs = v;
    }
    if let Some(v) = e.max_num_batched_tokens {
        rank.max_num_batched_tokens = v;
    }
    if let Some(v) = e.chunked_prefill {
        rank.enable_chunked_prefill = v;
    }
    if let Some(v) = e.preemption_mode {
        rank.preemption_mode = v;
    }
    if let Some(v) = e.speedup_ratio {
        rank.speedup_ratio = v;
    }
    if let Some(v) = e.decode_speedup_ratio {
        rank.decode_speedup_ratio = v;
    }
    rank.enable_prefix_caching = true;
    rank.timing_model = TimingModelConfig::Polynomial;
    if let Some(tiers) = host_tiers(offload) {
        (rank.native_host_offload, rank.g3_offload) = tiers;
        rank.kv_cache_bytes_per_token = offload.kv_cache_bytes_per_token;
    }
    if let Some((t, bandwidth_gbps)) = transfer {
        // The prefill (source) rank's bandwidth prices a transfer: tokens x bytes /
        // bandwidth, the delay (0.13.0) or the work on its send link (development releases,
        // whose receive links take the decode rank's bandwidth); with either unset, the
        // topology's handoff latency (0 here).
        rank.kv_transfer_bytes_per_token = t.bytes_per_token;
        rank.kv_transfer_bandwidth = bandwidth_gbps;
        rank.kv_transfer_timing_mode = t.sizing;
    }
    rank
}

/// A rank's G2 tier and, if any, its G3 tier: AISimulate's G2 defaults where a flag is not
/// given; G3 bandwidths not given are unlimited, and no latency to G3's first byte (dynosim
/// models none). None without `--host-blocks`.
fn host_tiers(o: &Offload) -> Option<(Option<NativeHostOffloadConfig>, Option<G3OffloadConfig>)> {
    let mut g2 = NativeHostOffloadConfig::new(o.host_blocks?);
    g2.d2h_bandwidth_gbps = o.d2h_gbps.unwrap_or(g2.d2h_bandwidth_gbps);
    g2.h2d_bandwidth_gbps = o.h2d_gbps.unwrap_or(g2.h2d_bandwidth_gbps);
    let g3 = o.g3_blocks.map(|num_g3_blocks| G3OffloadConfig {
        scope: o.g3_scope.unwrap_or(G3Scope::WorkerLocal),
        num_g3_blocks,
        latency_to_first_byte_ms: 0.0,
        read_bandwidth_gbps: o.g3_read_gbps.unwrap_or(0.0),
        write_bandwidth_gbps: o.g3_write_gbps.unwrap_or(0.0),
        shared_read_bandwidth_gbps: o.g3_shared_read_gbps.unwrap_or(0.0),
        shared_write_bandwidth_gbps: o.g3_shared_write_gbps.unwrap_or(0.0),
    });
    Some((Some(g2), g3))
}

fn role(
    e: &EngineArgs,
    offload: &Offload,
    transfer: &Transfer,
    bandwidth_gbps: Option<f64>,
) -> ReplayRoleConfig {
    ReplayRoleConfig {
        tensor_parallel_size: e.tensor_parallel_size.unwrap_or(1),
        rank: rank(e, offload, Some((transfer, bandwidth_gbps))),
        ..ReplayRoleConfig::default()
    }
}

/// The engine descriptor of the replay. The replayer sets each role's `worker_type`.
pub fn engine_config(a: &Args) -> ReplayEngineConfig {
    match a.topology {
        Topology::Aggregated { .. } => ReplayEngineConfig {
            tensor_parallel_size: a.engine.tensor_parallel_size.unwrap_or(1),
            rank: rank(&a.engine, &a.offload, None),
            ..ReplayEngineConfig::default()
        },
        Topology::Disaggregated { .. } => {
            let t = &a.transfer;
            let prefill = role(&a.prefill.or(&a.engine), &a.offload, t, t.bandwidth_gbps);
            let recv = t.recv_bandwidth_gbps.or(t.bandwidth_gbps);
            let decode = role(&a.decode.or(&a.engine), &a.offload, t, recv);
            ReplayEngineConfig {
                tensor_parallel_size: prefill.tensor_parallel_size,
                rank: prefill.rank.clone(),
                prefill: Some(prefill),
                decode: Some(decode),
                ..ReplayEngineConfig::default()
            }
        }
    }
}

fn topology(t: Topology) -> ReplayTopology {
    let pool = |workers| WorkerPoolSpec {
        initial_workers: workers,
        startup_delay_ms: 0.0,
    };
    match t {
        Topology::Aggregated { workers } => ReplayTopology::aggregated(workers),
        Topology::Disaggregated { prefill, decode } => ReplayTopology::Disaggregated {
            prefill: pool(prefill),
            decode: pool(decode),
            // Only the fallback delay when a transfer has no bytes per token or bandwidth.
            handoff_latency_ms: 0.0,
        },
    }
}

/// Loads the trace and replays it.
pub fn run(a: &Args) -> Result<Replay> {
    let engine = engine_config(a);
    // Through serde, which fills what a release adds (the development releases' `encoder`)
    // with its default: one source for every release. Round-robin placement and no scaling
    // (the default adapters: the only placement Replayer::new composes itself); per-request
    // records for exact percentiles and each request's terminal status; no requests here, the
    // runtime input below supplies them.
    let spec: ReplaySpec = serde_json::from_value(json!({
        "version": CURRENT_REPLAY_SPEC_VERSION,
        "topology": topology(a.topology),
        "engine": engine,
        "max_in_flight": a.concurrency,
        "record_per_request": true,
        "requests": [],
    }))?;

    let t_load = Instant::now();
    let trace = Trace::from_mooncake(&a.trace, a.trace_block_size)?
        .normalize_session_starts()?
        .speed_up_timing(a.arrival_speedup)?;
    // Prompts are hashed at the block size of the role that prefills them.
    let block_size = engine.rank.block_size;
    let driver = match a.concurrency {
        Some(cap) => WorkloadDriver::new_concurrency(trace, block_size, cap)?,
        None => WorkloadDriver::new_trace(trace, block_size)?,
    };
    let trace_load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    let t_run = Instant::now();
    let report = Replayer::new(spec, ReplayEngineFactory::new())?
        .with_runtime_input(ReplayRuntimeInput::Workload(driver))
        .with_capture_options(ReplayCaptureOptions {
            // Fixed request ids and synthetic output tokens: the same summary every run.
            determinism: ReplayDeterminism::CanonicalV1,
            ..ReplayCaptureOptions::default()
        })
        .run()?;
    Ok(Replay {
        report,
        engine,
        trace_load_ms,
        replay_ms: t_run.elapsed().as_secs_f64() * 1e3,
    })
}
