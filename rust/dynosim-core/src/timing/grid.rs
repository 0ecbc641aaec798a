//! A value tabulated on a grid of D axes: multilinear inside, linear extrapolation past the edges
//! (from the outermost segment), constant along an axis of one point, never below 0.

/// The segment of `axis` to interpolate on for `v`, and the weight of its upper end (outside
/// [0, 1] when extrapolating).
fn segment(axis: &[f64], v: f64) -> (usize, f64) {
    if axis.len() == 1 {
        return (0, 0.0);
    }
    let i = axis.partition_point(|&a| a <= v).clamp(1, axis.len() - 1) - 1;
    (i, (v - axis[i]) / (axis[i + 1] - axis[i]))
}

/// Values on the product of `D` strictly increasing axes (validated by the configuration),
/// stored row-major: the last axis varies fastest.
#[derive(Debug, Clone)]
pub struct Grid<const D: usize> {
    axes: [Vec<f64>; D],
    values: Vec<f64>,
}

impl<const D: usize> Grid<D> {
    /// A grid over `axes` holding `values` in row-major order (`D` <= 3).
    pub fn new(axes: [&[f64]; D], values: Vec<f64>) -> Self {
        debug_assert!(D <= 3);
        debug_assert_eq!(
            values.len(),
            axes.iter().map(|a| a.len()).product::<usize>()
        );
        Grid {
            axes: axes.map(|a| a.to_vec()),
            values,
        }
    }

    /// The value at point `x`. Corners are reduced one axis after the other, the first axis
    /// first, so a 2-D grid computes exactly what the bilinear formula of earlier releases did.
    pub fn at(&self, x: [f64; D]) -> f64 {
        let mut lower = [0usize; D];
        let mut upper = [0usize; D];
        let mut weight = [0.0f64; D];
        for d in 0..D {
            let (i, w) = segment(&self.axes[d], x[d]);
            lower[d] = i;
            upper[d] = (i + 1).min(self.axes[d].len() - 1);
            weight[d] = w;
        }
        // Corner c takes the upper index on axis d when bit d of c is set.
        let mut v = [0.0f64; 8];
        for (c, slot) in v.iter_mut().enumerate().take(1 << D) {
            let mut flat = 0;
            for d in 0..D {
                let i = if c >> d & 1 == 1 { upper[d] } else { lower[d] };
                flat = flat * self.axes[d].len() + i;
            }
            *slot = self.values[flat];
        }
        for (d, w) in weight.iter().enumerate() {
            let step = 1 << d;
            for c in 0..1 << D {
                if c & step == 0 {
                    v[c] += (v[c | step] - v[c]) * w;
                }
            }
        }
        v[0].max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plane() -> Grid<2> {
        // z = 10 + 2x + 3y + xy on x in {0, 10}, y in {1, 3}: bilinear reproduces it exactly.
        let f = |x: f64, y: f64| 10.0 + 2.0 * x + 3.0 * y + x * y;
        Grid::new(
            [&[0.0, 10.0], &[1.0, 3.0]],
            vec![f(0.0, 1.0), f(0.0, 3.0), f(10.0, 1.0), f(10.0, 3.0)],
        )
    }

    #[test]
    fn bilinear_inside_the_grid() {
        let g = plane();
        assert_eq!(g.at([0.0, 1.0]), 13.0); // a corner
        assert_eq!(g.at([5.0, 2.0]), 10.0 + 10.0 + 6.0 + 10.0); // the centre: 36
        assert_eq!(g.at([2.5, 1.0]), 10.0 + 5.0 + 3.0 + 2.5);
    }

    #[test]
    fn linear_extrapolation_past_the_edges() {
        let g = plane();
        // x = 20 extends the x segment: z(20, 1) = 10 + 40 + 3 + 20 = 73.
        assert_eq!(g.at([20.0, 1.0]), 73.0);
        // y = 5 at x = 0: 10 + 15 = 25.
        assert_eq!(g.at([0.0, 5.0]), 25.0);
        // Far below the grid the line would go negative (10 - 200 + 3 - 100): latency stays 0.
        assert_eq!(g.at([-100.0, 1.0]), 0.0);
    }

    #[test]
    fn single_point_axis_is_constant_along_it() {
        let g = Grid::new([&[4.0], &[1.0, 2.0]], vec![5.0, 7.0]);
        assert_eq!(g.at([0.0, 1.5]), 6.0);
        assert_eq!(g.at([1000.0, 2.0]), 7.0);
        let one = Grid::new([&[4.0], &[8.0]], vec![9.5]);
        assert_eq!(one.at([123.0, 0.5]), 9.5);
    }

    #[test]
    fn one_and_three_axes() {
        let line = Grid::new([&[0.0, 2.0, 4.0]], vec![1.0, 5.0, 6.0]);
        assert_eq!(line.at([1.0]), 3.0);
        assert_eq!(line.at([5.0]), 6.5); // the last segment extended: 6 + 0.5 x 1
                                         // w = x + 10 y + 100 z on the unit cube is trilinear, so exact anywhere.
        let f = |x: f64, y: f64, z: f64| x + 10.0 * y + 100.0 * z;
        let mut values = Vec::new();
        for x in [0.0, 1.0] {
            for y in [0.0, 1.0] {
                for z in [0.0, 1.0] {
                    values.push(f(x, y, z));
                }
            }
        }
        let cube = Grid::new([&[0.0, 1.0], &[0.0, 1.0], &[0.0, 1.0]], values);
        assert_eq!(cube.at([0.5, 0.25, 0.75]), 0.5 + 2.5 + 75.0);
        assert_eq!(cube.at([2.0, 0.0, 0.0]), 2.0);
    }
}
