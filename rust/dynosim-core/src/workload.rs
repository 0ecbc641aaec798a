//! The columnar request table a replay reads, borrowed from the caller (numpy arrays in Python)
//! or owned by the core ([`Columns`]):
//! its checks, and which requests are later turns of a session. The prefix identities of its
//! KV blocks are in `block_ids`.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Result, SimError};

/// The most requests one workload may hold, whatever made it (a trace, synthetic traffic,
/// columns): request indices are `u32` in the event loop, and a replay keeps a few hundred
/// bytes per request, so 100 million requests already need tens of GB.
pub const MAX_REQUESTS: u64 = 100_000_000;

/// The most prompt hash ids one workload may hold (8 bytes each in the columns, and again in
/// the block identity tables a replay builds).
pub const MAX_HASH_IDS: u64 = 1_000_000_000;

/// The latest a request may arrive, in ms after the first arrival (after
/// `cluster.arrival_speedup_ratio`), and the longest think time of a session turn: 2^43 ms
/// (about 278 years). The replay's clock is an f64 of ms, whose spacing at `t` is
/// 2^(floor(log2 t) - 52) ms: below 2^43 ms it resolves under a microsecond; from 2^52 ms
/// (4.5e15 ms) on not even a millisecond, and past 1e17 ms a pass of a few ms rounds away
/// entirely (TTFT and E2E of 0). Step times are fractions of a ms, so the bound keeps them.
pub const MAX_TIME_MS: f64 = 8_796_093_022_208.0;

/// Why a time `t` ms (a span after the first arrival, or a delay) is past [`MAX_TIME_MS`]
/// (`what` names it), or `None`.
fn past_time_bound(what: &str, t: f64) -> Option<String> {
    (t > MAX_TIME_MS).then(|| {
        format!(
            "{what} = {t:e} ms is past {} ms (2^43 ms, about 278 years), beyond which the \
             replay's clock (f64 ms) no longer resolves a microsecond and step times round away",
            grouped(MAX_TIME_MS as u64)
        )
    })
}

/// Thousands separated by commas, as the size limits are quoted.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `Err` when `requests` or `hash_ids` pass the limits of one workload; the message names the
/// count and the limit.
pub fn check_size(requests: u64, hash_ids: u64) -> Result<()> {
    for (count, limit, what) in [
        (requests, MAX_REQUESTS, "requests"),
        (hash_ids, MAX_HASH_IDS, "prompt hash ids"),
    ] {
        if count > limit {
            return Err(SimError::WorkloadShape(format!(
                "{} {what}, more than the {} one workload may hold",
                grouped(count),
                grouped(limit)
            )));
        }
    }
    Ok(())
}

/// Requests in columns. Request `i` owns `hash_ids[hash_offsets[i]..hash_offsets[i + 1]]`, one
/// id per `trace_block_size` prompt tokens.
#[derive(Debug, Clone, Copy)]
pub struct Workload<'a> {
    /// Arrival times (ms), first at 0, non-decreasing.
    pub arrival_ms: &'a [f64],
    /// Prompt lengths (tokens).
    pub input_length: &'a [u32],
    /// Output lengths (tokens), at least 1.
    pub output_length: &'a [u32],
    pub hash_offsets: &'a [u64],
    pub hash_ids: &'a [u64],
    /// Tokens per trace hash id.
    pub trace_block_size: u32,
    /// Session of each request (-1: none). Turns of a session are its requests in row order:
    /// turn n+1 is sent when turn n ends plus `delay_ms` (or the timestamp gap).
    pub session: Option<&'a [i64]>,
    /// Think time before a session turn is sent (ms), NaN to use the timestamp gap.
    pub delay_ms: Option<&'a [f64]>,
}

/// Requests in columns the core owns: what [`Workload`] borrows.
#[derive(Debug, Clone, Default)]
pub struct Columns {
    pub arrival_ms: Vec<f64>,
    pub input_length: Vec<u32>,
    pub output_length: Vec<u32>,
    pub hash_offsets: Vec<u64>,
    pub hash_ids: Vec<u64>,
    pub trace_block_size: u32,
    pub session: Option<Vec<i64>>,
    pub delay_ms: Option<Vec<f64>>,
}

