//! A Mooncake trace's rows as the requests a replay reads: in arrival order, the first at 0 ms,
//! sessions numbered by first arrival, checked by the workload's rules with a bad request named
//! by its file line.

use crate::arrival::{arrival_order, take, take_rows};
use crate::control::Control;
use crate::error::{Result, SimError};
use crate::prepared::PreparedWorkload;
use crate::workload::{check_size, Columns};

use super::{parse_mooncake_watched, MooncakeRows};

/// The requests of a Mooncake trace, held for replays, or why the workload's rules refuse
/// them; either way, which rows the file had out of arrival order (a refusal may be about the
/// order the sort made, so a reader says both).
#[derive(Debug)]
pub struct MooncakeRequests {
    pub requests: Result<PreparedWorkload>,
    /// Rows the file had out of arrival order: how many, and the file line of the first.
    pub late: Option<LateLines>,
}

/// Rows of a file that arrive earlier than a row above them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LateLines {
    pub rows: usize,
    /// Rows in the file.
    pub of: usize,
    /// File line of the first, counting from 1.
    pub first_line: u64,
}

/// Read the Mooncake trace `data` (from `path`, named in messages) with `trace_block_size`
/// prompt tokens per hash id, as [`parse_mooncake_watched`] does, then put its rows in arrival
/// order (a stable sort by timestamp), shift arrivals so the first is at 0 ms, renumber its
/// sessions 0, 1, ... in order of first arrival and check the requests by the workload's
/// rules. A bad row is an `Err`; a request the rules refuse is an `Err` in
/// [`MooncakeRequests::requests`], a [`SimError::Trace`] naming the file and its line.
pub fn read_mooncake(
    data: &[u8],
    path: &str,
    trace_block_size: u64,
    control: Option<&Control>,
) -> Result<MooncakeRequests> {
    let block = u32::try_from(trace_block_size)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| {
            SimError::Trace(format!(
                "{path}: trace_block_size (prompt tokens per hash id): expected between 1 and \
                 2**32 - 1 tokens, got {trace_block_size}"
            ))
        })?;
    let rows = parse_mooncake_watched(data, path, trace_block_size, control)?;
    check_size(rows.line.len() as u64, rows.hash_ids.len() as u64)
        .map_err(|e| SimError::Trace(format!("{path}: {e}")))?;
    let has_sessions = !rows.session_keys.is_empty();
    let (rows, late) = in_arrival_order(rows);
    let MooncakeRows {
        timestamp_ms: mut arrival_ms,
        input_length,
        output_length,
        hash_offsets,
        hash_ids,
        line,
        session,
        delay_ms,
        session_keys,
    } = rows;
    let first = arrival_ms[0];
    for t in &mut arrival_ms {
        *t -= first;
    }
    let columns = Columns {
        arrival_ms,
        input_length,
        output_length,
        hash_offsets,
        hash_ids,
        trace_block_size: block,
        session: has_sessions.then(|| by_first_arrival(&session, session_keys.len())),
        delay_ms: has_sessions.then_some(delay_ms),
    };
    let requests = PreparedWorkload::from_columns(columns).map_err(|e| match e {
        SimError::Workload { request, message } => {
            SimError::Trace(format!("{path}:{}: {message}", line[request]))
        }
        other => other,
    });
    Ok(MooncakeRequests { requests, late })
}

/// `rows` in arrival order, and which were late (by their file lines).
fn in_arrival_order(rows: MooncakeRows) -> (MooncakeRows, Option<LateLines>) {
    let Some((order, late)) = arrival_order(&rows.timestamp_ms) else {
        return (rows, None);
    };
    let late = LateLines {
        rows: late.rows,
        of: order.len(),
        first_line: rows.line[late.first],
    };
    let (hash_offsets, hash_ids) = take_rows(&rows.hash_offsets, &rows.hash_ids, &order);
    let sorted = MooncakeRows {
        timestamp_ms: take(&rows.timestamp_ms, &order),
        input_length: take(&rows.input_length, &order),
        output_length: take(&rows.output_length, &order),
        hash_offsets,
        hash_ids,
        line: take(&rows.line, &order),
        session: take(&rows.session, &order),
        delay_ms: take(&rows.delay_ms, &order),
        session_keys: rows.session_keys,
    };
    (sorted, Some(late))
}

