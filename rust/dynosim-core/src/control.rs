//! Watching and stopping long work (a replay, a trace being parsed) from another thread.
//!
//! A replay holding a [`Control`] keeps its count of finished requests current and, between
//! events, looks at its interrupt flag: once set, the replay stops with
//! [`SimError::Interrupted`] within one turn of its event loop (microseconds), so a user's
//! Ctrl-C or a cancelled sweep never waits for a long replay to end. Both are relaxed atomics:
//! the event loop pays one load and one store per turn. The Mooncake parser counts rows read
//! instead, and looks every few thousand rows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Result, SimError};

/// A replay's progress and its stop switch, shared with the threads that watch it. One control
/// may serve several replays at once (a sweep's): interrupting it stops them all, and its count
/// is then that of whichever replay reported last.
#[derive(Debug, Default)]
pub struct Control {
    finished: AtomicU64,
    interrupted: AtomicBool,
}

impl Control {
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests finished (completed or rejected) so far.
    pub fn finished(&self) -> u64 {
        self.finished.load(Ordering::Relaxed)
    }

    /// Ask every replay holding this control to stop.
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::Relaxed);
    }

    pub fn is_interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed)
    }

    /// Record `finished` requests (rows, for a parser); `Err(Interrupted)` once the work
    /// should stop.
    pub(crate) fn checkpoint(&self, finished: usize) -> Result<()> {
        self.finished.store(finished as u64, Ordering::Relaxed);
        if self.is_interrupted() {
            return Err(SimError::Interrupted {
                finished: finished as u64,
            });
        }
        Ok(())
    }
}
