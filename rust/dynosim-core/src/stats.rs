//! Exact summary statistics: mean, spread and linearly interpolated percentiles (numpy's
//! default method) over plain or run-length weighted samples, and a bounded CDF to draw.

use serde::Serialize;

use crate::prefetch;

/// Samples with multiplicities. Equal consecutive values merge, which keeps inter-token
/// latencies compact: every request decoding in one pass sees the same gap.
#[derive(Debug, Clone, Default)]
pub struct WeightedSamples {
    /// Runs in chunks of `CHUNK`, each written once: one vector doubling to millions of runs
    /// copied them at every doubling and faulted fresh pages in each time. `sealed` are full;
    /// `current` is being written.
    sealed: Vec<Vec<(f64, u64)>>,
    current: Vec<(f64, u64)>,
}

/// Equal values pushed in a row, not yet in a [`WeightedSamples`]: a loop pushing one
/// sample per request reaches the samples once per run of equal ones instead of once a
/// sample, each push waiting on the store of the one before. The runs come out as pushing
/// each value would make them.
#[derive(Debug, Clone, Copy)]
pub struct PendingRun {
    value: f64,
    count: u64,
}

impl Default for PendingRun {
    /// Empty: NaN equals no value, so the first push starts a run without a check of its own.
    fn default() -> Self {
        PendingRun {
            value: f64::NAN,
            count: 0,
        }
    }
}

/// Runs per chunk of [`WeightedSamples`]; a multiple of 8 (see [`Distribution::from_runs`]).
const CHUNK: usize = 1 << 14;

impl WeightedSamples {
    pub fn push(&mut self, value: f64) {
        self.push_n(value, 1);
    }

    /// Push `value` `count` times (nothing when `count` is 0).
    #[inline(always)]
    pub fn push_n(&mut self, value: f64, count: u64) {
        match self.current.last_mut() {
            _ if count == 0 => {}
            Some((v, c)) if *v == value => *c += count,
            _ => {
                if self.current.len() == CHUNK {
                    self.seal();
                }
                self.current.push((value, count));
            }
        }
    }

    /// Push `value` through `run`, which gathers equal values pushed in a row (see
    /// [`PendingRun`]).
    #[inline(always)]
    pub fn push_via(&mut self, run: &mut PendingRun, value: f64) {
        if run.value == value {
            run.count += 1;
        } else {
            self.push_n(run.value, run.count);
            *run = PendingRun { value, count: 1 };
        }
    }

    /// Push what `run` still holds.
    #[inline(always)]
    pub fn flush(&mut self, run: PendingRun) {
        self.push_n(run.value, run.count);
    }

    #[cold]
    #[inline(never)]
    fn seal(&mut self) {
        let full = std::mem::replace(&mut self.current, Vec::with_capacity(CHUNK));
        self.sealed.push(full);
    }

    /// The runs in order, as parts of `CHUNK` runs but the last.
    fn parts(&self) -> Vec<&[(f64, u64)]> {
        let sealed = self.sealed.iter().map(Vec::as_slice);
        sealed.chain([self.current.as_slice()]).collect()
    }

    /// The runs in order.
    fn runs(&self) -> impl Iterator<Item = &(f64, u64)> {
        self.sealed.iter().flatten().chain(&self.current)
    }

    pub fn count(&self) -> u64 {
        self.runs().map(|r| r.1).sum()
    }

    /// The distribution of all samples pushed so far.
    pub fn distribution(&mut self) -> Distribution {
        Distribution::from_runs(&self.parts(), None)
    }

    /// The CDF of all samples pushed so far, in log-spaced bins (see [`Cdf`]): a pass of its
    /// own, the reference `summarise` is tested against.
    pub fn cdf(&self) -> Cdf {
        let mut bins = CdfBins::default();
        let mut max = f64::NEG_INFINITY;
        for &(v, c) in self.runs() {
            bins.add(v, c);
            max = max.max(v);
        }
        bins.finish(max)
    }

