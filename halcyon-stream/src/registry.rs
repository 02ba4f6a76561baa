//! [`Registry`]: the live objects of one kind behind a [`StreamApi`](super::StreamApi)'s
//! handles, so that a backend checks every handle it is given before it reaches the driver.
//!
//! [`StreamApi`](super::StreamApi)'s methods are safe, and its handles are plain numbers a caller
//! can make up, keep after destroying what they named, or pass to the wrong device's API. Vendor
//! APIs dereference them unchecked (a `CUevent` or `hipStream_t` is a pointer into the driver),
//! so a stale or made-up handle would be undefined behaviour. A backend keeps each kind of
//! object in a registry instead: a handle that is not live there is an
//! [`StatusCode::InvalidArgument`] error naming it, and a call holds the object (an [`Arc`]) for
//! as long as it uses it, so destroying it on another thread meanwhile only removes it from the
//! registry. The vendor object is destroyed by its `Drop`, when the registry and the last call
//! using it let go; [`Registry::remove`] hands the registry's reference back so that a destroy
//! that finds itself the last holder can make the vendor call itself and report its error.
//!
//! Lookups take a read lock and clone an `Arc`; inserting and removing take the write lock
//! briefly. No vendor call is ever made under the lock. Handles are hashed with one multiply
//! (a private `HandleHasher`) rather than the standard library's SipHash: every driver call looks
//! handles up, and they are addresses chosen by the driver, not keys an attacker picks.
//!
//! ```
//! use halcyon_stream::registry::Registry;
//! use halcyon::StatusCode;
//!
//! let events = Registry::new("CUDA", "event");
//! events.insert(0x10, "an event");
//! assert_eq!(*events.get(0x10).unwrap(), "an event");
//! let err = events.get(0x20).unwrap_err();
//! assert_eq!(err.code(), StatusCode::InvalidArgument);
//! assert_eq!(err.message(), "0x20 is not a live CUDA event");
//! drop(events.remove(0x10).unwrap());
//! assert!(events.get(0x10).is_err());
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use halcyon::{Error, Result, StatusCode};

/// Hashes a handle (a `u64`) with one 64×64→128-bit multiply whose halves are folded
/// together, so both the low bits the table indexes by and the high bits it tags with depend
/// on every bit of the handle (driver handles are aligned addresses: their low bits are zero).
#[derive(Clone, Copy, Debug, Default)]
struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, handle: u64) {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let product = u128::from(self.0 ^ handle) * u128::from(K);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Table<T> = HashMap<u64, Arc<T>, BuildHasherDefault<HandleHasher>>;

/// Live objects of one kind by handle (see the [module docs](self)).
pub struct Registry<T> {
    api: &'static str,
    kind: &'static str,
    live: RwLock<Table<T>>,
}

impl<T> Registry<T> {
    /// An empty registry of `kind` objects (`"stream"`, `"event"`) of the API named `api`
    /// (`"CUDA"`, `"HIP"`): the two name the object in errors.
    pub fn new(api: &'static str, kind: &'static str) -> Self {
        Registry {
            api,
            kind,
            live: RwLock::default(),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Table<T>> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table<T>> {
        self.live.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `object` as `handle` and returns a reference to it. An object already
    /// registered as `handle` is replaced (and destroyed once its holders let go): a vendor
    /// handle is only reused after the object it named was destroyed.
    pub fn insert(&self, handle: u64, object: T) -> Arc<T> {
        let object = Arc::new(object);
        self.write().insert(handle, object.clone());
        object
    }

    /// The error for a handle that is not live: `InvalidArgument`, naming the handle.
    pub fn missing(&self, handle: u64) -> Error {
        Error::new(
            StatusCode::InvalidArgument,
            format!("{handle:#x} is not a live {} {}", self.api, self.kind),
        )
    }

    /// The object registered as `handle`, held for as long as the caller keeps the `Arc`;
    /// `InvalidArgument` if there is none (never registered, or removed).
    pub fn get(&self, handle: u64) -> Result<Arc<T>> {
        self.read()
            .get(&handle)
            .cloned()
            .ok_or_else(|| self.missing(handle))
    }

    /// Whether `handle` is live.
    pub fn contains(&self, handle: u64) -> bool {
        self.read().contains_key(&handle)
    }

    /// Unregisters `handle` and returns the registry's reference; `InvalidArgument` if it is
    /// not live. Only one of several concurrent removals of a handle succeeds.
    pub fn remove(&self, handle: u64) -> Result<Arc<T>> {
        self.write()
            .remove(&handle)
            .ok_or_else(|| self.missing(handle))
    }

    /// Keeps only the objects for which `keep` returns `true`; the others' references are
    /// returned (dropped by the caller outside the lock, where their `Drop` may call the
    /// vendor API).
    pub fn retain(&self, mut keep: impl FnMut(u64, &T) -> bool) -> Vec<Arc<T>> {
        let mut removed = Vec::new();
        self.write().retain(|&handle, object| {
            let kept = keep(handle, object);
            if !kept {
                removed.push(object.clone());
            }
            kept
        });
        removed
    }

    /// Unregisters every object and returns their references (for an API being dropped).
    pub fn drain(&self) -> Vec<Arc<T>> {
        self.write().drain().map(|(_, object)| object).collect()
    }

    /// How many objects are live.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no object is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("api", &self.api)
            .field("kind", &self.kind)
            .field("live", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_object_lives_on_with_its_holders_but_not_in_the_registry() {
        let registry = Registry::new("HIP", "stream");
        let held = registry.insert(7, String::from("s"));
        let during_a_call = registry.get(7).unwrap();
        let removed = registry.remove(7).unwrap();
        assert!(!registry.contains(7));
        assert_eq!(
            registry.remove(7).unwrap_err().message(),
            "0x7 is not a live HIP stream",
            "a second destroy is refused"
        );
        assert_eq!(Arc::strong_count(&removed), 3);
        drop((held, during_a_call));
        assert!(Arc::try_unwrap(removed).is_ok(), "the last holder");
    }

    #[test]
    fn aligned_handles_spread_over_low_and_high_bits() {
        use std::collections::HashSet;
        use std::hash::BuildHasher;
        let hashes: Vec<u64> = (1..=4096u64)
            .map(|i| BuildHasherDefault::<HandleHasher>::default().hash_one(i << 12))
            .collect();
        // Page-aligned handles (low 12 bits zero) still differ in the bits a table indexes by
        // (the low 10 here) and tags with (the top 7).
        let low: HashSet<u64> = hashes.iter().map(|h| h & 0x3ff).collect();
        let top: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(low.len() > 950, "{} distinct low values", low.len());
        assert_eq!(top.len(), 128);
        let unique: HashSet<&u64> = hashes.iter().collect();
        assert_eq!(unique.len(), hashes.len());
    }

    #[test]
    fn retain_hands_back_what_it_removed() {
        let registry = Registry::new("CUDA", "function");
        for handle in 0..6 {
            registry.insert(handle, handle % 2);
        }
        let mut removed: Vec<u64> = registry
            .retain(|_, &module| module == 0)
            .into_iter()
            .map(|f| *f)
            .collect();
        removed.sort();
        assert_eq!(removed, [1, 1, 1]);
        assert_eq!(registry.len(), 3);
        assert_eq!(registry.drain().len(), 3);
        assert!(registry.is_empty());
    }
}
