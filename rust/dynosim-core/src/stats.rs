//! Exact summary statistics: mean, spread and linearly interpolated percentiles (numpy's
//! default method) over plain or run-length weighted samples.

use serde::Serialize;

/// Samples with multiplicities. Equal consecutive values merge, which keeps inter-token
/// latencies compact: every request decoding in one pass sees the same gap.
#[derive(Debug, Clone, Default)]
pub struct WeightedSamples {
    runs: Vec<(f64, u64)>,
}

impl WeightedSamples {
    pub fn push(&mut self, value: f64) {
        match self.runs.last_mut() {
            Some((v, count)) if *v == value => *count += 1,
            _ => self.runs.push((value, 1)),
        }
    }

    pub fn count(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }

    /// The distribution of all samples pushed so far (sorts them in place).
    pub fn distribution(&mut self) -> Distribution {
        // Radix sort: millions of inter-token gaps sort several times faster than by compare.
        radsort::sort_by_key(&mut self.runs, |r| r.0);
        Distribution::from_sorted_runs(&self.runs)
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
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        radsort::sort(&mut v);
        let runs: Vec<(f64, u64)> = v.into_iter().map(|x| (x, 1)).collect();
        Distribution::from_sorted_runs(&runs)
    }

    fn from_sorted_runs(runs: &[(f64, u64)]) -> Distribution {
        let n: u64 = runs.iter().map(|r| r.1).sum();
        if n == 0 {
            return Distribution::default();
        }
        let total = n as f64;
        let mean = runs.iter().map(|&(v, c)| v * c as f64).sum::<f64>() / total;
        let var = runs
            .iter()
            .map(|&(v, c)| (v - mean) * (v - mean) * c as f64)
            .sum::<f64>()
            / total;
        let q = |p: f64| Some(quantile(runs, n, p));
        Distribution {
            count: n,
            mean: Some(mean),
            std: Some(var.sqrt()),
            min: Some(runs[0].0),
            max: Some(runs[runs.len() - 1].0),
            p50: q(0.50),
            p75: q(0.75),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
        }
    }
}

/// Value at sorted position `rank` (0-based) of the expanded runs.
fn at_rank(runs: &[(f64, u64)], rank: u64) -> f64 {
    let mut seen = 0;
    for &(v, c) in runs {
        seen += c;
        if rank < seen {
            return v;
        }
    }
    runs[runs.len() - 1].0
}

/// numpy's `linear` percentile: position (n - 1) * p between its two neighbours.
fn quantile(runs: &[(f64, u64)], n: u64, p: f64) -> f64 {
    let pos = (n - 1) as f64 * p;
    let lo = pos.floor() as u64;
    let frac = pos - lo as f64;
    let a = at_rank(runs, lo);
    if frac == 0.0 {
        return a;
    }
    let b = at_rank(runs, lo + 1);
    a + (b - a) * frac
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn empty_and_nan_samples() {
        assert_eq!(Distribution::of([]), Distribution::default());
        let d = Distribution::of([f64::NAN, 2.0]);
        assert_eq!((d.count, d.min, d.max), (1, Some(2.0), Some(2.0)));
    }
}
