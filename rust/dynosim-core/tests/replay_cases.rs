//! Hand-computable replays: every expected time below is worked out in the comments.

use dynosim_core::config::{PolynomialTiming, TimingConfig};
use dynosim_core::report::{RejectReason, Status};
use dynosim_core::{replay, SimConfig, Workload};

mod common;
use common::{arb_rows, Rows};
use proptest::prelude::*;

/// One worker, 4-token blocks, fixed timing: prefill 10 ms, decode 1 ms.
fn small(num_gpu_blocks: u32, budget: u32) -> SimConfig {
    let mut c = common::one_worker(num_gpu_blocks);
    c.engine.max_num_batched_tokens = Some(budget);
    c
}

#[test]
fn eight_token_request_with_polynomial_timing() {
    let rows = Rows::new(512, &[(0.0, 8, 1, &[42])]);
    let c = SimConfig {
        timing: TimingConfig::Polynomial(PolynomialTiming::default()),
        ..SimConfig::default()
    };
    let r = rows.replay(&c);
    let ttft = r.derived.ttft_ms[0];
    assert_eq!(format!("{ttft:.4}"), "16.6229");
}

#[test]
fn chunked_prefill_spans_passes() {
    // Budget 4: the 10-token prompt takes chunks 4, 4, 2 (three 10 ms prefill passes, first
    // token at 30 ms), then one 1 ms decode pass emits the second and last token at 31 ms.
    let rows = Rows::new(4, &[(0.0, 10, 2, &[1, 2, 3])]);
    let r = rows.replay(&small(100, 4));
    assert_eq!(r.derived.ttft_ms[0], 30.0);
    assert_eq!(r.derived.e2e_ms[0], 31.0);
    assert_eq!(r.summary.num_passes, 4);
}

#[test]
fn unchunked_prefill_takes_one_pass() {
    let rows = Rows::new(4, &[(0.0, 10, 2, &[1, 2, 3])]);
    let mut c = small(100, 4);
    c.engine.enable_chunked_prefill = Some(false);
    let r = rows.replay(&c);
    assert_eq!(r.derived.ttft_ms[0], 10.0);
    assert_eq!(r.summary.num_passes, 2);
}

#[test]
fn second_request_reuses_the_shared_prefix() {
    // A (t=0) and B (t=100) share their first 4-token block (hash 1); C (t=200) repeats A's
    // whole prompt. Both of C's blocks are cached, but a pass must compute at least its last
    // token and the cache reuses whole blocks: C reuses block 1 and recomputes block 2 (4
    // tokens), a 10 ms prefill pass, then emits its second token at 11 ms.
    let rows = Rows::new(
        4,
        &[
            (0.0, 8, 2, &[1, 2]),
            (100.0, 8, 2, &[1, 3]),
            (200.0, 8, 2, &[1, 2]),
        ],
    );
    let r = rows.replay(&small(100, 64));
    assert_eq!(r.records.reused_tokens, [0, 4, 4]);
    assert_eq!(r.derived.ttft_ms, [10.0, 10.0, 10.0]);
    assert_eq!(r.derived.e2e_ms[2], 11.0);
    assert_eq!(r.summary.reused_tokens, 8);
    assert!((r.summary.prefix_reuse_ratio - 8.0 / 24.0).abs() < 1e-12);
}

#[test]
fn a_fully_cached_prompt_computes_its_last_token_in_every_flavour() {
    // The same 8-token prompt (two 4-token blocks) at 0 and 100 ms, two tokens out each. The
    // second finds the whole prompt cached, but its pass must compute at least the last token:
    // the block caches (vLLM-like, TensorRT-LLM-like) reuse the first block and prefill the
    // second, the radix cache (SGLang-like, 1-token pages) reuses 7 tokens and prefills 1.
    // Either way a 10 ms prefill pass, then a 1 ms decode.
    use dynosim_core::config::Backend;
    let rows = Rows::new(4, &[(0.0, 8, 2, &[1, 2]), (100.0, 8, 2, &[1, 2])]);
    for (backend, reused) in [
        (Backend::Vllm, 4),
        (Backend::Trtllm, 4),
        (Backend::Sglang, 7),
    ] {
        let mut c = common::one_worker(100);
        c.engine.backend = backend;
        let r = rows.replay(&c);
        assert_eq!(r.records.reused_tokens, [0, reused], "{backend:?}");
        assert_eq!(r.derived.ttft_ms, [10.0, 10.0], "{backend:?}");
        assert_eq!(r.derived.e2e_ms, [11.0, 11.0], "{backend:?}");
    }
}

