//! KV-cache transfers from prefill to decode workers, and the KV bytes of one token.

use serde::{Deserialize, Serialize};

use super::limits::{
    count, positive_at_most, positive_within, thousands, MAX_DTYPE_BYTES, MAX_GBPS, MAX_HEADS,
    MAX_KV_BYTES_PER_TOKEN, MAX_LAYERS, MAX_PARALLEL, MIN_GBPS,
};
use super::{Result, SimError};

/// How a transfer's rate is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkModel {
    /// Transfers share each prefill rank's send link and each decode rank's receive link
    /// max-min fairly.
    MaxMin,
    /// Every transfer runs at the full bandwidth, as if links were never shared (Dynamo's model).
    LineRate,
}

/// Which prompt tokens a KV transfer moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferSizing {
    /// The whole prompt.
    FullPrompt,
    /// Only the prompt blocks the decode worker does not already cache.
    DestinationMissing,
}

/// When a disaggregated request's first token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstToken {
    /// When its KV lands on the decode worker: the prefill emitted it, the transfer delivers it.
    KvArrival,
    /// At the end of the decode worker's first pass that includes the request; the decode
    /// worker also reserves blocks only between passes (Dynamo's mocker).
    FirstDecodePass,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// The KV geometry of a model, from which the bytes of one token's KV follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvShape {
    pub num_layers: u32,
    /// KV heads per layer (1 for a latent).
    pub num_kv_heads: u32,
    /// Values per head (the latent width for a latent).
    pub head_dim: u32,
    /// Bytes per KV element (2 for bf16/fp16, 1 for fp8).
    pub dtype_bytes: u32,
    /// A latent KV (DeepSeek-style MLA): one vector per layer and token, no separate K and V,
    /// kept whole by every tensor-parallel GPU.
    #[serde(default, skip_serializing_if = "is_false")]
    pub latent: bool,
}

impl KvShape {
    /// KV bytes of one token on one GPU of a `tp`-way tensor-parallel rank: layers x 2 (K and
    /// V) x ceil(kv heads / tp) x head dim x dtype bytes (a model with fewer KV heads than GPUs
    /// replicates a head rather than split it); a latent: layers x width x dtype bytes on
    /// every GPU. `tp` 1 gives the whole model's KV per token, what a transfer moves.
    pub fn bytes_per_token(&self, tp: u32) -> u64 {
        let per_layer = if self.latent {
            u64::from(self.head_dim)
        } else {
            2 * u64::from(self.num_kv_heads.div_ceil(tp.max(1))) * u64::from(self.head_dim)
        };
        u64::from(self.num_layers) * per_layer * u64::from(self.dtype_bytes)
    }

    /// A shape from its JSON document (a `kv_shape` section on its own).
    pub fn from_json(text: &str) -> Result<Self> {
        super::parse_json(text, "kv_shape")
    }

    /// `bytes_per_token(tp)` of a shape not yet checked (one handed in on its own, not in a
    /// configuration): the shape at dotted path `section` and `tp` are checked first, so the
    /// product cannot wrap.
    pub fn checked_bytes_per_token(&self, section: &str, tp: i64) -> Result<u64> {
        self.validate(section)?;
        let tp = u32::try_from(tp).map_err(|_| {
            SimError::config(
                "tp",
                format!(
                    "must be between 1 and {}, got {tp}",
                    thousands(u64::from(MAX_PARALLEL))
                ),
            )
        })?;
        count("tp", tp, MAX_PARALLEL)?;
        Ok(self.bytes_per_token(tp))
    }

    pub(super) fn validate(&self, section: &str) -> Result<()> {
        for (name, value, max) in [
            ("num_layers", self.num_layers, MAX_LAYERS),
            ("num_kv_heads", self.num_kv_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_HEADS),
            ("dtype_bytes", self.dtype_bytes, MAX_DTYPE_BYTES),
        ] {
            count(&format!("{section}.{name}"), value, max)?;
        }
        // Within the bounds above the product fits u64; the bytes it gives are bounded like
        // kv_bytes_per_token.
        let bytes = self.bytes_per_token(1) as f64;
        if bytes > MAX_KV_BYTES_PER_TOKEN {
            return Err(SimError::config(
                section,
                format!(
                    "gives {bytes:e} KV bytes per token, more than the limit of \
                     {MAX_KV_BYTES_PER_TOKEN:e}"
                ),
            ));
        }
        Ok(())
    }
}

