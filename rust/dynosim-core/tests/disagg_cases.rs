//! Disaggregated replays with hand-computable KV transfers: prefill, transfer over the shared
//! send and receive links, then decode.
//!
//! Fixed timing (prefill 10 ms, decode 1 ms) and 1 GB/s links (1e6 bytes/ms): a 128-token
//! prompt at 1e6 bytes per token is a 128 ms transfer on an idle link.

use dynosim_core::config::{FixedTiming, LinkModel, ServingMode, TimingConfig, TransferSizing};
use dynosim_core::report::Status;
use dynosim_core::{Report, SimConfig};

mod common;
use common::Rows;

/// `n` requests at t=0 of 128 prompt tokens (one 128-token trace block each, with the given
/// ids) and `output` tokens.
fn at_zero(ids: &[u64], output: u32) -> Rows {
    let mut rows = Rows::new(128, &[]);
    for id in ids {
        rows.push(0.0, 128, output, &[*id]);
    }
    rows
}

fn disagg(prefill: u32, decode: u32, link: Option<LinkModel>) -> SimConfig {
    let mut c = SimConfig::default();
    c.cluster.mode = ServingMode::Disaggregated;
    c.cluster.num_prefill_workers = prefill;
    c.cluster.num_decode_workers = decode;
    c.timing = TimingConfig::Fixed(FixedTiming {
        prefill_ms: 10.0,
        decode_ms: 1.0,
    });
    c.kv_transfer.bandwidth_gbps = Some(1.0);
    c.kv_transfer.kv_bytes_per_token = Some(1e6);
    c.kv_transfer.link_model = link;
    c
}

fn transfer_ms(r: &Report) -> Vec<f64> {
    (0..r.records.arrival_ms.len())
        .map(|i| r.records.transfer_end_ms[i] - r.records.transfer_start_ms[i])
        .collect()
}

#[test]
fn two_transfers_into_one_decode_rank_take_twice_as_long() {
    // P0 and P1 each prefill one request by 10 ms; both go to D0 and share its receive link.
    let r = at_zero(&[1, 2], 3).replay(&disagg(2, 1, None));
    assert_eq!(r.records.worker, [0, 1]);
    assert_eq!(r.records.decode_worker, [0, 0]);
    assert_eq!(r.records.transfer_start_ms, [10.0, 10.0]);
    assert_eq!(transfer_ms(&r), [256.0, 256.0]);
    // First token when the KV lands, then two 1 ms decode passes.
    assert_eq!(r.derived.ttft_ms, [266.0, 266.0]);
    assert_eq!(r.derived.e2e_ms, [268.0, 268.0]);
    assert_eq!(r.summary.transfer_bytes, 2.0 * 128e6);
}

#[test]
fn two_transfers_from_one_prefill_rank_take_twice_as_long() {
    // One prefill pass serves both; D0 and D1 receive from P0's single send link.
    let r = at_zero(&[1, 2], 2).replay(&disagg(1, 2, None));
    assert_eq!(r.records.decode_worker, [0, 1]);
    assert_eq!(transfer_ms(&r), [256.0, 256.0]);
}

#[test]
fn transfers_on_separate_ranks_run_at_full_rate() {
    let r = at_zero(&[1, 2], 2).replay(&disagg(2, 2, None));
    assert_eq!(transfer_ms(&r), [128.0, 128.0]);
    // Each link moved 128 MB in 10 + 128 + 1 = 139 ms of replay.
    for u in &r.summary.link_utilization {
        assert!((u - 128.0 / 139.0).abs() < 1e-12, "{u}");
    }
}

#[test]
fn line_rate_ignores_sharing() {
    let r = at_zero(&[1, 2], 2).replay(&disagg(2, 1, Some(LinkModel::LineRate)));
    assert_eq!(transfer_ms(&r), [128.0, 128.0]);
    assert_eq!(r.summary.rate_recomputations, 0);
}

#[test]
fn no_bandwidth_means_instant_transfers() {
    let mut c = disagg(1, 1, None);
    c.kv_transfer.bandwidth_gbps = None;
    let r = at_zero(&[1], 2).replay(&c);
    assert_eq!(transfer_ms(&r), [0.0]);
    assert_eq!(r.derived.ttft_ms, [10.0]);
    assert!(r.summary.link_utilization.is_empty());
}

#[test]
fn slower_decode_link_is_the_bottleneck() {
    // Send 1 GB/s, receive 0.5 GB/s: 128 MB takes 256 ms even alone.
    let mut c = disagg(1, 1, None);
    c.kv_transfer.decode_bandwidth_gbps = Some(0.5);
    let r = at_zero(&[1], 2).replay(&c);
    assert_eq!(transfer_ms(&r), [256.0]);
}

#[test]
fn a_transfer_that_finishes_frees_bandwidth_for_the_other() {
    // Two requests into D0: one of 128 tokens, one of 384 (three blocks). Shared at 0.5 GB/s
    // until the small one is done at 10 + 256; the big one then has 384 - 128 = 256 MB left at
    // 1 GB/s: done at 266 + 256 = 522.
    let rows = Rows::new(128, &[(0.0, 128, 2, &[1]), (0.0, 384, 2, &[2, 3, 4])]);
    let r = rows.replay(&disagg(2, 1, None));
    assert_eq!(r.records.transfer_end_ms, [266.0, 522.0]);
    assert!(r.summary.rate_recomputations >= 2);
}