#[test]
fn cache_too_small_for_two_preempts_then_recomputes() {
    // 4 blocks of 4 tokens. A and B: 4-token prompts, 8 output tokens (each needs 3 blocks to
    // finish). Prefill both [0,10]; decodes at 11..14 grow each to 2 blocks (cache full).
    // At 14 A needs a third block: B (newest) is preempted; A finishes at 17. B is then
    // readmitted with its prompt block still cached, recomputes the 5 remaining tokens
    // (10 ms) and emits token 6 at 27, then 7 and 8 at 28 and 29.
    let rows = Rows::new(4, &[(0.0, 4, 8, &[1]), (0.0, 4, 8, &[2])]);
    let r = rows.replay(&small(4, 64));
    assert_eq!(r.records.status, [Status::Completed as u8; 2]);
    assert_eq!(r.records.preemptions, [0, 1]);
    assert_eq!(r.derived.e2e_ms, [17.0, 29.0]);
    assert_eq!(r.derived.ttft_ms, [10.0, 10.0]);
    // B's inter-token gaps: 1,1,1,1 then 13 (27 - 14) then 1,1; A's: 1 x7.
    assert_eq!(r.summary.itl_ms.count, 14);
    assert_eq!(r.summary.itl_ms.max, Some(13.0));
    assert_eq!(r.summary.num_preemptions, 1);
}

#[test]
fn fifo_and_lifo_preempt_different_requests() {
    // 6 blocks of 4 tokens; A, B, C: 4-token prompts, 8 output tokens (3 blocks each to
    // finish). Prefill together [0,10]; decodes to 14 grow each to 2 blocks (cache full). At
    // 14 A needs a third block: LIFO preempts the newest (C), FIFO the earliest admitted after
    // A (B). The survivors finish at 17; the victim is readmitted with its prompt block still
    // cached, recomputes 5 tokens (10 ms) and ends at 29.
    let rows = Rows::new(
        4,
        &[(0.0, 4, 8, &[1]), (0.0, 4, 8, &[2]), (0.0, 4, 8, &[3])],
    );
    let mut c = small(6, 64);
    let r = rows.replay(&c);
    assert_eq!(r.records.preemptions, [0, 0, 1]);
    assert_eq!(r.derived.e2e_ms, [17.0, 17.0, 29.0]);
    c.engine.preemption_mode = Some(dynosim_core::config::PreemptionMode::Fifo);
    let r = rows.replay(&c);
    assert_eq!(r.records.preemptions, [0, 1, 0]);
    assert_eq!(r.derived.e2e_ms, [17.0, 29.0, 17.0]);
}

