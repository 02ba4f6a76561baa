//! The backend-facing machinery: what device backends (`halcyon-cpu`, `halcyon-vulkan`,
//! `halcyon-cuda`, `halcyon-hip`) build on. Applications do not need anything here.
//!
//! * [`NativeSemaphore`]: backs a core [`Semaphore`] with a device object (a Vulkan timeline
//!   `VkSemaphore`, an event timeline on a GPU stream). The core keeps the waiters and the
//!   failure state; host signals reach the native object through [`NativeSemaphore::signal`];
//!   the backend reports device progress with [`SemaphoreExt::advance`] (normally from its
//!   [`crate::backend::reactor::Reactor`]).
//! * [`SemaphoreExt`]: the semaphore operations only a backend should perform.
//! * [`DeviceBackend`], [`BufferMemory`], [`ExecutableBackend`], [`Work`], [`ReadSink`]: the
//!   device SPI, re-exported here so a backend finds everything it implements in one place.
//! * The completion reactor ([`crate::backend::reactor`]) and the pending-action executor
//!   ([`crate::backend::ActionQueue`]) are public modules of their own.
//! * [`spin_until`]: bounded spinning, for a backend whose own threads watch for work or
//!   completions before they sleep.
//! * [`loader_image`]: the aligned, zero-padded copy of a binary kernel image handed to a
//!   vendor loader that takes no length.

use std::any::Any;

pub mod reactor;

pub use crate::buffer::BufferMemory;
pub use crate::channel::{
    ChannelBackend, Collective, CollectiveDone, CollectiveKind, HostEngine, HostJob,
};
pub use crate::device::{DeviceBackend, Work};
pub use crate::executable::{find_entry_point, ExecutableBackend};
pub use crate::profile::OperationTrace;
pub use crate::queue::action::{ActionQueue, Issue};
pub use crate::queue::ordered::{fail_in_order, failure_order};
pub use crate::queue::read_sink::ReadSink;
pub use crate::spin::spin_until;

use crate::error::{Error, Result};
use crate::semaphore::Semaphore;

/// `bytes` copied into 8-byte aligned memory (a binary kernel image's ELF headers are read in
/// place, as 64-bit fields) and followed by zeros up to at least `padded_len` bytes: the copy a
/// backend hands a vendor loader that takes no length (`cuModuleLoadData`,
/// `hipModuleLoadData`). Validation keeps the loader's reads that follow the image's own
/// structure inside `bytes`; the padding turns a fixed-size read the validation cannot foresee
/// (a header read whole near the end, a loader that copies a fixed prefix) into a read of
/// zeros of this copy. The first `max(bytes.len(), padded_len)` bytes of the words are the
/// image then the zeros (little-endian words, as on every host these loaders run on).
///
/// ```
/// let words = halcyon::backend::loader_image(b"\x7fELF", 4096);
/// assert_eq!(words.len() * 8, 4096);
/// assert_eq!(words[0], u64::from_le_bytes(*b"\x7fELF\0\0\0\0"));
/// ```
pub fn loader_image(bytes: &[u8], padded_len: usize) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().max(padded_len).div_ceil(8)];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut le = [0u8; 8];
        le[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_le_bytes(le);
    }
    words
}

/// A backend found its device lost (`VK_ERROR_DEVICE_LOST`, a sticky CUDA/HIP fault): every
/// operation in flight on it fails with `error`, and so will every later one. Emits a
/// `halcyon::device` ERROR event with the `tracing` feature; nothing otherwise.
pub fn device_lost(device: &str, error: &Error) {
    crate::log::event!("halcyon::device", ERROR, device, error = %error, "device lost");
    let _ = (device, error);
}

