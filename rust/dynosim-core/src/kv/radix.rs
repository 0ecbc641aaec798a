//! SGLang's radix prefix cache (its `RadixCache`) over prompt tokens: a compressed trie whose
//! edges are runs of tokens, matched and inserted at page granularity (a page is 1 token by
//! default), with per-node lock counts for the requests using a path and LRU eviction of
//! unlocked leaves only.
//!
//! Tokens are never stored. An edge names the request whose prompt spells it and the depths
//! it spans; two prompts agree on their first `n` tokens exactly when the prefix chains of the
//! trace block holding token `n - 1` are equal (`TraceChains`), so comparing a prompt with an
//! edge costs one chain comparison when it matches whole and a binary search over the edge's
//! trace blocks when it diverges. Memory is a few words per node, and there are at most two
//! nodes per cached leaf: it grows with the distinct cached token runs, never with requests.
//!
//! Capacity is the caller's: the tree counts the tokens it holds (evictable when no lock
//! reaches them, protected otherwise) and frees them on request.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::block_ids::TraceChains;

/// A node of the tree; stays valid while a lock holds it (unlocked leaves can be evicted).
pub type NodeId = u32;

/// The root: the empty prefix, never evicted.
pub const ROOT: NodeId = 0;

#[derive(Debug, Clone)]
struct Node {
    parent: NodeId,
    /// The edge holds prompt tokens `start..end` (depths from the root), page aligned.
    start: u32,
    end: u32,
    /// A request whose prompt spells the edge.
    source: u32,
    /// Locks held through this node (by its own lock or a descendant's).
    lock: u32,
    children: u32,
    last_access: u64,
}

impl Node {
    fn len(&self) -> u64 {
        u64::from(self.end - self.start)
    }
}

/// The prefix cache of one rank.
#[derive(Debug, Clone)]
pub struct RadixCache {
    chains: Arc<TraceChains>,
    page: u32,
    nodes: Vec<Node>,
    spare: Vec<NodeId>,
    /// A child by the identity of the prefix its first page completes: (chain of the trace
    /// block holding the page's last token, depth after the page). The identity names the
    /// whole prefix, so it also names the parent. Never iterated.
    children: FxHashMap<(u32, u32), NodeId>,
    /// Unlocked leaves by (last access, node): the eviction order.
    evictable_leaves: BTreeSet<(u64, NodeId)>,
    /// Logical time of the last match or insert.
    clock: u64,
    evictable: u64,
    protected: u64,
    /// Evicted edges as (source request, start, end), oldest first, kept only once
    /// `record_evictions` is called (the offload tiers read them).
    record_evicted: bool,
    evicted: Vec<(u32, u32, u32)>,
}

impl RadixCache {
    /// An empty cache over the prompts named by `chains`, matching `page` tokens at a time.
    pub fn new(chains: Arc<TraceChains>, page: u32) -> Self {
        assert!(page >= 1, "a page holds at least one token");
        let root = Node {
            parent: ROOT,
            start: 0,
            end: 0,
            source: 0,
            lock: 0,
            children: 0,
            last_access: 0,
        };
        RadixCache {
            chains,
            page,
            nodes: vec![root],
            spare: Vec::new(),
            children: FxHashMap::default(),
            evictable_leaves: BTreeSet::new(),
            clock: 0,
            evictable: 0,
            protected: 0,
            record_evicted: false,
            evicted: Vec::new(),
        }
    }

    /// From now on keep every evicted edge for `drain_evicted`.
    pub fn record_evictions(&mut self) {
        self.record_evicted = true;
    }

