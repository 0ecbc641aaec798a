//! A trace's rows in arrival order: a stable sort by timestamp (file order kept among equal
//! timestamps), and which rows the file had out of that order. Every trace reader orders its
//! rows by this one rule.

use std::cmp::Ordering;

/// Rows that arrive earlier than some row above them in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Late {
    /// How many rows.
    pub rows: usize,
    /// The first of them, as its row index in the file.
    pub first: usize,
}

/// The rows of timestamps `times` (file order) in arrival order: their indices, and the rows
/// that were late; `None` when the rows already are in arrival order (the common case, which
/// allocates nothing). Timestamps are finite (the readers check), so they compare totally.
pub fn arrival_order<T: PartialOrd + Copy>(times: &[T]) -> Option<(Vec<u32>, Late)> {
    let mut latest = *times.first()?;
    let mut late: Option<Late> = None;
    for (i, &t) in times.iter().enumerate().skip(1) {
        if t < latest {
            let l = late.get_or_insert(Late { rows: 0, first: i });
            l.rows += 1;
        } else if t > latest {
            latest = t;
        }
    }
    let late = late?;
    // Request indices fit u32 (a workload holds at most `MAX_REQUESTS`); the readers check the
    // count before they sort.
    let mut order: Vec<u32> = (0..times.len() as u32).collect();
    // `sort_by` is stable: equal timestamps keep file order.
    order.sort_by(|&a, &b| {
        times[a as usize]
            .partial_cmp(&times[b as usize])
            .unwrap_or(Ordering::Equal)
    });
    Some((order, late))
}

/// `column` in the order `order` gives.
pub fn take<T: Copy>(column: &[T], order: &[u32]) -> Vec<T> {
    order.iter().map(|&i| column[i as usize]).collect()
}

/// CSR rows (row `i` owns `ids[offsets[i]..offsets[i + 1]]`) in the order `order` gives:
/// the new offsets and ids.
pub fn take_rows(offsets: &[u64], ids: &[u64], order: &[u32]) -> (Vec<u64>, Vec<u64>) {
    let mut new_offsets = Vec::with_capacity(order.len() + 1);
    let mut new_ids = Vec::with_capacity(ids.len());
    new_offsets.push(0);
    for &i in order {
        let i = i as usize;
        new_ids.extend_from_slice(&ids[offsets[i] as usize..offsets[i + 1] as usize]);
        new_offsets.push(new_ids.len() as u64);
    }
    (new_offsets, new_ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_in_order_are_left_as_they_are() {
        assert_eq!(arrival_order::<f64>(&[]), None);
        assert_eq!(arrival_order(&[1.0, 1.0, 2.0, 5.0]), None);
    }

    #[test]
    fn late_rows_are_counted_against_the_latest_row_above() {
        // 3.0 is late against 4.0 (not against 2.0 just above it); 4.0 again is not late.
        let times = [1.0, 4.0, 2.0, 3.0, 4.0, 0.5];
        let (order, late) = arrival_order(&times).unwrap();
        assert_eq!(late, Late { rows: 3, first: 2 });
        // Stable: the two 4.0 rows keep file order (1 before 4).
        assert_eq!(order, vec![5, 0, 2, 3, 1, 4]);
    }

    #[test]
    fn integer_timestamps_sort_exactly() {
        // Nanosecond stamps past 2**53 differ by one; as f64 they would tie.
        let base = 1_700_000_000_000_000_001_i64;
        let (order, late) = arrival_order(&[base + 1, base]).unwrap();
        assert_eq!((order, late), (vec![1, 0], Late { rows: 1, first: 1 }));
    }

    #[test]
    fn rows_move_with_their_ids() {
        // Row 0 owns [7, 8], row 1 owns [], row 2 owns [9].
        let (offsets, ids) = take_rows(&[0, 2, 2, 3], &[7, 8, 9], &[2, 0, 1]);
        assert_eq!((offsets, ids), (vec![0, 1, 3, 3], vec![9, 7, 8]));
        assert_eq!(take(&[10, 20, 30], &[2, 0, 1]), vec![30, 10, 20]);
    }
}