    /// The distribution and the CDF together, the CDF's bins filled in the distribution's
    /// first pass over the samples (one pass over millions of gaps instead of two).
    pub fn summarise(&self) -> (Distribution, Cdf) {
        let mut bins = CdfBins::default();
        let d = Distribution::from_runs(&self.parts(), Some(&mut bins));
        // The distribution's maximum is the CDF's: the bins need not track it run by run.
        let max = d.max.unwrap_or(f64::NEG_INFINITY);
        (d, bins.finish(max))
    }
}

/// Mantissa bits a [`Cdf`] bin keeps: 16 bins per factor of two, neighbouring points at most
/// 2^-4 = 6.25 % apart.
const CDF_MANTISSA_BITS: u32 = 4;
const CDF_SHIFT: u32 = 52 - CDF_MANTISSA_BITS;
/// Bins of the positive samples: every bit pattern below the sign bit.
const CDF_BINS: usize = 1 << (63 - CDF_SHIFT);

/// The share of samples at or below each of a bounded number of values, to draw the CDF of
/// millions of samples at a fixed size. A positive sample falls into the bin of its binary
/// exponent and leading 4 mantissa bits, `[2^e (1 + j/16), 2^e (1 + (j+1)/16))`, read off its
/// bits without a logarithm (one bin for samples <= 0, shown at 0); each non-empty bin gives
/// its upper edge and the share of samples below it, the last point the exact maximum. Empty
/// without samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cdf {
    pub ms: Vec<f64>,
    pub share: Vec<f64>,
}

/// The bins of a [`Cdf`] as samples arrive.
struct CdfBins {
    /// By the top bits of a positive sample: for positive finite doubles the order of the bits
    /// is the order of the values, so bin k holds the samples whose top bits are k. An array
    /// of fixed size: a bin's index, masked to it, needs no bounds check.
    bins: Box<[u64; CDF_BINS]>,
    zero: u64,
    total: u64,
}

impl Default for CdfBins {
    fn default() -> Self {
        CdfBins {
            bins: vec![0; CDF_BINS].try_into().unwrap(),
            zero: 0,
            total: 0,
        }
    }
}

impl CdfBins {
    #[inline(always)]
    fn add(&mut self, v: f64, c: u64) {
        if v > 0.0 {
            // A positive sample's sign bit is clear: the mask changes no index.
            self.bins[(v.to_bits() >> CDF_SHIFT) as usize & (CDF_BINS - 1)] += c;
        } else {
            self.zero += c;
        }
        self.total += c;
    }

    /// The CDF of the samples added, whose maximum is `max` (it caps the last edge).
    fn finish(self, max: f64) -> Cdf {
        let mut cdf = Cdf::default();
        let total = self.total as f64;
        let mut seen = self.zero;
        if seen > 0 {
            cdf.ms.push(0.0);
            cdf.share.push(seen as f64 / total);
        }
        for (k, &count) in self.bins.iter().enumerate() {
            if count > 0 {
                seen += count;
                let edge = f64::from_bits((k as u64 + 1) << CDF_SHIFT);
                cdf.ms.push(edge.min(max));
                cdf.share.push(seen as f64 / total);
            }
        }
        cdf
    }
}

/// Summary of a sample set; every field is `None` when there are no samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Distribution {
    pub count: u64,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub p50: Option<f64>,
    pub p75: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