    /// The edges evicted since the last call, least recent first, as (request whose prompt
    /// spells it, first token, end).
    pub fn drain_evicted(&mut self) -> std::vec::Drain<'_, (u32, u32, u32)> {
        self.evicted.drain(..)
    }

    /// Tokens per page.
    pub fn page_size(&self) -> u32 {
        self.page
    }

    /// Cached tokens no lock reaches: what eviction can free.
    pub fn evictable(&self) -> u64 {
        self.evictable
    }

    /// Cached tokens on locked paths.
    pub fn protected(&self) -> u64 {
        self.protected
    }

    /// Every cached token.
    pub fn cached(&self) -> u64 {
        self.evictable + self.protected
    }

    /// Nodes in the tree, the root included.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.spare.len()
    }

    /// Heap bytes held by the tree (the benchmarks report it): proportional to its nodes.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.nodes.capacity() * size_of::<Node>()
            + self.spare.capacity() * size_of::<NodeId>()
            // A hashbrown slot plus its control byte.
            + self.children.capacity() * (size_of::<((u32, u32), NodeId)>() + 1)
            // B-tree leaves hold up to 11 entries; count them full.
            + self.evictable_leaves.len() * size_of::<(u64, NodeId)>() * 2
    }

    /// The depth along the tree where prefix `node` ends.
    pub fn depth(&self, node: NodeId) -> u32 {
        self.nodes[node as usize].end
    }

    fn aligned(&self, tokens: u32) -> u32 {
        tokens / self.page * self.page
    }

    /// The identity of `request`'s prompt prefix one page past `depth`.
    fn key(&self, request: u32, depth: u32) -> (u32, u32) {
        let end = depth + self.page;
        let block = (end - 1) / self.chains.trace_block_size();
        (self.chains.chain(request, block), end)
    }

    /// The depth to which `request`'s prompt agrees with edge `node` (whose first page it
    /// shares), at most `limit` (page aligned), rounded down to a page.
    fn reach(&self, request: u32, node: NodeId, limit: u32) -> u32 {
        let n = &self.nodes[node as usize];
        let end = n.end.min(limit);
        let tbs = self.chains.trace_block_size();
        let same =
            |block: u32| self.chains.chain(request, block) == self.chains.chain(n.source, block);
        if same((end - 1) / tbs) {
            return end;
        }
        // Chains that differ at one block differ at every later one: find the first.
        let (mut lo, mut hi) = (n.start / tbs, (end - 1) / tbs);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if same(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        // Node boundaries are page aligned, so this stays at or past the edge's start.
        self.aligned((lo * tbs).max(n.start))
    }

    /// Walk `request`'s prompt (its first `tokens` tokens) down the tree: returns the depth
    /// matched, the node it ends in, and, when the match ends inside an edge, that edge.
    fn walk(&self, request: u32, tokens: u32) -> (u32, NodeId, Option<NodeId>) {
        let limit = self.aligned(tokens.min(self.chains.prompt(request)));
        let (mut depth, mut node) = (0, ROOT);
        while depth < limit {
            let Some(&child) = self.children.get(&self.key(request, depth)) else {
                break;
            };
            let reach = self.reach(request, child, limit);
            if reach < self.nodes[child as usize].end {
                return (reach, node, Some(child));
            }
            depth = reach;
            node = child;
        }
        (depth, node, None)
    }

    /// How many leading tokens of `request`'s prompt (of its first `tokens`) the cache holds,
    /// without touching it (queue ordering and routers read this).
    pub fn peek(&self, request: u32, tokens: u32) -> u32 {
        self.walk(request, tokens).0
    }

    /// Match `request`'s prompt (its first `tokens` tokens): returns the tokens cached and the
    /// node where they end, splitting an edge the match ends inside, and marks the path used.
    pub fn match_prefix(&mut self, request: u32, tokens: u32) -> (u32, NodeId) {
        let (depth, mut node, inside) = self.walk(request, tokens);
        if let Some(edge) = inside {
            if depth > self.nodes[edge as usize].start {
                node = self.split(edge, depth);
            }
        }
        self.clock += 1;
        self.touch_path(node);
        (depth, node)
    }

    /// Cache `request`'s prompt up to `tokens` (rounded down to a page). Returns how many of
    /// those tokens were cached already (the caller's copies of them are duplicates) and the
    /// node where the prompt now ends.
    pub fn insert(&mut self, request: u32, tokens: u32) -> (u32, NodeId) {
        let limit = self.aligned(tokens.min(self.chains.prompt(request)));
        let (depth, mut node, inside) = self.walk(request, limit);
        if let Some(edge) = inside {
            node = self.split(edge, depth);
        }
        if depth < limit {
            node = self.add_leaf(node, request, depth, limit);
        }
        self.clock += 1;
        self.touch_path(node);
        (depth, node)
    }

    /// Protect the path from the root to `node` from eviction.
    pub fn lock(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            if n.lock == 0 {
                let (len, leaf, key) = (n.len(), n.children == 0, (n.last_access, node));
                self.evictable -= len;
                self.protected += len;
                if leaf {
                    self.evictable_leaves.remove(&key);
                }
            }
            let n = &mut self.nodes[node as usize];
            n.lock += 1;
            node = n.parent;
        }
    }

    /// Each node's lock count, by node, and the counts that one lock on each of `holders` (the
    /// root for none) implies: what the scheduler's debug checks compare.
    #[cfg(debug_assertions)]
    pub fn lock_counts(&self, holders: impl Iterator<Item = NodeId>) -> (Vec<u32>, Vec<u32>) {
        let counted = self.nodes.iter().map(|n| n.lock).collect();
        let mut implied = vec![0u32; self.nodes.len()];
        for mut node in holders {
            while node != ROOT {
                implied[node as usize] += 1;
                node = self.nodes[node as usize].parent;
            }
        }
        (counted, implied)
    }

    /// Release one `lock` of `node`.
    pub fn unlock(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            debug_assert!(n.lock > 0, "unlock without lock");
            n.lock -= 1;
            if n.lock == 0 {
                let (len, leaf, key) = (n.len(), n.children == 0, (n.last_access, node));
                self.evictable += len;
                self.protected -= len;
                if leaf {
                    self.evictable_leaves.insert(key);
                }
            }
            node = self.nodes[node as usize].parent;
        }
    }

    /// Free at least `tokens` cached tokens (fewer when not enough are evictable), least
    /// recently used unlocked leaves first, whole leaves at a time. Returns the tokens freed.
    pub fn evict(&mut self, tokens: u64) -> u64 {
        let mut freed = 0;
        while freed < tokens {
            let Some((_, node)) = self.evictable_leaves.pop_first() else {
                break;
            };
            let n = self.nodes[node as usize].clone();
            freed += n.len();
            self.evictable -= n.len();
            if self.record_evicted {
                self.evicted.push((n.source, n.start, n.end));
            }
            self.children.remove(&self.key(n.source, n.start));
            self.spare.push(node);
            let parent = &mut self.nodes[n.parent as usize];
            parent.children -= 1;
            if n.parent != ROOT && parent.children == 0 && parent.lock == 0 {
                self.evictable_leaves.insert((parent.last_access, n.parent));
            }
        }
        freed
    }

    /// Split edge `node` at depth `at` (strictly inside it): the upper part becomes a new node
    /// with the same locks and access time, parent of the lower part. Returns the new node.
    fn split(&mut self, node: NodeId, at: u32) -> NodeId {
        let n = self.nodes[node as usize].clone();
        debug_assert!(n.start < at && at < n.end);
        let upper = self.alloc(Node {
            end: at,
            children: 1,
            ..n
        });
        let key = self.key(n.source, n.start);
        self.children.insert(key, upper);
        self.children.insert(self.key(n.source, at), node);
        let lower = &mut self.nodes[node as usize];
        lower.start = at;
        lower.parent = upper;
        upper
    }

    /// A new unlocked leaf under `parent` holding `request`'s tokens `start..end`.
    fn add_leaf(&mut self, parent: NodeId, request: u32, start: u32, end: u32) -> NodeId {
        let p = &mut self.nodes[parent as usize];
        if parent != ROOT && p.children == 0 && p.lock == 0 {
            let key = (p.last_access, parent);
            self.evictable_leaves.remove(&key);
        }
        self.nodes[parent as usize].children += 1;
        let leaf = self.alloc(Node {
            parent,
            start,
            end,
            source: request,
            lock: 0,
            children: 0,
            last_access: self.clock,
        });
        self.children.insert(self.key(request, start), leaf);
        self.evictable += u64::from(end - start);
        self.evictable_leaves.insert((self.clock, leaf));
        leaf
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.spare.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        }
    }

    /// Mark every node from `node` up to the root as used now.
    fn touch_path(&mut self, mut node: NodeId) {
        let now = self.clock;
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            let old = n.last_access;
            n.last_access = now;
            if n.children == 0 && n.lock == 0 && self.evictable_leaves.remove(&(old, node)) {
                self.evictable_leaves.insert((now, node));
            }
            node = self.nodes[node as usize].parent;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::workload::tests::columns as workload;

    /// A cache over prompts given as (trace hash ids, length), `tbs` tokens per hash id.
    fn cache(prompts: &[(&[u64], u32)], tbs: u32, page: u32) -> RadixCache {
        let ids: Vec<u64> = prompts.iter().flat_map(|p| p.0.iter().copied()).collect();
        let mut offsets = vec![0u64];
        for p in prompts {
            offsets.push(offsets.last().unwrap() + p.0.len() as u64);
        }
        let input: Vec<u32> = prompts.iter().map(|p| p.1).collect();
        let n = prompts.len();
        let (output, arrival) = (vec![1; n], vec![0.0; n]);
        let w = workload(&ids, &offsets, &input, &output, &arrival, tbs);
        RadixCache::new(Arc::new(TraceChains::new(&w)), page)
    }

    #[test]
    fn split_on_divergence() {
        // 4-token trace blocks: prompts 0 and 1 share their first block (tokens 0..4) only.
        let mut c = cache(&[(&[1, 2], 8), (&[1, 3], 8), (&[1, 2], 6)], 4, 1);
        assert_eq!(c.insert(0, 8), (0, 1));
        assert_eq!((c.cached(), c.node_count()), (8, 2));
        // Prompt 1 finds 4 tokens: the edge 0..8 splits at 4 and a leaf 4..8 joins it.
        let (already, leaf) = c.insert(1, 8);
        assert_eq!((already, c.depth(leaf)), (4, 8));
        assert_eq!((c.cached(), c.node_count()), (12, 4));
        assert_eq!((c.peek(0, 8), c.peek(1, 8)), (8, 8));
        // Prompt 2 is prompt 0 cut at 6 tokens: all of it is cached.
        assert_eq!(c.peek(2, 6), 6);
        // With 2-token pages and 3-token blocks, divergence at token 3 matches one page.
        let mut c = cache(&[(&[1, 2], 6), (&[1, 5], 6)], 3, 2);
        c.insert(0, 6);
        assert_eq!(c.peek(1, 6), 2);
        assert_eq!(c.insert(1, 6).0, 2);
        assert_eq!(c.cached(), 6 + 4);
        // A partial page is never cached.
        let mut c = cache(&[(&[1, 2], 5)], 3, 2);
        let (_, node) = c.insert(0, 5);
        assert_eq!(c.depth(node), 4);
        assert_eq!(c.cached(), 4);
    }

    #[test]
    fn least_recently_used_leaves_go_first() {
        let mut c = cache(&[(&[1], 4), (&[2], 4), (&[3], 4)], 4, 1);
        c.record_evictions();
        for r in 0..3 {
            c.insert(r, 4);
        }
        c.match_prefix(0, 4); // prompt 0 is now the most recent; prompt 1 the least
                              // Asking for one token frees a whole leaf: prompt 1's 4 tokens.
        assert_eq!(c.evict(1), 4);
        assert_eq!((c.peek(0, 4), c.peek(1, 4), c.peek(2, 4)), (4, 0, 4));
        assert_eq!(c.evict(5), 8); // prompt 2, then prompt 0
        let evicted: Vec<_> = c.drain_evicted().collect();
        assert_eq!(evicted, [(1, 0, 4), (2, 0, 4), (0, 0, 4)]);
        assert_eq!((c.cached(), c.node_count()), (0, 1));

        // A parent is evicted only once its children are gone: prompts [1, 2] and [1, 3]
        // share tokens 0..4 (touched by both inserts); 4..8 of prompt 0 is the oldest leaf.
        let mut c = cache(&[(&[1, 2], 8), (&[1, 3], 8)], 4, 1);
        c.insert(0, 8);
        c.insert(1, 8);
        assert_eq!(c.evict(1), 4);
        assert_eq!((c.peek(0, 8), c.peek(1, 8)), (4, 8));
        assert_eq!(c.evict(1), 4); // prompt 1's leaf, not the shared parent
        assert_eq!(c.peek(1, 8), 4);
        assert_eq!(c.evict(1), 4); // the parent, a leaf now
        assert_eq!(c.cached(), 0);
    }

    #[test]
    fn locked_paths_are_never_evicted() {
        let mut c = cache(&[(&[1, 2], 8), (&[1, 3], 8)], 4, 1);
        let (_, node) = c.insert(0, 8);
        c.lock(node);
        c.insert(1, 8);
        assert_eq!((c.evictable(), c.protected()), (4, 8));
        // Only prompt 1's own leaf can go; the shared tokens 0..4 are on prompt 0's path.
        assert_eq!(c.evict(100), 4);
        assert_eq!((c.peek(0, 8), c.peek(1, 8)), (8, 4));
        assert_eq!(c.evict(100), 0);
        c.unlock(node);
        assert_eq!((c.evictable(), c.protected()), (8, 0));
        assert_eq!(c.evict(100), 8);
    }

    #[test]
    fn memory_follows_distinct_token_runs_not_requests() {
        // 1,000 requests with one 32-token prompt: one edge, however often it is inserted.
        let same: Vec<(&[u64], u32)> = vec![(&[1, 2, 3, 4, 5, 6, 7, 8], 32); 1000];
        let mut c = cache(&same, 4, 1);
        c.insert(0, 32);
        let (nodes, bytes) = (c.node_count(), c.memory_bytes());
        for r in 1..1000 {
            c.insert(r, 32);
        }
        assert_eq!(
            (c.node_count(), c.memory_bytes(), c.cached()),
            (nodes, bytes, 32)
        );
        // 1,000 prompts sharing 8 tokens, then 24 of their own: a shared edge and a leaf each,
        // a bounded number of bytes per node (not per token: 24,008 tokens are cached).
        let ids: Vec<Vec<u64>> = (0..1000u64)
            .map(|r| {
                vec![
                    1,
                    2,
                    10 * r + 100,
                    10 * r + 101,
                    10 * r + 102,
                    10 * r + 103,
                    10 * r + 104,
                    10 * r + 105,
                ]
            })
            .collect();
        let distinct: Vec<(&[u64], u32)> = ids.iter().map(|p| (p.as_slice(), 32)).collect();
        let mut c = cache(&distinct, 4, 1);
        for r in 0..1000 {
            c.insert(r, 32);
        }
        assert_eq!((c.node_count(), c.cached()), (1 + 1 + 1000, 8 + 1000 * 24));
        assert!(
            c.memory_bytes() < 128 * c.node_count(),
            "{} bytes",
            c.memory_bytes()
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize, u32),
        Match(usize),
        Lock(usize),
        Unlock(usize),
        Evict(u64),
    }

    fn ops() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..8, 0u32..30).prop_map(|(r, t)| Op::Insert(r, t)),
            (0usize..8).prop_map(Op::Match),
            (0usize..8).prop_map(Op::Lock),
            (0usize..8).prop_map(Op::Unlock),
            (0u64..12).prop_map(Op::Evict),
        ]
    }

    /// Prompts over a few trace ids (so prefixes are shared), their block and page sizes.
    fn prompts() -> impl Strategy<Value = (u32, u32, Vec<(Vec<u64>, u32)>)> {
        (1u32..5, 1u32..4).prop_flat_map(|(tbs, page)| {
            let prompt = prop::collection::vec(0u64..3, 1..6).prop_flat_map(move |ids| {
                let cover = ids.len() as u32 * tbs;
                (Just(ids), 1..=cover)
            });
            prop::collection::vec(prompt, 1..6).prop_map(move |p| (tbs, page, p))
        })
    }

    proptest! {
        /// Against a naive cache of every cached page-aligned prefix as a token list (with the
        /// time it was last used): matches and inserts find the longest cached prefix, token
        /// counts agree, eviction frees at least what was asked (or all it can), never a
        /// locked prefix, and nothing used after a leaf that survives it.
        #[test]
        fn agrees_with_a_naive_prefix_set(
            (tbs, page, prompts) in prompts(),
            script in prop::collection::vec(ops(), 1..40),
        ) {
            let views: Vec<(&[u64], u32)> =
                prompts.iter().map(|(ids, len)| (ids.as_slice(), *len)).collect();
            let mut c = cache(&views, tbs, page);
            let n = prompts.len();
            let tokens = |r: usize, k: u32| -> Vec<u64> {
                (0..k).map(|t| prompts[r].0[(t / tbs) as usize]).collect()
            };
            let aligned = |k: u32| k / page * page;
            // Cached prefix -> last use.
            let mut naive: BTreeMap<Vec<u64>, u64> = BTreeMap::new();
            let mut clock = 0u64;
            let mut locks: Vec<(usize, u32, NodeId)> = Vec::new();
            let longest = |naive: &BTreeMap<Vec<u64>, u64>, r: usize, limit: u32| {
                (1..=limit / page)
                    .map(|p| p * page)
                    .take_while(|&k| naive.contains_key(&tokens(r, k)))
                    .last()
                    .unwrap_or(0)
            };
            for op in script {
                match op {
                    Op::Insert(r, t) => {
                        let r = r % n;
                        let limit = aligned(t.min(prompts[r].1));
                        let already = longest(&naive, r, limit);
                        let (found, node) = c.insert(r as u32, t);
                        prop_assert_eq!(found, already);
                        prop_assert_eq!(c.depth(node), limit);
                        clock += 1;
                        for k in (1..=limit / page).map(|p| p * page) {
                            naive.insert(tokens(r, k), clock);
                        }
                    }
                    Op::Match(r) | Op::Lock(r) => {
                        let r = r % n;
                        let expect = longest(&naive, r, aligned(prompts[r].1));
                        prop_assert_eq!(c.peek(r as u32, u32::MAX), expect);
                        let (found, node) = c.match_prefix(r as u32, u32::MAX);
                        prop_assert_eq!((found, c.depth(node)), (expect, expect));
                        clock += 1;
                        for k in (1..=expect / page).map(|p| p * page) {
                            naive.insert(tokens(r, k), clock);
                        }
                        if matches!(op, Op::Lock(_)) {
                            c.lock(node);
                            locks.push((r, found, node));
                        }
                    }
                    Op::Unlock(i) => {
                        if !locks.is_empty() {
                            let (_, _, node) = locks.remove(i % locks.len());
                            c.unlock(node);
                        }
                    }
                    Op::Evict(want) => {
                        let before = naive.clone();
                        let evictable = c.evictable();
                        let freed = c.evict(want);
                        prop_assert!(freed >= want.min(evictable));
                        // What the tree still holds, asked prompt by prompt.
                        let mut kept = BTreeMap::new();
                        for r in 0..n {
                            let m = c.peek(r as u32, u32::MAX);
                            for k in (1..=m / page).map(|p| p * page) {
                                let key = tokens(r, k);
                                prop_assert!(before.contains_key(&key));
                                kept.insert(key.clone(), before[&key]);
                            }
                        }
                        // Prefixes no prompt reaches any more were evicted too (only prompts
                        // put tokens in, so every cached prefix is some prompt's).
                        let removed: Vec<(&Vec<u64>, &u64)> =
                            before.iter().filter(|(k, _)| !kept.contains_key(*k)).collect();
                        prop_assert_eq!(removed.len() as u64 * u64::from(page), freed);
                        let locked = |key: &[u64]| {
                            locks.iter().any(|&(r, m, _)| {
                                key.len() as u32 <= m && tokens(r, key.len() as u32) == key
                            })
                        };
                        let is_leaf = |key: &Vec<u64>| {
                            !before.keys().any(|o| o.len() == key.len() + page as usize
                                && o.starts_with(key))
                        };
                        let newest_evicted = removed.iter().map(|(_, &t)| t).max();
                        for (key, &t) in &before {
                            if kept.contains_key(key) && is_leaf(key) && !locked(key) {
                                prop_assert!(newest_evicted.is_none_or(|e| e <= t));
                            }
                        }
                        for (key, _) in &removed {
                            prop_assert!(!locked(key), "evicted a locked prefix");
                        }
                        naive = kept;
                    }
                }
                let locked_pages = naive.keys().filter(|key| locks.iter().any(|&(r, m, _)| {
                    key.len() as u32 <= m && tokens(r, key.len() as u32) == **key
                })).count() as u64;
                prop_assert_eq!(c.cached(), naive.len() as u64 * u64::from(page));
                prop_assert_eq!(c.protected(), locked_pages * u64::from(page));
            }
        }
    }
}
