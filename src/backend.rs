//! The backend-facing machinery: what device backends (`halcyon-cpu`, `halcyon-vulkan`,
//! `halcyon-cuda`, `halcyon-hip`) build on. Applications do not need anything here.
//!
//! * [`NativeSemaphore`]: backs a core [`Semaphore`] with a device object (a Vulkan timeline
//!   `VkSemaphore`, an event timeline on a GPU stream). The core keeps the waiters and the
//!   failure state; host signals reach the native object through [`NativeSemaphore::signal`];
//!   the backend reports device progress with [`SemaphoreExt::advance`] (normally from its
//!   [`crate::reactor::Reactor`]).
//! * [`SemaphoreExt`]: the semaphore operations only a backend should perform.
//! * [`DeviceBackend`], [`BufferMemory`], [`ExecutableBackend`], [`Work`], [`ReadSink`]: the
//!   device SPI, re-exported here so a backend finds everything it implements in one place.
//! * The completion reactor ([`crate::reactor`]) and the pending-action executor
//!   ([`crate::queue::ActionQueue`]) are public modules of their own.
//! * [`elf`]: checks of a binary kernel image's inner ELF references, before a vendor loader
//!   that takes no length follows them.

use std::any::Any;

pub mod elf;

pub use crate::buffer::BufferMemory;
pub use crate::device::{DeviceBackend, Work};
pub use crate::executable::{
    read_entry_points, read_entry_table, set_entry_value, write_entry_points, write_entry_table,
    ExecutableBackend, MAX_ENTRY_POINTS,
};
pub use crate::queue::ReadSink;

use crate::error::{Error, Result};
use crate::semaphore::Semaphore;

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

    /// The failure, if the semaphore failed before reaching `value`: work the device ran after
    /// a native wait for `value` must fail with it. A failure after `value` was reached (a later
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
        Semaphore::failure_before(self, value)
    }
}