impl Distribution {
    /// Summarise plain samples; NaN samples are skipped (a metric a request does not have).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Distribution {
        // Plain samples, not runs of one: half the memory for millions of requests, and the
        // same arithmetic (a count of one multiplies exactly).
        let values: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        Distribution::from_runs(&[&values], None)
    }

    /// [`Distribution::of`] the samples of `column` at `rows` (distinct indices, ascending).
    /// When the rows are all of them and none is NaN (a long replay's usual case) the column
    /// is summarised where it is: the copy would be as large as it (80 MB at 10 M requests).
    pub fn of_rows(column: &[f64], rows: &[u32]) -> Distribution {
        if rows.len() == column.len() && !column.iter().any(|x| x.is_nan()) {
            return Distribution::from_runs(&[column], None);
        }
        Distribution::of(rows.iter().map(|&i| column[i as usize]))
    }

    /// Summarise runs in any order, held in `parts` read as one sequence: every part but the
    /// last as long as the first, a multiple of 8. Only the twelve order statistics needed
    /// are found (a radix select), not the whole order: sorting millions of inter-token gaps
    /// used to dominate the report.
    fn from_runs<R: Run>(parts: &[&[R]], mut cdf: Option<&mut CdfBins>) -> Distribution {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len == 0 {
            return Distribution::default();
        }
        let stride = parts[0].len();
        debug_assert!(parts.len() == 1 || stride % 8 == 0);
        debug_assert!(parts[..parts.len() - 1].iter().all(|p| p.len() == stride));
        // Buckets span the key range of a sample: the exact range would take a pass of its
        // own. Keys outside it fall into the end buckets, which costs time only. Picks are
        // pseudo-random (xorshift): a stride can alias with periodic data.
        let (lo, hi) = if len <= SAMPLE {
            key_range(parts.iter().flat_map(|p| p.iter()).map(|r| key(r.value())))
        } else {
            let mut x = 0x9E37_79B9_7F4A_7C15_u64;
            key_range((0..SAMPLE).map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % len as u64) as usize;
                key(parts[i / stride][i % stride].value())
            }))
        };
        let buckets = Buckets::new(lo, hi, len);

        // Pass 1: sum and histogram. Each run's bucket (below 2^16) is kept: gathering then
        // reads 2 bytes a run instead of the run, and u16 indices into 2^16-entry tables need
        // no bounds checks.
        let mut hist: Box<[u64; 1 << 16]> = vec![0; 1 << 16].try_into().unwrap();
        let mut sum = 0.0;
        let mut in_bucket: Vec<u16> = Vec::with_capacity(len);
        // The runs were written long before: the sweeps ask for them ahead.
        for (k, part) in parts.iter().enumerate() {
            if let Some(next) = parts.get(k + 1) {
                prefetch::prefetch_start(next);
            }
            in_bucket.extend(part.iter().enumerate().map(|(i, r)| {
                prefetch::ahead(part, i);
                let (v, c) = r.run();
                sum += v * c as f64;
                if let Some(bins) = cdf.as_deref_mut() {
                    bins.add(v, c);
                }
                let b = buckets.of(key(v)) as u16;
                hist[usize::from(b)] += c;
                b
            }));
        }
        let n: u64 = hist.iter().sum();
        let total = n as f64;
        let mean = sum / total;
        // Pass 2: four partial sums of squares run in parallel (in a fixed order).
        let square = |r: &R| {
            let (v, c) = r.run();
            (v - mean) * (v - mean) * c as f64
        };
        // Lanes by position in the whole sequence: parts before the last are multiples of 4.
        let mut squares = [0.0; 4];
        for (k, part) in parts.iter().enumerate() {
            if let Some(next) = parts.get(k + 1) {
                prefetch::prefetch_start(next);
            }
            let mut chunks = part.chunks_exact(4);
            for (j, chunk) in (&mut chunks).enumerate() {
                prefetch::ahead(part, 4 * j);
                for (s, r) in squares.iter_mut().zip(chunk) {
                    *s += square(r);
                }
            }
            for (s, r) in squares.iter_mut().zip(chunks.remainder()) {
                *s += square(r);
            }
        }
        let var = squares.iter().sum::<f64>() / total;

        // numpy's `linear` percentile: position (n - 1) * p between its two neighbours. The
        // extremes are order statistics too (the first and last bucket may hold keys
        // outside the sampled range).
        let positions = PERCENTILES.map(|p| {
            let pos = (n - 1) as f64 * p;
            let rank = pos.floor() as u64;
            (rank, pos - rank as f64)
        });
        let mut ranks: Vec<u64> = positions
            .iter()
            .flat_map(|&(rank, frac)| [rank, rank + u64::from(frac != 0.0)])
            .chain([0, n - 1])
            .map(|rank| rank.min(n - 1))
            .collect();
        ranks.sort_unstable();
        ranks.dedup();

        // Pass 3: gather the runs in the buckets holding the ranks.
        let wanted = locate(&hist[..], &ranks);
        let slot: Box<[u8; 1 << 16]> = slots(&wanted, 1 << 16).try_into().unwrap();
        let mut gathered = vec![Vec::new(); wanted.len()];
        // Few runs are wanted: test eight at a time, without a branch each (parts before the
        // last are multiples of 8).
        let mut at = 0;
        for part in parts {
            let bs = &in_bucket[at..at + part.len()];
            at += part.len();
            for (bs, rs) in bs.chunks(8).zip(part.chunks(8)) {
                if bs.iter().fold(0, |any, &b| any | slot[usize::from(b)]) == 0 {
                    continue;
                }
                for (&b, r) in bs.iter().zip(rs) {
                    let (v, c) = r.run();
                    if let Some(s) = slot[usize::from(b)].checked_sub(1) {
                        push_run(&mut gathered[usize::from(s)], key(v), c);
                    }
                }
            }
        }
        let mut keys = vec![0; ranks.len()];
        select_in_parts(&gathered, &wanted, &ranks, &mut keys);

        let at = |rank: u64| value(keys[ranks.binary_search(&rank.min(n - 1)).unwrap()]);
        let [p50, p75, p90, p95, p99] = positions.map(|(rank, frac)| {
            let a = at(rank);
            Some(if frac == 0.0 {
                a
            } else {
                a + (at(rank + 1) - a) * frac
            })
        });
        Distribution {
            count: n,
            mean: Some(mean),
            std: Some(var.sqrt()),
            min: Some(at(0)),
            max: Some(at(n - 1)),
            p50,
            p75,
            p90,
            p95,
            p99,
        }
    }
}