#[test]
fn fifo_preemption_cannot_livelock() {
    // The minimal case a property test found: with FIFO preempting the oldest running request
    // outright, two requests on worker 0 preempted each other forever.
    let rows = Rows::new(
        4,
        &[
            (0.0, 4, 1, &[0]),
            (0.0, 1, 1, &[0]),
            (1.0, 51, 12, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
            (1.0, 1, 1, &[0]),
            (1.0, 29, 10, &[100, 101, 102, 103, 104, 105, 106, 107]),
        ],
    );
    let mut c = small(24, 9);
    c.cluster.num_workers = 2;
    c.engine.max_num_seqs = 2;
    c.engine.preemption_mode = Some(dynosim_core::config::PreemptionMode::Fifo);
    let r = rows.replay(&c);
    assert_eq!(r.summary.completed_requests, 5);
}

#[test]
fn request_that_can_never_fit_is_rejected_and_the_rest_complete() {
    // 4 blocks of 4 tokens = 16 tokens. Row 1: a 16-token prompt plus one token needs 5 blocks.
    // Row 2: 8 + 10 - 1 = 17 tokens needed to finish: 5 blocks.
    let rows = Rows::new(
        4,
        &[
            (0.0, 4, 2, &[1]),
            (0.0, 16, 1, &[2, 3, 4, 5]),
            (0.0, 8, 10, &[6, 7]),
            (5.0, 4, 2, &[8]),
        ],
    );
    let r = rows.replay(&small(4, 64));
    assert_eq!(r.records.status, [0, 1, 1, 0]);
    assert_eq!(
        r.records.reject_reason[1..3],
        [
            RejectReason::PromptExceedsCache as u8,
            RejectReason::OutputExceedsCache as u8
        ]
    );
    assert_eq!(r.summary.completed_requests, 2);
    assert_eq!(r.summary.rejected_requests, 2);
    assert_eq!(r.summary.rejections_by_reason.len(), 2);
}

#[test]
fn arrival_speedup_divides_gaps() {
    let rows = Rows::new(4, &[(0.0, 4, 1, &[1]), (1000.0, 4, 1, &[2])]);
    let mut c = small(100, 64);
    c.cluster.arrival_speedup_ratio = 4.0;
    let r = rows.replay(&c);
    assert_eq!(r.records.arrival_ms, [0.0, 250.0]);
}

#[test]
fn round_robin_spreads_requests() {
    let rows = Rows::new(
        4,
        &[(0.0, 4, 1, &[1]), (0.0, 4, 1, &[2]), (0.0, 4, 1, &[3])],
    );
    let mut c = small(100, 64);
    c.cluster.num_workers = 2;
    let r = rows.replay(&c);
    assert_eq!(r.records.worker, [0, 1, 0]);
    // Workers run in parallel: requests 0 and 2 share worker 0's first pass.
    assert_eq!(r.derived.ttft_ms, [10.0, 10.0, 10.0]);
}

#[test]
fn an_aggregated_report_says_no_request_was_transferred() {
    // The transfer columns are made only as the report is built: full length, each request
    // with no decode worker, no bytes and no transfer times.
    let rows = Rows::new(4, &[(0.0, 4, 2, &[1]), (1.0, 4, 2, &[2])]);
    let r = rows.replay(&small(100, 64));
    assert_eq!(r.records.decode_worker, [-1, -1]);
    assert_eq!(r.records.transfer_bytes, [0.0, 0.0]);
    let times = [&r.records.transfer_start_ms, &r.records.transfer_end_ms];
    assert!(times
        .iter()
        .all(|t| t.len() == 2 && t.iter().all(|x| x.is_nan())));
    assert_eq!(
        (r.summary.num_transfers, r.summary.transfer_ms.count),
        (0, 0)
    );
}

#[test]
fn empty_workload_ends_in_both_loops() {
    let rows = Rows::new(4, &[]);
    let mut c = small(100, 64);
    assert_eq!(rows.replay(&c).summary.num_requests, 0);
    c.cluster.concurrency = Some(3);
    assert_eq!(rows.replay(&c).summary.num_requests, 0);
}

#[test]
fn bad_workload_is_an_error_not_a_panic() {
    let rows = Rows::new(4, &[(0.0, 9, 1, &[1, 2])]);
    let err = replay(&rows.workload(), &small(100, 64), None).unwrap_err();
    assert!(
        err.to_string().contains("fewer than input_length 9"),
        "{err}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Every request ends completed or rejected, token times are ordered, and a second run is
    /// identical, whatever the cache pressure, batch limits and engine flavour (vLLM-like, or
    /// TensorRT-LLM-like with no-evict or max-utilization capacity).
    #[test]
    fn requests_are_conserved(rows in arb_rows(), blocks in 2u32..40, budget in 1u32..40,
                              seqs in 1u32..6, workers in 1u32..4, fifo in any::<bool>(),
                              chunked in any::<bool>(), flavour in 0u8..3) {
        let rows = Rows::of_families(&rows);
        let mut c = small(blocks, budget);
        c.engine.max_num_seqs = seqs;
        c.cluster.num_workers = workers;
        c.engine.enable_chunked_prefill = Some(chunked);
        if fifo {
            c.engine.preemption_mode = Some(dynosim_core::config::PreemptionMode::Fifo);
        }
        if flavour > 0 {
            use dynosim_core::config::{Backend, CapacityScheduler};
            c.engine.backend = Backend::Trtllm;
            c.engine.max_num_batched_tokens = None;
            c.engine.enable_chunked_prefill = None;
            c.engine.preemption_mode = None;
            c.engine.max_num_tokens = Some(budget);
            c.engine.enable_chunked_context = Some(chunked);
            if flavour == 2 {
                c.engine.capacity_scheduler = Some(CapacityScheduler::MaxUtilization);
            }
        }
        let r = rows.replay(&c);
        let s = &r.summary;
        prop_assert_eq!(s.completed_requests + s.rejected_requests, s.num_requests);
        if flavour == 1 {
            prop_assert_eq!(s.num_preemptions, 0, "no-evict never preempts");
        }
        common::check_replay(&rows, &c, &r)?;
    }
}

#[test]
fn data_parallel_ranks_pass_in_lockstep() {
    // One worker of two DP ranks: request 0 (8 tokens) lands on rank 0, request 1 (4,000
    // tokens) on rank 1. Polynomial prefill: 16.6229 ms and 83.9717 ms; the grouped pass ends
    // with the slower rank, so both first tokens come at 83.97 ms.
    let ids: Vec<u64> = (0..9).collect();
    let rows = Rows::new(512, &[(0.0, 8, 1, &ids[..1]), (0.0, 4000, 1, &ids[1..])]);
    let mut c = SimConfig::default();
    c.cluster.num_workers = 1;
    c.engine.data_parallel_size = 2;
    let r = rows.replay(&c);
    let slow = 4.209989e-7 * 4000f64.powi(2) + 1.518344e-2 * 4000.0 + 16.50142;
    assert_eq!(r.records.worker, [0, 0]);
    assert!(
        (r.derived.ttft_ms[0] - slow).abs() < 1e-9,
        "{:?}",
        r.derived.ttft_ms
    );
    assert!((r.derived.ttft_ms[1] - slow).abs() < 1e-9);
    assert_eq!(r.summary.num_passes, 2); // one pass per rank
}

#[test]
fn a_pass_that_preempts_admits_nothing() {
    // Blocks of 4 tokens, 7 of them, a budget of 8 tokens; prefill 10 ms, decode 1 ms. A (4
    // prompt tokens, 10 out) and V (4 prompt tokens, 20 out) prefill in pass 1 (0-10 ms) and
    // then decode 1 ms a pass, each crossing into a new block at targets 5, 9 and 13 (passes 2,
    // 6 and 10). At pass 10 (18 ms) both hold 3 blocks and 1 is left: A takes it, V must yield
    // itself (LIFO). V's prompt block stays cached and 3 blocks are free, so a 7-token chunk
    // of its recompute would fit; vLLM admits nothing in a step that preempted, so pass 10
    // only decodes A's last token: 1 ms, A ends at 19 ms (29 ms if V's chunk had joined it).
    let rows = Rows::new(4, &[(0.0, 4, 10, &[1]), (0.0, 4, 20, &[2])]);
    let r = rows.replay(&small(7, 8));
    assert_eq!(r.records.last_token_ms[0], 19.0);
    assert!(r.records.preemptions[1] >= 1);
    assert_eq!(r.summary.completed_requests, 2);
}

#[test]
fn async_scheduling_forms_a_pass_while_the_one_before_runs() {
    // Prefill 10 ms, decode 1 ms. A (8-token prompt, 3 tokens) arrives at 0, B (4-token
    // prompt, 2 tokens) at 5, while A's prefill runs (0-10).
    let rows = Rows::new(4, &[(0.0, 8, 3, &[1, 2]), (5.0, 4, 2, &[3])]);
    let mut c = small(100, 64);
    // vLLM forms the pass after A's prefill when that prefill starts, at 0, before B arrives:
    // 10-11 decodes A alone (its second token at 11). B joins the pass formed at 10: 11-22,
    // mixed (A's last token, B's first: TTFT 22 - 5 = 17); B's last token 22-23.
    let r = rows.replay(&c);
    assert_eq!(r.records.first_admit_ms, [0.0, 11.0]);
    assert_eq!(r.derived.ttft_ms[..], [10.0, 17.0]);
    assert_eq!(r.records.last_token_ms, [22.0, 23.0]);
    // Formed when the pass before ends, B prefills beside A's second token, 10-21.
    c.engine.async_scheduling = Some(false);
    let r = rows.replay(&c);
    assert_eq!(r.derived.ttft_ms[..], [10.0, 16.0]);
    assert_eq!(r.records.last_token_ms, [22.0, 22.0]);
}

#[test]
fn async_scheduling_forms_again_a_pass_formed_empty() {
    // A (one token) finishes with its prefill, 0-10: the pass formed at 0 after it has nothing
    // (vLLM knows A is done), so it is never launched and the engine forms one at 10 with B,
    // who arrived at 5: B prefills 10-20, as without async scheduling. A request reaching an
    // idle rank starts at once: C at 100 has its first token at 110.
    let rows = Rows::new(
        4,
        &[(0.0, 8, 1, &[1, 2]), (5.0, 4, 1, &[3]), (100.0, 4, 1, &[4])],
    );
    let r = rows.replay(&small(100, 64));
    assert_eq!(r.records.first_token_ms, [10.0, 20.0, 110.0]);
}

#[test]
fn a_request_is_admitted_once_its_whole_prompt_fits() {
    // 10 blocks of 4 tokens, budget 8. A (24-token prompt, 2 tokens) and B (20-token prompt)
    // arrive at 0; A's prompt takes the whole budget of passes 0-10, 10-20 and 20-30 (its first
    // token at 30, 6 blocks held). At 30 A decodes (a 7th block) and 7 budget tokens are left:
    // B's first chunk would need 2 of the 3 free blocks, but its whole prompt needs 5, so vLLM
    // 0.19 admits it only after A ends (30-31): at 31. Gating on the chunk alone admits it at
    // 30.
    let rows = Rows::new(
        4,
        &[
            (0.0, 24, 2, &[1, 2, 3, 4, 5, 6]),
            (0.0, 20, 2, &[7, 8, 9, 10, 11]),
        ],
    );
    let mut c = small(10, 8);
    assert_eq!(rows.replay(&c).records.first_admit_ms, [0.0, 31.0]);
    c.engine.scheduler_reserve_full_isl = Some(false);
    assert_eq!(rows.replay(&c).records.first_admit_ms, [0.0, 30.0]);
}

#[test]
fn data_parallel_ranks_keep_their_own_caches() {
    // The same prompt twice, the second sent at 11 ms while the first still decodes (prefill
    // 10 ms, then 1 ms decodes to its 50th token). With one rank the second reuses the cached
    // prompt but its last block (a pass computes at least the last token); with two, the busy
    // rank 0 scores 1 (one running) and the idle rank 1 scores 0, so the second lands on rank
    // 1's empty cache.
    let rows = Rows::new(4, &[(0.0, 8, 50, &[1, 2]), (11.0, 8, 1, &[1, 2])]);
    let mut c = small(100, 64);
    assert_eq!(rows.replay(&c).records.reused_tokens, [0, 4]);
    c.engine.data_parallel_size = 2;
    assert_eq!(rows.replay(&c).records.reused_tokens, [0, 0]);
}

#[test]
fn data_parallel_dispatch_goes_to_the_least_loaded_rank() {
    // vLLM's balancer: the lowest 4 x waiting + running, ties to the lowest rank. One worker of
    // two ranks, one sequence a rank, prefill 10 ms, decode 1 ms.
    // - 0 ms: request 0 (100 tokens out) goes to rank 0 (a tie); the pass 0-10 ms prefills it.
    // - 1 ms: request 1 (1 token out) goes to rank 1 (rank 0 runs one: score 1, rank 1: 0);
    //   the next grouped pass, 10-20 ms, prefills it on rank 1 and decodes request 0 on rank 0,
    //   and request 1 completes at 20 ms.
    // - 25 ms: request 2 arrives as a 1 ms pass ends; rank 0 still runs request 0 (score 1),
    //   rank 1 is idle (0): it goes to rank 1 and is admitted at once. Round robin would have
    //   sent it to rank 0, where it waits for request 0 to end (~118 ms).
    let rows = Rows::new(
        512,
        &[(0.0, 8, 100, &[0]), (1.0, 8, 1, &[1]), (25.0, 8, 1, &[2])],
    );
    let mut c = small(1000, 64);
    c.engine.data_parallel_size = 2;
    c.engine.max_num_seqs = 1;
    let r = rows.replay(&c);
    assert_eq!(r.records.first_admit_ms, [0.0, 10.0, 25.0]);
    assert_eq!(r.records.last_token_ms[1], 20.0);
}

#[test]
fn gpu_hours_count_tp_times_dp_per_worker() {
    let rows = Rows::new(4, &[(0.0, 4, 2, &[1])]);
    let mut c = small(100, 64);
    c.cluster.num_workers = 3;
    c.engine.tensor_parallel_size = 2;
    c.engine.data_parallel_size = 2;
    let r = rows.replay(&c);
    assert_eq!(r.summary.num_gpus, 12);
    // Prefill 10 ms + one 1 ms decode: 11 ms of 12 GPUs.
    assert!((r.summary.gpu_hours - 12.0 * 11.0 / 3.6e6).abs() < 1e-15);
}

fn with_sessions<'a>(rows: &'a Rows, session: &'a [i64], delay: &'a [f64]) -> Workload<'a> {
    Workload {
        session: Some(session),
        delay_ms: Some(delay),
        ..rows.workload()
    }
}

