//! What the allocator turns down: [`LinkError`], and the input checks shared by
//! [`max_min_rates`](super::max_min_rates) and [`LinkNetwork`](super::LinkNetwork).

use thiserror::Error;

/// Invalid input, or a network state that cannot make progress.
///
/// `flow` fields hold the index into the `flows` slice for
/// [`max_min_rates`](super::max_min_rates), or the id the flow has (or would
/// have received) for [`LinkNetwork`](super::LinkNetwork).
/// Capacities, caps and rates are in bytes/ms, sizes in bytes, times in ms.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LinkError {
    /// A flow names a link that does not exist.
    #[error("flow {flow}: link id {link} is out of range (there are {n_links} links)")]
    LinkOutOfRange {
        flow: u64,
        link: usize,
        n_links: usize,
    },
    /// A link capacity is NaN, infinite, zero or negative.
    #[error("link {link}: capacity {value} bytes/ms must be finite and > 0")]
    BadCapacity { link: usize, value: f64 },
    /// A rate cap is NaN, zero or negative (+infinity means no cap).
    #[error("flow {flow}: rate cap {value} bytes/ms must be > 0 (not NaN)")]
    BadCap { flow: u64, value: f64 },
    /// A flow crosses no links.
    #[error("flow {flow}: crosses no links")]
    EmptyFlow { flow: u64 },
    /// `caps` and `flows` differ in length.
    #[error("{caps} rate caps given for {flows} flows")]
    CapsLength { flows: usize, caps: usize },
    /// A flow size is NaN, infinite or negative.
    #[error("flow {flow}: size {value} bytes must be finite and >= 0")]
    BadBytes { flow: u64, value: f64 },
    /// A time is NaN or infinite.
    #[error("time {now_ms} ms must be finite")]
    BadTime { now_ms: f64 },
    /// A call is earlier than the previous one (beyond the tolerance).
    #[error("time {now_ms} ms is before the network clock {clock_ms} ms")]
    TimeWentBack { now_ms: f64, clock_ms: f64 },
    /// `start_flow` came after a finish that was never popped.
    #[error(
        "flow {flow} finished at {finish_ms} ms, before now ({now_ms} ms): pop finished flows first"
    )]
    MissedFinish {
        flow: u64,
        finish_ms: f64,
        now_ms: f64,
    },
    /// An active flow has no finite finish time (its rate underflowed).
    #[error(
        "flow {flow}: rate {rate} bytes/ms leaves {bytes_left} bytes with no finite finish time"
    )]
    Stalled {
        flow: u64,
        rate: f64,
        bytes_left: f64,
    },
}

/// Checks that every capacity is finite and > 0.
pub(super) fn check_capacities(capacities: &[f64]) -> Result<(), LinkError> {
    match capacities
        .iter()
        .enumerate()
        .find(|(_, c)| !(c.is_finite() && **c > 0.0))
    {
        Some((link, &value)) => Err(LinkError::BadCapacity { link, value }),
        None => Ok(()),
    }
}

/// Checks a flow's link list against the number of links.
pub(super) fn check_links(flow: u64, links: &[usize], n_links: usize) -> Result<(), LinkError> {
    if links.is_empty() {
        return Err(LinkError::EmptyFlow { flow });
    }
    match links.iter().find(|&&l| l >= n_links) {
        Some(&link) => Err(LinkError::LinkOutOfRange {
            flow,
            link,
            n_links,
        }),
        None => Ok(()),
    }
}

/// Checks a rate cap; +infinity means "no cap".
pub(super) fn check_cap(flow: u64, cap: f64) -> Result<f64, LinkError> {
    if cap.is_nan() || cap <= 0.0 {
        return Err(LinkError::BadCap { flow, value: cap });
    }
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::super::{max_min_rates, LinkNetwork};
    use super::*;

    #[test]
    fn errors_name_index_and_value() {
        let e = max_min_rates(&[vec![0, 5]], &[1.0, 1.0], None).unwrap_err();
        assert_eq!(
            e,
            LinkError::LinkOutOfRange {
                flow: 0,
                link: 5,
                n_links: 2
            }
        );
        assert!(e.to_string().contains("flow 0") && e.to_string().contains("link id 5"));

        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = max_min_rates(&[vec![0]], &[1.0, bad], None).unwrap_err();
            assert!(matches!(e, LinkError::BadCapacity { link: 1, .. }), "{e}");
            assert!(e.to_string().contains("link 1") && e.to_string().contains(&bad.to_string()));
            assert!(LinkNetwork::new(vec![bad]).is_err());
        }

        for bad in [0.0, -2.5, f64::NAN, f64::NEG_INFINITY] {
            let e = max_min_rates(&[vec![0], vec![0]], &[1.0], Some(&[1.0, bad])).unwrap_err();
            assert!(matches!(e, LinkError::BadCap { flow: 1, .. }), "{e}");
            assert!(e.to_string().contains("flow 1") && e.to_string().contains(&bad.to_string()));
        }

        let e = max_min_rates(&[vec![0], vec![]], &[1.0], None).unwrap_err();
        assert_eq!(e, LinkError::EmptyFlow { flow: 1 });
        assert!(e.to_string().contains("flow 1"));

        let e = max_min_rates(&[vec![0]], &[1.0], Some(&[])).unwrap_err();
        assert_eq!(e, LinkError::CapsLength { flows: 1, caps: 0 });
    }
}
