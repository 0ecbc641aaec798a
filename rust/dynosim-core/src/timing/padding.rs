//! How many tokens a pass really computes: an engine running CUDA graphs pads a pass to the
//! size of a captured graph, and the data-parallel ranks of a worker pass in lockstep (padded
//! to a common size, their MoE layers running on every rank's tokens together).

/// The token counts CUDA graphs were captured for, ascending (empty: no graphs, every pass runs
/// at its own size).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaptureSizes(Vec<u32>);

impl CaptureSizes {
    /// Graphs captured for `sizes` (ascending).
    pub fn new(sizes: Vec<u32>) -> Self {
        debug_assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        CaptureSizes(sizes)
    }

    /// The largest captured size (0: none).
    pub fn largest(&self) -> u64 {
        self.0.last().map_or(0, |&s| u64::from(s))
    }

    /// The tokens a pass of `tokens` computes: the smallest captured size at least that many,
    /// or `tokens` itself past the largest (such a pass runs without a graph).
    pub fn pad(&self, tokens: u64) -> u64 {
        if self.0.is_empty() || tokens > self.largest() {
            return tokens;
        }
        let i = self.0.partition_point(|&s| u64::from(s) < tokens);
        u64::from(self.0[i])
    }

    /// What the ranks of one data-parallel group compute in a grouped pass in which each
    /// computes `tokens` (0: a rank with no work, which runs a one-token dummy pass to join
    /// the group's collectives). When every rank fits a captured graph they all run the
    /// graph of the largest padded size (vLLM pads the group to its maximum so every rank
    /// replays the same graph); otherwise each runs its own count without a graph. The MoE
    /// layers gather every rank's tokens and each rank's experts run on all of them.
    pub fn lockstep(&self, tokens: &[u64]) -> Lockstep {
        let own = |t: u64| t.max(1);
        let graphs = tokens.iter().all(|&t| own(t) <= self.largest());
        let pad_to = graphs.then(|| tokens.iter().map(|&t| self.pad(own(t))).max().unwrap_or(1));
        let sum: u64 = match pad_to {
            Some(p) => p * tokens.len() as u64,
            None => tokens.iter().map(|&t| own(t)).sum(),
        };
        Lockstep {
            pad_to,
            moe_tokens_per_rank: sum as f64 / tokens.len().max(1) as f64,
        }
    }
}

/// A grouped pass of data-parallel ranks, as each rank's price needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lockstep {
    /// The tokens every rank computes, when the group runs a captured graph.
    pub pad_to: Option<u64>,
    /// The group's tokens over its ranks: what a rank's MoE layers run on, per rank, in the
    /// form AIC's tables price them (a rank's table assumes every rank computes as many
    /// tokens as it does).
    pub moe_tokens_per_rank: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_padded_to_the_next_captured_size() {
        let sizes = CaptureSizes::new(vec![1, 2, 4, 8, 16]);
        assert_eq!(
            [1, 3, 5, 8, 9, 16, 17].map(|t| sizes.pad(t)),
            [1, 4, 8, 8, 16, 16, 17]
        );
        assert_eq!(CaptureSizes::default().pad(3), 3);
    }

    #[test]
    fn a_group_pads_to_its_largest_graph_or_runs_without() {
        let sizes = CaptureSizes::new(vec![1, 2, 4, 8, 16]);
        // Ranks of 3 and 9 tokens and an idle one: all fit a graph, all run the 16 of the
        // largest; the MoE layers see 3 x 16 tokens, 16 a rank.
        let l = sizes.lockstep(&[3, 9, 0]);
        assert_eq!((l.pad_to, l.moe_tokens_per_rank), (Some(16), 16.0));
        // 20 tokens fit no graph: no padding, the idle rank's dummy pass is 1 token, and the
        // MoE layers see 3 + 20 + 1 = 24 tokens, 8 a rank.
        let l = sizes.lockstep(&[3, 20, 0]);
        assert_eq!((l.pad_to, l.moe_tokens_per_rank), (None, 8.0));
    }
}
