//! Hand-computable replays: every expected time below is worked out in the comments.

use dynosim_core::config::{FixedTiming, PolynomialTiming, TimingConfig};
use dynosim_core::report::{RejectReason, Status};
use dynosim_core::{replay, Report, SimConfig, Workload};
use proptest::prelude::*;

/// Requests as (arrival ms, prompt tokens, output tokens, trace hash ids).
struct Rows {
    arrival: Vec<f64>,
    input: Vec<u32>,
    output: Vec<u32>,
    offsets: Vec<u64>,
    ids: Vec<u64>,
    tbs: u32,
}

impl Rows {
    fn new(tbs: u32, rows: &[(f64, u32, u32, &[u64])]) -> Rows {
        let mut r = Rows {
            arrival: vec![],
            input: vec![],
            output: vec![],
            offsets: vec![0],
            ids: vec![],
            tbs,
        };
        for &(t, i, o, h) in rows {
            r.arrival.push(t);
            r.input.push(i);
            r.output.push(o);
            r.ids.extend_from_slice(h);
            r.offsets.push(r.ids.len() as u64);
        }
        r
    }

    fn workload(&self) -> Workload<'_> {
        Workload {
            arrival_ms: &self.arrival,
            input_length: &self.input,
            output_length: &self.output,
            hash_offsets: &self.offsets,
            hash_ids: &self.ids,
            trace_block_size: self.tbs,
        }
    }

    fn replay(&self, config: &SimConfig) -> Report {
        replay(&self.workload(), config, None).unwrap()
    }
}

/// One worker, 4-token blocks, fixed timing: prefill 10 ms, decode 1 ms.
fn small(num_gpu_blocks: u32, budget: u32) -> SimConfig {
    let mut c = SimConfig::default();
    c.cluster.num_workers = 1;
    c.engine.block_size = 4;
    c.engine.num_gpu_blocks = num_gpu_blocks;
    c.engine.max_num_batched_tokens = budget;
    c.timing = TimingConfig::Fixed(FixedTiming {
        prefill_ms: 10.0,
        decode_ms: 1.0,
    });
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
    c.engine.enable_chunked_prefill = false;
    let r = rows.replay(&c);
    assert_eq!(r.derived.ttft_ms[0], 10.0);
    assert_eq!(r.summary.num_passes, 2);
}

#[test]
fn second_request_reuses_the_shared_prefix() {
    // A (t=0) and B (t=100) share their first 4-token block (hash 1); C (t=200) repeats A's
    // whole prompt, so nothing is left to prefill: its pass costs 0 ms.
    let rows = Rows::new(
        4,
        &[
            (0.0, 8, 2, &[1, 2]),
            (100.0, 8, 2, &[1, 3]),
            (200.0, 8, 2, &[1, 2]),
        ],
    );
    let r = rows.replay(&small(100, 64));
    assert_eq!(r.records.reused_tokens, [0, 4, 8]);
    assert_eq!(r.derived.ttft_ms[..2], [10.0, 10.0]);
    assert_eq!(r.derived.ttft_ms[2], 0.0);
    assert_eq!(r.derived.e2e_ms[2], 1.0);
    assert_eq!(r.summary.reused_tokens, 12);
    assert!((r.summary.prefix_reuse_ratio - 12.0 / 24.0).abs() < 1e-12);
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
fn fifo_preemption_takes_the_oldest() {
    let rows = Rows::new(4, &[(0.0, 4, 8, &[1]), (0.0, 4, 8, &[2])]);
    let mut c = small(4, 64);
    c.engine.preemption_mode = dynosim_core::config::PreemptionMode::Fifo;
    let r = rows.replay(&c);
    assert_eq!(r.records.preemptions, [1, 0]);
    // Mirror image of the LIFO case: B finishes at 17, A at 29.
    assert_eq!(r.derived.e2e_ms, [29.0, 17.0]);
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
fn bad_workload_is_an_error_not_a_panic() {
    let rows = Rows::new(4, &[(0.0, 9, 1, &[1, 2])]);
    let err = replay(&rows.workload(), &small(100, 64), None).unwrap_err();
    assert!(
        err.to_string().contains("fewer than input_length 9"),
        "{err}"
    );
}

fn arb_rows() -> impl Strategy<Value = Vec<(u32, u32, u32, u8)>> {
    // (gap ms, prompt tokens, output tokens, prefix family)
    prop::collection::vec((0u32..40, 1u32..60, 1u32..20, 0u8..3), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every request ends completed or rejected, token times are ordered, and a second run is
    /// identical, whatever the cache pressure and batch limits.
    #[test]
    fn requests_are_conserved(rows in arb_rows(), blocks in 2u32..40, budget in 1u32..40,
                              seqs in 1u32..6, workers in 1u32..4, fifo in any::<bool>(),
                              chunked in any::<bool>()) {
        let mut t = 0.0;
        let mut table = Vec::new();
        for &(gap, input, output, family) in &rows {
            t += f64::from(gap);
            // Shared leading ids within a family make prefix hits happen.
            let ids: Vec<u64> = (0..input.div_ceil(4) as u64)
                .map(|k| if k < 2 { u64::from(family) * 100 + k } else { 10_000 + t as u64 * 64 + k })
                .collect();
            table.push((t, input, output, ids));
        }
        let refs: Vec<(f64, u32, u32, &[u64])> =
            table.iter().map(|(t, i, o, h)| (*t, *i, *o, h.as_slice())).collect();
        let rows = Rows::new(4, &refs);
        let mut c = small(blocks, budget);
        c.engine.max_num_seqs = seqs;
        c.cluster.num_workers = workers;
        c.engine.enable_chunked_prefill = chunked;
        if fifo {
            c.engine.preemption_mode = dynosim_core::config::PreemptionMode::Fifo;
        }
        let r = rows.replay(&c);
        let s = &r.summary;
        prop_assert_eq!(s.completed_requests + s.rejected_requests, s.num_requests);
        for i in 0..rows.arrival.len() {
            let rec = &r.records;
            if rec.status[i] == Status::Completed as u8 {
                prop_assert!(rec.first_token_ms[i] >= rec.arrival_ms[i]);
                prop_assert!(rec.last_token_ms[i] >= rec.first_token_ms[i]);
                prop_assert!(rec.reused_tokens[i] <= rec.input_length[i]);
            } else {
                prop_assert_eq!(rec.status[i], Status::Rejected as u8);
                prop_assert!(rec.reject_reason[i] != RejectReason::None as u8);
            }
        }
        let completed_outputs: u64 = (0..rows.arrival.len())
            .filter(|&i| r.records.status[i] == Status::Completed as u8)
            .map(|i| u64::from(rows.output[i]) - 1)
            .sum();
        prop_assert_eq!(s.itl_ms.count, completed_outputs);
        let again = rows.replay(&c);
        prop_assert_eq!(r.summary_json(), again.summary_json());
    }
}
