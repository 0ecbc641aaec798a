//! How much memory one replay may take, estimated before it runs: for callers that start
//! several at once (a sweep's jobs) and must know they fit. An upper bound by construction:
//! each part counts the most its structure can hold for the workload's size.

use crate::config::{Role, SimConfig};
use crate::kv::by_identity::IdentityCache;
use crate::kv::slot_index::index_bytes;
use crate::kv::RankCache;

/// Bytes a replay keeps per request at most: its records and derived metrics (about twenty
/// 8-byte columns), its entries in queues, the dispatcher and the router.
pub const REQUEST_BYTES: u64 = 512;
/// Bytes a block cache keeps per block it holds (a 16-byte slot in a vector that doubles).
pub const CACHE_BLOCK_BYTES: u64 = 32;
/// Bytes a cache reserves up front however little it holds (65,536 slots).
pub const CACHE_RESERVED_BYTES: u64 = 1 << 20;
/// Bytes of the block identity tables per prompt block (the trie over the workload's hash
/// ids, and each block's identity).
pub const IDENTITY_BYTES: u64 = 24;

/// The most bytes one replay of `config` takes for a workload of `requests` requests of
/// `tokens` prompt and output tokens together (the workload's own columns not included).
pub fn replay_bytes(config: &SimConfig, requests: u64, tokens: u64) -> u64 {
    let mut total = REQUEST_BYTES * requests;
    let tiers = &config.offload;
    let caches = config.block_caches();
    for (role, workers) in config.roles() {
        let engine = config.role(role).0.with_defaults();
        let block = u64::from(engine.block_size());
        // Every block a request can name: its prompt's and output's, started blocks whole.
        let ids = tokens / block + 2 * requests;
        let ranks = u64::from(workers) * u64::from(engine.data_parallel_size);
        // The offload tiers' caches are by slot; a rank's own takes the form that fits.
        let cache = |capacity: u32| {
            let held = ids.min(u64::from(capacity));
            CACHE_RESERVED_BYTES
                + held * CACHE_BLOCK_BYTES
                + index_bytes(capacity, ids, held, caches)
        };
        let gpu = engine.num_gpu_blocks;
        let rank_cache = if RankCache::by_identity(gpu, ids, engine.max_num_seqs, caches) {
            IdentityCache::bytes(gpu, ids)
        } else {
            cache(gpu)
        };
        total += IDENTITY_BYTES * ids + ranks * rank_cache;
        if let Some(g2) = tiers.g2_blocks {
            total += ranks * cache(g2);
            if let Some(g3) = tiers.g3_blocks {
                // One shared pool for the cluster, counted with the first role.
                let pools = match (tiers.g3_shared, role) {
                    (true, Role::Aggregated | Role::Prefill) => 1,
                    (true, Role::Decode) => 0,
                    (false, _) => ranks,
                };
                total += pools * cache(g3);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_counts_requests_ranks_and_tiers() {
        let config = SimConfig::default();
        // 4 workers of 16,384 blocks of 64 tokens; 1,000 requests of 1,000 tokens:
        // ids = 1,000,000 / 64 + 2,000 = 17,625, of which a cache holds at most its 16,384;
        // each rank's cache by identity: 4 bytes an identity and 160 a block of capacity,
        // 70,500 + 2,621,440 bytes (within 16 MiB).
        let cache = 17_625 * 4 + 16_384 * 160;
        assert_eq!(
            replay_bytes(&config, 1_000, 1_000_000),
            512 * 1_000 + 24 * 17_625 + 4 * cache
        );
        // 10 million requests: 156.25 million identities, too many for 16 MiB; the cache by
        // slot holds at most its 16,384 blocks, with a hashed index of 32 bytes each.
        let ids: u64 = 10_000_000_000 / 64 + 20_000_000;
        let by_slot = (1 << 20) + 16_384 * 32 + 16_384 * 32;
        assert_eq!(
            replay_bytes(&config, 10_000_000, 10_000_000_000),
            512 * 10_000_000 + 24 * ids + 4 * by_slot
        );
        // 32 workers share 256 MiB of dense index, 8 MiB each: a million requests of 220
        // tokens name 220,000,000 / 64 + 2,000,000 = 5,437,500 identities, whose 2-byte index
        // (10.875 MB) fits a worker alone but not its share, so each rank's index is hashed.
        let ids: u64 = 220_000_000 / 64 + 2_000_000;
        let alone = (1 << 20) + 16_384 * 32 + ids * 2;
        let shared = (1 << 20) + 16_384 * 32 + 16_384 * 32;
        let mut wide = config.clone();
        wide.cluster.num_workers = 1;
        assert_eq!(
            replay_bytes(&wide, 1_000_000, 220_000_000),
            512 * 1_000_000 + 24 * ids + alone
        );
        wide.cluster.num_workers = 32;
        assert_eq!(
            replay_bytes(&wide, 1_000_000, 220_000_000),
            512 * 1_000_000 + 24 * ids + 32 * shared
        );
        // The cache by identity shares the same budget: 100,000 requests of 1,152 tokens name
        // 115,200,000 / 64 + 200,000 = 2,000,000 identities, 4 bytes each and 160 a block of
        // capacity (10,621,440 bytes): within a worker's own 16 MiB, not within 8 MiB as one of
        // 32, where the rank's cache goes by slot with a 2-byte dense index (4,000,000 bytes).
        wide.cluster.num_workers = 1;
        assert_eq!(
            replay_bytes(&wide, 100_000, 115_200_000),
            512 * 100_000 + 24 * 2_000_000 + 10_621_440
        );
        wide.cluster.num_workers = 32;
        let by_slot = (1 << 20) + 16_384 * 32 + 4_000_000;
        assert_eq!(
            replay_bytes(&wide, 100_000, 115_200_000),
            512 * 100_000 + 24 * 2_000_000 + 32 * by_slot
        );
        let mut tiers = config.clone();
        tiers.offload.g2_blocks = Some(100);
        // G2 holds at most its 100 blocks; its index is dense all the same.
        let g2 = (1 << 20) + 100 * 32 + 17_625 * 2;
        assert_eq!(
            replay_bytes(&tiers, 1_000, 1_000_000),
            replay_bytes(&config, 1_000, 1_000_000) + 4 * g2
        );
    }
}
