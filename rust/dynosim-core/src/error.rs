//! The errors of the simulation core.

use thiserror::Error;

/// Everything that can go wrong in the core. Each variant names what is wrong and where, so the
/// binding layer can turn it into a precise Python exception.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SimError {
    /// A configuration value is out of range; `field` is its dotted path (`engine.block_size`).
    #[error("{field}: {message}")]
    Config { field: String, message: String },
    /// The configuration document itself could not be read (unknown field, wrong type).
    #[error("invalid configuration: {0}")]
    ConfigFormat(String),
    /// The columnar workload handed to the core is inconsistent; `request` is its row index.
    #[error("workload request {request}: {message}")]
    Workload { request: usize, message: String },
    /// The workload arrays disagree in shape.
    #[error("workload: {0}")]
    WorkloadShape(String),
    /// A trace file is unreadable or has a bad row; the message names the file, line, field
    /// and value.
    #[error("{0}")]
    Trace(String),
    /// The KV-transfer link model failed (an invariant of the allocator broke).
    #[error("KV transfer links: {0}")]
    Links(#[from] crate::links::LinkError),
    /// A [`crate::control::Control`] asked a replay (or a parse) to stop before it ended.
    #[error("interrupted after {finished} requests")]
    Interrupted { finished: u64 },
    /// An internal invariant broke (a bug): the replay stops rather than hang or report nonsense.
    #[error("internal simulation error: {0}")]
    Internal(String),
}

impl SimError {
    pub(crate) fn config(field: &str, message: impl Into<String>) -> Self {
        SimError::Config {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, SimError>;