#[test]
fn destination_missing_moves_only_uncached_blocks() {
    // Two identical prompts one after another on P0 -> D0: the second finds the prompt cached
    // on D0 and moves nothing.
    let mut c = disagg(1, 1, None);
    c.kv_transfer.sizing = Some(TransferSizing::DestinationMissing);
    let rows = Rows::new(128, &[(0.0, 128, 2, &[7]), (1000.0, 128, 2, &[7])]);
    let r = rows.replay(&c);
    assert_eq!(r.records.transfer_bytes, [128e6, 0.0]);
    assert_eq!(transfer_ms(&r), [128.0, 0.0]);
    // The prompt is cached on P0 too (two 64-token blocks), but its last token is computed:
    // P0 reuses the first block and prefills the second, 10 ms, and the empty transfer lands
    // at once. The first computes all 128 tokens and its KV takes 128 ms.
    assert_eq!(r.records.reused_tokens, [0, 64]);
    assert_eq!(r.derived.ttft_ms, [138.0, 10.0]);
}

#[test]
fn many_transfers_finishing_at_once() {
    // 16 prefill and 16 decode workers, 16 identical transfers on disjoint link pairs: all
    // end at the same instant, every request completes.
    let ids: Vec<u64> = (0..16).collect();
    let r = at_zero(&ids, 2).replay(&disagg(16, 16, None));
    assert!(transfer_ms(&r).iter().all(|&t| t == 128.0));
    assert!(r
        .records
        .status
        .iter()
        .all(|&s| s == Status::Completed as u8));
}

#[test]
fn one_third_capacities_leave_no_stray_bytes() {
    // 1/3 GB/s links: rates and finish times are not exact in binary; every transfer must
    // still end, at 384 ms (alone) or 768 ms (shared by two).
    let mut c = disagg(2, 1, None);
    c.kv_transfer.bandwidth_gbps = Some(1.0 / 3.0);
    let r = at_zero(&[1, 2, 3], 2).replay(&c);
    assert!(r
        .records
        .status
        .iter()
        .all(|&s| s == Status::Completed as u8));
    let t = transfer_ms(&r);
    assert!(t.iter().all(|&x| x >= 384.0 * (1.0 - 1e-9)), "{t:?}");
}

#[test]
fn decode_pool_that_cannot_hold_a_request_rejects_it() {
    let mut c = disagg(1, 1, None);
    let mut small = c.engine.clone();
    small.block_size = Some(64);
    small.num_gpu_blocks = 2; // 128 tokens: the prompt plus one token does not fit
    c.decode.engine = Some(small);
    let r = at_zero(&[1], 2).replay(&c);
    assert_eq!(r.records.status, [Status::Rejected as u8]);
    assert_eq!(r.summary.num_transfers, 0);
}

#[test]
fn first_token_after_the_first_decode_pass() {
    // Dynamo's accounting: the KV lands at 266 ms (as above), the decode worker's next pass
    // (1 ms) emits the first token at 267, then 268 and 269.
    let mut c = disagg(2, 1, None);
    c.kv_transfer.first_token = Some(dynosim_core::config::FirstToken::FirstDecodePass);
    let r = at_zero(&[1, 2], 3).replay(&c);
    assert_eq!(r.records.transfer_end_ms, [266.0, 266.0]);
    assert_eq!(r.derived.ttft_ms, [267.0, 267.0]);
    assert_eq!(r.derived.e2e_ms, [269.0, 269.0]);
    // A one-token request also waits for that pass.
    let r = at_zero(&[1], 1).replay(&c);
    assert_eq!(r.derived.e2e_ms, [10.0 + 128.0 + 1.0]);
}

#[test]
fn decode_workers_name_blocks_at_their_own_block_size() {
    // Prefill blocks of 16 tokens, decode blocks of 48; 64-token trace blocks. B shares its
    // first 64 tokens with A: 4 prefill blocks, but only 1 decode block (tokens 0..48; the
    // next, 48..96, reaches B's second trace block), so 80 of its 128 tokens move.
    let mut c = disagg(1, 1, None);
    c.kv_transfer.sizing = Some(TransferSizing::DestinationMissing);
    c.engine.block_size = Some(16);
    let mut decode = c.engine.clone();
    decode.block_size = Some(48);
    c.decode.engine = Some(decode);
    let rows = Rows::new(64, &[(0.0, 128, 2, &[7, 8]), (1000.0, 128, 2, &[7, 9])]);
    let r = rows.replay(&c);
    assert_eq!(r.records.reused_tokens, [0, 64]);
    assert_eq!(r.records.transfer_bytes, [128e6, 80e6]);
}

#[test]
fn a_decode_side_recompute_keeps_the_first_admission_and_reuse() {
    // The preemption of `cache_too_small_for_two_preempts_then_recomputes` on a decode worker:
    // A and B (4-token prompts, 8 tokens out) prefill together on P0 (0-10 ms) and land at
    // once on D0, 4 blocks of 4 tokens. Decodes grow each to 2 blocks; at 14 ms A needs a
    // third and B (the newest) is preempted; A ends at 17 ms, then B recomputes its 5 tokens
    // on D0 (its prompt block cached there) from 17 to 27 ms and ends at 29 ms. B was admitted
    // at 0 ms on P0 and reused nothing: the recompute on D0 is no first admission.
    let mut c = disagg(1, 1, None);
    c.kv_transfer.bandwidth_gbps = None;
    c.engine.block_size = Some(4);
    let mut decode = c.engine.clone();
    decode.num_gpu_blocks = 4;
    c.decode.engine = Some(decode);
    let rows = Rows::new(4, &[(0.0, 4, 8, &[1]), (0.0, 4, 8, &[2])]);
    let r = rows.replay(&c);
    assert_eq!(r.records.preemptions, [0, 1]);
    assert_eq!(r.derived.e2e_ms, [17.0, 29.0]);
    assert_eq!(r.records.first_admit_ms, [0.0, 0.0]);
    assert_eq!(r.records.reused_tokens, [0, 0]);
}
