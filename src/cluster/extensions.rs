//! State the layers above the transport keep per [`Cluster`] handle,
//! shared by its clones, found by its type: the transport holds it for them
//! and knows nothing of it (the throttled reporters, the deny caches'
//! invalidation hub and the primitives' outcome counts live here, so that
//! `cluster/` imports nothing of the features built on it). Of all that,
//! the handle shows one thing itself: the outcome counts, in
//! [`Cluster::stats`], through the [`PrimitiveCounts`] they are told by.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::Cluster;
use super::stats::{PrimitiveCounts, PrimitiveStats};

/// One value per type, made on first use.
#[derive(Default)]
pub(super) struct Extensions {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// What [`Cluster::stats`] shows of the primitives, once told.
    primitives: OnceLock<Arc<dyn PrimitiveCounts>>,
}

impl Extensions {
    /// Every primitive's counts: none before the first primitive is built.
    pub(super) fn primitives(&self) -> Vec<PrimitiveStats> {
        self.primitives
            .get()
            .map(|counts| counts.snapshot())
            .unwrap_or_default()
    }
}

impl Cluster {
    /// This handle's value of type `T` (one per handle and its clones),
    /// made by `make` on first use. Not for the hot path: it takes a lock.
    pub(crate) fn extension<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let mut values = self
            .inner
            .extensions
            .values
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let id = TypeId::of::<T>();
        if let Some(value) = values.get(&id).and_then(|v| v.clone().downcast::<T>().ok()) {
            return value;
        }
        let value = Arc::new(make());
        values.insert(id, value.clone());
        value
    }

    /// Shows `counts` in [`Stats::primitives`](super::Stats::primitives).
    /// The first call wins: a handle has one set of counts, and its keeper
    /// tells the handle each time it hands them out.
    pub(crate) fn show_primitives(&self, counts: Arc<dyn PrimitiveCounts>) {
        self.inner.extensions.primitives.get_or_init(|| counts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle that never connects: the slot needs no server.
    async fn unconnected() -> Cluster {
        Cluster::builder(["redis://127.0.0.1:1"])
            .lazy_connect(true)
            .build()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn one_value_per_type_shared_by_clones_made_once() {
        let cluster = unconnected().await;
        let first = cluster.extension(|| String::from("first"));
        let again = cluster.clone().extension(|| String::from("second"));
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(*cluster.extension(|| 7_u32), 7);
        assert_eq!(*cluster.extension(|| 8_u32), 7);
        assert_eq!(*cluster.extension(String::new), "first");
    }

    struct Counts(&'static str);

    impl PrimitiveCounts for Counts {
        fn snapshot(&self) -> Vec<PrimitiveStats> {
            vec![PrimitiveStats {
                kind: self.0.into(),
                ..PrimitiveStats::default()
            }]
        }
    }

    #[tokio::test]
    async fn stats_show_the_first_counts_told() {
        let cluster = unconnected().await;
        assert!(cluster.stats().primitives.is_empty());
        cluster.show_primitives(Arc::new(Counts("first")));
        cluster.clone().show_primitives(Arc::new(Counts("second")));
        let stats = cluster.stats();
        assert_eq!(stats.primitives.len(), 1);
        assert!(stats.get("first", "").is_some());
    }
}
