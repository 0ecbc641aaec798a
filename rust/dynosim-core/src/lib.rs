//! dynosim-core: a deterministic discrete-event simulator of LLM serving clusters.
//!
//! Plain Rust with no Python in it: the `dynosim-py` crate binds it as `dynosim._core`, and a
//! Rust program can call [`replay::replay`] directly.

pub mod arrival;
pub mod block_ids;
pub mod config;
pub mod control;
pub mod error;
pub mod event_queue;
pub mod explain;
pub mod kv;
pub mod links;
mod marked;
mod min_heap;
pub mod mooncake;
pub mod offload;
pub mod prefetch;
pub mod prepared;
pub mod replay;
pub mod report;
pub mod router;
pub mod scheduler;
pub mod stats;
pub mod time_series;
pub mod timing;
pub mod transfer;
pub mod workload;

pub use config::SimConfig;
pub use control::Control;
pub use error::{Result, SimError};
pub use mooncake::{
    parse_mooncake, parse_mooncake_watched, read_mooncake, MooncakeRequests, MooncakeRows,
    SessionKey,
};
pub use prepared::PreparedWorkload;
pub use replay::{replay, replay_prepared};
pub use report::Report;
pub use workload::{Columns, Workload};
