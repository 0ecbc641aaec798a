//! The columnar request table a replay reads, borrowed from the caller (numpy arrays in Python),
//! and the prefix identity of its KV blocks.

use crate::error::{Result, SimError};

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
        if self.trace_block_size == 0 {
            return Err(SimError::WorkloadShape(
                "trace_block_size must be >= 1".into(),
            ));
        }
        let mut previous = 0.0_f64;
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
                    "arrival_ms must be finite and non-decreasing, got {t} after {previous}"
                ));
            }
            previous = t;
            if self.input_length[i] == 0 {
                return bad("input_length must be >= 1, got 0".into());
            }
            if self.output_length[i] == 0 {
                return bad("output_length must be >= 1, got 0".into());
            }
            if let Some(d) = self.delay_ms.map(|d| d[i]) {
                if !(d.is_nan() || (d.is_finite() && d >= 0.0)) {
                    return bad(format!("delay_ms must be >= 0 ms or NaN (unset), got {d}"));
                }
            }
            if let Some(s) = self.session.map(|s| s[i]) {
                if s < -1 {
                    return bad(format!("session must be >= 0, or -1 for none, got {s}"));
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
        }
        Ok(())
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
        let mut last: Vec<u32> = Vec::new();
        for (i, &s) in session.iter().enumerate() {
            if s < 0 {
                continue;
            }
            let s = s as usize;
            if s >= last.len() {
                last.resize(s + 1, u32::MAX);
            }
            if last[s] != u32::MAX {
                next[last[s] as usize] = i as u32;
                follows[i] = true;
            }
            last[s] = i as u32;
        }
        (next, follows)
    }

    /// Chained identities of the full engine blocks of request `i`'s prompt, written to `out`.
    ///
    /// Token `t` of the prompt is identified by the trace hash id of its trace block; engine block
    /// `k` (tokens `k*bs..(k+1)*bs`) is identified by its parent's identity and the runs of trace
    /// ids it covers, so two requests share block `k` exactly when they share every token up to
    /// its end. A partial last block gets no identity: it belongs to its request.
    pub fn block_hashes(&self, i: usize, block_size: u32, out: &mut Vec<u64>) {
        out.clear();
        let ids = self.hashes(i);
        let (bs, tbs) = (u64::from(block_size), u64::from(self.trace_block_size));
        let full_blocks = u64::from(self.input_length[i]) / bs;
        out.reserve(full_blocks as usize);
        let mut chain = CHAIN_SEED;
        // Walk trace block `j` (ending at token `boundary`) alongside: no division per block.
        let (mut j, mut boundary) = (0, tbs);
        for k in 0..full_blocks {
            let (mut pos, end) = (k * bs, (k + 1) * bs);
            while pos < end {
                let run_end = end.min(boundary);
                chain = mix(chain, ids[j], run_end - pos);
                pos = run_end;
                if pos == boundary {
                    j += 1;
                    boundary += tbs;
                }
            }
            out.push(chain);
        }
    }
}

const CHAIN_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// A 64-bit mix of a parent identity with one run (trace id, token count); SplitMix64's
/// finaliser keeps chains of equal runs apart.
fn mix(parent: u64, id: u64, run: u64) -> u64 {
    let mut z = parent ^ id.wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ run.rotate_left(47);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_requests<'a>(
        ids: &'a [u64],
        offsets: &'a [u64],
        input: &'a [u32],
        tbs: u32,
    ) -> Workload<'a> {
        Workload {
            arrival_ms: &[0.0, 0.0],
            input_length: input,
            output_length: &[1, 1],
            hash_offsets: offsets,
            hash_ids: ids,
            trace_block_size: tbs,
            session: None,
            delay_ms: None,
        }
    }

    #[test]
    fn shared_trace_prefix_gives_shared_engine_blocks() {
        // Request 0: ids [7, 8]; request 1: ids [7, 9]; 512-token trace blocks, 64-token engine blocks.
        let w = two_requests(&[7, 8, 7, 9], &[0, 2, 4], &[1024, 1000], 512);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        w.block_hashes(0, 64, &mut a);
        w.block_hashes(1, 64, &mut b);
        assert_eq!(a.len(), 16);
        assert_eq!(b.len(), 15); // 1000 / 64 full blocks
        assert_eq!(a[..8], b[..8]);
        assert!(a[8..15].iter().zip(&b[8..15]).all(|(x, y)| x != y));
        // Blocks inside one trace block are still distinct (their chains differ).
        let mut distinct = a.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), a.len());
    }

    #[test]
    fn engine_block_spanning_two_trace_blocks() {
        // Trace block 4 tokens, engine block 6: block 0 covers id0 x4 + id1 x2.
        let w = two_requests(&[1, 2, 3, 1, 2, 4], &[0, 3, 6], &[12, 12], 4);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        w.block_hashes(0, 6, &mut a);
        w.block_hashes(1, 6, &mut b);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]); // tokens 8..12 differ (id 3 vs 4)
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
        let w = two_requests(&[1, 2], &[0, 1, 2], &[512, 513], 512);
        let err = w.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "workload request 1: 1 hash ids cover 512 tokens, fewer than input_length 513"
        );
    }
}
