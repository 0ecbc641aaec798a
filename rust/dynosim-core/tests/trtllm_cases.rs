//! Hand-computed replays of the TensorRT-LLM-like engine flavour: every expected time is
//! worked out in the comments. One worker, 4-token blocks, fixed timing: a pass that prefills
//! costs 10 ms, one that decodes 1 ms, one that does both 11 ms.

use dynosim_core::config::{Backend, CapacityScheduler};
use dynosim_core::report::RejectReason;
use dynosim_core::SimConfig;

mod common;
use common::Rows;

fn trtllm(num_gpu_blocks: u32, max_num_tokens: u32) -> SimConfig {
    let mut c = common::one_worker(num_gpu_blocks);
    c.engine.backend = Backend::Trtllm;
    c.engine.max_num_tokens = Some(max_num_tokens);
    c
}

#[test]
fn no_evict_admission_stops_at_the_first_request_that_does_not_fit() {
    // 10 blocks. A reserves ceil((8 + 8) / 4) = 4 blocks; B then needs ceil((8 + 20) / 4) = 7 of
    // the 6 left and waits; C would fit (ceil(8 / 4) = 2) but does not skip ahead of B.
    let rows = Rows::new(
        4,
        &[
            (0.0, 8, 8, &[1, 2]),
            (0.0, 8, 20, &[3, 4]),
            (0.0, 4, 4, &[5]),
        ],
    );
    let r = rows.replay(&trtllm(10, 64));
    // A: prefill pass 0-10 ms (first token), 7 decode passes: last token at 17 ms. Then B
    // (7 blocks) and C (2 of the 3 left) are admitted together; one prefill pass: 27 ms.
    assert_eq!(r.records.first_admit_ms, [0.0, 17.0, 17.0]);
    assert_eq!(r.derived.e2e_ms[0], 17.0);
    assert_eq!(r.derived.ttft_ms[1..], [27.0, 27.0]);
    assert_eq!(r.summary.num_preemptions, 0);
    // The vLLM-like engine admits all three at once (2 + 2 + 1 blocks fit).
    let mut vllm = trtllm(10, 64);
    vllm.engine.backend = Backend::Vllm;
    vllm.engine.max_num_tokens = None;
    vllm.engine.max_num_batched_tokens = Some(64);
    assert_eq!(rows.replay(&vllm).records.first_admit_ms, [0.0; 3]);
}

#[test]
fn an_unchunked_context_waits_until_it_fits_the_budget_whole() {
    // Budget 8. A (8-token prompt, 4 tokens) prefills 0-10 ms. B (8-token prompt) arrives at
    // 5 ms; from 10 ms A's generation token comes first, leaving 7 < 8: B waits while A decodes
    // at 11, 12 and 13 ms (done), then prefills alone 13-23 ms and decodes its last at 24 ms.
    let rows = Rows::new(4, &[(0.0, 8, 4, &[1, 2]), (5.0, 8, 2, &[3, 4])]);
    let r = rows.replay(&trtllm(100, 8));
    assert_eq!(r.derived.e2e_ms[0], 13.0);
    assert_eq!(r.records.first_admit_ms[1], 13.0);
    assert_eq!((r.derived.ttft_ms[1], r.derived.e2e_ms[1]), (18.0, 19.0));
    // A 9-token prompt never fits the 8-token budget whole: rejected, unless chunked.
    let long = Rows::new(4, &[(0.0, 9, 2, &[1, 2, 3])]);
    let r = long.replay(&trtllm(100, 8));
    assert_eq!(
        r.records.reject_reason,
        [RejectReason::PromptExceedsPassBudget as u8]
    );
    // Chunked context: B takes the 7 tokens left at 10 ms (an 11 ms mixed pass, A's second
    // token at 21 ms), its last prompt token at 21-32 ms (first token at 32: TTFT 27), then
    // one decode pass ends both at 33 ms.
    let mut chunked = trtllm(100, 8);
    chunked.engine.enable_chunked_context = Some(true);
    let r = rows.replay(&chunked);
    assert_eq!(r.records.first_admit_ms[1], 10.0);
    assert_eq!((r.derived.ttft_ms[1], r.derived.e2e_ms[1]), (27.0, 28.0));
    assert_eq!(r.derived.e2e_ms[0], 33.0);
}

#[test]
fn generation_tokens_take_the_budget_first() {
    // Budget 6, chunked context; A, B and C have 4-token prompts and 8 tokens each.
    // Pass 1 (0-10 ms): A's 4 prompt tokens, B a 2-token chunk (the budget left); C waits.
    // Pass 2 (10-21, mixed): A's generation token first, then B's last 2 prompt tokens (first
    // token at 21), then C admitted with the 3 tokens left.
    // Pass 3 (21-32, mixed): A's and B's generation tokens, then C's last prompt token (first
    // token at 32).
    let rows = Rows::new(
        4,
        &[(0.0, 4, 8, &[1]), (0.0, 4, 8, &[2]), (0.0, 4, 8, &[3])],
    );
    let mut c = trtllm(100, 6);
    c.engine.enable_chunked_context = Some(true);
    let r = rows.replay(&c);
    assert_eq!(r.derived.ttft_ms, [10.0, 21.0, 32.0]);
    assert_eq!(r.records.first_admit_ms, [0.0, 0.0, 10.0]);
}

#[test]
fn max_utilization_pauses_the_latest_started_request() {
    // 6 blocks. A and B (8-token prompts, 12 tokens each; distinct prefixes) both fit their
    // next step and prefill together (0-10 ms). Each decode adds KV: at 10 ms each takes its
    // third block (6 in use); at 14 ms A's 13th KV token needs a fourth: B, started after A,
    // is paused (tokens 2-5 done at 11-14 ms). A decodes alone to its 12th token at 21 ms. B's
    // prompt blocks stay cached, but its recompute (13 tokens: 2 cached blocks back plus 2 new)
    // fits only once A is gone: 21-31 ms (its 6th token), then tokens 7-12 at 32-37 ms.
    let rows = Rows::new(4, &[(0.0, 8, 12, &[1, 2]), (0.0, 8, 12, &[3, 4])]);
    let mut c = trtllm(6, 64);
    c.engine.capacity_scheduler = Some(CapacityScheduler::MaxUtilization);
    let r = rows.replay(&c);
    assert_eq!(r.derived.e2e_ms, [21.0, 37.0]);
    assert_eq!(r.records.preemptions, [0, 1]);
    // guaranteed_no_evict never pauses: B (5 blocks to completion) waits for A, then runs
    // 21-31 ms (first token) and decodes to 42 ms.
    c.engine.capacity_scheduler = None;
    let r = rows.replay(&c);
    assert_eq!(r.derived.e2e_ms, [21.0, 42.0]);
    assert_eq!(r.summary.num_preemptions, 0);
}