/// `session` (indices below `sessions` in order of first appearance in the file, -1 for none)
/// renumbered in order of first appearance in these rows.
fn by_first_arrival(session: &[i64], sessions: usize) -> Vec<i64> {
    let mut renamed = vec![-1_i64; sessions];
    let mut next = 0;
    session
        .iter()
        .map(|&s| {
            if s < 0 {
                return -1;
            }
            let r = &mut renamed[s as usize];
            if *r < 0 {
                *r = next;
                next += 1;
            }
            *r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<MooncakeRequests> {
        read_mooncake(text.as_bytes(), "t.jsonl", 512, None)
    }

    #[test]
    fn rows_in_file_order_keep_it_and_start_at_zero() {
        let t = read(
            "{\"timestamp\": 100, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n\
             {\"timestamp\": 250.5, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [1, 2]}\n",
        )
        .unwrap();
        assert_eq!(t.late, None);
        let w = t.requests.as_ref().unwrap().workload();
        assert_eq!(w.arrival_ms, &[0.0, 150.5]);
        assert_eq!(w.input_length, &[10, 600]);
        assert_eq!(w.hash_offsets, &[0, 1, 3]);
        assert_eq!(w.hash_ids, &[1, 1, 2]);
        assert!(w.session.is_none() && w.delay_ms.is_none());
    }

    #[test]
    fn late_rows_are_sorted_with_their_ids_and_sessions_renumbered_by_first_arrival() {
        // Line 2 (blank lines count) is session "b" at 5 ms; line 4 is session "a" at 1 ms,
        // so "a" arrives first and becomes session 0. Line 3 has no session.
        let t = read(
            "\n{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [50], \"session_id\": \"b\"}\n\
             {\"timestamp\": 9, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [90]}\n\
             {\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [10], \"session_id\": \"a\"}\n\
             {\"timestamp\": 7, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [70], \"session_id\": \"b\", \"delay_ms\": 3}\n",
        )
        .unwrap();
        // Lines 4 (1 ms < 9 ms) and 5 (7 ms < 9 ms) are late.
        assert_eq!(
            t.late,
            Some(LateLines {
                rows: 2,
                of: 4,
                first_line: 4
            })
        );
        let w = t.requests.as_ref().unwrap().workload();
        assert_eq!(w.arrival_ms, &[0.0, 4.0, 6.0, 8.0]);
        assert_eq!(w.hash_ids, &[10, 50, 70, 90]);
        assert_eq!(w.session.unwrap(), &[0, 1, 1, -1]);
        let delay = w.delay_ms.unwrap();
        assert!(delay[0].is_nan() && delay[1].is_nan() && delay[3].is_nan());
        assert_eq!(delay[2], 3.0);
    }

    #[test]
    fn a_request_the_workload_rules_refuse_is_named_by_its_line() {
        // After the sort, the row of line 3 is the first turn of session 7 and may take no
        // delay; the core's check names request 0, which is line 3, and the late row is told.
        let read = read(
            "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1], \"session_id\": 7}\n\n\
             {\"timestamp\": 2, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [2], \"session_id\": 7, \"delay_ms\": 4}\n",
        )
        .unwrap();
        assert_eq!(
            read.late,
            Some(LateLines {
                rows: 1,
                of: 2,
                first_line: 3
            })
        );
        let err = read.requests.unwrap_err();
        let SimError::Trace(message) = err else {
            panic!("{err:?}")
        };
        assert!(
            message.starts_with("t.jsonl:3: delay_ms: this request is the first turn"),
            "{message}"
        );
    }

    #[test]
    fn a_block_size_past_u32_is_refused() {
        let err = read_mooncake(b"", "t.jsonl", 1 << 32, None).unwrap_err();
        assert!(err.to_string().contains("trace_block_size"), "{err}");
    }
}
