//! Requests for hand-computed replays, shared by the integration tests.
// Every test crate includes this module and uses a different part of it.
#![allow(dead_code)]

use dynosim_core::{replay, Report, SimConfig, Workload};

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
