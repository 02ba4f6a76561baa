//! The logical device and what everything else shares: created once per halcyon device, kept
//! alive by every object made from it (semaphores, memory, executables), destroyed last.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use ash::vk;
use halcyon::{Error, Result, StatusCode};

use crate::instance::{version_string, vk_error, vk_fail, Instance};
use crate::options::VulkanDeviceOptions;
use crate::semaphore::SemInner;

/// Diagnostics counters, readable through device queries (`vulkan.*` keys).
#[derive(Default)]
pub(crate) struct Stats {
    /// Wait entries handed to `vkQueueSubmit` (device-side waits, no host round trip).
    pub(crate) native_waits: AtomicU64,
    /// Submissions that had to wait on the host (pending actions on the reactor).
    pub(crate) host_waits: AtomicU64,
    /// Returns from the reactor's `vkWaitSemaphores`.
    pub(crate) parks: AtomicU64,
    /// Returns from a queue completion thread's `vkWaitSemaphores` with the value reached.
    pub(crate) completion_wakes: AtomicU64,
    /// Awaited submissions that waited in `vkWaitSemaphores` themselves
    /// (`DeviceBackend::wait_native`).
    pub(crate) awaiting_waits: AtomicU64,
    /// Times `NativeSemaphore::watch` interrupted the reactor.
    pub(crate) watch_interrupts: AtomicU64,
    /// Submissions completed by the reactor.
    pub(crate) completed: AtomicU64,
    /// `vkQueueSubmit` calls.
    pub(crate) submits: AtomicU64,
    /// Command lists submitted again without re-recording (cached recordings).
    pub(crate) recording_reuses: AtomicU64,
    /// Timestamp queries written by profiled submissions (two each).
    pub(crate) timestamp_queries: AtomicU64,
    /// Timestamp query pools created (each holds [`crate::timestamps::STAMPS_PER_POOL`] stamps).
    pub(crate) timestamp_query_pools: AtomicU64,
    /// Device times moved into their submit-to-completion window (see [`crate::timestamps`]).
    pub(crate) timestamp_clamps: AtomicU64,
    /// The largest such move, in nanoseconds.
    pub(crate) timestamp_max_clamp_ns: AtomicU64,
    /// Completed submissions whose timestamp queries were not available.
    pub(crate) timestamp_unavailable: AtomicU64,
}

/// Watched native semaphores: native id -> (semaphore, lowest awaited value).
pub(crate) type Watched = HashMap<u64, (Arc<SemInner>, u64)>;

pub(crate) struct Context {
    pub(crate) device: ash::Device,
    pub(crate) memory: vk::PhysicalDeviceMemoryProperties,
    pub(crate) limits: vk::PhysicalDeviceLimits,
    /// Identity and limits of the physical device (answers the `vulkan.*` queries).
    pub(crate) properties: vk::PhysicalDeviceProperties,
    pub(crate) pipeline_cache: vk::PipelineCache,
    /// The reactor's control timeline: `Unpark` signals it to end a `vkWaitSemaphores`.
    pub(crate) control: vk::Semaphore,
    /// The last value signalled on `control` (the lock keeps signals increasing).
    pub(crate) control_value: Mutex<u64>,
    /// Wakes the reactor once the device is lost (the control semaphore no longer can).
    lost_wake: Condvar,
    /// Set once when the device is lost: every later submission fails with it.
    lost: OnceLock<Error>,
    pub(crate) watched: Mutex<Watched>,
    pub(crate) stats: Stats,
    /// Buffer memory blocks (freed in `Drop`, before the device).
    pub(crate) allocator: crate::suballoc::Allocator,
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) api_version: u32,
    pub(crate) options: VulkanDeviceOptions,
    /// The queue families queues were created from: buffers are shared `CONCURRENT`ly between
    /// them when there are two.
    pub(crate) queue_families: Vec<u32>,
    /// `hostQueryReset` is enabled: timestamp queries are reset from the host (required for
    /// profiling timestamps).
    pub(crate) host_query_reset: bool,
    /// The GPU timestamp clock and its calibration to the profile clock.
    pub(crate) clock: crate::timestamps::DeviceClock,
    /// `VK_KHR_external_semaphore_fd`, where the device shares timeline semaphores as opaque
    /// file descriptors (see `external.rs`).
    pub(crate) external_fd: Option<ash::khr::external_semaphore_fd::Device>,
    // Dropped after the device (declared last; see `Drop`).
    _instance: Instance,
}

