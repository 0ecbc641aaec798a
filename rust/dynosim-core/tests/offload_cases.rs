//! KV offload tiers with hand-computable onboarding delays.
//!
//! Fixed timing (prefill 10 ms, decode 1 ms), 16-token blocks, a 5-block G1 per worker, and
//! 1e6 KV bytes per token: one block is 16e6 bytes, 16 ms on a 1 GB/s (1e6 bytes/ms) link.
//!
//! Each worker w plays four requests (one token of output each), round robin:
//! A at 0 ms: 3 blocks [a1 a2 a3]; B at 20 ms: 4 new blocks [b1 b2 b3 b4] of 63 tokens (b4 is
//! partial, never cached), evicting a3 then a2 from G1 to G2 (least recent first: a request's
//! tail goes first); D at 40 ms: either B again (a G1 hit of b1 b2 b3, its partial last block
//! recomputed in the free fifth block: no eviction, "keep") or 4 new blocks evicting a1 and
//! B's blocks ("push"), which with a small G2 sends A's blocks on to G3; C at 100 ms:
//! [a1 a2 a3 c4], whose first three blocks come back from G1/G2/G3 before its prefill.

use dynosim_core::config::{Duplex, FixedTiming, InFlight, OffloadWrites, TimingConfig};
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
            let ids = |keys: &[u64]| -> Vec<u64> { keys.iter().map(|k| base + k).collect() };
            let (t, ids, tokens) = match phase {
                0 => (0.0, ids(&[1, 2, 3]), 48),
                1 => (20.0, ids(&[11, 12, 13, 14]), 63),
                2 if push => (40.0, ids(&[21, 22, 23, 24]), 64),
                2 => (40.0, ids(&[11, 12, 13, 14]), 63),
                _ => (100.0, ids(&[1, 2, 3, 31]), 64),
            };
            rows.push(t, tokens, 1, &ids);
        }
    }
    rows
}

/// `workers` workers with the given tiers, G1<->G2 at 1 GB/s, G2<->G3 at 0.5 GB/s, copies down
/// costed (flows), requests waiting for blocks in flight, unless a test says otherwise.
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
    // The tiers' settings, which without tiers are an error (they would do nothing).
    if g2.is_some() {
        c.offload.g1_g2_gbps = 1.0;
        c.offload.g2_g3_gbps = 0.5;
        c.offload.in_flight = InFlight::Wait;
    }
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
    // D found B's 3 full blocks in G1, C found a1.
    assert_eq!((o.queueing.g1_hit_blocks, o.queueing.g2_hit_blocks), (4, 2));
    assert_eq!(
        (o.queueing.g1_hit_tokens, o.queueing.g2_hit_tokens),
        (64, 32)
    );
    assert_eq!(o.queueing.num_onboards, 1);
    assert_eq!(o.queueing.onboard_ms.as_ref().unwrap().mean, Some(32.0));
    assert_eq!(o.queueing.onboarded_g2_blocks, 2);
    assert_eq!(o.queueing.onboard_bytes, 2.0 * BLOCK_BYTES);
    // a3 a2 when B came; C's hold of 2 blocks took the free block and evicted b3, and its
    // last block at admission evicted b2.
    assert_eq!(o.queueing.offloaded_g2_blocks, 4);
    assert_eq!(o.queueing.offload_bytes, 4.0 * BLOCK_BYTES);
    assert_eq!(o.dropped_blocks, 0);
    // Offloads are flows, one per eviction: a3 a2 at 20 ms (landed at 52 ms, long before C
    // needs them), C's hold at 100 ms, C's admission at 132 ms.
    let down = &o.queueing.flows.g1_to_g2;
    assert_eq!((down.flows, down.bytes), (3, 4.0 * BLOCK_BYTES));
    assert_eq!(o.queueing.onboards_delayed, 0);
    // Without tiers C reuses a1 and prefills the rest at once.
    let plain = phases(&[false]).replay(&config(1, None, None, false));
    assert_eq!(plain.derived.ttft_ms[c], 10.0);
    assert_eq!(plain.records.reused_tokens[c], 16);
    assert!(plain.summary.offload.is_none());
}