const PERCENTILES: [f64; 5] = [0.50, 0.75, 0.90, 0.95, 0.99];

/// A value with its multiplicity: a run of equal samples, or one plain sample.
trait Run: Copy {
    fn run(&self) -> (f64, u64);

    #[inline(always)]
    fn value(&self) -> f64 {
        self.run().0
    }
}

impl Run for (f64, u64) {
    #[inline(always)]
    fn run(&self) -> (f64, u64) {
        *self
    }
}

impl Run for f64 {
    #[inline(always)]
    fn run(&self) -> (f64, u64) {
        (*self, 1)
    }
}

/// Order-preserving map of a float to an integer (radsort's): positives get the sign bit set,
/// negatives have every bit flipped. Order statistics are found on keys, so -0.0 ranks
/// below +0.0 exactly as when sorting.
fn key(v: f64) -> u64 {
    let bits = v.to_bits();
    bits ^ (((bits as i64 >> 63) as u64) | (1 << 63))
}

fn value(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 {
        key ^ (1 << 63)
    } else {
        !key
    })
}

/// Runs sampled to place the first level's buckets.
const SAMPLE: usize = 1024;
/// At most this many runs are sorted outright, cheaper than a histogram.
const SORT_MAX: usize = 64;
/// Histogram buckets per level, at most 2^this (a 512 KiB histogram). The first level
/// keeps bucket indices as u16.
const MAX_BUCKET_BITS: u32 = 16;

/// Keys split by their leading bits below the common prefix of `lo..=hi`, into about one
/// bucket per run. Keys outside `lo..=hi` fall into the end buckets.
struct Buckets {
    lo: u64,
    shift: u32,
    last: usize,
}

/// A bucket holding some of the wanted ranks: its index, the samples before it, and the
/// index of its first rank.
type Wanted = (usize, u64, usize);

impl Buckets {
    fn new(lo: u64, hi: u64, runs: usize) -> Buckets {
        let bits = (usize::BITS - runs.leading_zeros()).min(MAX_BUCKET_BITS);
        let shift = (u64::BITS - (hi - lo).leading_zeros()).saturating_sub(bits);
        let last = ((hi - lo) >> shift) as usize;
        Buckets { lo, shift, last }
    }

    fn of(&self, key: u64) -> usize {
        ((key.saturating_sub(self.lo) >> self.shift) as usize).min(self.last)
    }

    /// Samples per bucket of (key, count) runs.
    fn histogram(&self, runs: impl Iterator<Item = (u64, u64)>) -> Vec<u64> {
        let mut hist = vec![0; self.last + 1];
        for (k, c) in runs {
            hist[self.of(k)] += c;
        }
        hist
    }

