//! A bounded cache of immutable, verified values: least recently used first out once the
//! entries' estimated bytes exceed a budget. Used for content-addressed objects (a key is the
//! digest of its value, so an entry can never be stale) and for loaded sessions (keyed by
//! session, revalidated against the manifest by the caller).
//!
//! Budgets come from `WORKRAIL_CACHE_MB` (default 64, split between the caches, see
//! [`CacheBudget`]); a value read after its eviction is read and verified again.

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use lru::LruCache;

/// The environment variable with the total cache budget, in MiB.
pub const CACHE_MB_ENV: &str = "WORKRAIL_CACHE_MB";

/// The most execution snapshots a process keeps parsed, whatever the byte budget: a snapshot
/// is read again mostly while its node is the newest of its branch, and a long loop writes one
/// per advance (D225).
pub const SNAPSHOT_CACHE_ENTRIES: usize = 1024;

/// The default total budget, in MiB.
pub const DEFAULT_CACHE_MB: usize = 64;

/// The byte budget of each cache of one WorkRail (a process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBudget {
    /// Loaded sessions (events, manifest): a quarter.
    pub sessions: usize,
    /// The sessions' projections kept extendable between calls (the run DAGs, outputs, gaps):
    /// one sixteenth (D205).
    pub projections: usize,
    /// The rows of `workrail sessions` and the Console's sessions page, one per session (its
    /// health and run summaries): one sixteenth.
    pub overviews: usize,
    /// `resume_session`'s per-session summaries (run tips, their notes): one eighth.
    pub resume: usize,
    /// Execution snapshots: a quarter.
    pub snapshots: usize,
    /// Pinned compiled workflows: a quarter.
    pub workflows: usize,
}

impl CacheBudget {
    /// A total of `mib` MiB, split as documented on the fields.
    pub fn of_mib(mib: usize) -> Self {
        let total = mib.saturating_mul(1024 * 1024);
        Self {
            sessions: total / 4,
            projections: total / 16,
            overviews: total / 16,
            resume: total / 8,
            snapshots: total / 4,
            workflows: total / 4,
        }
    }

    /// `WORKRAIL_CACHE_MB` when set (a whole number of MiB, 0 turns caching off), else the
    /// default.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(CACHE_MB_ENV) {
            Err(_) => Ok(Self::of_mib(DEFAULT_CACHE_MB)),
            Ok(value) => value.trim().parse::<usize>().map(Self::of_mib).map_err(|_| {
                format!(
                    "{CACHE_MB_ENV}={value:?} is not a whole number of MiB; set it to e.g. {DEFAULT_CACHE_MB}, or 0 to cache nothing."
                )
            }),
        }
    }
}

impl Default for CacheBudget {
    fn default() -> Self {
        Self::of_mib(DEFAULT_CACHE_MB)
    }
}

struct Inner<K: Hash + Eq, V> {
    entries: LruCache<K, (Arc<V>, usize)>,
    bytes: usize,
}

/// The cache.
pub struct ObjectCache<K: Hash + Eq, V> {
    budget: usize,
    /// The most values held at once (unbounded unless set).
    max_entries: usize,
    /// Whether the most recently stored value stays even when it alone is over the budget (the
    /// session cache, D94); otherwise such a value is not kept.
    keep_newest: bool,
    inner: Mutex<Inner<K, V>>,
}

impl<K: Hash + Eq, V> std::fmt::Debug for ObjectCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("ObjectCache")
            .field("budget", &self.budget)
            .field("bytes", &inner.bytes)
            .field("entries", &inner.entries.len())
            .finish()
    }
}

impl<K: Hash + Eq, V> ObjectCache<K, V> {
    /// An empty cache holding at most `budget` estimated bytes (0: holds nothing).
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            max_entries: usize::MAX,
            keep_newest: false,
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    /// An empty cache holding at most `budget` estimated bytes, except that the most recently
    /// stored value is kept even when it alone is larger (then it is the only entry), unless
    /// `budget` is 0. For loaded sessions (D94): a call on a session needs the whole session in
    /// memory anyway, so keeping the one in use adds nothing to the peak, while dropping it
    /// would make every call on a long session reload it from disk.
    pub fn keeping_newest(budget: usize) -> Self {
        Self {
            keep_newest: budget > 0,
            ..Self::new(budget)
        }
    }