#[test]
fn g3_hits_stage_through_g2() {
    // Free copies down: onboarding alone (`copies_down_in_flight_delay_the_onboard` costs them).
    let mut cfg = config(1, Some(2), Some(16), false);
    cfg.offload.writes = OffloadWrites::Free;
    let r = phases(&[true]).replay(&cfg);
    let c = 3;
    assert_eq!(
        (r.records.g2_hit_blocks[c], r.records.g3_hit_blocks[c]),
        (0, 3)
    );
    // Over the G3->G2 link (0.5 GB/s) and the G2->G1 link (1 GB/s): 48e6 / 0.5e6 = 96 ms.
    assert_eq!(onboard_ms(&r, c), 96.0);
    assert_eq!(r.derived.ttft_ms[c], 106.0);
    let o = r.summary.offload.as_ref().unwrap();
    assert_eq!(o.queueing.g3_hit_blocks, 3);
    assert_eq!(o.queueing.onboarded_g3_blocks, 3);
    assert_eq!(o.queueing.onboard_bytes, 3.0 * BLOCK_BYTES);
    assert_eq!(
        o.queueing.offload_bytes,
        (o.queueing.offloaded_g2_blocks + o.queueing.offloaded_g3_blocks) as f64 * BLOCK_BYTES
    );
    assert!(o.queueing.offloaded_g3_blocks >= 3);
}