    /// The runs in each wanted bucket.
    fn gather(
        &self,
        runs: impl Iterator<Item = (u64, u64)>,
        wanted: &[Wanted],
    ) -> Vec<Vec<(u64, u64)>> {
        let slot = slots(wanted, self.last + 1);
        let mut parts = vec![Vec::new(); wanted.len()];
        for (k, c) in runs {
            if let Some(s) = slot[self.of(k)].checked_sub(1) {
                push_run(&mut parts[usize::from(s)], k, c);
            }
        }
        parts
    }
}

/// Appends a run to a part, merged into the last one if of equal key: concentrated data
/// then gathers little.
fn push_run(part: &mut Vec<(u64, u64)>, key: u64, count: u64) {
    match part.last_mut() {
        Some((last, c)) if *last == key => *c += count,
        _ => part.push((key, count)),
    }
}

fn key_range(keys: impl Iterator<Item = u64>) -> (u64, u64) {
    keys.fold((u64::MAX, 0), |(lo, hi), k| (lo.min(k), hi.max(k)))
}

/// Per bucket, its part + 1 among `wanted`, or 0. At most twelve ranks: parts fit a byte.
fn slots(wanted: &[Wanted], buckets: usize) -> Vec<u8> {
    let mut slot = vec![0; buckets];
    for (s, w) in wanted.iter().enumerate() {
        slot[w.0] = s as u8 + 1;
    }
    slot
}

/// The buckets of `hist` that hold `ranks` (ascending, below the total count).
fn locate(hist: &[u64], ranks: &[u64]) -> Vec<Wanted> {
    let mut wanted: Vec<Wanted> = Vec::new();
    let (mut b, mut before) = (0, 0);
    for (i, &rank) in ranks.iter().enumerate() {
        while before + hist[b] <= rank {
            before += hist[b];
            b += 1;
        }
        if wanted.last().is_none_or(|w| w.0 != b) {
            wanted.push((b, before, i));
        }
    }
    wanted
}

/// Sets `out[i]` to the key at 0-based position `ranks[i]` of all runs, given the runs of
/// the wanted buckets as gathered.
fn select_in_parts(parts: &[Vec<(u64, u64)>], wanted: &[Wanted], ranks: &[u64], out: &mut [u64]) {
    for (s, (part, &(_, before, first))) in parts.iter().zip(wanted).enumerate() {
        let end = wanted.get(s + 1).map_or(ranks.len(), |w| w.2);
        let within: Vec<u64> = ranks[first..end].iter().map(|r| r - before).collect();
        select(part, &within, &mut out[first..end]);
    }
}

