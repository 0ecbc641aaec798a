//! Requests for hand-computed replays, shared by the integration tests.
// Every test crate includes this module and uses a different part of it.
#![allow(dead_code)]

use dynosim_core::config::{FixedTiming, TimingConfig};
use dynosim_core::report::{RejectReason, Status};
use dynosim_core::{replay, Report, SimConfig, Workload};
use proptest::prelude::*;

/// Requests in columns, built row by row: (arrival ms, prompt tokens, output tokens, trace
/// hash ids), with `tbs` tokens per hash id.
pub struct Rows {
    pub arrival: Vec<f64>,
    pub input: Vec<u32>,
    pub output: Vec<u32>,
    pub offsets: Vec<u64>,
    pub ids: Vec<u64>,
    pub tbs: u32,
}

impl Rows {
    pub fn new(tbs: u32, rows: &[(f64, u32, u32, &[u64])]) -> Rows {
        let mut r = Rows {
            arrival: vec![],
            input: vec![],
            output: vec![],
            offsets: vec![0],
            ids: vec![],
            tbs,
        };
        for &(t, i, o, h) in rows {
            r.push(t, i, o, h);
        }
        r
    }

    pub fn push(&mut self, t: f64, input: u32, output: u32, ids: &[u64]) {
        self.arrival.push(t);
        self.input.push(input);
        self.output.push(output);
        self.ids.extend_from_slice(ids);
        self.offsets.push(self.ids.len() as u64);
    }

    pub fn workload(&self) -> Workload<'_> {
        Workload {
            arrival_ms: &self.arrival,
            input_length: &self.input,
            output_length: &self.output,
            hash_offsets: &self.offsets,
            hash_ids: &self.ids,
            trace_block_size: self.tbs,
            session: None,
            delay_ms: None,
        }
    }

    pub fn replay(&self, config: &SimConfig) -> Report {
        replay(&self.workload(), config, None).unwrap()
    }
}

/// What every replay of `rows` under `config` must show: `check_outcomes`, and the same
/// summary again.
pub fn check_replay(rows: &Rows, config: &SimConfig, r: &Report) -> Result<(), TestCaseError> {
    check_outcomes(rows, config, r)?;
    let again = rows.replay(config);
    prop_assert_eq!(r.summary_json(), again.summary_json());
    Ok(())
}

/// What every request of a replay of `rows` under `config` must show: completed after it
/// arrived, its first token taking time (a pass computes at least one token), reusing less
/// than its prompt, or rejected with a reason; no KV transfer moving more than its prompt's
/// KV; counts that add up, and one inter-token gap per completed output token after the
/// first.
pub fn check_outcomes(rows: &Rows, config: &SimConfig, r: &Report) -> Result<(), TestCaseError> {
    let s = &r.summary;
    prop_assert_eq!(s.completed_requests + s.rejected_requests, s.num_requests);
    let rec = &r.records;
    let kv_bytes_per_token = config.kv_transfer.bytes_per_token();
    for i in 0..rows.arrival.len() {
        let prompt_bytes = f64::from(rows.input[i]) * kv_bytes_per_token;
        prop_assert!(
            rec.transfer_bytes[i] <= prompt_bytes,
            "request {}: {} transfer bytes for a prompt of {}",
            i,
            rec.transfer_bytes[i],
            prompt_bytes
        );
        if rec.status[i] == Status::Completed as u8 {
            prop_assert!(
                rec.first_token_ms[i] > rec.arrival_ms[i],
                "request {}: first token at its arrival, {} ms",
                i,
                rec.arrival_ms[i]
            );
            prop_assert!(rec.last_token_ms[i] >= rec.first_token_ms[i]);
            prop_assert!(rec.reused_tokens[i] < rec.input_length[i]);
        } else {
            prop_assert_eq!(rec.status[i], Status::Rejected as u8);
            prop_assert!(rec.reject_reason[i] != RejectReason::None as u8);
        }
    }
    let completed_outputs: u64 = (0..rows.arrival.len())
        .filter(|&i| rec.status[i] == Status::Completed as u8)
        .map(|i| u64::from(rows.output[i]) - 1)
        .sum();
    prop_assert_eq!(s.itl_ms.count, completed_outputs);
    Ok(())
}

/// Random request rows: (gap ms, prompt tokens, output tokens, prefix family).
pub fn arb_rows() -> impl Strategy<Value = Vec<(u32, u32, u32, u8)>> {
    prop::collection::vec((0u32..40, 1u32..60, 1u32..20, 0u8..3), 1..40)
}

impl Rows {
    /// `arb_rows` as requests of 4-token hash ids: arrivals the running sum of the gaps, and
    /// the first two ids shared within a family so prefix hits happen.
    pub fn of_families(rows: &[(u32, u32, u32, u8)]) -> Rows {
        let mut t = 0.0;
        let mut table = Vec::new();
        for &(gap, input, output, family) in rows {
            t += f64::from(gap);
            let ids: Vec<u64> = (0..input.div_ceil(4) as u64)
                .map(|k| {
                    if k < 2 {
                        u64::from(family) * 100 + k
                    } else {
                        10_000 + t as u64 * 64 + k
                    }
                })
                .collect();
            table.push((t, input, output, ids));
        }
        let refs: Vec<(f64, u32, u32, &[u64])> = table
            .iter()
            .map(|(t, i, o, h)| (*t, *i, *o, h.as_slice()))
            .collect();
        Rows::new(4, &refs)
    }
}

/// One worker of `num_gpu_blocks` 4-token blocks with fixed timing: prefill 10 ms, decode 1 ms.
pub fn one_worker(num_gpu_blocks: u32) -> SimConfig {
    let mut c = SimConfig::default();
    c.cluster.num_workers = 1;
    c.engine.block_size = Some(4);
    c.engine.num_gpu_blocks = num_gpu_blocks;
    c.timing = TimingConfig::Fixed(FixedTiming {
        prefill_ms: 10.0,
        decode_ms: 1.0,
    });
    c
}
