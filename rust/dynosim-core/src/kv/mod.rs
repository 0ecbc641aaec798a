//! A rank's KV memory: the caches the engine flavours keep their prompt KV in.

pub mod blocks;

pub use blocks::{KvCache, PrefixHit};