    /// The same cache holding at most `entries` values, whatever their bytes: for small values
    /// that are hot only while new (execution snapshots, D225), so a budget sized for large ones
    /// does not fill with thousands of old small ones.
    pub fn with_max_entries(mut self, entries: usize) -> Self {
        self.max_entries = entries.max(1);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value for `key`, marked as recently used.
    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        self.lock().entries.get(key).map(|(v, _)| Arc::clone(v))
    }

    /// Stores `value` of about `bytes` bytes, then evicts the least recently used entries until
    /// the budget holds. A value larger than the whole budget is not kept, unless the cache
    /// keeps its newest value ([`ObjectCache::keeping_newest`]).
    pub fn insert(&self, key: K, value: Arc<V>, bytes: usize) {
        if bytes > self.budget && !self.keep_newest {
            self.remove(&key);
            return;
        }
        let mut inner = self.lock();
        if let Some((_, old)) = inner.entries.put(key, (value, bytes)) {
            inner.bytes -= old;
        }
        inner.bytes += bytes;
        // The value just stored is the most recently used: it leaves last.
        let floor = usize::from(self.keep_newest);
        while (inner.bytes > self.budget || inner.entries.len() > self.max_entries)
            && inner.entries.len() > floor
        {
            match inner.entries.pop_lru() {
                Some((_, (_, size))) => inner.bytes -= size,
                None => break,
            }
        }
    }

    /// Drops the entry of `key`.
    pub fn remove(&self, key: &K) {
        let mut inner = self.lock();
        if let Some((_, size)) = inner.entries.pop(key) {
            inner.bytes -= size;
        }
    }

    /// The estimated bytes held now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The number of entries held now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The budget, in estimated bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }
}

/// The estimated in-memory size of a value that was read from `file_bytes` bytes of JSON: the
/// parsed form (strings, vectors, maps) takes about twice the text.
pub fn estimate(file_bytes: usize) -> usize {
    file_bytes.saturating_mul(2).saturating_add(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_over_budget_value_is_not_kept_by_default() {
        let cache = ObjectCache::new(100);
        cache.insert(1, Arc::new("small"), 40);
        cache.insert(2, Arc::new("huge"), 150);
        assert!(cache.get(&2).is_none());
        assert_eq!(cache.get(&1).as_deref(), Some(&"small"));
        assert_eq!(cache.bytes(), 40);
    }

    #[test]
    fn a_cache_keeping_its_newest_keeps_an_over_budget_value_alone() {
        let cache = ObjectCache::keeping_newest(100);
        cache.insert(1, Arc::new("small"), 40);
        cache.insert(2, Arc::new("huge"), 150);
        assert_eq!(cache.get(&2).as_deref(), Some(&"huge"));
        assert!(cache.get(&1).is_none(), "everything else leaves");
        assert_eq!((cache.len(), cache.bytes()), (1, 150));
        // The next value within the budget evicts the oversized one, now least recently used.
        cache.insert(3, Arc::new("next"), 60);
        assert!(cache.get(&2).is_none());
        assert_eq!((cache.len(), cache.bytes()), (1, 60));
        cache.insert(4, Arc::new("another"), 30);
        assert_eq!((cache.len(), cache.bytes()), (2, 90));
    }

    /// decision: D225
    #[test]
    fn a_cache_with_an_entry_cap_keeps_only_the_most_recently_used_values() {
        let cache = ObjectCache::new(1000).with_max_entries(2);
        cache.insert(1, Arc::new("a"), 10);
        cache.insert(2, Arc::new("b"), 10);
        assert!(cache.get(&1).is_some());
        cache.insert(3, Arc::new("c"), 10);
        assert!(cache.get(&2).is_none(), "the least recently used leaves");
        assert_eq!(cache.get(&1).as_deref(), Some(&"a"));
        assert_eq!(cache.get(&3).as_deref(), Some(&"c"));
        assert_eq!((cache.len(), cache.bytes()), (2, 20));
    }

    #[test]
    fn a_zero_budget_keeps_nothing_even_when_keeping_the_newest() {
        let cache = ObjectCache::keeping_newest(0);
        cache.insert(1, Arc::new("any"), 1);
        assert!(cache.is_empty());
    }
}