#[test]
fn a_shared_g3_pool_is_shared_at_half_rate() {
    // Both workers onboard 3 blocks from G3 at 100 ms.
    // Free copies down: onboarding alone.
    let mut cfg = config(2, Some(2), Some(16), false);
    cfg.offload.g2_g3_gbps = 1.0;
    cfg.offload.writes = OffloadWrites::Free;
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
    // Free copies down: onboarding alone.
    let mut cfg = config(2, Some(1), Some(16), true);
    cfg.offload.g2_g3_gbps = 1.4;
    cfg.offload.writes = OffloadWrites::Free;
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
fn a_hit_without_room_in_g1_is_looked_up_again() {
    // A runner R of 3 blocks (48 tokens, output 17) arrives at 99 ms: its admission takes the
    // free block and evicts a1 and b3 (copied down 99-131 ms), its prefill runs 99-109 ms, its
    // first decode takes a fourth block (evicting b2), and its last token ends at 125 ms. C
    // queues at 100 ms; at 109 ms it finds a1 a2 a3 in G2 (a1 still on its way down), but G1
    // has 1 block left, not 3: it waits, skipped once, and is looked up again before each pass.
    // At 125 ms R has released its blocks: C holds 3 (evicting b1 and one of R's), waits for
    // a1's copy to land (131 ms), onboards the 3 blocks (48 ms, to 179 ms), reuses 48 tokens
    // and prefills its last block to 189 ms. (Admitted at 125 ms without them, it would have
    // prefilled all 64 tokens in the same 10 ms of fixed timing.)
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
    let (runner, c) = (c, c + 1);
    assert_eq!(r.records.last_token_ms[runner], 125.0);
    assert_eq!(
        (r.records.g1_hit_blocks[c], r.records.g2_hit_blocks[c]),
        (0, 3)
    );
    assert_eq!(r.records.onboard_start_ms[c], 125.0);
    assert_eq!(r.records.onboard_end_ms[c], 179.0);
    assert_eq!(r.records.first_admit_ms[c], 179.0);
    assert_eq!(r.records.reused_tokens[c], 48);
    assert_eq!(r.derived.ttft_ms[c], 89.0);
    let o = &r.summary.offload.as_ref().unwrap().queueing;
    assert_eq!((o.onboards_skipped, o.num_onboards), (1, 1));
    assert_eq!((o.onboards_delayed, o.offload_wait_ms_mean), (1, 6.0));
}

#[test]
fn tier_settings_are_validated() {
    let err = SimConfig::from_json(r#"{"offload": {"g2_blocks": 8}}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "offload: needs kv_transfer.kv_bytes_per_token (or kv_shape, or roles timed by an aic \
         section, whose model gives it) to size block moves"
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
    // Without tiers a tier setting would do nothing: the replay refuses it, naming it (a
    // document alone may get its G2 size from elsewhere, a flag).
    let idle = SimConfig::from_json(r#"{"offload": {"writes": "free"}}"#).unwrap();
    assert_eq!(
        idle.check_replayable().unwrap_err().to_string(),
        "offload.writes: applies to the offload tiers, and there are none: set \
         offload.g2_blocks (--g2-blocks) to have them, or leave it at its default"
    );
    let at_default = SimConfig::from_json(r#"{"offload": {"writes": "flows"}}"#).unwrap();
    assert!(at_default.check_replayable().is_ok());
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

#[test]
fn copies_down_in_flight_delay_the_onboard() {
    // G1->G2 writes at 0.25 GB/s. B at 20 ms evicts a3 a2: 32e6 bytes, 20e6 of them sent by
    // 100 ms, 12e6 left. At 100 ms C finds a2 a3 in G2 still in flight and waits for the copy:
    // 12e6 / 0.25e6 = 48 ms (the two of B's blocks its hold evicts queue behind it: one copy
    // down at a time per rank and direction). At 148 ms C reads a2 a3 over the G2->G1 link
    // (1 GB/s, the other direction): 32 ms, to 180 ms; its prefill of the last block ends at
    // 190 ms.
    let mut cfg = config(1, Some(8), None, false);
    cfg.offload.g1_g2_write_gbps = Some(0.25);
    let r = phases(&[false]).replay(&cfg);
    let c = 3;
    assert_eq!(
        (r.records.g1_hit_blocks[c], r.records.g2_hit_blocks[c]),
        (1, 2)
    );
    assert_eq!(r.records.onboard_start_ms[c], 100.0);
    assert!((r.records.onboard_end_ms[c] - 180.0).abs() < 1e-9);
    assert!((r.derived.ttft_ms[c] - 90.0).abs() < 1e-9);
    let o = &r.summary.offload.as_ref().unwrap().queueing;
    assert_eq!((o.num_onboards, o.onboards_delayed), (1, 1));
    assert_eq!(o.delayed_onboard_share, 1.0);
    assert!((o.offload_wait_ms_mean - 48.0).abs() < 1e-9);
    // The replay ends with C at 190 ms. Copies: a3 a2 (20 to 148 ms), B's pair (started at
    // 148 ms, in flight at the end), the block C's admission evicted (queued behind it, never
    // started). The write link was busy from 20 ms on: 170 of 190 ms.
    assert_eq!(r.summary.duration_ms, 190.0);
    let summary = r.summary.offload.as_ref().unwrap();
    assert!((summary.link_utilization.g1_to_g2 - 170.0 / 190.0).abs() < 1e-9);
    let down = &o.flows.g1_to_g2;
    assert_eq!((down.flows, down.landed), (2, 1));
    assert!((down.mean_flow_ms - 128.0).abs() < 1e-9);
    // Recomputing what is in flight: C's hit ends at a1 (a2 a3 are misses), it prefills at
    // once: 10 ms.
    cfg.offload.in_flight = InFlight::Recompute;
    let recompute = phases(&[false]).replay(&cfg);
    assert_eq!(recompute.records.g2_hit_blocks[c], 0);
    assert!(recompute.records.onboard_start_ms[c].is_nan());
    assert_eq!(recompute.derived.ttft_ms[c], 10.0);
    let o = &recompute.summary.offload.as_ref().unwrap().queueing;
    assert_eq!((o.hits_cut_by_copies, o.blocks_lost_to_copies), (1, 2));
    assert_eq!((o.num_onboards, o.onboards_delayed), (0, 0));
    // Free copies down: C onboards at once (132 ms), as `evicted_prefix_is_onboarded_from_g2`.
    cfg.offload.in_flight = InFlight::Wait;
    cfg.offload.writes = OffloadWrites::Free;
    let free = phases(&[false]).replay(&cfg);
    assert_eq!(free.records.onboard_end_ms[c], 132.0);
    let o = &free.summary.offload.as_ref().unwrap().queueing;
    assert_eq!((o.onboards_delayed, o.flows.g1_to_g2.flows), (0, 0));
}

#[test]
fn g3_copies_share_a_half_duplex_link_with_g3_reads() {
    // The run of `g3_hits_stage_through_g2` with copies down costed: C's three G3 blocks were
    // pushed there at 40 ms and are still in flight on the 0.5 GB/s G3 link at 100 ms, so its
    // onboard starts later than with free copies; with a full-duplex link its read no longer
    // shares the link with the copies its own hold sends down.
    let mut cfg = config(1, Some(2), Some(16), false);
    let half = phases(&[true]).replay(&cfg);
    cfg.offload.g3_duplex = Duplex::Full;
    let full = phases(&[true]).replay(&cfg);
    cfg.offload.writes = OffloadWrites::Free;
    let free = phases(&[true]).replay(&cfg);
    let c = 3;
    let end = |r: &Report| r.records.onboard_end_ms[c];
    assert_eq!(end(&free), 196.0);
    assert!(end(&full) > end(&free));
    assert!(end(&half) > end(&full));
    let o = &half.summary.offload.as_ref().unwrap().queueing;
    assert_eq!(o.onboards_delayed, 1);
}

#[test]
fn a_decode_worker_receives_only_the_blocks_its_tiers_lack() {
    // One prefill worker (128-token blocks, 64 of them: it never evicts) and one decode worker
    // (64-token blocks, 8 of them), 1 GB/s KV links, G1<->G2 at 0.5 GB/s, 1e6 bytes per token.
    // A [1 2] at 0 ms and B [3 4 5] at 1,000 ms each decode one token. B's reservation on the
    // decode rank (6 blocks) evicts A's last two 64-token blocks (trace block 2) to its G2
    // (landed by 1,266 ms). C [1 2 7] at 2,000 ms: the decode rank holds trace block 1 in G1
    // and block 2 in G2, so with destination-missing sizing the transfer moves 128 tokens
    // (128e6 bytes: 128 ms from 2,010 ms) while G2 sends its 2 blocks (128e6 bytes at 0.5
    // GB/s: 256 ms): C is active, its first token out, at 2,266 ms.
    use dynosim_core::config::{EngineConfig, ServingMode, TransferSizing};
    let rows = Rows::new(
        128,
        &[
            (0.0, 256, 1, &[1, 2]),
            (1000.0, 384, 1, &[3, 4, 5]),
            (2000.0, 384, 1, &[1, 2, 7]),
        ],
    );
    let mut c = config(1, Some(8), None, false);
    c.cluster.mode = ServingMode::Disaggregated;
    c.cluster.num_prefill_workers = 1;
    c.cluster.num_decode_workers = 1;
    c.engine.block_size = Some(64);
    c.engine.num_gpu_blocks = 8;
    c.prefill.engine = Some(EngineConfig {
        block_size: Some(128),
        num_gpu_blocks: 64,
        ..c.engine.clone()
    });
    c.offload.g1_g2_gbps = 0.5;
    c.kv_transfer.bandwidth_gbps = Some(1.0);
    c.kv_transfer.sizing = Some(TransferSizing::DestinationMissing);
    let r = rows.replay(&c);
    let i = 2;
    assert_eq!(r.records.transfer_bytes[i], 128e6);
    assert_eq!(r.records.transfer_end_ms[i], 2138.0);
    assert_eq!(r.derived.ttft_ms[i], 266.0);
    let o = r.summary.offload.as_ref().unwrap();
    // The prefill side found trace blocks 1 and 2 in its G1 (two 128-token blocks), and its
    // columns stay its own.
    assert_eq!(r.records.g1_hit_blocks[i], 2);
    assert_eq!(
        (o.queueing.g1_hit_tokens, o.queueing.g2_hit_tokens),
        (256, 0)
    );
    // The decode side: two 64-token blocks in G1 and two in G2, in its own block size.
    let d = o.decode.as_ref().unwrap();
    assert_eq!((d.g1_hit_blocks, d.g2_hit_blocks), (2, 2));
    assert_eq!((d.g1_hit_tokens, d.g2_hit_tokens), (128, 128));
    assert_eq!((d.onboarded_g2_blocks, d.onboard_bytes), (2, 128e6));
    assert_eq!(d.flows.g2_to_g1.flows, 1);
    assert!((d.flows.g2_to_g1.flow_ms - 256.0).abs() < 1e-9);
    assert_eq!(o.queueing.onboarded_blocks, 0);
    // With the full prompt on its way the decode rank reads nothing from its tiers: 384 ms.
    c.kv_transfer.sizing = Some(TransferSizing::FullPrompt);
    let full = rows.replay(&c);
    assert_eq!(full.derived.ttft_ms[i], 394.0);
    let d = full
        .summary
        .offload
        .as_ref()
        .unwrap()
        .decode
        .clone()
        .unwrap();
    assert_eq!((d.g2_hit_blocks, d.onboarded_blocks), (0, 0));
}

#[test]
fn a_radix_prefix_ending_inside_a_tier_block_is_not_counted_twice() {
    // SGLang-like ranks (4-token blocks, 1-token pages): a prefill rank that never evicts and a
    // decode rank of 24 tokens, 1 GB/s line-rate KV links and G1<->G2 links, 1e6 bytes per
    // token (a token is 1 ms on a link), destination-missing sizing. Each request decodes one
    // token (its first, when its KV lands).
    // - A (6 tokens, trace blocks [1 2]) at 0 ms: the decode rank caches its 6 tokens.
    // - C (8 tokens, [1 2]) at 100 ms: the decode rank adds tokens 6..8 under A's.
    // - D (18 new tokens) at 200 ms: its reservation (18 of 16 free) evicts C's leaf, tokens
    //   6..8, and with them block 1 (tokens 4..8) goes to G2 (landed at 214 ms).
    // - B (8 tokens, [1 2]) at 300 ms: prefills 1 token (the rest is cached there) to 310 ms.
    //   The decode rank holds tokens 0..6 in G1 (evicting D's leaf for B's last 2 tokens) and
    //   block 1, tokens 4..8, in G2: together the whole prompt, so the transfer moves nothing
    //   while G2 sends block 1 (4e6 bytes: 4 ms): B's first token at 314 ms. (Counted apart,
    //   6 + 4 tokens held are 2 more than the prompt: a wrapped 2^32 - 2 tokens, 4.29e15 bytes.)
    use dynosim_core::config::{Backend, EngineConfig, LinkModel, ServingMode, TransferSizing};
    let rows = Rows::new(
        4,
        &[
            (0.0, 6, 1, &[1, 2]),
            (100.0, 8, 1, &[1, 2]),
            (200.0, 18, 1, &[10, 11, 12, 13, 14]),
            (300.0, 8, 1, &[1, 2]),
        ],
    );
    let mut c = config(1, Some(8), None, false);
    c.cluster.mode = ServingMode::Disaggregated;
    c.cluster.num_prefill_workers = 1;
    c.cluster.num_decode_workers = 1;
    c.engine.backend = Backend::Sglang;
    c.engine.block_size = Some(4);
    c.engine.num_gpu_blocks = 6;
    c.prefill.engine = Some(EngineConfig {
        num_gpu_blocks: 64,
        ..c.engine.clone()
    });
    c.kv_transfer.bandwidth_gbps = Some(1.0);
    c.kv_transfer.link_model = Some(LinkModel::LineRate);
    c.kv_transfer.sizing = Some(TransferSizing::DestinationMissing);
    let r = rows.replay(&c);
    assert_eq!(r.records.transfer_bytes, [6e6, 2e6, 18e6, 0.0]);
    assert_eq!(r.derived.ttft_ms, [16.0, 12.0, 28.0, 14.0]);
    let d = r.summary.offload.as_ref().unwrap().decode.clone().unwrap();
    // Over the four reservations: G1 held block 0 for C and B; G2 held B's block 1.
    assert_eq!(
        (d.g1_hit_blocks, d.g2_hit_blocks, d.onboarded_g2_blocks),
        (2, 1, 1)
    );
}

#[test]
fn a_request_onboarding_counts_as_waiting_on_its_rank_in_every_flavour() {
    // One worker of two data-parallel ranks, one sequence slot each, 16-token blocks. A, B and C
    // go to rank 0 (ties go to the lowest rank): B evicts A's blocks to G2, and at 100 ms C
    // starts onboarding them there. E (one new block) arrives at 110 ms: rank 0 holds C
    // onboarding, which vLLM's balancer counts as waiting (4 x 1 + 0 = 4 against rank 1's 0),
    // so E goes to the idle rank 1 and prefills at once (TTFT 10 ms). Sent to rank 0, E would
    // wait for C's slot (in the SGLang-like flavour until C ends at 158 ms).
    use dynosim_core::config::Backend;
    let rows = Rows::new(
        BLOCK as u32,
        &[
            (0.0, 48, 1, &[1, 2, 3]),
            (20.0, 64, 1, &[11, 12, 13, 14]),
            (100.0, 64, 1, &[1, 2, 3, 31]),
            (110.0, 16, 1, &[41]),
        ],
    );
    for backend in [Backend::Vllm, Backend::Sglang, Backend::Trtllm] {
        let mut c = config(1, Some(8), None, false);
        c.engine.backend = backend;
        c.engine.data_parallel_size = 2;
        c.engine.max_num_seqs = 1;
        let r = rows.replay(&c);
        assert!(!r.records.onboard_start_ms[2].is_nan(), "{backend:?}");
        assert_eq!(r.records.first_admit_ms[3], 110.0, "{backend:?}");
        assert_eq!(r.derived.ttft_ms[3], 10.0, "{backend:?}");
    }
}
