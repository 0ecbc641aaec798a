//! KV caches of one rank.

pub mod radix;
