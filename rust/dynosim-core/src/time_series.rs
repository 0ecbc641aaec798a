//! Quantities over simulated time, kept in a bounded number of buckets.
//!
//! A replay's state (queue depth, running requests, KV blocks, link rates) is a step function
//! of the virtual clock. Each bucket keeps, per column, the time integral of the value (for the
//! mean), its minimum and its maximum, so a spike shorter than a bucket stays visible. Buckets
//! start `sample_interval_ms` wide; when the span needs more than [`MAX_BUCKETS`] of them, the
//! width doubles and neighbouring buckets merge. Memory is therefore proportional to the
//! columns, never to the simulated span: a trace whose rows lie a year apart costs what a
//! one-minute trace costs.

/// Most buckets a series holds.
pub const MAX_BUCKETS: usize = 2048;

/// How many columns a series has: one value, or one per worker, link, ... (a table even
/// when there is only one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Scalar,
    Columns(usize),
}

impl Shape {
    pub fn columns(self) -> usize {
        match self {
            Shape::Scalar => 1,
            Shape::Columns(n) => n,
        }
    }
}

/// Named groups of columns sharing one bucket grid.
#[derive(Debug, Clone, Default)]
pub struct TimeSeries {
    /// The bucket width the report asked for (ms).
    pub sample_interval_ms: f64,
    /// The bucket width in use (ms): `sample_interval_ms` times a power of two.
    width_ms: f64,
    /// Time up to which values were observed (ms).
    end_ms: f64,
    /// Per column, the value it has held since `held_from_ms`, not in the buckets yet: most
    /// observations change a few columns, and a column's unchanged run is one segment.
    held: Vec<f64>,
    held_from_ms: Vec<f64>,
    /// Each series' name and shape, in the order `record` takes values.
    series: Vec<(&'static str, Shape)>,
    columns: usize,
    /// Row-major `[bucket][column]`: value x ms, minimum, maximum.
    integral: Vec<f64>,
    min: Vec<f64>,
    max: Vec<f64>,
    /// The bucket the latest segment ended in: most segments lie inside it.
    open: OpenBucket,
}

/// A bucket `b` that exists, with the segments `[from, to)` that [`TimeSeries::add_spanning`]
/// would put into it alone, whole: `from_lo <= from <= from_hi` and `to <= to_hi`. The bounds
/// come from that method's own float arithmetic (the edges `b * w` and `(b + 1) * w`, `from / w`
/// rounding down to at most `b`, `to / w` rounding up to at most `b + 1`), so the shortcut adds
/// what it would, bit for bit, even a hair from an edge.
#[derive(Debug, Clone, Copy)]
struct OpenBucket {
    index: usize,
    from_lo: f64,
    from_hi: f64,
    to_hi: f64,
}

impl OpenBucket {
    /// No bucket: no segment passes its bounds.
    const NONE: OpenBucket = OpenBucket {
        index: usize::MAX,
        from_lo: f64::INFINITY,
        from_hi: f64::NEG_INFINITY,
        to_hi: f64::NEG_INFINITY,
    };

    /// Bucket `b` of width `w`.
    fn new(b: usize, w: f64) -> OpenBucket {
        let (lo, hi) = (b as f64 * w, (b + 1) as f64 * w);
        let mut from_hi = hi;
        while (from_hi / w) as usize > b {
            from_hi = below(from_hi);
        }
        let mut to_hi = hi;
        while ceil_index(to_hi / w) > b + 1 {
            to_hi = below(to_hi);
        }
        OpenBucket {
            index: b,
            // A `from` at or above `lo` whose quotient rounds below `b` gives the bucket
            // before a span <= 0 there: nothing is added to it.
            from_lo: lo,
            from_hi,
            to_hi,
        }
    }
}

impl Default for OpenBucket {
    fn default() -> Self {
        OpenBucket::NONE
    }
}

/// One series over the buckets, row-major `[bucket][column]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    pub shape: Shape,
    pub mean: Vec<f64>,
    pub min: Vec<f64>,
    pub max: Vec<f64>,
}

