//! The SGLang-like engine flavour under random workloads, with its debug checks on (memory
//! never over-committed, token accounting consistent after every pass).

use dynosim_core::config::{
    Backend, FixedTiming, RouterMode, SchedulePolicy, ServingMode, TimingConfig, TransferSizing,
};
use dynosim_core::report::{RejectReason, Status};
use dynosim_core::SimConfig;
use proptest::prelude::*;

mod common;
use common::{arb_rows, Rows};

/// The SGLang flavour on `tokens` tokens of KV in 4-token blocks, fixed timing (prefill 10 ms,
/// decode 1 ms), small prefill budgets so prompts are chunked.
fn sglang(tokens: u32, page: u32, lpm: bool) -> SimConfig {
    let mut c = SimConfig::default();
    c.engine.backend = Backend::Sglang;
    c.engine.block_size = Some(4);
    c.engine.num_gpu_blocks = tokens.div_ceil(4);
    c.engine.page_size = Some(page);
    c.engine.chunked_prefill_size = Some(16);
    c.engine.max_prefill_tokens = Some(32);
    c.engine.schedule_policy = Some(if lpm {
        SchedulePolicy::Lpm
    } else {
        SchedulePolicy::Fcfs
    });
    c.timing = TimingConfig::Fixed(FixedTiming {
        prefill_ms: 10.0,
        decode_ms: 1.0,
    });
    c.kv_transfer.kv_bytes_per_token = Some(1e3);
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Every request ends completed or rejected with a reason, every emitted token is
    /// counted, no transfer moves more than its prompt, and a second run is identical,
    /// whatever the memory pressure (retractions), page size, queue policy, serving mode,
    /// router, offload tiers (none, G2, G2 and G3 per rank or shared) and transfer sizing.
    #[test]
    fn requests_are_conserved(rows in arb_rows(), tokens in 8u32..160, page in 1u32..5,
                              lpm in any::<bool>(), seqs in 1u32..6, workers in 1u32..4,
                              disaggregated in any::<bool>(), kv_aware in any::<bool>(),
                              tiers in 0u8..4, missing in any::<bool>()) {
        let rows = Rows::of_families(&rows);
        let mut c = sglang(tokens, page, lpm);
        c.engine.max_num_seqs = seqs;
        if disaggregated {
            c.cluster.mode = ServingMode::Disaggregated;
            c.cluster.num_prefill_workers = workers;
            c.cluster.num_decode_workers = 1;
        } else {
            c.cluster.num_workers = workers;
        }
        if kv_aware {
            c.cluster.router = RouterMode::KvAware;
        }
        if tiers > 0 {
            c.offload.g2_blocks = Some(8);
        }
        if tiers > 1 {
            c.offload.g3_blocks = Some(16);
            c.offload.g3_shared = tiers == 3;
        }
        if missing {
            c.kv_transfer.sizing = Some(TransferSizing::DestinationMissing);
        }
        let r = rows.replay(&c);
        let s = &r.summary;
        prop_assert_eq!(s.completed_requests + s.rejected_requests, s.num_requests);
        common::check_replay(&rows, &c, &r)?;
    }
}

#[test]
fn a_request_whose_prompt_and_output_fill_the_cache_is_rejected() {
    // 64 tokens of KV: admission needs the prompt and the output strictly inside memory, so
    // 40 + 24 = 64 can never be admitted; 40 + 23 can.
    let ids: Vec<u64> = (0..10).collect();
    let rows = Rows::new(4, &[(0.0, 40, 24, &ids), (0.0, 40, 23, &ids)]);
    let r = rows.replay(&sglang(64, 1, false));
    assert_eq!(
        r.records.reject_reason[0],
        RejectReason::OutputExceedsCache as u8
    );
    assert_eq!(r.records.status[1], Status::Completed as u8);
}

/// A measurement rather than a check (run with `--ignored --nocapture`; needs the shared
/// traces, `$DYNOSIM_TRACES`): every prompt of the Mooncake conversation trace inserted into one
/// radix cache with no memory limit, and the heap it takes against the distinct tokens cached.
#[test]
#[ignore]
fn radix_memory_on_the_conversation_trace() {
    use dynosim_core::block_ids::TraceChains;
    use dynosim_core::kv::radix::RadixCache;
    use dynosim_core::{parse_mooncake, Workload};
    use std::sync::Arc;

    let dir = std::env::var("DYNOSIM_TRACES").unwrap_or("../../../shared/data/traces".into());
    let path = format!("{dir}/mooncake_conversation.jsonl");
    let data = std::fs::read(&path).expect("the conversation trace");
    let rows = parse_mooncake(&data, &path, 512).unwrap();
    let w = Workload {
        arrival_ms: &rows.timestamp_ms,
        input_length: &rows.input_length,
        output_length: &rows.output_length,
        hash_offsets: &rows.hash_offsets,
        hash_ids: &rows.hash_ids,
        trace_block_size: 512,
        session: None,
        delay_ms: None,
    };
    let chains = Arc::new(TraceChains::new(&w));
    let mut tree = RadixCache::new(chains.clone(), 1);
    let start = std::time::Instant::now();
    for i in 0..w.len() {
        tree.insert(i as u32, w.input_length[i]);
    }
    let elapsed = start.elapsed();
    let prompt_tokens: u64 = w.input_length.iter().map(|&n| u64::from(n)).sum();
    let (bytes, nodes, cached) = (tree.memory_bytes(), tree.node_count(), tree.cached());
    println!(
        "{} prompts, {prompt_tokens} prompt tokens, {cached} distinct tokens cached in {nodes} \
         nodes: {bytes} bytes ({:.1} per node, {:.4} per cached token); chains {} bytes; \
         {:.1} ms to insert",
        w.len(),
        bytes as f64 / nodes as f64,
        bytes as f64 / cached as f64,
        chains.memory_bytes(),
        elapsed.as_secs_f64() * 1e3,
    );
    assert!(bytes < 128 * nodes);
}
