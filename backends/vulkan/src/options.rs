//! How a Vulkan device is created ([`VulkanDeviceOptions`]) and simulated driver failures
//! ([`FaultInjector`]) for testing how an application survives them.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use ash::vk;

/// How [`crate::create_device_with`] creates a device. `Default` is what [`crate::create_device`]
/// uses.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct VulkanDeviceOptions {
    /// The most compute queues to expose (each one Vulkan queue of the compute family); at
    /// least 1 is always used. Default 4.
    pub max_queues: u32,
    /// How many queues of a dedicated transfer family (one with `TRANSFER` but neither
    /// `COMPUTE` nor `GRAPHICS`, a GPU's copy engine) to expose after the compute queues, where
    /// the device has one. They run fills, updates, copies, reads and writes, not dispatches
    /// ([`halcyon::QueueCapabilities::TRANSFER`]; find them with
    /// [`halcyon::Device::queue_affinity`]). While they are in use, buffers are shared
    /// `VK_SHARING_MODE_CONCURRENT` between the two families. Default 1; 0 uses none.
    pub transfer_queues: u32,
    /// Treat every host-visible memory type as non-coherent: mapping guards flush and
    /// invalidate (in `nonCoherentAtomSize` steps) even where the driver's memory is coherent.
    /// Flushing coherent memory is valid Vulkan, so this exercises the non-coherent path on
    /// drivers that have none (lavapipe). Default `false`.
    pub force_non_coherent: bool,
    /// Calibrate profiling timestamps by a measured round trip (a submission that only writes
    /// a timestamp, timed on the host) even where the device offers calibrated timestamps
    /// (`VK_EXT_calibrated_timestamps` / `VK_KHR_calibrated_timestamps`). The device is then
    /// created without the extension. This exercises the fallback path on drivers that have
    /// the extension (lavapipe). Default `false`.
    pub force_measured_calibration: bool,
    /// Simulated driver failures (see [`FaultInjector`]). Default `None`.
    pub faults: Option<FaultInjector>,
}

impl VulkanDeviceOptions {
    /// Sets [`VulkanDeviceOptions::max_queues`].
    pub fn with_max_queues(mut self, max_queues: u32) -> Self {
        self.max_queues = max_queues;
        self
    }

    /// Sets [`VulkanDeviceOptions::transfer_queues`].
    pub fn with_transfer_queues(mut self, transfer_queues: u32) -> Self {
        self.transfer_queues = transfer_queues;
        self
    }

    /// Sets [`VulkanDeviceOptions::force_non_coherent`].
    pub fn with_force_non_coherent(mut self, force_non_coherent: bool) -> Self {
        self.force_non_coherent = force_non_coherent;
        self
    }

    /// Sets [`VulkanDeviceOptions::force_measured_calibration`].
    pub fn with_force_measured_calibration(mut self, force_measured_calibration: bool) -> Self {
        self.force_measured_calibration = force_measured_calibration;
        self
    }

    /// Sets [`VulkanDeviceOptions::faults`].
    pub fn with_faults(mut self, faults: Option<FaultInjector>) -> Self {
        self.faults = faults;
        self
    }
}

impl Default for VulkanDeviceOptions {
    fn default() -> Self {
        VulkanDeviceOptions {
            max_queues: 4,
            transfer_queues: 1,
            force_non_coherent: false,
            force_measured_calibration: false,
            faults: None,
        }
    }
}

/// Makes the device report driver failures on demand, for testing failure handling without a
/// broken GPU.
///
/// Each injected failure stands in for the `VkResult` a real driver would return at that
/// point, and the device handles it exactly as it would the real one:
///
/// * [`FaultInjector::fail_next_submit`]: the next `vkQueueSubmit` is not made and reports the
///   result instead. The submission's signal fence fails with it; `ERROR_DEVICE_LOST` also
///   loses the device.
/// * [`FaultInjector::fail_next_completion_wait`]: the next time a queue's completion thread
///   returns from `vkWaitSemaphores`, it reports the result instead (the work did run, so
///   nothing it used is freed early). `ERROR_DEVICE_LOST` there loses the device: every
///   in-flight submission fails, and so does every later one.
#[derive(Clone, Debug, Default)]
pub struct FaultInjector {
    inner: Arc<Faults>,
}

#[derive(Debug, Default)]
struct Faults {
    submit: AtomicI32,
    completion_wait: AtomicI32,
}

impl FaultInjector {
    /// A new injector with nothing armed.
    pub fn new() -> FaultInjector {
        FaultInjector::default()
    }

    /// The next `vkQueueSubmit` reports `result` (an error code) instead of submitting.
    pub fn fail_next_submit(&self, result: vk::Result) {
        self.inner.submit.store(result.as_raw(), Ordering::SeqCst);
    }

    /// The next completion-thread `vkWaitSemaphores` reports `result` after it returns.
    pub fn fail_next_completion_wait(&self, result: vk::Result) {
        self.inner
            .completion_wait
            .store(result.as_raw(), Ordering::SeqCst);
    }

    /// Takes the armed submit failure, if any.
    pub(crate) fn take_submit(&self) -> Option<vk::Result> {
        Self::take(&self.inner.submit)
    }

    /// Takes the armed completion-wait failure, if any.
    pub(crate) fn take_completion_wait(&self) -> Option<vk::Result> {
        Self::take(&self.inner.completion_wait)
    }

    fn take(slot: &AtomicI32) -> Option<vk::Result> {
        match slot.swap(0, Ordering::SeqCst) {
            0 => None,
            raw => Some(vk::Result::from_raw(raw)),
        }
    }
}