/// A device-native object behind a [`Semaphore`].
///
/// The core calls these hooks; none of them may call back into the same semaphore (`signal`
/// runs with the semaphore's internal lock held, to keep the native and core timelines in the
/// same order). Implementations must be cheap and must not block on the device.
pub trait NativeSemaphore: Send + Sync + 'static {
    /// A host [`Semaphore::signal`] to `value` (already checked to be above the core payload).
    /// Signal the native object (for example `vkSignalSemaphore`) so device work waiting on it is
    /// released. An error aborts the signal: the core timeline does not move.
    fn signal(&self, value: u64) -> Result<()>;

    /// The semaphore failed with `error`. Release whatever device work waits on the native object
    /// (or arrange for it to be failed); the core has already failed every host waiter.
    fn fail(&self, error: &Error);

    /// Someone started waiting for `value` (not yet reached). Backends that watch native objects
    /// from a reactor thread add it to the watched set here (and interrupt the reactor's wait).
    fn watch(&self, value: u64) {
        let _ = value;
    }

    /// The native payload, if reading it is cheap (`vkGetSemaphoreCounterValue`). `None` means
    /// the core payload is authoritative. A value above the core payload is applied as device
    /// progress; an error fails the semaphore.
    fn query(&self) -> Option<Result<u64>> {
        None
    }

    /// The object as [`Any`], so a backend can recognise its own semaphores (for device-side
    /// waits) with `downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

/// Semaphore operations reserved for backends.
pub trait SemaphoreExt {
    /// Creates a semaphore backed by `native`, starting at `initial_value`.
    fn with_native(initial_value: u64, native: Box<dyn NativeSemaphore>) -> Semaphore;

    /// Records that the device reached `value`: moves the payload up to it and wakes the waiters
    /// it reaches. Unlike [`Semaphore::signal`] this never errors: a value at or below the
    /// current payload, or a failed semaphore, is left as is, and the native object is not
    /// signalled again.
    fn advance(&self, value: u64);

    /// The native object, if this semaphore has one.
    fn native(&self) -> Option<&dyn NativeSemaphore>;

    /// The smallest value a registered waiter awaits: the value a reactor should watch.
    fn min_awaited(&self) -> Option<u64>;

    /// The failure, if the semaphore failed before reaching `value`, as [inherited](Error::inherited)
    /// by work the device ran after a native wait for `value`, which must fail with it. A failure after `value` was reached (a later
    /// operation's) is `None`: the work's input was complete.
    fn failure_before(&self, value: u64) -> Option<Error>;
}

impl SemaphoreExt for Semaphore {
    fn with_native(initial_value: u64, native: Box<dyn NativeSemaphore>) -> Semaphore {
        Semaphore::build(initial_value, Some(native))
    }

    fn advance(&self, value: u64) {
        self.advance_to(value)
    }

    fn native(&self) -> Option<&dyn NativeSemaphore> {
        Semaphore::native(self)
    }

    fn min_awaited(&self) -> Option<u64> {
        Semaphore::min_awaited(self)
    }

    fn failure_before(&self, value: u64) -> Option<Error> {
        Semaphore::failure_before(self, value).map(|error| {
            error.inherited(format_args!(
                "waits on a failed semaphore{} (value {value})",
                crate::label::suffix(self.label())
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::loader_image;

    #[test]
    fn loader_images_are_aligned_copies_padded_with_zeros() {
        let short: Vec<u8> = (1..=13).collect();
        let words = loader_image(&short, 4096);
        assert_eq!(words.len() * 8, 4096);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(&bytes[..13], &short[..]);
        assert!(bytes[13..].iter().all(|&b| b == 0));
        // Longer than the padded length: the image whole, rounded up to a word.
        let long = vec![7u8; 5001];
        let words = loader_image(&long, 4096);
        assert_eq!(words.len(), 626);
        assert!(words[..625]
            .iter()
            .all(|&w| w == u64::from_le_bytes([7; 8])));
        assert_eq!(words[625], 7);
        // A length past the image: padding after it.
        assert_eq!(loader_image(&long, 5001 + 4096).len(), 1138);
    }
}