impl TimeSeries {
    /// Empty series named with their shapes, buckets `sample_interval_ms` wide (> 0).
    pub fn new(sample_interval_ms: f64, series: Vec<(&'static str, Shape)>) -> Self {
        let columns = series.iter().map(|s| s.1.columns()).sum();
        TimeSeries {
            sample_interval_ms,
            width_ms: sample_interval_ms,
            end_ms: 0.0,
            held: Vec::new(),
            held_from_ms: Vec::new(),
            series,
            columns,
            integral: Vec::new(),
            min: Vec::new(),
            max: Vec::new(),
            open: OpenBucket::NONE,
        }
    }

    /// Observe that every column held `values` (all series' columns in order) from the last
    /// observation until `to_ms`.
    pub fn observe(&mut self, to_ms: f64, values: &[f64]) {
        debug_assert_eq!(values.len(), self.columns);
        let from = self.end_ms;
        if to_ms <= from {
            return;
        }
        if self.held.is_empty() {
            self.held = values.to_vec();
            self.held_from_ms = vec![from; values.len()];
        } else {
            for (k, &v) in values.iter().enumerate() {
                if v != self.held[k] {
                    self.add(k, self.held_from_ms[k], from, self.held[k]);
                    self.held[k] = v;
                    self.held_from_ms[k] = from;
                }
            }
        }
        self.end_ms = to_ms;
    }

    /// `observe` when only the columns `changed` (ascending) may differ from the values last
    /// observed: the others are not compared. The buckets come out as `observe` makes them,
    /// bit for bit (each column's segments are added in the same order).
    pub fn observe_changed(&mut self, to_ms: f64, values: &[f64], changed: &[usize]) {
        debug_assert_eq!(values.len(), self.columns);
        debug_assert!(changed.windows(2).all(|w| w[0] < w[1]));
        if self.held.is_empty() || to_ms <= self.end_ms {
            return self.observe(to_ms, values);
        }
        let from = self.end_ms;
        for &k in changed {
            let v = values[k];
            if v != self.held[k] {
                self.add(k, self.held_from_ms[k], from, self.held[k]);
                self.held[k] = v;
                self.held_from_ms[k] = from;
            }
        }
        debug_assert!(values == self.held, "a column changed without being named");
        self.end_ms = to_ms;
    }

    /// Columns of all series together.
    pub fn columns(&self) -> usize {
        self.columns
    }

    /// Close the series at `end_ms` with `values` as the state since the last observation. A
    /// replay that spans no time gets one bucket holding that instant's state.
    pub fn finish(&mut self, end_ms: f64, values: &[f64]) {
        self.observe(end_ms, values);
        let end = self.end_ms;
        for k in 0..self.held.len() {
            self.add(k, self.held_from_ms[k], end, self.held[k]);
        }
        self.held_from_ms.fill(end);
        if self.integral.is_empty() {
            self.grow(1);
            self.min.copy_from_slice(values);
            self.max.copy_from_slice(values);
        }
    }

    /// Put `value`, held by column `k` over `[from_ms, to_ms)`, into the buckets.
    #[inline]
    fn add(&mut self, k: usize, from_ms: f64, to_ms: f64, value: f64) {
        let open = self.open;
        if from_ms >= open.from_lo && from_ms <= open.from_hi && to_ms <= open.to_hi {
            // Inside the open bucket, as `add_spanning` would find (see `OpenBucket`).
            if from_ms < to_ms {
                let i = open.index * self.columns + k;
                self.integral[i] += value * (to_ms - from_ms);
                self.min[i] = self.min[i].min(value);
                self.max[i] = self.max[i].max(value);
            }
            return;
        }
        self.add_spanning(k, from_ms, to_ms, value);
    }

    /// `add` for any segment: across buckets, past the buckets held, or past the width.
    #[cold]
    #[inline(never)]
    fn add_spanning(&mut self, k: usize, from_ms: f64, to_ms: f64, value: f64) {
        if to_ms <= from_ms {
            return;
        }
        // One quotient serves the width check and the last bucket.
        let mut end = to_ms / self.width_ms;
        while end > MAX_BUCKETS as f64 {
            self.coarsen();
            end = to_ms / self.width_ms;
        }
        let w = self.width_ms;
        let first = (from_ms / w) as usize;
        let last = ceil_index(end).clamp(first + 1, MAX_BUCKETS);
        self.grow(last);
        let c = self.columns;
        for b in first..last {
            let span = to_ms.min((b + 1) as f64 * w) - from_ms.max(b as f64 * w);
            if span > 0.0 {
                let i = b * c + k;
                self.integral[i] += value * span;
                self.min[i] = self.min[i].min(value);
                self.max[i] = self.max[i].max(value);
            }
        }
        if self.open.index != last - 1 {
            self.open = OpenBucket::new(last - 1, w);
        }
    }

    /// Width of the buckets in use (ms).
    pub fn interval_ms(&self) -> f64 {
        self.width_ms
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.integral.len() / self.columns.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start of each bucket (ms).
    pub fn time_ms(&self) -> Vec<f64> {
        (0..self.len()).map(|b| b as f64 * self.width_ms).collect()
    }

    /// Each series by name with its buckets; the mean is over the part of a bucket the replay
    /// covered (the last bucket may end early).
    pub fn series(&self) -> Vec<(&'static str, Buckets)> {
        let n = self.len();
        let c = self.columns;
        let mut out = Vec::with_capacity(self.series.len());
        let mut offset = 0;
        for &(name, shape) in &self.series {
            let cols = shape.columns();
            let mut b = Buckets {
                shape,
                mean: Vec::with_capacity(n * cols),
                min: Vec::with_capacity(n * cols),
                max: Vec::with_capacity(n * cols),
            };
            for row in 0..n {
                let covered =
                    self.end_ms.min((row + 1) as f64 * self.width_ms) - row as f64 * self.width_ms;
                for k in offset..offset + cols {
                    let i = row * c + k;
                    b.mean.push(if covered > 0.0 {
                        self.integral[i] / covered
                    } else {
                        self.min[i]
                    });
                    b.min.push(self.min[i]);
                    b.max.push(self.max[i]);
                }
            }
            offset += cols;
            out.push((name, b));
        }
        out
    }

    /// One series by name (`None` if there is none).
    pub fn get(&self, name: &str) -> Option<Buckets> {
        self.series()
            .into_iter()
            .find_map(|(n, b)| (n == name).then_some(b))
    }

    #[inline]
    fn grow(&mut self, buckets: usize) {
        let len = buckets * self.columns;
        if self.integral.len() < len {
            self.grow_to(len);
        }
    }

    /// `grow` past the buckets held: once per bucket over a replay.
    #[cold]
    #[inline(never)]
    fn grow_to(&mut self, len: usize) {
        self.integral.resize(len, 0.0);
        self.min.resize(len, f64::INFINITY);
        self.max.resize(len, f64::NEG_INFINITY);
    }

    /// Double the bucket width, merging buckets `2i` and `2i + 1` into `i`.
    fn coarsen(&mut self) {
        let c = self.columns;
        let n = self.len();
        let merged = n.div_ceil(2);
        for i in 0..merged {
            for k in 0..c {
                let (a, b) = (2 * i * c + k, (2 * i + 1) * c + k);
                let (sum, lo, hi) = if 2 * i + 1 < n {
                    (
                        self.integral[a] + self.integral[b],
                        self.min[a].min(self.min[b]),
                        self.max[a].max(self.max[b]),
                    )
                } else {
                    (self.integral[a], self.min[a], self.max[a])
                };
                self.integral[i * c + k] = sum;
                self.min[i * c + k] = lo;
                self.max[i * c + k] = hi;
            }
        }
        self.integral.truncate(merged * c);
        self.min.truncate(merged * c);
        self.max.truncate(merged * c);
        self.width_ms *= 2.0;
        self.open = OpenBucket::NONE;
    }
}

/// The largest double below `x`, a positive finite double (`f64::next_down` needs Rust 1.86).
#[inline]
fn below(x: f64) -> f64 {
    debug_assert!(x > 0.0 && x.is_finite());
    f64::from_bits(x.to_bits() - 1)
}

/// `q.ceil() as usize` for `q` from 0 to [`MAX_BUCKETS`] (or NaN, giving 0 as the cast
/// does): exact there, and without the C library's `ceil`, which x86-64 without SSE4.1 calls.
#[inline(always)]
fn ceil_index(q: f64) -> usize {
    let whole = q as usize;
    whole + usize::from((whole as f64) < q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_step_inside_one_bucket_keeps_its_mean_min_and_max() {
        // 10 ms buckets; 1 over [0, 4), 5 over [4, 6), 2 over [6, 10), 3 over [10, 15).
        let mut s = TimeSeries::new(10.0, vec![("x", Shape::Scalar)]);
        s.observe(4.0, &[1.0]);
        s.observe(6.0, &[5.0]);
        s.observe(10.0, &[2.0]);
        s.finish(15.0, &[3.0]);
        let x = s.get("x").unwrap();
        assert_eq!(s.time_ms(), vec![0.0, 10.0]);
        // Bucket 0: (1*4 + 5*2 + 2*4) / 10 = 2.2; bucket 1 covers 5 ms of value 3.
        assert_eq!(x.mean, vec![2.2, 3.0]);
        assert_eq!(x.min, vec![1.0, 3.0]);
        assert_eq!(x.max, vec![5.0, 3.0]);
    }

    #[test]
    fn a_long_span_doubles_the_width_instead_of_growing() {
        // A year of 1 ms buckets would be 3.2e10 of them; the width doubles until <= 2048 fit.
        let year_ms = 365.0 * 86_400_000.0;
        let mut s = TimeSeries::new(1.0, vec![("x", Shape::Columns(2))]);
        s.observe(1.0, &[7.0, 1.0]);
        s.finish(year_ms, &[0.0, 1.0]);
        assert!(s.len() <= MAX_BUCKETS);
        assert!(s.interval_ms() >= year_ms / MAX_BUCKETS as f64);
        let x = s.get("x").unwrap();
        // The 1 ms spike of 7 survives in the first bucket's max; column 1 is 1 throughout.
        assert_eq!(x.max[0], 7.0);
        assert_eq!(x.min[0], 0.0);
        assert!(x
            .mean
            .iter()
            .skip(1)
            .step_by(2)
            .all(|&m| (m - 1.0).abs() < 1e-12));
    }

    #[test]
    fn an_instant_replay_has_one_bucket_with_its_state() {
        let mut s = TimeSeries::new(1000.0, vec![("a", Shape::Scalar), ("b", Shape::Scalar)]);
        s.finish(0.0, &[3.0, 4.0]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.get("b").unwrap().mean, vec![4.0]);
    }

    /// Where `(b + 1) * w / w` rounds past `b + 1` (about one bucket edge in twenty), the
    /// general path puts a segment ending on the edge partly into the next bucket, or drops
    /// one starting a hair below it; the shortcut must do the same.
    #[test]
    fn the_shortcut_rounds_at_bucket_edges_as_the_general_path_does() {
        let mut awkward = 0;
        for i in 0..400 {
            let w = 0.013 + f64::from(i) * 0.1237;
            for b in 0..40usize {
                let (lo, hi) = (b as f64 * w, (b + 1) as f64 * w);
                awkward += usize::from(hi / w > (b + 1) as f64 || lo / w < b as f64);
                let mid = lo + w / 2.0;
                let mut fast = TimeSeries::new(w, vec![("x", Shape::Scalar)]);
                let mut general = fast.clone();
                // Open bucket b first, then segments ending and starting at its edges.
                let segments = [
                    (mid, mid + w / 8.0, 1.0),
                    (lo, mid, 2.0),
                    (mid, hi, 3.0),
                    (hi.next_down(), hi, 4.0),
                    (hi.next_down().next_down(), hi.next_down(), 5.0),
                    (mid, hi.next_down(), 6.0),
                ];
                for (from, to, value) in segments {
                    fast.add(0, from, to, value);
                    general.add_spanning(0, from, to, value);
                }
                let bits = |s: &TimeSeries| {
                    [&s.integral, &s.min, &s.max]
                        .map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                };
                assert_eq!(bits(&fast), bits(&general), "w {w}, bucket {b}");
            }
        }
        assert!(
            awkward > 100,
            "only {awkward} awkward edges: the widths test little"
        );
    }

    proptest! {
        /// Naming only the columns that changed gives the buckets full observations give, bit
        /// for bit, coarsening included (the fast path the replay's sampler takes).
        #[test]
        fn observing_the_changed_columns_equals_observing_all(
            steps in prop::collection::vec(
                (0.0f64..3e5, prop::collection::vec(prop::option::of(0u32..4), 3), any::<u8>()),
                1..300,
            ),
            interval in 0.01f64..50.0,
        ) {
            let names = vec![("a", Shape::Scalar), ("b", Shape::Columns(2))];
            let (mut full, mut sparse) =
                (TimeSeries::new(interval, names.clone()), TimeSeries::new(interval, names));
            let (mut t, mut values) = (0.0, vec![0.0; 3]);
            for (dt, set, extra) in &steps {
                t += dt;
                // The sampler names every column it set, changed or not, and no other.
                let mut changed = Vec::new();
                for (k, v) in set.iter().enumerate() {
                    if let Some(v) = v {
                        values[k] = f64::from(*v);
                        changed.push(k);
                    } else if extra >> k & 1 == 1 {
                        changed.push(k);
                    }
                }
                full.observe(t, &values);
                sparse.observe_changed(t, &values, &changed);
            }
            full.finish(t + 1.0, &values);
            sparse.finish(t + 1.0, &values);
            let bits = |s: &TimeSeries| {
                s.series().into_iter().map(|(_, b)| {
                    [b.mean, b.min, b.max].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                }).collect::<Vec<_>>()
            };
            prop_assert_eq!(full.interval_ms(), sparse.interval_ms());
            prop_assert_eq!(bits(&full), bits(&sparse));
        }

        /// Segments put in through the open bucket's shortcut land as the general path puts
        /// them, bit for bit: ends on and a few ulps either side of bucket edges, segments
        /// within, across and past the buckets held, coarsening included.
        #[test]
        fn the_open_bucket_shortcut_adds_what_the_general_path_adds(
            segments in prop::collection::vec(
                (
                    0usize..3,
                    prop::sample::select(vec![0u32, 0, 0, 1, 2, 700]),
                    (-3i32..=3, 0u32..3),
                    (-3i32..=3, 0u32..3, 0u32..3),
                    -1.0f64..9.0,
                ),
                1..300,
            ),
            interval in 0.01f64..50.0,
        ) {
            // A point near edge `b`: on it, `ulps` away, and a third of a bucket in per `part`.
            let at = |b: u32, ulps: i32, part: u32| {
                let mut x = f64::from(b) * interval + f64::from(part) * interval / 3.0;
                for _ in 0..ulps.unsigned_abs() {
                    x = if ulps > 0 { x.next_up() } else { x.next_down() };
                }
                x.max(0.0)
            };
            let names = vec![("a", Shape::Scalar), ("b", Shape::Columns(2))];
            let (mut fast, mut general) =
                (TimeSeries::new(interval, names.clone()), TimeSeries::new(interval, names));
            // Segments start where the last one did or a little later, as the sampler's do.
            let mut b = 0;
            for &(k, step, (ulps, part), (ulps_to, part_to, buckets), value) in &segments {
                b += step;
                let from = at(b, ulps, part);
                let to = at(b + buckets, ulps_to, part_to);
                fast.add(k, from, to, value);
                general.add_spanning(k, from, to, value);
            }
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(fast.interval_ms(), general.interval_ms());
            prop_assert_eq!(bits(&fast.integral), bits(&general.integral));
            prop_assert_eq!(bits(&fast.min), bits(&general.min));
            prop_assert_eq!(bits(&fast.max), bits(&general.max));
        }

        /// The bucket index rounding up is `f64::ceil`'s over the whole range it serves.
        #[test]
        fn ceil_index_is_ceil(q in 0.0f64..=MAX_BUCKETS as f64, whole in 0usize..=MAX_BUCKETS) {
            prop_assert_eq!(ceil_index(q), q.ceil() as usize);
            // Whole numbers and their neighbours, where rounding up could go wrong.
            let w = whole as f64;
            for x in [w, w.next_up(), w.next_down().max(0.0)] {
                prop_assert_eq!(ceil_index(x), x.ceil() as usize);
            }
        }

        /// Whatever the steps, buckets stay bounded, each mean lies within its min and max, and
        /// the integral over all buckets equals the integral of the steps.
        #[test]
        fn buckets_conserve_the_integral(
            steps in prop::collection::vec((0.0f64..1e6, 0u32..100), 1..200),
            interval in 0.001f64..100.0,
        ) {
            let mut s = TimeSeries::new(interval, vec![("x", Shape::Scalar)]);
            let (mut t, mut area) = (0.0, 0.0);
            for &(dt, v) in &steps {
                s.observe(t + dt, &[f64::from(v)]);
                area += dt * f64::from(v);
                t += dt;
            }
            s.finish(t, &[0.0]);
            prop_assert!(s.len() <= MAX_BUCKETS);
            let x = s.get("x").unwrap();
            let w = s.interval_ms();
            let mut total = 0.0;
            for b in 0..s.len() {
                prop_assert!(x.min[b] <= x.mean[b] + 1e-9 && x.mean[b] <= x.max[b] + 1e-9);
                let covered = t.min((b + 1) as f64 * w) - b as f64 * w;
                total += x.mean[b] * covered.max(0.0);
            }
            prop_assert!((total - area).abs() <= 1e-9 * area.max(1.0));
        }
    }
}
