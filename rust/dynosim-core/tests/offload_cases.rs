//! KV offload tiers with hand-computable onboarding delays.
//!
//! Fixed timing (prefill 10 ms, decode 1 ms), 16-token blocks, a 5-block G1 per worker, and
//! 1e6 KV bytes per token: one block is 16e6 bytes, 16 ms on a 1 GB/s (1e6 bytes/ms) link.
//!
//! Each worker w plays four requests (one token of output each), round robin:
//! A at 0 ms: 3 blocks [a1 a2 a3]; B at 20 ms: 4 new blocks, evicting a3 then a2 from G1 to G2
//! (least recent first: a request's tail goes first); D at 40 ms: either B again (a full G1
//! hit, no eviction: "keep") or 4 new blocks evicting a1 and B's blocks ("push"), which with a
//! small G2 sends A's blocks on to G3; C at 100 ms: [a1 a2 a3 c4], whose first three blocks
//! come back from G1/G2/G3 before its prefill.

use dynosim_core::config::{FixedTiming, TimingConfig};
use dynosim_core::links::{FlowId, LinkNetwork};
use dynosim_core::{Report, SimConfig};

mod common;
use common::Rows;

const BLOCK: u64 = 16;
const GB: f64 = 1e6; // bytes per ms in one GB/s
const BLOCK_BYTES: f64 = 16e6;

/// The four phases for `workers` workers; `push_to_g3[w]`: worker w's D evicts B.
fn phases(push_to_g3: &[bool]) -> Rows {
    let mut rows = Rows::new(BLOCK as u32, &[]);
    for phase in 0..4u64 {
        for (w, &push) in push_to_g3.iter().enumerate() {
            let base = 1000 * w as u64;
            let (t, ids): (f64, Vec<u64>) = match phase {
                0 => (0.0, (1..=3).map(|k| base + k).collect()),
                1 => (20.0, (11..=14).map(|k| base + k).collect()),
                2 if push => (40.0, (21..=24).map(|k| base + k).collect()),
                2 => (40.0, (11..=14).map(|k| base + k).collect()),
                _ => (100.0, [1, 2, 3, 31].iter().map(|k| base + k).collect()),
            };
            rows.push(t, (ids.len() as u64 * BLOCK) as u32, 1, &ids);
        }
    }
    rows
}

fn config(workers: u32, g2: Option<u32>, g3: Option<u32>, shared: bool) -> SimConfig {
    let mut c = SimConfig::default();
    c.cluster.num_workers = workers;
    c.engine.block_size = Some(BLOCK as u32);
    c.engine.num_gpu_blocks = 5;
    c.timing = TimingConfig::Fixed(FixedTiming {
        prefill_ms: 10.0,
        decode_ms: 1.0,
    });
    c.kv_transfer.kv_bytes_per_token = Some(1e6);
    c.offload.g2_blocks = g2;
    c.offload.g3_blocks = g3;
    c.offload.g3_shared = shared;
    c.offload.g1_g2_gbps = 1.0;
    c.offload.g2_g3_gbps = 0.5;
    c
}

/// The C requests (the last `workers` rows).
fn last(r: &Report, workers: usize) -> std::ops::Range<usize> {
    let n = r.records.arrival_ms.len();
    n - workers..n
}

fn onboard_ms(r: &Report, i: usize) -> f64 {
    r.records.onboard_end_ms[i] - r.records.onboard_start_ms[i]
}

