//! A prepared workload replays to the same report as its columns, here with two block sizes in
//! one identity space (prefill and decode engines of different block sizes, one shared G3
//! pool), where the second table numbers its blocks after the first's.

mod common;

use common::Rows;
use dynosim_core::{replay, replay_prepared, PreparedWorkload, SimConfig};

#[test]
fn two_block_sizes_replay_the_same_prepared_or_not() {
    let mut rows = Rows::new(32, &[]);
    for k in 0..40u64 {
        // Four families sharing a 3-block prefix, then blocks of their own.
        let ids: Vec<u64> = (0..6)
            .map(|b| {
                if b < 3 {
                    (k % 4) * 100 + b
                } else {
                    10_000 + k * 10 + b
                }
            })
            .collect();
        rows.push(k as f64 * 3.0, 180, 5 + (k % 3) as u32, &ids);
    }
    let config = SimConfig::from_json(
        r#"{"cluster":{"mode":"disaggregated","num_prefill_workers":2,"num_decode_workers":2},
            "engine":{"num_gpu_blocks":40,"max_num_batched_tokens":128},
            "prefill":{"engine":{"block_size":16,"num_gpu_blocks":40,"max_num_batched_tokens":128}},
            "decode":{"engine":{"block_size":32,"num_gpu_blocks":40,"max_num_batched_tokens":128}},
            "timing":{"model":"fixed","prefill_ms":2.0,"decode_ms":1.0},
            "kv_transfer":{"kv_bytes_per_token":1000,"bandwidth_gbps":1},
            "offload":{"g2_blocks":16,"g3_blocks":64,"g3_shared":true}}"#,
    )
    .unwrap();
    let workload = rows.workload();
    let fresh = replay(&workload, &config, None).unwrap();
    let prepared = PreparedWorkload::new(&workload).unwrap();
    for _ in 0..2 {
        let again = replay_prepared(&prepared, &config, None).unwrap();
        assert_eq!(again.summary_json(), fresh.summary_json());
        assert_eq!(
            format!("{:?}", again.records),
            format!("{:?}", fresh.records)
        );
        assert_eq!(
            format!("{:?}", again.timeseries),
            format!("{:?}", fresh.timeseries)
        );
    }
    // One table per block size, the decode one numbered after the prefill one.
    assert_eq!(prepared.tables_held(), 2);
    let summary: serde_json::Value = serde_json::from_str(&fresh.summary_json()).unwrap();
    assert_eq!(summary["completed_requests"], 40);
    assert!(summary["offload"]["g1_hit_blocks"].as_u64().unwrap() > 0);
}
