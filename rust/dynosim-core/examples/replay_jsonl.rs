//! Replay a Mooncake JSONL trace from Rust, without Python: the core used as a library.
//!
//! `cargo run --release -p dynosim-core --example replay_jsonl -- TRACE [CONFIG_JSON] [RUNS]`
//! prints the wall time of each run and the summary of the last one as JSON.

use std::time::Instant;

use dynosim_core::{replay, SimConfig, Workload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: replay_jsonl TRACE [CONFIG_JSON] [RUNS]")?;
    let config = SimConfig::from_json(args.get(2).map_or("{}", String::as_str))?;
    let runs: usize = args.get(3).map_or(Ok(1), |r| r.parse())?;
    let (mut arrival, mut input, mut output) = (Vec::new(), Vec::new(), Vec::new());
    let (mut offsets, mut ids) = (vec![0u64], Vec::new());
    for (n, line) in std::fs::read_to_string(path)?.lines().enumerate() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let field = |k: &str| row[k].as_f64().ok_or(format!("{path}:{}: bad {k}", n + 1));
        arrival.push(field("timestamp")?);
        input.push(field("input_length")? as u32);
        output.push(field("output_length")? as u32);
        for h in row["hash_ids"].as_array().ok_or("hash_ids")? {
            ids.push(h.as_u64().ok_or("hash id")?);
        }
        offsets.push(ids.len() as u64);
    }
    let t0 = arrival[0];
    arrival.iter_mut().for_each(|t| *t -= t0);
    let workload = Workload {
        arrival_ms: &arrival,
        input_length: &input,
        output_length: &output,
        hash_offsets: &offsets,
        hash_ids: &ids,
        trace_block_size: 512,
        session: None,
        delay_ms: None,
    };
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let report = replay(&workload, &config, None)?;
        eprintln!("replay: {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
        last = Some(report);
    }
    if let Some(report) = last {
        println!("{}", report.summary_json());
    }
    Ok(())
}
