//! A set of indices marked since it was last taken: each index once, in the order first
//! marked, with a flag per index so marking costs O(1). The link network and the transport
//! keep the links whose use changed this way, for the time series to read again.

#[derive(Debug, Clone, Default)]
pub(crate) struct Marked {
    order: Vec<u32>,
    flag: Vec<bool>,
}

impl Marked {
    /// An empty set of indices below `n`.
    pub(crate) fn new(n: usize) -> Self {
        Marked {
            order: Vec::new(),
            flag: vec![false; n],
        }
    }

    /// Mark index `i` (again, or for the first time).
    pub(crate) fn mark(&mut self, i: u32) {
        if !self.flag[i as usize] {
            self.flag[i as usize] = true;
            self.order.push(i);
        }
    }

    /// Moves the marked indices into `out` (cleared first), in the order first marked, and
    /// leaves the set empty.
    pub(crate) fn take_into(&mut self, out: &mut Vec<usize>) {
        out.clear();
        for i in self.order.drain(..) {
            self.flag[i as usize] = false;
            out.push(i as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_each_index_once_in_first_order_and_empties_when_taken() {
        let mut set = Marked::new(5);
        for i in [3, 1, 3, 4, 1] {
            set.mark(i);
        }
        let mut out = vec![9];
        set.take_into(&mut out);
        assert_eq!(out, [3, 1, 4]);
        set.take_into(&mut out);
        assert!(out.is_empty());
        set.mark(3); // taken indices can be marked again
        set.take_into(&mut out);
        assert_eq!(out, [3]);
    }
}