#[test]
fn session_turns_wait_for_the_previous_turn() {
    // Session 0: turns at t=0 and t=5 (timestamp gap 5 ms); the second turn is sent 5 ms after
    // the first ends (10 + 1 = 11 ms), not at 5 ms. Session 1's turn 2 has an explicit 100 ms
    // think time. Fixed timing: prefill 10, decode 1.
    let rows = Rows::new(
        4,
        &[
            (0.0, 4, 2, &[1]),
            (0.0, 4, 2, &[2]),
            (5.0, 4, 2, &[3]),
            (5.0, 4, 2, &[4]),
        ],
    );
    let session = [0, 1, 0, 1];
    let delay = [f64::NAN, f64::NAN, f64::NAN, 100.0];
    let r = replay(
        &with_sessions(&rows, &session, &delay),
        &small(100, 64),
        None,
    )
    .unwrap();
    assert_eq!(r.records.arrival_ms, [0.0, 0.0, 16.0, 111.0]);
    // Each turn's TTFT counts from when it was sent.
    assert_eq!(r.derived.ttft_ms, [10.0, 10.0, 10.0, 10.0]);
}

#[test]
fn session_turn_after_a_rejected_turn_still_goes() {
    let rows = Rows::new(4, &[(0.0, 64, 1, &[1; 16]), (3.0, 4, 1, &[2])]);
    let session = [7, 7];
    let delay = [f64::NAN, f64::NAN];
    let r = replay(&with_sessions(&rows, &session, &delay), &small(4, 64), None).unwrap();
    assert_eq!(
        r.records.status,
        [Status::Rejected as u8, Status::Completed as u8]
    );
    // Rejected at 0: the next turn goes 3 ms later (the timestamp gap).
    assert_eq!(r.records.arrival_ms[1], 3.0);
}