impl Columns {
    /// A copy of `workload`'s columns.
    pub fn copied(workload: &Workload) -> Self {
        Columns {
            arrival_ms: workload.arrival_ms.to_vec(),
            input_length: workload.input_length.to_vec(),
            output_length: workload.output_length.to_vec(),
            hash_offsets: workload.hash_offsets.to_vec(),
            hash_ids: workload.hash_ids.to_vec(),
            trace_block_size: workload.trace_block_size,
            session: workload.session.map(<[i64]>::to_vec),
            delay_ms: workload.delay_ms.map(<[f64]>::to_vec),
        }
    }

    /// The columns, borrowed.
    pub fn workload(&self) -> Workload<'_> {
        Workload {
            arrival_ms: &self.arrival_ms,
            input_length: &self.input_length,
            output_length: &self.output_length,
            hash_offsets: &self.hash_offsets,
            hash_ids: &self.hash_ids,
            trace_block_size: self.trace_block_size,
            session: self.session.as_deref(),
            delay_ms: self.delay_ms.as_deref(),
        }
    }
}

impl<'a> Workload<'a> {
    pub fn len(&self) -> usize {
        self.arrival_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.arrival_ms.is_empty()
    }

    /// The trace hash ids of request `i`.
    pub fn hashes(&self, i: usize) -> &'a [u64] {
        &self.hash_ids[self.hash_offsets[i] as usize..self.hash_offsets[i + 1] as usize]
    }

    /// Check shapes and every row; the error names the request index and the value.
    pub fn validate(&self) -> Result<()> {
        let n = self.len();
        if self.input_length.len() != n || self.output_length.len() != n {
            return Err(SimError::WorkloadShape(format!(
                "arrival_ms has {n} rows but input_length has {} and output_length {}",
                self.input_length.len(),
                self.output_length.len()
            )));
        }
        for (name, len) in [
            ("session", self.session.map(<[i64]>::len)),
            ("delay_ms", self.delay_ms.map(<[f64]>::len)),
        ] {
            if let Some(len) = len.filter(|&len| len != n) {
                return Err(SimError::WorkloadShape(format!(
                    "{name} must have one entry per request ({n}), got {len}"
                )));
            }
        }
        if self.hash_offsets.len() != n + 1 {
            return Err(SimError::WorkloadShape(format!(
                "hash_offsets must have {} entries (requests + 1), got {}",
                n + 1,
                self.hash_offsets.len()
            )));
        }
        if self.hash_offsets[0] != 0 || self.hash_offsets[n] != self.hash_ids.len() as u64 {
            return Err(SimError::WorkloadShape(format!(
                "hash_offsets must run from 0 to {} (the number of hash ids), got {}..{}",
                self.hash_ids.len(),
                self.hash_offsets[0],
                self.hash_offsets[n]
            )));
        }
        check_size(n as u64, self.hash_ids.len() as u64)?;
        if self.trace_block_size == 0 {
            return Err(SimError::WorkloadShape(
                "trace_block_size must be >= 1".into(),
            ));
        }
        let mut previous = f64::NEG_INFINITY;
        let mut seen: FxHashSet<i64> = FxHashSet::default();
        for i in 0..n {
            let bad = |message: String| {
                Err(SimError::Workload {
                    request: i,
                    message,
                })
            };
            let t = self.arrival_ms[i];
            if !t.is_finite() || t < previous {
                return bad(format!(
                    "arrival_ms must be finite and non-decreasing, got {t} after {}",
                    self.arrival_ms[i.saturating_sub(1)]
                ));
            }
            previous = t;
            if let Some(message) =
                past_time_bound("arrival_ms - first arrival", t - self.arrival_ms[0])
            {
                return bad(message);
            }
            if self.input_length[i] == 0 {
                return bad("input_length must be >= 1, got 0".into());
            }
            if self.output_length[i] == 0 {
                return bad("output_length must be >= 1, got 0".into());
            }
            let s = self.session.map_or(-1, |s| s[i]);
            if s < -1 {
                return bad(format!("session must be >= 0, or -1 for none, got {s}"));
            }
            let first_turn = s >= 0 && seen.insert(s);
            if let Some(d) = self.delay_ms.map(|d| d[i]).filter(|d| !d.is_nan()) {
                if !(d.is_finite() && d >= 0.0) {
                    return bad(format!("delay_ms must be >= 0 ms or NaN (unset), got {d}"));
                }
                if let Some(message) = past_time_bound("delay_ms", d) {
                    return bad(message);
                }
                if s < 0 {
                    return bad(format!(
                        "delay_ms applies between turns of a session, but this request has no \
                         session; got {d}"
                    ));
                }
                if first_turn {
                    return bad(format!(
                        "delay_ms: this request is the first turn of its session, which is sent \
                         at its arrival; expected NaN (no delay), got {d}"
                    ));
                }
            }
            let (lo, hi) = (self.hash_offsets[i], self.hash_offsets[i + 1]);
            if hi < lo {
                return bad(format!("hash_offsets decrease ({lo} then {hi})"));
            }
            if (hi - lo) * u64::from(self.trace_block_size) < u64::from(self.input_length[i]) {
                return bad(format!(
                    "{} hash ids cover {} tokens, fewer than input_length {}",
                    hi - lo,
                    (hi - lo) * u64::from(self.trace_block_size),
                    self.input_length[i]
                ));
            }
            if let Some(message) = too_many_ids(
                hi - lo,
                u64::from(self.input_length[i]),
                u64::from(self.trace_block_size),
                "input_length",
            ) {
                return bad(message);
            }
        }
        Ok(())
    }

    /// `Err` when the replay's clock would pass [`MAX_TIME_MS`] once arrivals and delays are
    /// divided by `speedup` (`cluster.arrival_speedup_ratio`; [`Self::validate`] checks them
    /// as they are): the message names the first request past it and the ratio.
    pub fn check_speedup(&self, speedup: f64) -> Result<()> {
        let (Some(&first), Some(&last)) = (self.arrival_ms.first(), self.arrival_ms.last()) else {
            return Ok(());
        };
        let scaled = |t: f64| t / speedup;
        let late = if scaled(last - first) > MAX_TIME_MS {
            let i = self
                .arrival_ms
                .partition_point(|&t| scaled(t - first) <= MAX_TIME_MS);
            Some((
                i,
                "(arrival_ms - first arrival)",
                scaled(self.arrival_ms[i] - first),
            ))
        } else {
            None
        };
        let long = self.delay_ms.and_then(|d| {
            d.iter()
                .position(|&x| scaled(x) > MAX_TIME_MS)
                .map(|i| (i, "delay_ms", scaled(d[i])))
        });
        match late.or(long) {
            Some((request, what, t)) => Err(SimError::Workload {
                request,
                message: past_time_bound(
                    &format!("{what} / cluster.arrival_speedup_ratio {speedup}"),
                    t,
                )
                .unwrap_or_default(),
            }),
            None => Ok(()),
        }
    }

    /// For each request, the next turn of its session (`u32::MAX`: none), and whether it is a
    /// later turn (sent when the previous one ends, not at its timestamp).
    pub fn session_turns(&self) -> (Vec<u32>, Vec<bool>) {
        let n = self.len();
        let mut next = vec![u32::MAX; n];
        let mut follows = vec![false; n];
        let Some(session) = self.session else {
            return (next, follows);
        };
        // The last turn seen of each session (looked up, never iterated).
        let mut last: FxHashMap<i64, u32> = FxHashMap::default();
        for (i, &s) in session.iter().enumerate() {
            if s < 0 {
                continue;
            }
            if let Some(prev) = last.insert(s, i as u32) {
                next[prev as usize] = i as u32;
                follows[i] = true;
            }
        }
        (next, follows)
    }
}

