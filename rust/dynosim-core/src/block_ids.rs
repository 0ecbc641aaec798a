//! Prefix identities of the full prompt blocks of every request, as small dense integers.
//!
//! Two requests share engine block `k` exactly when they share every token up to its end: the
//! trace hash ids of every trace block up to the one holding the block's last token. A trie over
//! trace hash ids (one node per distinct run of leading trace blocks) names those prefixes, and
//! each node owns the identities of the engine blocks whose last token falls in its trace block.
//! Identities are numbered densely, so a KV cache finds a block by indexing an array with its
//! identity instead of probing a hash table (the replay does that millions of times).
//!
//! A partial last block gets no identity: it belongs to its request.

use rustc_hash::FxHashMap;

use crate::error::{Result, SimError};
use crate::workload::Workload;

/// The identity of one full prompt block (dense: below `BlockIds::end`).
pub type BlockId = u32;

/// The parent of the first trace block of every prompt.
const ROOT: u32 = u32::MAX;

/// A trie over trace hash ids: (parent node, hash id) -> (node, a value), nodes numbered in
/// the order they are first met. Never iterated.
///
/// Trace hash ids are mostly small and dense, and a hash id nearly always follows one parent
/// (it names a prefix's content): then the first node of each hash id sits in an array indexed
/// by it, one read where a hash table probes a table sized for every id of the workload. Other
/// keys, and every key when ids are large, go to the hash table, which numbers nodes the same.
struct PrefixTrie<V> {
    /// By hash id: (parent, node, value) of the first node met with it (node `u32::MAX`: none).
    direct: Vec<(u32, u32, V)>,
    rest: FxHashMap<(u32, u64), (u32, V)>,
    nodes: u32,
}

impl<V: Copy + Default> PrefixTrie<V> {
    /// A trie for the hash ids of `workload`; `direct`: index the first node of each id by it
    /// when the ids are small enough (else the hash table alone, the reference).
    fn new(workload: &Workload, direct: bool) -> Self {
        let ids = workload.hash_ids.len();
        let max = workload.hash_ids.iter().copied().max().unwrap_or(0);
        // Up to twice as many entries as hash ids (and a floor for tiny workloads).
        let direct = direct && max < 2 * ids as u64 + 1024;
        PrefixTrie {
            direct: if direct {
                vec![(0, u32::MAX, V::default()); max as usize + 1]
            } else {
                Vec::new()
            },
            rest: FxHashMap::with_capacity_and_hasher(
                if direct { 0 } else { ids },
                Default::default(),
            ),
            nodes: 0,
        }
    }

    /// The node of `hash` under `parent` and its value, made with `make()` when new.
    #[inline]
    fn entry(&mut self, parent: u32, hash: u64, make: impl FnOnce() -> V) -> (u32, V) {
        if let Some(first) = self.direct.get_mut(hash as usize) {
            if first.1 == u32::MAX {
                *first = (parent, self.nodes, make());
                self.nodes += 1;
                return (first.1, first.2);
            }
            if first.0 == parent {
                return (first.1, first.2);
            }
        }
        let nodes = &mut self.nodes;
        *self.rest.entry((parent, hash)).or_insert_with(|| {
            *nodes += 1;
            (*nodes - 1, make())
        })
    }
}

/// The identities of every request's full prompt blocks at one block size.
#[derive(Debug, Clone)]
pub struct BlockIds {
    block_size: u32,
    /// Request `i` owns `ids[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<usize>,
    ids: Vec<BlockId>,
    end: BlockId,
}

impl BlockIds {
    /// Name the full prompt blocks of every request of `workload` at `block_size` tokens per
    /// block, numbering identities from `first_id` (tables of several block sizes then share
    /// one identity space and never confuse their blocks). `workload` must be valid (its trace
    /// ids cover every prompt).
    pub fn new(workload: &Workload, block_size: u32, first_id: BlockId) -> Result<Self> {
        Self::with_trie(workload, block_size, first_id, true)
    }