#[test]
fn closed_loop_keeps_concurrency_and_ignores_timestamps() {
    // Concurrency 2, five one-token requests far apart in the trace: two start at 0, each
    // completion (10 ms prefill) starts the next at once. The prompts are one cached 4-token
    // block, but the last token is always computed, so each recomputes its block: every pass
    // is a 10 ms prefill.
    let rows: Vec<(f64, u32, u32, &[u64])> = (0..5)
        .map(|i| (f64::from(i) * 1000.0, 4, 1, &[9u64][..]))
        .collect();
    let rows = Rows::new(4, &rows);
    let mut c = small(100, 64);
    c.cluster.concurrency = Some(2);
    let r = rows.replay(&c);
    assert_eq!(r.records.arrival_ms, [0.0, 0.0, 10.0, 10.0, 20.0]);
    assert_eq!(r.records.first_token_ms, [10.0, 10.0, 20.0, 20.0, 30.0]);
}

#[test]
fn kv_aware_routing_follows_the_cached_prefix() {
    // Four workers. Request 0 warms worker 0 with a 4-block prefix; request 1, arriving after
    // it finished, shares the prefix: kv_aware sends it to worker 0, round robin to worker 1.
    // It is request 0's whole prompt: it reuses 3 blocks and recomputes the last.
    let rows = Rows::new(
        4,
        &[(0.0, 16, 1, &[1, 2, 3, 4]), (100.0, 16, 1, &[1, 2, 3, 4])],
    );
    let mut c = small(100, 64);
    c.cluster.num_workers = 4;
    assert_eq!(rows.replay(&c).records.worker, [0, 1]);
    c.cluster.router = dynosim_core::config::RouterMode::KvAware;
    let r = rows.replay(&c);
    assert_eq!(r.records.worker, [0, 0]);
    assert_eq!(r.records.reused_tokens, [0, 12]);
}

