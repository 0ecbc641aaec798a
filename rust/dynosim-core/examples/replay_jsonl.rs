//! Replay a Mooncake JSONL trace from Rust, without Python: the core used as a library.
//!
//! `cargo run --release -p dynosim-core --example replay_jsonl -- TRACE [CONFIG_JSON] [RUNS]`
//! prints the wall time of each run and the summary of the last one as JSON.

use std::time::Instant;

use dynosim_core::{parse_mooncake, replay, SimConfig, Workload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: replay_jsonl TRACE [CONFIG_JSON] [RUNS]")?;
    let config = SimConfig::from_json(args.get(2).map_or("{}", String::as_str))?;
    let runs: usize = args.get(3).map_or(Ok(1), |r| r.parse())?;
    let trace = parse_mooncake(&std::fs::read(path)?, path, 512)?;
    let t0 = trace.timestamp_ms[0];
    let arrival: Vec<f64> = trace.timestamp_ms.iter().map(|t| t - t0).collect();
    let workload = Workload {
        arrival_ms: &arrival,
        input_length: &trace.input_length,
        output_length: &trace.output_length,
        hash_offsets: &trace.hash_offsets,
        hash_ids: &trace.hash_ids,
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
