//! Read deliveries per batch mode: how many reads of TCP streams returned
//! data, and how many bytes they returned.
//!
//! One pair of counters per mode ([`BatchMode`]), each pair on its own
//! cache line, bumped with two relaxed `fetch_add`s by the task whose read
//! returned data. Relaxed is enough: the counters are independent tallies,
//! read by [`DeliveryCounters::snapshot`] one by one, and a snapshot is
//! allowed to see a delivery's count without its bytes for an instant.
//! The counters live in the runtime's shared state, beside the scheduler's
//! other subsystems; the reactor only reports readiness and knows nothing
//! of what the reads that follow return. They belong to `net`, which
//! knows the modes; `stats` only holds the snapshot's types.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

use super::BatchMode;
use crate::stats::{Deliveries, DeliveryStats};

/// The two counters of one mode.
#[derive(Debug, Default)]
struct ModeCounters {
    deliveries: AtomicU64,
    bytes: AtomicU64,
}

impl ModeCounters {
    fn read(&self) -> Deliveries {
        Deliveries {
            count: self.deliveries.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
        }
    }
}

/// A runtime's delivery counters (see the module docs). Any thread adds;
/// [`Handle::stats`](crate::Handle::stats) reads.
#[derive(Debug, Default)]
pub(crate) struct DeliveryCounters {
    /// Indexed by [`BatchMode::index`].
    modes: [CachePadded<ModeCounters>; BatchMode::COUNT],
}

impl DeliveryCounters {
    /// Counts one read in `mode` that returned `bytes` bytes; a read that
    /// returned nothing (end-of-file) is not a delivery.
    pub(crate) fn record(&self, mode: BatchMode, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let counters = &self.modes[mode.index()];
        counters.deliveries.fetch_add(1, Relaxed);
        counters.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// The counters as they are now.
    pub(crate) fn snapshot(&self) -> DeliveryStats {
        DeliveryStats {
            off: self.modes[BatchMode::Off.index()].read(),
            fixed: self.modes[BatchMode::Fixed.index()].read(),
            adaptive: self.modes[BatchMode::Adaptive.index()].read(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_per_mode_and_ignores_end_of_file() {
        let counters = DeliveryCounters::default();
        counters.record(BatchMode::Off, 10);
        counters.record(BatchMode::Fixed, 1000);
        counters.record(BatchMode::Fixed, 24);
        counters.record(BatchMode::Adaptive, 0);
        let stats = counters.snapshot();
        assert_eq!(
            stats.off,
            Deliveries {
                count: 1,
                bytes: 10
            }
        );
        assert_eq!(
            stats.fixed,
            Deliveries {
                count: 2,
                bytes: 1024
            }
        );
        assert_eq!(stats.adaptive, Deliveries::default());
        assert_eq!(stats.fixed.bytes_per_delivery(), 512.0);
        assert_eq!(
            stats.total(),
            Deliveries {
                count: 3,
                bytes: 1034
            }
        );
    }
}