/// Why `count` hash ids are too many for a prompt of `input_length` tokens at
/// `trace_block_size` tokens per id (one id per started block: `ceil(input_length / size)`), or
/// `None`. A trace hashed at a smaller block size than it is read with has too many: replaying
/// it so would count reuse over the wrong tokens, so the message suggests the size the ids
/// imply. `length_key` names the length field.
pub fn too_many_ids(
    count: u64,
    input_length: u64,
    trace_block_size: u64,
    length_key: &str,
) -> Option<String> {
    let needed = input_length.div_ceil(trace_block_size.max(1));
    if count <= needed {
        return None;
    }
    let hint = match implied_block_size(count, input_length) {
        Some(size) => {
            format!("; the ids imply a trace block size of {size} (--trace-block-size {size})")
        }
        None => format!("; no trace block size gives {count} ids for {input_length} tokens"),
    };
    Some(format!(
        "too many hash ids: got {count}, but {length_key} {input_length} needs {needed} at \
         {trace_block_size} tokens per id{hint}"
    ))
}

/// A block size `b` with `ceil(input_length / b) == count` (`count` >= 1): a power of two if
/// one fits, as traces are hashed, else the smallest.
fn implied_block_size(count: u64, input_length: u64) -> Option<u64> {
    let lo = input_length.div_ceil(count);
    // ceil(L / b) == n  <=>  L / n <= b < L / (n - 1).
    let hi = match count {
        1 => u64::MAX,
        n => (input_length - 1) / (n - 1),
    };
    if lo > hi || lo == 0 {
        return None;
    }
    let power = lo.checked_next_power_of_two().filter(|&p| p <= hi);
    Some(power.unwrap_or(lo))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A workload over the given columns (no sessions).
    pub(crate) fn columns<'a>(
        ids: &'a [u64],
        offsets: &'a [u64],
        input: &'a [u32],
        output: &'a [u32],
        arrival: &'a [f64],
        tbs: u32,
    ) -> Workload<'a> {
        Workload {
            arrival_ms: arrival,
            input_length: input,
            output_length: output,
            hash_offsets: offsets,
            hash_ids: ids,
            trace_block_size: tbs,
            session: None,
            delay_ms: None,
        }
    }

    /// A trace hashed at 64 tokens per id read at 512: more ids than the prompt has blocks.
    #[test]
    fn more_hash_ids_than_blocks_suggest_the_implied_block_size() {
        // 1,000 tokens at 64 per id: ceil(1000 / 64) = 16 ids; at 512 it needs 2.
        let ids: Vec<u64> = (0..16).collect();
        let w = columns(&ids, &[0, 16], &[1000], &[1], &[0.0], 512);
        assert_eq!(
            w.validate().unwrap_err().to_string(),
            "workload request 0: too many hash ids: got 16, but input_length 1000 needs 2 at \
             512 tokens per id; the ids imply a trace block size of 64 (--trace-block-size 64)"
        );
        assert!(columns(&ids, &[0, 16], &[1000], &[1], &[0.0], 64)
            .validate()
            .is_ok());
        // 10 tokens: 1 per id gives 10 ids, 2 per id 5; nothing gives 9.
        let w = columns(&ids[..9], &[0, 9], &[10], &[1], &[0.0], 16);
        assert!(w
            .validate()
            .unwrap_err()
            .to_string()
            .ends_with("no trace block size gives 9 ids for 10 tokens"));
        // 100 tokens in 3 ids: sizes 34..=49 give 3; no power of two does, so 34.
        assert_eq!(implied_block_size(3, 100), Some(34));
        // 1,000 in 2: sizes 500..=999, and 512 is a power of two.
        assert_eq!(implied_block_size(2, 1000), Some(512));
        assert_eq!(implied_block_size(1, 7), Some(8));
    }

    #[test]
    fn sizes_past_the_limits_are_refused_naming_count_and_limit() {
        assert_eq!(check_size(MAX_REQUESTS, MAX_HASH_IDS), Ok(()));
        assert_eq!(
            check_size(MAX_REQUESTS + 1, 0).unwrap_err().to_string(),
            "workload: 100,000,001 requests, more than the 100,000,000 one workload may hold"
        );
        assert_eq!(
            check_size(1, 10_u64.pow(12)).unwrap_err().to_string(),
            "workload: 1,000,000,000,000 prompt hash ids, more than the 1,000,000,000 one \
             workload may hold"
        );
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn session_turns_link_rows_in_order() {
        let session = [0i64, -1, 0, 1, 0];
        let w = Workload {
            arrival_ms: &[0.0; 5],
            input_length: &[1; 5],
            output_length: &[1; 5],
            hash_offsets: &[0, 1, 2, 3, 4, 5],
            hash_ids: &[1, 2, 3, 4, 5],
            trace_block_size: 512,
            session: Some(&session),
            delay_ms: None,
        };
        w.validate().unwrap();
        let (next, follows) = w.session_turns();
        assert_eq!(next, [2, u32::MAX, 4, u32::MAX, u32::MAX]);
        assert_eq!(follows, [false, false, true, false, true]);
    }

    #[test]
    fn validation_names_the_row() {
        let w = columns(&[1, 2], &[0, 1, 2], &[512, 513], &[1, 1], &[0.0; 2], 512);
        let err = w.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "workload request 1: 1 hash ids cover 512 tokens, fewer than input_length 513"
        );
    }
    #[test]
    fn sparse_session_ids_link_turns() {
        let session = [1_000_000_000_000i64, -1, 1_000_000_000_000, 5];
        let delay = [f64::NAN, f64::NAN, 3.0, f64::NAN];
        let w = Workload {
            session: Some(&session),
            delay_ms: Some(&delay),
            ..columns(
                &[1, 2, 3, 4],
                &[0, 1, 2, 3, 4],
                &[1; 4],
                &[1; 4],
                &[0.0; 4],
                512,
            )
        };
        w.validate().unwrap();
        let (next, follows) = w.session_turns();
        assert_eq!(next, [2, u32::MAX, u32::MAX, u32::MAX]);
        assert_eq!(follows, [false, false, true, false]);
    }

    #[test]
    fn delays_belong_to_later_turns() {
        let ids = [1, 2];
        let check = |session: [i64; 2], delay: [f64; 2]| {
            let w = Workload {
                session: Some(&session),
                delay_ms: Some(&delay),
                ..columns(&ids, &[0, 1, 2], &[1; 2], &[1; 2], &[0.0; 2], 512)
            };
            w.validate().map_err(|e| e.to_string())
        };
        assert!(check([0, 0], [f64::NAN, 2.0]).is_ok());
        assert_eq!(
            check([0, 0], [1.0, f64::NAN]).unwrap_err(),
            "workload request 0: delay_ms: this request is the first turn of its session, \
             which is sent at its arrival; expected NaN (no delay), got 1"
        );
        assert!(check([-1, 0], [f64::NAN, 0.0])
            .unwrap_err()
            .contains("first turn"));
        assert!(check([0, -1], [f64::NAN, 4.0])
            .unwrap_err()
            .contains("request 1: delay_ms applies between turns of a session"));
        assert!(check([0, 0], [f64::NAN, -1.0])
            .unwrap_err()
            .contains(">= 0 ms"));
        assert!(check([0, -2], [f64::NAN; 2])
            .unwrap_err()
            .contains("got -2"));
    }

    #[test]
    fn times_past_the_clock_resolution_are_refused() {
        // 2^43 ms is the bound itself; one ms more is past it.
        let at = |last: f64| {
            columns(&[1, 2], &[0, 1, 2], &[1; 2], &[1; 2], &[5.0, last], 512)
                .validate()
                .map_err(|e| e.to_string())
        };
        assert!(at(5.0 + MAX_TIME_MS).is_ok());
        assert_eq!(
            at(6.0 + MAX_TIME_MS).unwrap_err(),
            "workload request 1: arrival_ms - first arrival = 8.796093022209e12 ms is past \
             8,796,093,022,208 ms (2^43 ms, about 278 years), beyond which the replay's clock \
             (f64 ms) no longer resolves a microsecond and step times round away"
        );
        // 1e303 ms: what a rate of 1e-300 requests/s gives.
        assert!(at(1e303).unwrap_err().contains("= 1e303 ms is past"));
        // Divided by a speedup below 1, arrivals within the bound may pass it.
        let w = columns(
            &[1, 2, 3],
            &[0, 1, 2, 3],
            &[1; 3],
            &[1; 3],
            &[0.0, 1e6, 1e12],
            512,
        );
        assert!(w.validate().is_ok() && w.check_speedup(1.0).is_ok());
        assert_eq!(
            w.check_speedup(1e-6).unwrap_err().to_string(),
            "workload request 2: (arrival_ms - first arrival) / cluster.arrival_speedup_ratio \
             0.000001 = 1e18 ms is past 8,796,093,022,208 ms (2^43 ms, about 278 years), beyond \
             which the replay's clock (f64 ms) no longer resolves a microsecond and step times \
             round away"
        );
        let session = [0i64, 0];
        let delay = [f64::NAN, 1e13];
        let w = Workload {
            session: Some(&session),
            delay_ms: Some(&delay),
            ..columns(&[1, 2], &[0, 1, 2], &[1; 2], &[1; 2], &[0.0; 2], 512)
        };
        assert!(w
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("workload request 1: delay_ms = 1e13 ms is past"));
    }

    #[test]
    fn session_columns_must_cover_every_request() {
        let session = [0i64];
        let w = Workload {
            session: Some(&session),
            ..columns(&[1, 2], &[0, 1, 2], &[1; 2], &[1; 2], &[0.0; 2], 512)
        };
        assert_eq!(
            w.validate().unwrap_err().to_string(),
            "workload: session must have one entry per request (2), got 1"
        );
    }
}