/// Sets `out[i]` to the key at 0-based position `ranks[i]` (ascending, below the total
/// count) of the expanded (key, count) runs.
fn select(runs: &[(u64, u64)], ranks: &[u64], out: &mut [u64]) {
    let (lo, hi) = key_range(runs.iter().map(|r| r.0));
    if lo == hi {
        out.fill(lo);
        return;
    }
    if runs.len() <= SORT_MAX {
        let mut sorted = runs.to_vec();
        sorted.sort_unstable_by_key(|r| r.0);
        let (mut runs, mut seen, mut k) = (sorted.into_iter(), 0, 0);
        for (o, &rank) in out.iter_mut().zip(ranks) {
            while seen <= rank {
                let (next, c) = runs.next().expect("rank below the total count");
                (seen, k) = (seen + c, next);
            }
            *o = k;
        }
        return;
    }
    // Every level narrows the key range by the bucket count, down to single keys.
    let buckets = Buckets::new(lo, hi, runs.len());
    let wanted = locate(&buckets.histogram(runs.iter().copied()), ranks);
    let parts = buckets.gather(runs.iter().copied(), &wanted);
    select_in_parts(&parts, &wanted, ranks, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cdf_bins_are_log_spaced_and_end_at_the_maximum() {
        // 1 = 2^0 (1 + 0/16): bin [1, 1.0625); 2 = 2^1: bin [2, 2.125); 10 = 2^3 (1 + 4/16):
        // bin [10, 10.5), shown at the maximum 10. Shares 2/4, 3/4, 4/4.
        let mut s = WeightedSamples::default();
        s.push_n(1.0, 2);
        s.push(2.0);
        s.push(10.0);
        let cdf = s.cdf();
        assert_eq!(cdf.share, vec![0.5, 0.75, 1.0]);
        assert_eq!(cdf.ms, vec![1.0625, 2.125, 10.0]);
        // A gap of 0 ms has its own point at 0; no samples, no points.
        let mut z = WeightedSamples::default();
        z.push(0.0);
        z.push(3.0);
        assert_eq!(z.cdf().ms[0], 0.0);
        assert_eq!(WeightedSamples::default().cdf(), Cdf::default());
        assert_eq!(WeightedSamples::default().summarise().1, Cdf::default());
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        // numpy.percentile([1, 2, 3, 4], [50, 75, 90, 99]) == [2.5, 3.25, 3.7, 3.97]
        let d = Distribution::of([4.0, 1.0, 3.0, 2.0]);
        assert_eq!(d.p50, Some(2.5));
        assert_eq!(d.p75, Some(3.25));
        assert!((d.p90.unwrap() - 3.7).abs() < 1e-12);
        assert!((d.p99.unwrap() - 3.97).abs() < 1e-12);
        assert_eq!(d.mean, Some(2.5));
        assert!((d.std.unwrap() - 1.25f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn weighted_runs_equal_expanded_samples() {
        let mut w = WeightedSamples::default();
        let values = [5.0, 5.0, 5.0, 1.0, -1.0, 9.0, 5.0];
        for v in values {
            w.push(v);
        }
        assert_eq!(w.count(), 7);
        let (a, b) = (w.distribution(), Distribution::of(values));
        // Order statistics are exact; sums differ only in rounding (weights vs repeats).
        assert_eq!(
            (a.count, a.min, a.max, a.p50, a.p90, a.p99),
            (b.count, b.min, b.max, b.p50, b.p90, b.p99)
        );
        assert!((a.mean.unwrap() - b.mean.unwrap()).abs() < 1e-12);
        assert!((a.std.unwrap() - b.std.unwrap()).abs() < 1e-12);
    }

    /// The previous implementation: sort every run (`total_cmp` orders like the keys), then
    /// walk to each rank.
    fn sorted_oracle(runs: &[(f64, u64)]) -> Distribution {
        let mut runs = runs.to_vec();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let n: u64 = runs.iter().map(|r| r.1).sum();
        if n == 0 {
            return Distribution::default();
        }
        let at_rank = |rank: u64| {
            let mut seen = 0;
            runs.iter()
                .find(|r| {
                    seen += r.1;
                    rank < seen
                })
                .unwrap()
                .0
        };
        let q = |p: f64| {
            let pos = (n - 1) as f64 * p;
            let lo = pos.floor() as u64;
            let frac = pos - lo as f64;
            let a = at_rank(lo);
            Some(if frac == 0.0 {
                a
            } else {
                a + (at_rank(lo + 1) - a) * frac
            })
        };
        let total = n as f64;
        let mean = runs.iter().map(|&(v, c)| v * c as f64).sum::<f64>() / total;
        let var = runs
            .iter()
            .map(|&(v, c)| (v - mean) * (v - mean) * c as f64);
        Distribution {
            count: n,
            mean: Some(mean),
            std: Some((var.sum::<f64>() / total).sqrt()),
            min: Some(runs[0].0),
            max: Some(runs[runs.len() - 1].0),
            p50: q(0.50),
            p75: q(0.75),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
        }
    }

    fn assert_matches_oracle(runs: &[(f64, u64)]) {
        let mut w = WeightedSamples::default();
        for &(v, c) in runs {
            w.push_n(v, c);
        }
        let flat: Vec<(f64, u64)> = w.parts().concat();
        let (got, want) = (w.distribution(), sorted_oracle(&flat));
        // Plain samples give, bit for bit, what runs of one each give (means and spreads too).
        let ones: Vec<(f64, u64)> = runs.iter().map(|r| (r.0, 1)).collect();
        let plain = Distribution::of(runs.iter().map(|r| r.0));
        let all_bits = |d: &Distribution| {
            let f = [
                d.mean, d.std, d.min, d.max, d.p50, d.p75, d.p90, d.p95, d.p99,
            ];
            (d.count, f.map(|x| x.map(f64::to_bits)))
        };
        assert_eq!(
            all_bits(&plain),
            all_bits(&Distribution::from_runs(&[&ones], None))
        );
        let bits = |d: &Distribution| {
            let f = [d.min, d.max, d.p50, d.p75, d.p90, d.p95, d.p99];
            (d.count, f.map(|x| x.map(f64::to_bits)))
        };
        assert_eq!(bits(&got), bits(&want), "{got:?} != {want:?}");
        // The one-pass summary gives the same distribution, and the CDF its own pass gives.
        let (together, cdf) = w.summarise();
        assert_eq!(bits(&together), bits(&got));
        assert_eq!(cdf, w.cdf());
        // Sums run in another order: allow rounding relative to the terms' size (mean |v|),
        // not to a result that cancellation made tiny. When that size overflows, whether a
        // sum overflows too depends on the order.
        let scale = flat.iter().map(|&(v, c)| v.abs() * c as f64).sum::<f64>() / got.count as f64;
        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => {
                a == b
                    || !scale.is_finite()
                    || (a - b).abs() <= 1e-12 * scale.max(a.abs()).max(b.abs())
            }
            (a, b) => a == b,
        };
        assert!(close(got.mean, want.mean), "{got:?} != {want:?}");
        assert!(close(got.std, want.std), "{got:?} != {want:?}");
    }

    /// Chunked runs summarise, bit for bit, as the same runs in one slice (the sums too: the
    /// order and the lanes of the squares are the same).
    #[test]
    fn chunked_runs_summarise_as_one_sequence() {
        let mut w = WeightedSamples::default();
        let mut x = 7u64;
        for i in 0..(2 * CHUNK + 1234) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            // Some equal neighbours, which merge into one run.
            let v = if i % 5 == 0 {
                3.0
            } else {
                5.0 + (x >> 40) as f64 / 1e4
            };
            w.push_n(v, 1 + x % 3);
        }
        assert_eq!(w.sealed.len(), 2);
        assert!(w.sealed.iter().all(|c| c.len() == CHUNK));
        let flat: Vec<(f64, u64)> = w.parts().concat();
        let all_bits = |d: &Distribution| {
            let f = [
                d.mean, d.std, d.min, d.max, d.p50, d.p75, d.p90, d.p95, d.p99,
            ];
            (d.count, f.map(|x| x.map(f64::to_bits)))
        };
        let one = Distribution::from_runs(&[&flat], None);
        let (chunked, cdf) = w.summarise();
        assert_eq!(all_bits(&chunked), all_bits(&one));
        assert_eq!(all_bits(&w.distribution()), all_bits(&one));
        assert_eq!(
            all_bits(&sorted_oracle(&flat)).1[2..],
            all_bits(&one).1[2..]
        );
        assert_eq!(cdf, w.cdf());
        assert_eq!(w.count(), flat.iter().map(|r| r.1).sum::<u64>());
    }

    #[test]
    fn edge_cases_match_sorting() {
        assert_matches_oracle(&[]);
        assert_matches_oracle(&[(3.5, 1)]);
        assert_matches_oracle(&[(-2.0, 1), (7.0, 1)]);
        assert_matches_oracle(&[(0.0, 1), (-0.0, 1), (-0.0, 3), (0.0, 2)]);
        assert_matches_oracle(&[(-1e300, 1), (1e300, 1), (f64::MIN_POSITIVE, 5)]);
        // All equal, in many runs and with counts whose total exceeds 2^53.
        assert_matches_oracle(&vec![(4.25, 1 << 50); 1000]);
        let mixed: Vec<(f64, u64)> = (0..5000)
            .map(|i| (f64::from(i % 7), 1 + i as u64 % 3))
            .collect();
        assert_matches_oracle(&mixed);
    }

    /// A value of one of four kinds, from random bits (per-element strategy unions are slow).
    fn sample_value(kind: u8, bits: u64) -> f64 {
        match kind {
            // Few distinct values: many ties, also across non-adjacent runs.
            0 => [-1.5, -0.0, 0.0, 0.5, 2.0, 3.5, 7.0][bits as usize % 7],
            // Neighbouring floats: select must resolve them down to the last bit.
            1 => f64::from_bits(100.0f64.to_bits() + bits % 40),
            // ITL-like gaps.
            2 => 5.0 + 195.0 * (bits >> 11) as f64 / (1u64 << 53) as f64,
            // Any finite value of either sign (a clear top exponent bit rules out inf/NaN).
            _ => f64::from_bits(bits & !(1 << 62)),
        }
    }

    proptest! {
        #[test]
        fn matches_sorting(
            // Which kinds of value and whether some counts are huge vary per case, so that
            // some cases cluster tightly (many bucket boundaries) and some spread widely.
            kinds in 1u8..16,
            huge in any::<bool>(),
            runs in prop::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 0..2500),
        ) {
            let kinds: Vec<u8> = (0..4).filter(|k| kinds >> k & 1 == 1).collect();
            let runs: Vec<(f64, u64)> = runs
                .into_iter()
                .map(|(kind, bits, c)| {
                    let count = if huge && c % 8 == 0 { 1 + (c >> 3) % (1 << 40) } else { 1 + c % 8 };
                    (sample_value(kinds[kind as usize % kinds.len()], bits), count)
                })
                .collect();
            assert_matches_oracle(&runs);
        }

        /// Pushing through a pending run leaves the runs pushing each value leaves, wherever
        /// the pending runs are flushed (values from a few, zeros of both signs and NaN among
        /// them).
        #[test]
        fn pending_runs_push_as_single_values(
            steps in prop::collection::vec((0u8..5, any::<bool>()), 0..300),
        ) {
            let values = [0.0, -0.0, 1.5, 2.0, f64::NAN];
            let (mut one_by_one, mut gathered) = (WeightedSamples::default(), WeightedSamples::default());
            let mut run = PendingRun::default();
            for &(k, flush) in &steps {
                one_by_one.push(values[usize::from(k)]);
                gathered.push_via(&mut run, values[usize::from(k)]);
                if flush {
                    gathered.flush(std::mem::take(&mut run));
                }
            }
            gathered.flush(run);
            let bits = |s: &WeightedSamples| {
                s.runs().map(|&(v, c)| (v.to_bits(), c)).collect::<Vec<_>>()
            };
            prop_assert_eq!(bits(&one_by_one), bits(&gathered));
        }
    }

    #[test]
    fn rows_of_a_column_summarise_as_their_samples() {
        let column = [4.0, 1.0, 7.5, 3.0, 2.0];
        let bits = |d: Distribution| format!("{d:?}");
        let of = |rows: &[u32]| bits(Distribution::of(rows.iter().map(|&i| column[i as usize])));
        // Every row and no NaN: the column itself is summarised, as its copy would be.
        assert_eq!(
            bits(Distribution::of_rows(&column, &[0, 1, 2, 3, 4])),
            of(&[0, 1, 2, 3, 4])
        );
        // Some rows: only theirs (p50 of 4, 7.5, 2 is 4, not the column's 3).
        let some = Distribution::of_rows(&column, &[0, 2, 4]);
        assert_eq!((some.count, some.p50), (3, Some(4.0)));
        assert_eq!(bits(some), of(&[0, 2, 4]));
        // Every row but a NaN among them: it is skipped, not summarised in place.
        let holed = [4.0, f64::NAN, 7.5];
        let d = Distribution::of_rows(&holed, &[0, 1, 2]);
        assert_eq!((d.count, d.mean), (2, Some(5.75)));
        assert_eq!(
            bits(Distribution::of_rows(&[], &[])),
            bits(Distribution::default())
        );
    }

    #[test]
    fn empty_and_nan_samples() {
        assert_eq!(Distribution::of([]), Distribution::default());
        let d = Distribution::of([f64::NAN, 2.0]);
        assert_eq!((d.count, d.min, d.max), (1, Some(2.0), Some(2.0)));
    }
}