#[test]
fn random_router_is_seeded() {
    let rows: Vec<(f64, u32, u32, &[u64])> =
        (0..50).map(|i| (f64::from(i), 4, 1, &[7u64][..])).collect();
    let rows = Rows::new(4, &rows);
    let mut c = small(100, 64);
    c.cluster.num_workers = 4;
    c.cluster.router = dynosim_core::config::RouterMode::Random;
    let a = rows.replay(&c).records.worker;
    assert_eq!(a, rows.replay(&c).records.worker);
    c.cluster.router_seed = 1;
    assert_ne!(a, rows.replay(&c).records.worker);
    assert!((0..4).all(|w| a.contains(&w)));
}

fn arb_sessions() -> impl Strategy<Value = Vec<(u32, u32, u32, i64, u8)>> {
    // (gap ms, prompt, output, session or -1, delay in ms (255: none))
    prop::collection::vec((0u32..30, 1u32..40, 1u32..10, -1i64..4, 0u8..=255), 1..30)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Closed loop never has more than `concurrency` sessions in flight, a session's turns
    /// never overlap and keep their order, and every request ends.
    #[test]
    fn sessions_and_concurrency_hold(rows in arb_sessions(), limit in 1u32..4,
                                     closed in any::<bool>(), workers in 1u32..3) {
        let mut t = 0.0;
        let mut table = Vec::new();
        let (mut session, mut delay) = (Vec::new(), Vec::new());
        for (k, &(gap, input, output, s, d)) in rows.iter().enumerate() {
            if k > 0 {
                t += f64::from(gap);
            }
            table.push((t, input, output, vec![k as u64; input.div_ceil(4) as usize]));
            // A delay only on a later turn of a session (the workload rule).
            let later_turn = s >= 0 && session.contains(&s);
            session.push(s);
            delay.push(if d == 255 || !later_turn { f64::NAN } else { f64::from(d) });
        }
        let refs: Vec<(f64, u32, u32, &[u64])> =
            table.iter().map(|(t, i, o, h)| (*t, *i, *o, h.as_slice())).collect();
        let rows = Rows::new(4, &refs);
        let mut c = small(30, 16);
        c.cluster.num_workers = workers;
        if closed {
            c.cluster.concurrency = Some(limit);
        }
        let w = with_sessions(&rows, &session, &delay);
        let r = replay(&w, &c, None).unwrap();
        let rec = &r.records;
        let n = rows.arrival.len();
        prop_assert_eq!(r.summary.completed_requests + r.summary.rejected_requests, n as u64);
        // When each request stopped occupying its session (rejected: at once).
        let end = |i: usize| if rec.status[i] == Status::Completed as u8 {
            rec.last_token_ms[i]
        } else {
            rec.arrival_ms[i]
        };
        let (next, _) = w.session_turns();
        for (i, &j) in next.iter().enumerate().filter(|(_, &j)| j != u32::MAX) {
            let j = j as usize;
            prop_assert!(rec.arrival_ms[j] >= end(i), "turn {} sent before turn {} ended", j, i);
        }
        if closed {
            // Sessions in flight at every send instant stay within the limit.
            let first = |i: usize| (0..i).all(|k| next[k] as usize != i);
            let mut spans: Vec<(f64, f64)> = Vec::new();
            for i in (0..n).filter(|&i| first(i)) {
                let mut last = i;
                while next[last] != u32::MAX {
                    last = next[last] as usize;
                }
                spans.push((rec.arrival_ms[i], end(last)));
            }
            for &(start, _) in &spans {
                let open = spans.iter().filter(|&&(s, e)| s <= start && start < e).count();
                prop_assert!(open <= limit as usize, "{} sessions open at {}", open, start);
            }
        }
    }
}
