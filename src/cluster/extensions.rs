//! State the layers above the transport keep per [`Cluster`] handle,
//! shared by its clones, found by its type: the transport holds it for them
//! and knows nothing of it (the throttled reporters and the deny caches'
//! invalidation hub live here, say, so that `cluster/` imports nothing of
//! the features built on it).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::Cluster;

/// One value per type, made on first use.
#[derive(Default)]
pub(super) struct Extensions {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_value_per_type_shared_by_clones_made_once() {
        let cluster = Cluster::builder(["redis://127.0.0.1:1"])
            .lazy_connect(true)
            .build()
            .await
            .unwrap();
        let first = cluster.extension(|| String::from("first"));
        let again = cluster.clone().extension(|| String::from("second"));
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(*cluster.extension(|| 7_u32), 7);
        assert_eq!(*cluster.extension(|| 8_u32), 7);
        assert_eq!(*cluster.extension(String::new), "first");
    }
}
