//! A rank's KV memory: the caches the engine flavours keep their prompt KV in (full blocks
//! hashed by prefix, and SGLang's token radix tree).

pub mod blocks;
pub mod by_identity;
pub mod occupancy;
pub mod radix;
pub mod rank_cache;
pub mod slot_index;

pub use blocks::{KvCache, PrefixHit};
pub use rank_cache::RankCache;
