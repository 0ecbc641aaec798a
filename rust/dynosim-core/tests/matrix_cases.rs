//! Every engine flavour (vLLM-like, SGLang-like, TensorRT-LLM-like with either capacity
//! scheduler) in both serving modes, with every offload-tier layout (none, G2, G2 and G3 per
//! rank or one shared G3 pool, G2 used by decode ranks only) and every KV transfer setting
//! (instant, line-rate or max-min links; full-prompt or destination-missing sizing), under
//! random workloads: what must hold in all of them (`common::check_outcomes`: requests
//! conserved, TTFT above 0, no transfer above its prompt's KV; and `check_limits`).
//!
//! Each point replays random workloads of its own, seeded by its place in the matrix, so a
//! run is the same every time and a failure names its point and shrinks to a minimal
//! workload. The per-rank limits (sequence slots against `max_num_seqs`, the pass token
//! budget, the KV capacity, reference counts) are also checked by the engines themselves
//! when each pass is planned and when it ends, since tests run as debug builds.

use dynosim_core::config::{
    Backend, CapacityScheduler, EngineConfig, FirstToken, InFlight, LinkModel, Role, ServingMode,
    TransferSizing,
};
use dynosim_core::{Report, SimConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

mod common;
use common::{arb_rows, Rows};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Flavour {
    Vllm,
    Sglang,
    TrtllmNoEvict,
    TrtllmMaxUtilization,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tiers {
    None,
    G2,
    G2G3,
    SharedG3,
    /// G2 tiers where only decode ranks evict (the prefill ranks' G1 holds every prompt), so
    /// destination-missing transfers are sized by what the decode ranks' tiers hold.
    DecodeSide,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Link {
    Instant,
    LineRate,
    MaxMin,
}

/// One point of the matrix.
#[derive(Debug, Clone, Copy)]
struct Point {
    flavour: Flavour,
    mode: ServingMode,
    tiers: Tiers,
    link: Link,
    sizing: TransferSizing,
}

/// Every point: transfer settings only matter (and decode-side tiers only exist) in
/// disaggregated mode.
fn points() -> Vec<Point> {
    let mut out = Vec::new();
    let flavours = [
        Flavour::Vllm,
        Flavour::Sglang,
        Flavour::TrtllmNoEvict,
        Flavour::TrtllmMaxUtilization,
    ];
    let tiers = [
        Tiers::None,
        Tiers::G2,
        Tiers::G2G3,
        Tiers::SharedG3,
        Tiers::DecodeSide,
    ];
    for flavour in flavours {
        for t in tiers {
            if t != Tiers::DecodeSide {
                out.push(Point {
                    flavour,
                    mode: ServingMode::Aggregated,
                    tiers: t,
                    link: Link::Instant,
                    sizing: TransferSizing::FullPrompt,
                });
            }
            for link in [Link::Instant, Link::LineRate, Link::MaxMin] {
                for sizing in [
                    TransferSizing::FullPrompt,
                    TransferSizing::DestinationMissing,
                ] {
                    out.push(Point {
                        flavour,
                        mode: ServingMode::Disaggregated,
                        tiers: t,
                        link,
                        sizing,
                    });
                }
            }
        }
    }
    out
}

/// The random part of a case besides the workload.
#[derive(Debug, Clone)]
struct Knobs {
    /// KV blocks (4 tokens each) of a rank, and of a decode rank.
    blocks: u32,
    decode_blocks: u32,
    seqs: u32,
    /// A pass's token budget (SGLang: its chunk size, at least 4).
    budget: u32,
    chunked: bool,
    /// SGLang's page size.
    page: u32,
    workers: u32,
    decode_workers: u32,
    data_parallel: u32,
    first_decode_pass: bool,
    wait_for_copies: bool,
}

/// Random request rows (`arb_rows`) and knobs. Half the cases are crowded: prompts of at
/// most 12 tokens (within a family they share up to 8: many prefixes overlap, many prompts are
/// fully cached) on caches of 2 to 9 blocks, which evict all the time.
fn arb_case() -> impl Strategy<Value = (Vec<(u32, u32, u32, u8)>, Knobs)> {
    (
        arb_rows(),
        (2u32..40, 2u32..40, 1u32..6, 1u32..40),
        (any::<bool>(), 1u32..5, 1u32..3, 1u32..3, 1u32..3),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                mut rows,
                (blocks, decode_blocks, seqs, budget),
                (chunked, page, workers, decode_workers, data_parallel),
                (first_decode_pass, wait_for_copies, crowded),
            )| {
                let (blocks, decode_blocks) = if crowded {
                    for row in &mut rows {
                        row.1 = 1 + (row.1 - 1) % 12;
                    }
                    (2 + blocks % 8, 2 + decode_blocks % 8)
                } else {
                    (blocks, decode_blocks)
                };
                let knobs = Knobs {
                    blocks,
                    decode_blocks,
                    seqs,
                    budget,
                    chunked,
                    page,
                    workers,
                    decode_workers,
                    data_parallel,
                    first_decode_pass,
                    wait_for_copies,
                };
                (rows, knobs)
            },
        )
}

/// The configuration of point `p` with knobs `k`: fixed timing (prefill 10 ms, decode 1 ms),
/// 4-token blocks.
fn config(p: Point, k: &Knobs) -> SimConfig {
    let mut c = common::one_worker(k.blocks);
    let e = &mut c.engine;
    e.max_num_seqs = k.seqs;
    e.data_parallel_size = k.data_parallel;
    match p.flavour {
        Flavour::Vllm => {
            e.max_num_batched_tokens = Some(k.budget);
            e.enable_chunked_prefill = Some(k.chunked);
        }
        Flavour::Sglang => {
            e.backend = Backend::Sglang;
            e.page_size = Some(k.page);
            e.chunked_prefill_size = Some(k.budget.max(4));
            e.max_prefill_tokens = Some(2 * k.budget.max(4));
        }
        Flavour::TrtllmNoEvict | Flavour::TrtllmMaxUtilization => {
            e.backend = Backend::Trtllm;
            e.max_num_tokens = Some(k.budget);
            e.enable_chunked_context = Some(k.chunked);
            if p.flavour == Flavour::TrtllmMaxUtilization {
                e.capacity_scheduler = Some(CapacityScheduler::MaxUtilization);
            }
        }
    }
    // A 60-token prompt's KV is 6e6 bytes: 6 ms on a 1 GB/s link.
    c.kv_transfer.kv_bytes_per_token = Some(1e5);
    if p.mode == ServingMode::Disaggregated {
        c.cluster.mode = ServingMode::Disaggregated;
        c.cluster.num_prefill_workers = k.workers;
        c.cluster.num_decode_workers = k.decode_workers;
        // Each role its own capacity.
        c.decode.engine = Some(EngineConfig {
            num_gpu_blocks: k.decode_blocks,
            ..c.engine.clone()
        });
        c.kv_transfer.sizing = Some(p.sizing);
        if k.first_decode_pass {
            c.kv_transfer.first_token = Some(FirstToken::FirstDecodePass);
        }
        match p.link {
            Link::Instant => {}
            Link::LineRate => {
                c.kv_transfer.bandwidth_gbps = Some(1.0);
                c.kv_transfer.link_model = Some(LinkModel::LineRate);
            }
            Link::MaxMin => {
                c.kv_transfer.bandwidth_gbps = Some(1.0);
                c.kv_transfer.link_model = Some(LinkModel::MaxMin);
            }
        }
    } else {
        c.cluster.num_workers = k.workers;
    }
    // With tiers, a block (4e5 bytes) takes 4 ms on the G1<->G2 link, 8 ms on the G2<->G3
    // link (tier settings without tiers would be refused: they would do nothing).
    let o = &mut c.offload;
    if p.tiers != Tiers::None {
        o.g1_g2_gbps = 0.1;
        o.g2_g3_gbps = 0.05;
        if k.wait_for_copies {
            o.in_flight = InFlight::Wait;
        }
    }
    match p.tiers {
        Tiers::None => {}
        Tiers::G2 => o.g2_blocks = Some(8),
        Tiers::G2G3 | Tiers::SharedG3 => {
            o.g2_blocks = Some(4);
            o.g3_blocks = Some(16);
            o.g3_shared = p.tiers == Tiers::SharedG3;
        }
        Tiers::DecodeSide => {
            o.g2_blocks = Some(8);
            // 4,096 blocks hold every prompt of a case: the prefill ranks never evict.
            c.prefill.engine = Some(EngineConfig {
                num_gpu_blocks: 4096,
                ..c.engine.clone()
            });
        }
    }
    c
}

/// The KV blocks a worker's ranks hold at most: its role's configured blocks on each rank.
fn worker_blocks(c: &SimConfig, w: usize) -> f64 {
    let role = match c.cluster.mode {
        ServingMode::Aggregated => Role::Aggregated,
        ServingMode::Disaggregated if w < c.cluster.num_prefill_workers as usize => Role::Prefill,
        ServingMode::Disaggregated => Role::Decode,
    };
    let e = c.role(role).0;
    f64::from(e.num_gpu_blocks) * f64::from(e.data_parallel_size)
}

/// What must hold in a replay under `c` besides `common::check_outcomes`: the running
/// requests never exceed the sequence slots of the ranks, and no worker holds more KV blocks
/// than its role's ranks have.
fn check_limits(c: &SimConfig, r: &Report) -> Result<(), TestCaseError> {
    let ranks = c.cluster.num_prefill_workers + c.cluster.num_decode_workers;
    let ranks = match c.cluster.mode {
        ServingMode::Aggregated => c.cluster.num_workers,
        ServingMode::Disaggregated => ranks,
    } * c.engine.data_parallel_size;
    let running = r.timeseries.get("running").unwrap();
    let slots = f64::from(ranks * c.engine.max_num_seqs);
    prop_assert!(running.max.iter().all(|&n| n <= slots));
    let kv = r.timeseries.get("kv_blocks_used").unwrap();
    let workers = kv.shape.columns();
    for (k, &used) in kv.max.iter().enumerate() {
        let w = k % workers;
        prop_assert!(
            used <= worker_blocks(c, w),
            "worker {w} held {used} blocks, more than {}",
            worker_blocks(c, w)
        );
    }
    Ok(())
}

#[test]
fn every_flavour_mode_tier_and_transfer_setting_keeps_its_limits() {
    let strategy = arb_case();
    let mut failures = Vec::new();
    for (k, p) in points().into_iter().enumerate() {
        let cases = Config {
            cases: 6,
            failure_persistence: None,
            ..Config::default()
        };
        // Each point its own workloads, the same on every run.
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&(k as u64).to_le_bytes());
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
        let mut runner = TestRunner::new_with_rng(cases, rng);
        let outcome = runner.run(&strategy, |(rows, knobs)| {
            let rows = Rows::of_families(&rows);
            let c = config(p, &knobs);
            let r = rows.replay(&c);
            common::check_outcomes(&rows, &c, &r)?;
            check_limits(&c, &r)
        });
        if let Err(e) = outcome {
            failures.push(format!("{p:?}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
