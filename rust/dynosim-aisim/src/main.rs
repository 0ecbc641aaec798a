//! `dynosim-aisim`: replays a Mooncake JSONL trace with AISimulate (the published
//! `aisimulate-core` crate) and prints its summary as one JSON object on stdout, for dynosim's
//! side-by-side comparison (`offline_replay_bench --compare aisimulate`, which builds and runs
//! this binary). Run with `--help` for the flags.
//!
//! Output: `simulator`, `version`, `engine` (AISimulate's engine descriptor as run), `requests`
//! (arrived, and how many ended completed, rejected, canceled or failed), `summary`
//! (AISimulate's own flat summary: `mean_ttft_ms`, `p99_e2e_latency_ms`, ...; percentiles of
//! TTFT, TTST, TPOT and E2E exact at the rounded rank, ITL's from a sketch), `wall` (ms of
//! this process: trace load, replay, total) and `peak_rss_mib` (this process's peak resident
//! memory, MiB; null where /proc is not there). Exit status 0, 2 for bad arguments, 1 when the
//! replay fails (the message on stderr).

mod args;
mod replay;

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use aisimulate_core::replay::ReplayTerminalStatus;
use serde_json::json;

/// The `aisimulate-core` release this binary is built on (the one Cargo.lock pins).
const AISIMULATE_VERSION: &str = env!("AISIMULATE_CORE_VERSION");

/// The kernel's high-water mark of this process's resident memory (MiB), on Linux. A parent
/// cannot measure it: a child's rusage counts the parent's memory at the fork.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kib: f64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib / 1024.0)
}

fn main() -> ExitCode {
    let start = Instant::now();
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("dynosim-aisim: {msg}");
            return ExitCode::from(2);
        }
    };
    let done = match replay::run(&args) {
        Ok(done) => done,
        Err(e) => {
            let trace = args.trace.display();
            let mut msg = format!("dynosim-aisim: {trace}: AISimulate's replay failed: {e}");
            let mut source = e.source();
            while let Some(s) = source {
                msg.push_str(&format!("\n  caused by: {s}"));
                source = s.source();
            }
            eprintln!("{msg}");
            return ExitCode::from(1);
        }
    };
    let report = &done.report;
    let mut ended = [0usize; 4];
    for r in &report.per_request {
        ended[match r.terminal_status {
            ReplayTerminalStatus::Completed => 0,
            ReplayTerminalStatus::Rejected => 1,
            ReplayTerminalStatus::Canceled => 2,
            ReplayTerminalStatus::Failed => 3,
        }] += 1;
    }
    if let Some(path) = &args.per_request {
        let write = || -> Result<(), Box<dyn Error>> {
            let mut out = String::new();
            for r in &report.per_request {
                out.push_str(&serde_json::to_string(r)?);
                out.push('\n');
            }
            Ok(std::fs::write(path, out)?)
        };
        if let Err(e) = write() {
            eprintln!("dynosim-aisim: {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    // ReplayReport serializes as AISimulate's flat summary (per-request records left out).
    let out = serde_json::to_value(report).and_then(|summary| {
        let num_requests = summary.get("num_requests").cloned();
        serde_json::to_string_pretty(&json!({
            "simulator": "aisimulate-core",
            "version": AISIMULATE_VERSION,
            "engine": done.engine,
            "requests": {
                "arrived": num_requests,
                "completed": ended[0],
                "rejected": ended[1],
                "canceled": ended[2],
                "failed": ended[3],
            },
            "summary": summary,
            "wall": {
                "trace_load_ms": done.trace_load_ms,
                "replay_ms": done.replay_ms,
                "total_ms": start.elapsed().as_secs_f64() * 1e3,
            },
            "peak_rss_mib": peak_rss_mib(),
        }))
    });
    match out {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dynosim-aisim: the summary does not serialize: {e}");
            ExitCode::from(1)
        }
    }
}