#[test]
fn evicted_prefix_is_onboarded_from_g2() {
    let r = phases(&[false]).replay(&config(1, Some(8), None, false));
    let c = 3;
    // a1 is still in G1; a2 a3 went to G2.
    assert_eq!(
        (
            r.records.g1_hit_blocks[c],
            r.records.g2_hit_blocks[c],
            r.records.g3_hit_blocks[c]
        ),
        (1, 2, 0)
    );
    // 2 blocks = 32e6 bytes at 1 GB/s: 32 ms, then the 10 ms prefill of the last block.
    assert_eq!(r.records.onboard_start_ms[c], 100.0);
    assert_eq!(r.records.onboard_end_ms[c], 132.0);
    assert_eq!(r.records.first_admit_ms[c], 132.0);
    assert_eq!(r.records.reused_tokens[c], 48);
    assert_eq!(r.derived.ttft_ms[c], 42.0);
    let o = r.summary.offload.as_ref().unwrap();
    // D found all of B in G1 (4 blocks), C found a1.
    assert_eq!((o.g1_hit_blocks, o.g2_hit_blocks), (5, 2));
    assert_eq!((o.g1_hit_tokens, o.g2_hit_tokens), (80, 32));
    assert_eq!(o.num_onboards, 1);
    assert_eq!(o.onboard_ms.mean, Some(32.0));
    assert_eq!(o.onboarded_g2_blocks, 2);
    assert_eq!(o.onboard_bytes, 2.0 * BLOCK_BYTES);
    // a3 a2 when B came; C's hold of 2 blocks evicted 2 of B's (D hit B fully), and its last
    // block at admission one more.
    assert_eq!(o.offloaded_g2_blocks, 5);
    assert_eq!(o.offload_bytes, 5.0 * BLOCK_BYTES);
    assert_eq!(o.dropped_blocks, 0);
    // Offloads move no flow (nothing else rides their links): one rate solve, C's onboard.
    assert_eq!(o.rate_recomputations, 1);
    // Without tiers C reuses a1 and prefills the rest at once.
    let plain = phases(&[false]).replay(&config(1, None, None, false));
    assert_eq!(plain.derived.ttft_ms[c], 10.0);
    assert_eq!(plain.records.reused_tokens[c], 16);
    assert!(plain.summary.offload.is_none());
}

#[test]
fn g3_hits_stage_through_g2() {
    let r = phases(&[true]).replay(&config(1, Some(2), Some(16), false));
    let c = 3;
    assert_eq!(
        (r.records.g2_hit_blocks[c], r.records.g3_hit_blocks[c]),
        (0, 3)
    );
    // Over the G3->G2 link (0.5 GB/s) and the G2->G1 link (1 GB/s): 48e6 / 0.5e6 = 96 ms.
    assert_eq!(onboard_ms(&r, c), 96.0);
    assert_eq!(r.derived.ttft_ms[c], 106.0);
    let o = r.summary.offload.as_ref().unwrap();
    assert_eq!(o.g3_hit_blocks, 3);
    assert_eq!(o.onboarded_g3_blocks, 3);
    assert_eq!(o.onboard_bytes, 3.0 * BLOCK_BYTES);
    assert_eq!(
        o.offload_bytes,
        (o.offloaded_g2_blocks + o.offloaded_g3_blocks) as f64 * BLOCK_BYTES
    );
    assert!(o.offloaded_g3_blocks >= 3);
}

#[test]
fn a_shared_g3_pool_is_shared_at_half_rate() {
    // Both workers onboard 3 blocks from G3 at 100 ms.
    let mut cfg = config(2, Some(2), Some(16), false);
    cfg.offload.g2_g3_gbps = 1.0;
    let own = phases(&[true, true]).replay(&cfg);
    cfg.offload.g3_shared = true;
    let shared = phases(&[true, true]).replay(&cfg);
    for c in last(&own, 2) {
        assert_eq!(own.records.g3_hit_blocks[c], 3);
        assert_eq!(shared.records.g3_hit_blocks[c], 3);
        // Own 1 GB/s G3 links: 48 ms each. One shared 1 GB/s pool: 0.5 GB/s each, 96 ms.
        assert_eq!(onboard_ms(&own, c), 48.0);
        assert_eq!(onboard_ms(&shared, c), 96.0);
    }
}

#[test]
fn a_flow_capped_by_its_own_g2_link_leaves_the_pool_to_the_other() {
    // A 1-block G2. Worker 0 keeps: its C finds a1 in G1, a2 in G2 and a3 in G3; worker 1
    // pushes: its C finds all three in the shared G3 pool. G1<->G2 links 1 GB/s, the pool
    // 1.4 GB/s. Flows at 100 ms: F0a (G2, 16e6 B, [link0]), F0b (G3, 16e6 B, [pool, link0]),
    // F1 (G3, 48e6 B, [pool, link1]). Link 0 carries two flows: 0.5 GB/s each, so F0b is capped
    // there and F1 takes the rest of the pool: 0.9 GB/s, not the fair half 0.7. F0a and F0b
    // end at 132 ms; then F1 runs at 1 GB/s, its own link (19.2e6 B left: 151.2 ms).
    let mut cfg = config(2, Some(1), Some(16), true);
    cfg.offload.g2_g3_gbps = 1.4;
    let r = phases(&[false, true]).replay(&cfg);
    let (c0, c1) = (6, 7);
    assert_eq!(
        (
            r.records.g1_hit_blocks[c0],
            r.records.g2_hit_blocks[c0],
            r.records.g3_hit_blocks[c0]
        ),
        (1, 1, 1)
    );
    assert_eq!(
        (r.records.g2_hit_blocks[c1], r.records.g3_hit_blocks[c1]),
        (0, 3)
    );
    assert!((r.records.onboard_end_ms[c0] - 132.0).abs() < 1e-9);
    assert!((r.records.onboard_end_ms[c1] - 151.2).abs() < 1e-9);
}

