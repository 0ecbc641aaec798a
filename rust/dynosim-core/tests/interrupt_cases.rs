//! A replay stops, with `SimError::Interrupted`, once its control is interrupted.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::Rows;
use dynosim_core::{replay, Control, SimConfig, SimError};

/// `n` requests a millisecond apart, each with its own 64-token prompt and 16 output tokens.
fn requests(n: u64) -> Rows {
    let mut rows = Rows::new(64, &[]);
    for k in 0..n {
        rows.push(k as f64, 64, 16, &[k]);
    }
    rows
}

#[test]
fn an_interrupted_control_stops_the_replay_before_any_request() {
    let rows = requests(100);
    let control = Control::new();
    control.interrupt();
    let err = replay(&rows.workload(), &SimConfig::default(), Some(&control)).unwrap_err();
    assert_eq!(err, SimError::Interrupted { finished: 0 });
}

#[test]
fn a_control_counts_every_finished_request_of_a_whole_replay() {
    let rows = requests(100);
    let control = Control::new();
    let report = replay(&rows.workload(), &SimConfig::default(), Some(&control)).unwrap();
    assert_eq!(report.summary.completed_requests, 100);
    assert_eq!(control.finished(), 100);
}

#[test]
fn interrupting_from_another_thread_stops_a_running_replay() {
    // 2,000,000 requests take seconds to replay; the watcher interrupts as soon as the first
    // has finished, so the replay stops with most of them unfinished.
    let n = 2_000_000;
    let rows = requests(n);
    let control = Control::new();
    let watching = AtomicBool::new(true);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            while watching.load(Ordering::Relaxed) && control.finished() == 0 {
                std::thread::yield_now();
            }
            control.interrupt();
        });
        let result = replay(&rows.workload(), &SimConfig::default(), Some(&control));
        watching.store(false, Ordering::Relaxed);
        result
    });
    match result {
        Err(SimError::Interrupted { finished }) => assert!(finished >= 1 && finished < n),
        other => panic!(
            "expected an interruption, got {:?}",
            other.map(|r| r.summary)
        ),
    }
}

#[test]
fn an_interrupted_control_stops_a_trace_parse_at_its_next_look() {
    use dynosim_core::parse_mooncake_watched;

    let row = r#"{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}"#;
    let text = format!("{row}\n").repeat(10_000);
    let control = Control::new();
    let rows = parse_mooncake_watched(text.as_bytes(), "t.jsonl", 512, Some(&control)).unwrap();
    assert_eq!(rows.line.len(), 10_000);
    // Rows are counted every 4,096: the count stands at the last multiple.
    assert_eq!(control.finished(), 8192);
    control.interrupt();
    let err = parse_mooncake_watched(text.as_bytes(), "t.jsonl", 512, Some(&control)).unwrap_err();
    assert_eq!(err, SimError::Interrupted { finished: 4096 });
}