    /// `new`; `direct`: whether the trie may index nodes by hash id (see [`PrefixTrie`]).
    fn with_trie(
        workload: &Workload,
        block_size: u32,
        first_id: BlockId,
        direct: bool,
    ) -> Result<Self> {
        let (bs, tbs) = (u64::from(block_size), u64::from(workload.trace_block_size));
        // Each node owns the identities of the engine blocks ending in its trace block: the
        // node's value is the first of them.
        let mut trie = PrefixTrie::<BlockId>::new(workload, direct);
        let mut next_id = u64::from(first_id);
        let mut offsets = Vec::with_capacity(workload.len() + 1);
        offsets.push(0);
        let total: u64 = workload
            .input_length
            .iter()
            .map(|&n| u64::from(n) / bs)
            .sum();
        let mut ids = Vec::with_capacity(total as usize);
        for i in 0..workload.len() {
            let trace = workload.hashes(i);
            let full = u64::from(workload.input_length[i]) / bs;
            let mut parent = ROOT;
            // Trace block `j` holds the last tokens of engine blocks `lo..hi`.
            let mut j = 0u64;
            while j * tbs < full * bs {
                let (lo, hi) = (j * tbs / bs, (j + 1) * tbs / bs);
                let (node, first) = trie.entry(parent, trace[j as usize], || {
                    let first = next_id;
                    next_id += hi - lo;
                    first as BlockId
                });
                if next_id > u64::from(BlockId::MAX) {
                    return Err(SimError::WorkloadShape(format!(
                        "more than {} distinct prompt blocks at block size {block_size} (by \
                         request {i}); a larger block size names fewer",
                        BlockId::MAX - first_id
                    )));
                }
                // A plain range of identities: it extends as one vectorised fill.
                ids.extend(first..first + (hi.min(full) - lo) as BlockId);
                parent = node;
                j += 1;
            }
            offsets.push(ids.len());
        }
        Ok(BlockIds {
            block_size,
            offsets,
            ids,
            end: next_id as BlockId,
        })
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The identities of request `i`'s full prompt blocks, in block order.
    pub fn of(&self, i: usize) -> &[BlockId] {
        &self.ids[self.offsets[i]..self.offsets[i + 1]]
    }

    /// One past the largest identity (the first identity of a next table).
    pub fn end(&self) -> BlockId {
        self.end
    }
}

/// Every request's prompt as a sequence of trace blocks named by prefix: the chain of trace
/// block `j` of request `i` is equal for two requests exactly when their trace hash ids agree
/// up to block `j`, so two prompts share their first `n` tokens exactly when the chains of the
/// block holding token `n - 1` are equal. A radix cache compares token runs with this in
/// O(1) per trace block instead of walking tokens.
#[derive(Debug, Clone)]
pub struct TraceChains {
    trace_block_size: u32,
    /// Request `i` owns `chains[offsets[i]..offsets[i + 1]]`, one per trace block of its prompt.
    offsets: Vec<usize>,
    chains: Vec<u32>,
    input_length: Vec<u32>,
}

impl TraceChains {
    /// Name the trace blocks of every prompt of `workload` (which must be valid).
    pub fn new(workload: &Workload) -> Self {
        let tbs = workload.trace_block_size;
        // A chain is a node of the trie.
        let mut trie = PrefixTrie::<()>::new(workload, true);
        let mut offsets = Vec::with_capacity(workload.len() + 1);
        offsets.push(0);
        let mut chains = Vec::with_capacity(workload.hash_ids.len());
        for i in 0..workload.len() {
            let blocks = workload.input_length[i].div_ceil(tbs) as usize;
            let mut parent = ROOT;
            for &hash in &workload.hashes(i)[..blocks] {
                parent = trie.entry(parent, hash, || ()).0;
                chains.push(parent);
            }
            offsets.push(chains.len());
        }
        TraceChains {
            trace_block_size: tbs,
            offsets,
            chains,
            input_length: workload.input_length.to_vec(),
        }
    }

    /// Tokens per trace block.
    pub fn trace_block_size(&self) -> u32 {
        self.trace_block_size
    }

    /// The chain of trace block `block` of request `request`'s prompt.
    #[inline(always)]
    pub fn chain(&self, request: u32, block: u32) -> u32 {
        self.chains[self.offsets[request as usize] + block as usize]
    }

    /// Prompt tokens of request `request`.
    pub fn prompt(&self, request: u32) -> u32 {
        self.input_length[request as usize]
    }