#[test]
fn the_allocator_gives_a_capped_flows_share_of_a_pool_to_the_other() {
    // The same max-min fact on the network alone: links 0 and 1 are two ranks' G2->G1 links
    // (1 GB/s and 0.3 GB/s), link 2 a shared 1 GB/s G3 pool. Flow A crosses [pool, 0], flow B
    // [pool, 1]: B is capped at 0.3 by its own link, A takes the other 0.7 of the pool.
    let mut net = LinkNetwork::new(vec![GB, 0.3 * GB, GB]).unwrap();
    let a = net.start_flow(0.0, &[2, 0], 70e6, None).unwrap();
    let b = net.start_flow(0.0, &[2, 1], 30e6, None).unwrap();
    assert_eq!(net.next_finish_ms().unwrap(), Some(100.0));
    assert!((net.rate(a).unwrap() - 0.7 * GB).abs() < 1e-6);
    assert!((net.rate(b).unwrap() - 0.3 * GB).abs() < 1e-6);
    let done = net.pop_finished(100.0).unwrap();
    assert_eq!(done, vec![FlowId(a.0), FlowId(b.0)]);
}

#[test]
fn no_room_in_g1_means_no_onboarding() {
    // A runner of 3 blocks (output 17: 4 blocks by its end) arrives at 99 ms, evicting a1 and
    // two of B's blocks, and holds 3 of the 5 G1 blocks when C queues at 100 ms: C finds a1 a2
    // a3 in G2 but G1 has 2 blocks free, not 3, so C queues without them and prefills all.
    let mut rows = phases(&[false]);
    let c = rows.arrival.len() - 1;
    rows.arrival.insert(c, 99.0);
    rows.input.insert(c, 48);
    rows.output.insert(c, 17);
    rows.ids = [
        1, 2, 3, 11, 12, 13, 14, 11, 12, 13, 14, 501, 502, 503, 1, 2, 3, 31,
    ]
    .to_vec();
    rows.offsets = vec![0, 3, 7, 11, 14, 18];
    let r = rows.replay(&config(1, Some(8), None, false));
    let c = c + 1;
    assert_eq!(
        (r.records.g1_hit_blocks[c], r.records.g2_hit_blocks[c]),
        (0, 3)
    );
    assert!(r.records.onboard_start_ms[c].is_nan());
    assert_eq!(r.summary.offload.as_ref().unwrap().onboards_skipped, 1);
    assert_eq!(r.summary.offload.as_ref().unwrap().num_onboards, 0);
    assert_eq!(r.records.reused_tokens[c], 0);
}

#[test]
fn tier_settings_are_validated() {
    let err = SimConfig::from_json(r#"{"offload": {"g2_blocks": 8}}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "offload: needs kv_transfer.kv_bytes_per_token (or kv_shape) to size block moves"
    );
    let err = SimConfig::from_json(
        r#"{"offload": {"g3_blocks": 8}, "kv_transfer": {"kv_bytes_per_token": 1}}"#,
    )
    .unwrap_err();
    assert!(err
        .to_string()
        .starts_with("offload.g3_blocks: needs offload.g2_blocks"));
    let err = SimConfig::from_json(r#"{"offload": {"g1_g2_gbps": 0}}"#).unwrap_err();
    assert!(err.to_string().starts_with("offload.g1_g2_gbps: must be"));
}

#[test]
fn a_request_onboarding_takes_a_sequence_slot() {
    // C onboards from 100 to 132 ms; E arrives at 110 ms with one new block. With one sequence
    // slot, E waits for C: admitted when C ends (132 + 10 ms prefill), not at once.
    let mut rows = phases(&[false]);
    rows.push(110.0, BLOCK as u32, 1, &[999]);
    let mut c = config(1, Some(8), None, false);
    c.engine.max_num_seqs = 1;
    let r = rows.replay(&c);
    let (c_row, e_row) = (3, 4);
    assert_eq!(r.records.first_admit_ms[c_row], 132.0);
    assert_eq!(r.records.last_token_ms[c_row], 142.0);
    assert_eq!(r.records.first_admit_ms[e_row], 142.0);
    assert_eq!(r.derived.ttft_ms[e_row], 42.0);
}
