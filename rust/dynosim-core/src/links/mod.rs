//! Max-min fair bandwidth sharing for KV-cache transfers between GPU ranks.
//!
//! A *flow* (one transfer) crosses a set of *links*; in the simulator that is
//! the prefill rank's sending link and the decode rank's receiving link. Rates
//! are the max-min fair allocation computed by progressive filling (Bertsekas &
//! Gallager, *Data Networks*, 6.5).
//!
//! Units everywhere: bytes, milliseconds of simulated time, and bytes per ms
//! for capacities, caps and rates (1 GB/s = 1e6 bytes/ms).
//!
//! Two layers:
//! * [`max_min_rates`]: a pure solver over an explicit list of flows.
//! * [`LinkNetwork`]: the stateful version driven by the event loop. It keeps
//!   flows with identical (link set, cap) in one *group*, since max-min
//!   fairness gives them identical rates, re-solves only the connected
//!   component touched by a change, and keys each group's next finish in an
//!   indexed heap that is re-keyed in place.
//!
//! Nothing here iterates a hash map, so identical call sequences give
//! bit-identical results.
//!
//! Files: `error` (what is turned down, and the input checks), `solver` (the
//! pure solver and the progressive filling both layers run), `network` (the
//! stateful layer and its groups, ordered by next finish in the crate's
//! `min_heap`); `tests` exercises the network as a whole.

mod error;
mod network;
mod solver;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use error::LinkError;
pub use network::{FlowId, LinkNetwork};
pub use solver::max_min_rates;