    /// Heap bytes held (the benchmarks report it).
    pub fn memory_bytes(&self) -> usize {
        self.offsets.capacity() * std::mem::size_of::<usize>()
            + (self.chains.capacity() + self.input_length.capacity()) * 4
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::workload::tests::columns as workload;

    #[test]
    fn shared_trace_prefix_gives_shared_engine_blocks() {
        // Request 0: ids [7, 8]; request 1: ids [7, 9]; 512-token trace blocks, 64-token blocks.
        let w = workload(
            &[7, 8, 7, 9],
            &[0, 2, 4],
            &[1024, 1000],
            &[1, 1],
            &[0.0; 2],
            512,
        );
        let b = BlockIds::new(&w, 64, 0).unwrap();
        let (x, y) = (b.of(0), b.of(1));
        assert_eq!(x.len(), 16);
        assert_eq!(y.len(), 15); // 1000 / 64 full blocks
        assert_eq!(x[..8], y[..8]);
        assert!(x[8..15].iter().zip(&y[8..15]).all(|(p, q)| p != q));
        // Blocks inside one trace block are distinct, and identities are dense.
        assert_eq!(x, (0..16).collect::<Vec<_>>());
        assert_eq!(b.end(), 24);
    }

    #[test]
    fn engine_block_spanning_two_trace_blocks() {
        // Trace block 4 tokens, engine block 6: block 0 covers id0 x4 + id1 x2.
        let w = workload(
            &[1, 2, 3, 1, 2, 4],
            &[0, 3, 6],
            &[12, 12],
            &[1, 1],
            &[0.0; 2],
            4,
        );
        let b = BlockIds::new(&w, 6, 10).unwrap();
        assert_eq!(b.of(0)[0], b.of(1)[0]);
        assert_ne!(b.of(0)[1], b.of(1)[1]); // tokens 8..12 differ (id 3 vs 4)
        assert!(b.of(0).iter().all(|&id| (10..b.end()).contains(&id)));
    }

    /// Random prompts over a few trace ids, so prefixes are often shared.
    fn prompts() -> impl Strategy<Value = (u32, u32, Vec<Vec<u64>>, Vec<u32>)> {
        (1u32..9, 1u32..9).prop_flat_map(|(tbs, bs)| {
            let request = prop::collection::vec(0u64..3, 1..7).prop_flat_map(move |ids| {
                let cover = ids.len() as u32 * tbs;
                (Just(ids), 1..=cover)
            });
            prop::collection::vec(request, 1..8).prop_map(move |rows| {
                let (ids, lens) = rows.into_iter().unzip();
                (tbs, bs, ids, lens)
            })
        })
    }

    proptest! {
        /// Two blocks share an identity exactly when they are the same block of prompts that
        /// agree on every token up to its end.
        #[test]
        fn identities_name_token_prefixes((tbs, bs, trace, lens) in prompts()) {
            let offsets: Vec<u64> = std::iter::once(0)
                .chain(trace.iter().scan(0u64, |s, t| { *s += t.len() as u64; Some(*s) }))
                .collect();
            let flat: Vec<u64> = trace.concat();
            let n = lens.len();
            let (output, arrival) = (vec![1; n], vec![0.0; n]);
            let w = workload(&flat, &offsets, &lens, &output, &arrival, tbs);
            let b = BlockIds::new(&w, bs, 3).unwrap();
            // The trie indexing nodes by hash id names them as the hash table alone does.
            let hashed = BlockIds::with_trie(&w, bs, 3, false).unwrap();
            prop_assert_eq!((&b.ids, b.end), (&hashed.ids, hashed.end));
            // The trace id of every token of request i up to the end of its block k.
            let tokens = |i: usize, k: usize| -> Vec<u64> {
                (0..(k as u32 + 1) * bs).map(|t| trace[i][(t / tbs) as usize]).collect()
            };
            for (i, len) in lens.iter().enumerate() {
                prop_assert_eq!(b.of(i).len(), (len / bs) as usize);
                for (k, &id) in b.of(i).iter().enumerate() {
                    prop_assert!((3..b.end()).contains(&id));
                    for i2 in 0..n {
                        for (k2, &id2) in b.of(i2).iter().enumerate() {
                            let same = k == k2 && tokens(i, k) == tokens(i2, k2);
                            prop_assert_eq!(id == id2, same, "request {} block {} vs {} {}", i, k, i2, k2);
                        }
                    }
                }
            }
        }
    }
}
