//! Explained replays (`report.explain`), worked out by hand: each rank's passes by kind with
//! the parts of their prices, and each request's time to first token by stage. Fixed timing:
//! a pass that prefills costs 10 ms, one that decodes 1 ms, one that does both 11 ms.

use dynosim_core::config::{ServingMode, TimingConfig};
use dynosim_core::report::TTFT_STAGES;
use dynosim_core::{Report, SimConfig};

mod common;
use common::Rows;

fn explained(mut c: SimConfig) -> SimConfig {
    c.report.explain = true;
    c
}

/// Stage `name` of request `i`'s time to first token (ms).
fn stage(r: &Report, name: &str, i: usize) -> f64 {
    let k = TTFT_STAGES.iter().position(|s| *s == name).unwrap();
    r.breakdown.as_ref().unwrap().1[k][i]
}

#[test]
fn passes_by_kind_and_time_to_first_token_by_stage() {
    // A (8-token prompt, 6 tokens) at 0 prefills alone 0-10 (prefill only: first token at 10).
    // B (4-token prompt, 2 tokens) arrives at 5 and prefills beside A's second token 10-21
    // (mixed: 10 + 1). Then decodes only: 21-22 (A's third, B's last), 22-23, 23-24, 24-25
    // (A's sixth and last; these three are chained outside the event loop).
    // (Without async scheduling: B joins the pass right after its arrival.)
    let rows = Rows::new(4, &[(0.0, 8, 6, &[1, 2]), (5.0, 4, 2, &[3])]);
    let mut c = explained(common::one_worker(100));
    c.engine.async_scheduling = Some(false);
    let r = rows.replay(&c);
    assert_eq!(r.derived.ttft_ms[..], [10.0, 16.0]);
    let (b, _) = r.breakdown.as_ref().unwrap();
    assert_eq!(b.parts["aggregated"], ["prefill", "decode"]);
    let rank = &b.ranks[0];
    assert_eq!((rank.role, rank.worker, rank.dp_rank), ("aggregated", 0, 0));
    let kind = |k: &str| {
        let p = &rank.passes[k];
        (
            p.passes,
            p.mean_ms,
            p.p99_ms,
            p.parts_mean_ms["prefill"],
            p.parts_mean_ms["decode"],
        )
    };
    assert_eq!(kind("prefill_only"), (1, 10.0, 10.0, 10.0, 0.0));
    assert_eq!(kind("mixed"), (1, 11.0, 11.0, 10.0, 1.0));
    assert_eq!(kind("decode_only"), (4, 1.0, 1.0, 0.0, 1.0));
    // A: no wait, one 10 ms pass. B: waits 5 ms for A's pass, then its own 11 ms pass.
    assert_eq!(
        (stage(&r, "queue", 0), stage(&r, "prefill_passes", 0)),
        (0.0, 10.0)
    );
    assert_eq!(
        (stage(&r, "queue", 1), stage(&r, "prefill_passes", 1)),
        (5.0, 11.0)
    );
    for s in ["between_chunks", "handoff", "transfer", "after_transfer"] {
        assert_eq!((stage(&r, s, 0), stage(&r, s, 1)), (0.0, 0.0), "{s}");
    }
    // Means over the two requests, in stage order.
    let means: Vec<(&str, f64)> = b.ttft_stages.iter().map(|s| (s.stage, s.mean_ms)).collect();
    assert_eq!(means[..2], [("queue", 2.5), ("prefill_passes", 10.5)]);
}

#[test]
fn a_chunked_prompt_waits_between_its_chunks() {
    // Budget 4 tokens: A's 8-token prompt is two chunks; B (4 tokens, 3 out) arrives at 0
    // behind it. Pass 1 (0-10) and pass 2 (10-20): A's chunks (a running request takes the
    // budget first, so B waits). Pass 3 (20-31): A's second token and 3 of B's 4 prompt
    // tokens; pass 4 (31-42): A's third token and B's last prompt token: B's first token.
    let rows = Rows::new(4, &[(0.0, 8, 4, &[1, 2]), (0.0, 4, 3, &[3])]);
    let mut c = explained(common::one_worker(100));
    c.engine.max_num_batched_tokens = Some(4);
    let r = rows.replay(&c);
    assert_eq!(r.derived.ttft_ms[..], [20.0, 42.0]);
    // A: admitted at 0, two 10 ms passes back to back.
    assert_eq!(stage(&r, "prefill_passes", 0), 20.0);
    assert_eq!(stage(&r, "between_chunks", 0), 0.0);
    // B: admitted in pass 3 at 20 (it waited 20 ms), its chunks in passes 3 and 4 (22 ms).
    assert_eq!(stage(&r, "queue", 1), 20.0);
    assert_eq!(stage(&r, "prefill_passes", 1), 22.0);
    assert_eq!(stage(&r, "between_chunks", 1), 0.0);
}

#[test]
fn disaggregated_stages_include_the_transfer() {
    // 1 prefill + 1 decode worker, 1 GB/s links, 1e6 bytes per token: the 8-token prompt is an
    // 8 ms transfer. Prefill 0-10, transfer 10-18, first token when the KV lands (18).
    let rows = Rows::new(4, &[(0.0, 8, 3, &[1, 2])]);
    let mut c = explained(common::one_worker(100));
    c.cluster.mode = ServingMode::Disaggregated;
    c.cluster.num_prefill_workers = 1;
    c.cluster.num_decode_workers = 1;
    c.kv_transfer.bandwidth_gbps = Some(1.0);
    c.kv_transfer.kv_bytes_per_token = Some(1e6);
    let r = rows.replay(&c);
    assert_eq!(r.derived.ttft_ms[0], 18.0);
    let stages: Vec<f64> = TTFT_STAGES.iter().map(|s| stage(&r, s, 0)).collect();
    assert_eq!(stages, [0.0, 10.0, 0.0, 0.0, 8.0, 0.0]);
    let (b, _) = r.breakdown.as_ref().unwrap();
    let roles: Vec<&str> = b.ranks.iter().map(|r| r.role).collect();
    assert_eq!(roles, ["prefill", "decode"]);
    assert_eq!(b.ranks[0].passes["prefill_only"].passes, 1);
    // The decode worker's two passes decode the second and third tokens.
    assert_eq!(b.ranks[1].passes["decode_only"].passes, 2);
    assert!(matches!(c.timing, TimingConfig::Fixed(_)));
}