/// What device creation found: the compute family and how many queues of it, then the
/// dedicated transfer family (if any) and how many of its queues were created (0: unused).
pub(crate) struct QueueChoice {
    pub(crate) family: u32,
    pub(crate) count: u32,
    pub(crate) transfer_family: Option<u32>,
    pub(crate) transfer_count: u32,
    /// `timestampValidBits` of the compute family and of the transfer family (0: none).
    pub(crate) timestamp_bits: u32,
    pub(crate) transfer_timestamp_bits: u32,
}

impl Context {
    pub(crate) fn new(
        index: u32,
        options: VulkanDeviceOptions,
    ) -> Result<(Arc<Context>, QueueChoice)> {
        let instance = Instance::new()?;
        let physicals = instance.physical_devices()?;
        let Some(&physical) = physicals.get(index as usize) else {
            let code = if physicals.is_empty() {
                StatusCode::Unavailable
            } else {
                StatusCode::NotFound
            };
            return Err(Error::new(
                code,
                format!(
                    "vulkan://{index} does not exist: the Vulkan loader reports {} physical \
                     device(s)",
                    physicals.len()
                ),
            ));
        };
        let (name, api_version) = instance.describe(physical);
        if api_version < vk::API_VERSION_1_2 {
            return Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "vulkan://{index} ({name}) supports Vulkan {}; halcyon-vulkan needs Vulkan \
                     1.2 timeline semaphores",
                    version_string(api_version)
                ),
            ));
        }
        let mut features12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut features12);
        // SAFETY: `physical` belongs to the instance; the chain outlives the call.
        unsafe {
            instance
                .instance
                .get_physical_device_features2(physical, &mut features)
        };
        if features12.timeline_semaphore == vk::FALSE {
            return Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "vulkan://{index} ({name}) does not support timeline semaphores \
                     (VkPhysicalDeviceVulkan12Features::timelineSemaphore is false); \
                     halcyon-vulkan requires them"
                ),
            ));
        }
        // SAFETY: as above.
        let families = unsafe {
            instance
                .instance
                .get_physical_device_queue_family_properties(physical)
        };
        let compute = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or_else(|| {
                Error::new(
                    StatusCode::Unavailable,
                    format!("vulkan://{index} ({name}) has no compute queue family"),
                )
            })? as u32;
        let transfer_family = families
            .iter()
            .position(|f| {
                f.queue_flags.contains(vk::QueueFlags::TRANSFER)
                    && !f
                        .queue_flags
                        .intersects(vk::QueueFlags::COMPUTE | vk::QueueFlags::GRAPHICS)
            })
            .map(|f| f as u32);
        let count = families[compute as usize]
            .queue_count
            .clamp(1, options.max_queues.max(1));
        let transfer_count = transfer_family.map_or(0, |f| {
            families[f as usize]
                .queue_count
                .min(options.transfer_queues)
        });
        let priorities = vec![1.0f32; count.max(transfer_count) as usize];
        let mut queue_infos = vec![vk::DeviceQueueCreateInfo::default()
            .queue_family_index(compute)
            .queue_priorities(&priorities[..count as usize])];
        let mut queue_families = vec![compute];
        if let (Some(family), 1..) = (transfer_family, transfer_count) {
            queue_infos.push(
                vk::DeviceQueueCreateInfo::default()
                    .queue_family_index(family)
                    .queue_priorities(&priorities[..transfer_count as usize]),
            );
            queue_families.push(family);
        }
        let host_query_reset = features12.host_query_reset == vk::TRUE;
        let mut enable12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .host_query_reset(host_query_reset);
        let probe = crate::timestamps::probe(
            &instance.entry,
            &instance.instance,
            physical,
            options.force_measured_calibration || !host_query_reset,
        );
        let external = crate::external::supported(&instance.instance, physical);
        let mut extensions: Vec<_> = probe.extension.iter().map(|e| e.as_ptr()).collect();
        if external {
            extensions.push(crate::external::EXTENSION.as_ptr());
        }
        let device_info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_infos)
            .enabled_extension_names(&extensions)
            .push_next(&mut enable12);
        // SAFETY: the create info and everything it points to live across the call.
        let device = unsafe {
            instance
                .instance
                .create_device(physical, &device_info, None)
        }
        .map_err(|r| vk_error(StatusCode::Unavailable, "vkCreateDevice", r))?;
        // SAFETY: `physical` belongs to the instance.
        let (memory, props) = unsafe {
            (
                instance
                    .instance
                    .get_physical_device_memory_properties(physical),
                instance.instance.get_physical_device_properties(physical),
            )
        };
        let clock = crate::timestamps::DeviceClock::new(
            &instance.instance,
            &device,
            &probe,
            props.limits.timestamp_period,
        );
        let external_fd = external
            .then(|| ash::khr::external_semaphore_fd::Device::new(&instance.instance, &device));
        // From here on `device` is destroyed by `Context::drop` if anything fails: build the
        // context first with null handles.
        let context = Context {
            device,
            memory,
            limits: props.limits,
            properties: props,
            pipeline_cache: vk::PipelineCache::null(),
            control: vk::Semaphore::null(),
            control_value: Mutex::new(0),
            lost_wake: Condvar::new(),
            lost: OnceLock::new(),
            watched: Mutex::new(HashMap::new()),
            stats: Stats::default(),
            allocator: crate::suballoc::Allocator::new(&memory),
            id: format!("vulkan://{index}"),
            name,
            api_version,
            options,
            queue_families,
            host_query_reset,
            clock,
            external_fd,
            _instance: instance,
        };
        let mut context = context;
        context.control = context.create_timeline(0)?;
        // SAFETY: the device is live; the create info lives across the call.
        context.pipeline_cache = unsafe {
            context
                .device
                .create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
        }
        .map_err(|r| vk_fail("vkCreatePipelineCache", r))?;
        Ok((
            Arc::new(context),
            QueueChoice {
                family: compute,
                count,
                transfer_family,
                transfer_count,
                timestamp_bits: families[compute as usize].timestamp_valid_bits,
                transfer_timestamp_bits: transfer_family
                    .map_or(0, |f| families[f as usize].timestamp_valid_bits),
            },
        ))
    }

    /// Creates a timeline `VkSemaphore` at `initial`.
    pub(crate) fn create_timeline(&self, initial: u64) -> Result<vk::Semaphore> {
        self.timeline(initial, false)
    }

    /// A timeline semaphore for a user (`Device::create_semaphore`): exportable as an opaque
    /// file descriptor where the device shares timelines (see `external.rs`).
    pub(crate) fn create_user_timeline(&self, initial: u64) -> Result<vk::Semaphore> {
        self.timeline(initial, self.external_fd.is_some())
    }

    fn timeline(&self, initial: u64, exportable: bool) -> Result<vk::Semaphore> {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(initial);
        let mut export = vk::ExportSemaphoreCreateInfo::default()
            .handle_types(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        let mut info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        if exportable {
            info = info.push_next(&mut export);
        }
        // SAFETY: the device is live; the info chain lives across the call.
        unsafe { self.device.create_semaphore(&info, None) }
            .map_err(|r| vk_fail("vkCreateSemaphore (timeline)", r))
    }

    /// Reads a timeline counter.
    pub(crate) fn counter(&self, semaphore: vk::Semaphore) -> Result<u64> {
        // SAFETY: callers pass live timeline semaphores of this device.
        unsafe { self.device.get_semaphore_counter_value(semaphore) }
            .map_err(|r| vk_fail("vkGetSemaphoreCounterValue", r))
    }

    /// Signals `semaphore` to `value` from the host.
    pub(crate) fn host_signal(&self, semaphore: vk::Semaphore, value: u64) -> Result<()> {
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(semaphore)
            .value(value);
        // SAFETY: callers pass live timeline semaphores of this device and a value above the
        // current counter.
        unsafe { self.device.signal_semaphore(&info) }.map_err(|r| vk_fail("vkSignalSemaphore", r))
    }

    /// Ends the reactor's current (or next) park: bumps the control timeline (and, once the
    /// device is lost, the condition variable the reactor sleeps on instead).
    pub(crate) fn interrupt(&self) {
        let mut value = self.control_value.lock().unwrap_or_else(|p| p.into_inner());
        *value += 1;
        // The reactor may still be inside a Vulkan wait that began before a loss: signal the
        // control semaphore regardless (a truly lost driver fails it, and its wait then fails
        // too), and wake the condition variable it sleeps on after a loss.
        let signalled = self.host_signal(self.control, *value);
        if self.lost.get().is_some() || signalled.is_err() {
            self.lost_wake.notify_all();
        }
    }

    /// The reactor's sleep: until [`Context::interrupt`] moves the control value past `seen`
    /// (or `timeout`). Returns the control value it saw last.
    ///
    /// While the device works this blocks in `vkWaitSemaphores` on the control semaphore; once
    /// the device is lost (that wait would fail at once) it sleeps on a condition variable.
    pub(crate) fn park(&self, seen: u64, timeout: Duration) -> u64 {
        if self.lost.get().is_none() {
            let handles = [self.control];
            let values = [seen + 1];
            let info = vk::SemaphoreWaitInfo::default()
                .semaphores(&handles)
                .values(&values);
            // SAFETY: `control` is a live timeline semaphore of this device.
            let waited = unsafe {
                self.device
                    .wait_semaphores(&info, timeout.as_nanos() as u64)
            };
            if !matches!(waited, Err(r) if r != vk::Result::TIMEOUT) {
                return self.counter(self.control).unwrap_or(seen);
            }
        }
        let value = self.control_value.lock().unwrap_or_else(|p| p.into_inner());
        let (value, _) = self
            .lost_wake
            .wait_timeout_while(value, timeout, |v| *v <= seen)
            .unwrap_or_else(|p| p.into_inner());
        *value
    }

    /// The error the device was lost with, if it was.
    pub(crate) fn lost(&self) -> Option<&Error> {
        self.lost.get()
    }

    /// Marks the device lost with `error` (the first loss wins) and wakes the reactor so it
    /// stops waiting on Vulkan. Returns the error the device is lost with.
    pub(crate) fn lose(&self, error: Error) -> Error {
        let error = self.lost.get_or_init(|| error).clone();
        self.interrupt();
        error
    }

    pub(crate) fn stat(&self, counter: &AtomicU64) -> i64 {
        counter.load(Ordering::Relaxed) as i64
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every object holding this context has been dropped (they hold an Arc), so
        // nothing else uses the device; waiting idle first makes destroying it valid even if
        // the GPU were still running something.
        unsafe {
            let _ = self.device.device_wait_idle();
            if self.pipeline_cache != vk::PipelineCache::null() {
                self.device
                    .destroy_pipeline_cache(self.pipeline_cache, None);
            }
            if self.control != vk::Semaphore::null() {
                self.device.destroy_semaphore(self.control, None);
            }
            self.allocator.release_all(&self.device);
            self.device.destroy_device(None);
        }
    }
}