/// KV-cache transfers from prefill to decode workers (disaggregated mode).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvTransferConfig {
    /// Each prefill rank's sending link (GB/s, 1e9 bytes/s). Unset: transfers are instant.
    pub bandwidth_gbps: Option<f64>,
    /// Each decode rank's receiving link (GB/s); unset: `bandwidth_gbps`.
    pub decode_bandwidth_gbps: Option<f64>,
    /// Unset: `max_min` whenever a bandwidth is set.
    pub link_model: Option<LinkModel>,
    pub sizing: Option<TransferSizing>,
    /// Unset: `kv_arrival`.
    pub first_token: Option<FirstToken>,
    /// KV bytes of one token; or give `kv_shape`.
    pub kv_bytes_per_token: Option<f64>,
    pub kv_shape: Option<KvShape>,
}

impl KvTransferConfig {
    pub fn sizing(&self) -> TransferSizing {
        self.sizing.unwrap_or(TransferSizing::FullPrompt)
    }

    pub fn first_token(&self) -> FirstToken {
        self.first_token.unwrap_or(FirstToken::KvArrival)
    }

    pub fn link_model(&self) -> LinkModel {
        self.link_model.unwrap_or(LinkModel::MaxMin)
    }

    /// The send and receive link bandwidths (GB/s), when a bandwidth is set.
    pub fn bandwidths_gbps(&self) -> Option<(f64, f64)> {
        self.bandwidth_gbps
            .map(|send| (send, self.decode_bandwidth_gbps.unwrap_or(send)))
    }

    /// Bytes of one token's KV, whole model (0 when neither it nor a shape is given).
    pub fn bytes_per_token(&self) -> f64 {
        match (&self.kv_bytes_per_token, &self.kv_shape) {
            (Some(b), _) => *b,
            (None, Some(shape)) => shape.bytes_per_token(1) as f64,
            (None, None) => 0.0,
        }
    }

    /// Check the section; `model_named`: a role's timing names the model (an `aic` section),
    /// whose KV geometry the Python layer fills in before a replay, so a bandwidth may come
    /// without KV bytes per token.
    pub(super) fn validate(&self, model_named: bool) -> Result<()> {
        if let Some(b) = self.bandwidth_gbps {
            positive_within("kv_transfer.bandwidth_gbps", b, MIN_GBPS, MAX_GBPS)?;
        }
        if let Some(b) = self.decode_bandwidth_gbps {
            positive_within("kv_transfer.decode_bandwidth_gbps", b, MIN_GBPS, MAX_GBPS)?;
            if self.bandwidth_gbps.is_none() {
                return Err(SimError::config(
                    "kv_transfer.decode_bandwidth_gbps",
                    "needs kv_transfer.bandwidth_gbps (the prefill side) as well",
                ));
            }
        }
        if self.link_model.is_some() && self.bandwidth_gbps.is_none() {
            return Err(SimError::config(
                "kv_transfer.link_model",
                "needs kv_transfer.bandwidth_gbps; without a bandwidth transfers are instant",
            ));
        }
        if let Some(b) = self.kv_bytes_per_token {
            positive_at_most("kv_transfer.kv_bytes_per_token", b, MAX_KV_BYTES_PER_TOKEN)?;
        }
        if let Some(shape) = &self.kv_shape {
            shape.validate("kv_transfer.kv_shape")?;
        }
        match (self.kv_bytes_per_token.is_some(), self.kv_shape.is_some()) {
            (true, true) => Err(SimError::config(
                "kv_transfer.kv_bytes_per_token",
                "give either kv_bytes_per_token or kv_shape, not both",
            )),
            (false, false) if self.bandwidth_gbps.is_some() && !model_named => {
                Err(SimError::config(
                    "kv_transfer.kv_bytes_per_token",
                    "required with a bandwidth (or give kv_transfer.kv_shape, or time the roles \
                     with an aic section, whose model gives it)",
                ))
            }
            _ => Ok(()),
        }
    }
}
