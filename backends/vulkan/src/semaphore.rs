//! Core semaphores backed by Vulkan timeline semaphores.
//!
//! * A host [`halcyon::Semaphore::signal`] becomes `vkSignalSemaphore`.
//! * [`NativeSemaphore::query`] reads the counter with `vkGetSemaphoreCounterValue`, except while
//!   a submission that signals it is in flight: then the reactor (which settles a submission's
//!   signal fence in fence order, the core's completion marker first) is authoritative.
//! * [`NativeSemaphore::watch`] adds the value to the set the reactor waits on and interrupts
//!   its `vkWaitSemaphores` when the value is lower than what it waits for.
//! * Device submissions that wait on a value some already-submitted work of this device signals
//!   wait in `vkQueueSubmit` (no host round trip); `device_max` records that value.

use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ash::vk;
use halcyon::backend::NativeSemaphore;
use halcyon::{Error, Result, StatusCode};

use crate::context::Context;

static NEXT_SEMAPHORE: AtomicU64 = AtomicU64::new(1);

/// The Vulkan object; destroyed when the last holder (the core semaphore, the reactor's watch
/// set, an in-flight submission) drops it.
pub(crate) struct SemInner {
    pub(crate) context: Arc<Context>,
    pub(crate) handle: vk::Semaphore,
    pub(crate) id: u64,
    /// The highest value that work already passed to `vkQueueSubmit` signals.
    pub(crate) device_max: AtomicU64,
    /// In-flight submissions that signal this semaphore.
    pub(crate) in_flight: AtomicUsize,
}

impl Drop for SemInner {
    fn drop(&mut self) {
        // SAFETY: the last holder is gone: no in-flight submission (they hold an Arc) and no
        // reactor wait (the watch set holds an Arc) uses the handle.
        unsafe { self.context.device.destroy_semaphore(self.handle, None) }
    }
}

/// The [`NativeSemaphore`] of a Vulkan device.
pub(crate) struct VulkanSemaphore {
    pub(crate) inner: Arc<SemInner>,
}

impl VulkanSemaphore {
    pub(crate) fn new(context: &Arc<Context>, initial: u64) -> Result<VulkanSemaphore> {
        let handle = context.create_user_timeline(initial)?;
        Ok(VulkanSemaphore {
            inner: Arc::new(SemInner {
                context: context.clone(),
                handle,
                id: NEXT_SEMAPHORE.fetch_add(1, Ordering::Relaxed),
                device_max: AtomicU64::new(initial),
                in_flight: AtomicUsize::new(0),
            }),
        })
    }
}

impl NativeSemaphore for VulkanSemaphore {
    fn signal(&self, value: u64) -> Result<()> {
        let inner = &self.inner;
        let counter = inner.context.counter(inner.handle)?;
        if counter >= value {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "cannot signal semaphore to {value} from the host: the device already \
                     reached {counter} on it"
                ),
            ));
        }
        let pending = inner.device_max.load(Ordering::Acquire);
        if inner.in_flight.load(Ordering::Acquire) > 0 && pending >= value {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "cannot signal semaphore to {value} from the host: submitted device work \
                     will signal it to {pending}; a timeline only moves up"
                ),
            ));
        }
        inner.context.host_signal(inner.handle, value)
    }

    fn fail(&self, _error: &Error) {
        // Device work only ever waits on values that already-submitted device work signals
        // (everything else waits on the host), so nothing on the device needs releasing: the
        // waiting submissions run once their predecessors do, and the reactor fails their signal
        // fences when it sees that a semaphore they waited on failed.
    }

    fn watch(&self, value: u64) {
        let inner = &self.inner;
        let context = &inner.context;
        // Work already submitted signals `value` (or more): the queue completion threads see it
        // finish and advance the core semaphore, so nothing needs watching or interrupting.
        if inner.in_flight.load(Ordering::Acquire) > 0
            && inner.device_max.load(Ordering::Acquire) >= value
        {
            return;
        }
        let interrupt = {
            let mut watched = context.watched.lock().unwrap_or_else(|p| p.into_inner());
            match watched.get_mut(&inner.id) {
                Some((_, watching)) if *watching <= value => false,
                Some((_, watching)) => {
                    *watching = value;
                    true
                }
                None => {
                    watched.insert(inner.id, (inner.clone(), value));
                    true
                }
            }
        };
        if interrupt {
            context
                .stats
                .watch_interrupts
                .fetch_add(1, Ordering::Relaxed);
            context.interrupt();
        }
    }

    fn query(&self) -> Option<Result<u64>> {
        if self.inner.in_flight.load(Ordering::Acquire) > 0 {
            return None; // the reactor settles it, in fence order
        }
        Some(self.inner.context.counter(self.inner.handle))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
