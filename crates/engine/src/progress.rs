//! What a run tells while it runs (events) and when it ends (counts).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use oi_api::ObjectKey;

/// One thing the engine did, or saw, somewhere. Holds names and URLs, never key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The hypervisor it happened on, if any.
    pub hypervisor: Option<String>,
    pub cluster: ObjectKey,
    /// The component, if the event concerns one.
    pub component: Option<String>,
    pub message: String,
    /// Set on the last event of a cluster's run: how it ended (a live display counts them).
    pub ended: Option<Ended>,
}

/// How a cluster's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Converged and ready: the event's message is `ready`, the line runs have always shown.
    Ready,
    /// Torn down.
    Deleted,
    /// Not ready, or not planned; the run's summary says why.
    Failed,
}

impl Event {
    /// Whether a plain (line by line) display shows this event: every event but the ends
    /// that only a live display counts (a failure is in the run's summary already).
    pub fn shown_as_line(&self) -> bool {
        matches!(self.ended, None | Some(Ended::Ready))
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(h) = &self.hypervisor {
            write!(f, "[{h}] ")?;
        }
        f.write_str(&self.cluster.name)?;
        if let Some(c) = &self.component {
            write!(f, "/{c}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Counts of what a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pods_created: u64,
    pub pods_replaced: u64,
    pub pods_unchanged: u64,
    pub pods_removed: u64,
    pub files_written: u64,
    /// Mutating CRI calls of every runtime during the run.
    pub mutating_calls: u64,
    /// Objects created, updated or deleted through the clusters' own APIs.
    pub cluster_writes: u64,
}

/// The counts as a run adds to them, from every cluster at once.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub created: AtomicU64,
    pub replaced: AtomicU64,
    pub unchanged: AtomicU64,
    pub removed: AtomicU64,
    pub files: AtomicU64,
    pub cluster_writes: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The counts, with the run's mutating calls.
    pub fn counts(&self, mutating_calls: u64) -> Counts {
        Counts {
            pods_created: self.created.load(Ordering::Relaxed),
            pods_replaced: self.replaced.load(Ordering::Relaxed),
            pods_unchanged: self.unchanged.load(Ordering::Relaxed),
            pods_removed: self.removed.load(Ordering::Relaxed),
            files_written: self.files.load(Ordering::Relaxed),
            mutating_calls,
            cluster_writes: self.cluster_writes.load(Ordering::Relaxed),
        }
    }
}
