//! Which worker serves a request.

use crate::config::RouterMode;

/// A routing policy with its state.
#[derive(Debug, Clone)]
pub enum Router {
    /// Workers in turn, in index order.
    RoundRobin { next: usize, workers: usize },
}

impl Router {
    pub fn new(mode: RouterMode, workers: usize) -> Self {
        match mode {
            RouterMode::RoundRobin => Router::RoundRobin { next: 0, workers },
        }
    }

    /// The worker for the next request.
    pub fn route(&mut self) -> usize {
        match self {
            Router::RoundRobin { next, workers } => {
                let w = *next;
                *next = (w + 1) % *workers;
                w
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_cycles_in_order() {
        let mut r = Router::new(RouterMode::RoundRobin, 3);
        let picks: Vec<usize> = (0..7).map(|_| r.route()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }
}
