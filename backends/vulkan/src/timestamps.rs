//! GPU timestamps of profiled submissions, converted to the profile clock.
//!
//! * **Stamps.** A submission whose signal fence carries an [`OperationTrace`] (its device
//!   profiles) takes a [`Stamp`] from its queue: two queries of a timestamp query pool and two
//!   command buffers recorded once, when the pool was made, one writing `TOP_OF_PIPE` into the
//!   first query and one writing `BOTTOM_OF_PIPE` into the second. The batch becomes
//!   `[begin, recording, end]`. A submission that is not profiled takes no stamp and writes no
//!   query.
//! * **Pools.** A queue's pools grow by [`STAMPS_PER_POOL`] stamps when its free list is empty
//!   (at the first profiled submission, and whenever more stamps are out at once than its pools
//!   hold) and live until the device is dropped: one pool per 32 stamps out at once, never one
//!   per submission. A stamp returns to the free list, its queries reset from the host (Vulkan
//!   1.2 `hostQueryReset`, required for timestamps), when its submission is released (one
//!   completion later, like its recording).
//! * **Reading.** On the completion path, once the queue timeline passed the submission and
//!   before its signal fence is signalled, both queries are read without `WAIT` (they are
//!   available: the timeline signal follows every command of the batch), masked to the queue
//!   family's `timestampValidBits`, scaled by `timestampPeriod` and mapped to the profile
//!   clock. Each time is then clamped into [host time just before `vkQueueSubmit`, host time
//!   of the read]: the device cannot have run the work outside that window, so clamping only
//!   removes calibration error and keeps submitted ≤ issued ≤ start ≤ end ≤ completed. The
//!   largest correction is kept (`vulkan.timestamp_max_clamp_ns`): above the calibration error
//!   it means the calibration is wrong.
//! * **Calibration.** With `VK_EXT_calibrated_timestamps` (or the KHR one) and the `DEVICE`
//!   and `CLOCK_MONOTONIC` (or `CLOCK_MONOTONIC_RAW`) time domains, one
//!   `vkGetCalibratedTimestamps` call pairs a device tick with a host monotonic time, which
//!   `clock_gettime` read around [`now_ns`] maps to the profile clock; the error is the call's
//!   `maxDeviation` plus half that bracket. It is sampled again, on the completion path, when
//!   the last sample is older than [`RECALIBRATE_AFTER`] (a host call, no submission); the new
//!   sample replaces the mapping only where the two disagree by more than their errors (the
//!   clocks drifted apart), otherwise the stated error widens to cover the disagreement, so
//!   the times of back-to-back operations do not jitter across a recalibration. Without
//!   the extension (or with [`VulkanDeviceOptions::force_measured_calibration`]) the offset is
//!   measured once, at device creation: a command buffer that only writes a timestamp is
//!   submitted and waited for with a fence, [`MEASURE_ROUNDS`] times; the round trip with the
//!   least time wins, its midpoint is the host time and half of it the error. That path is not
//!   recalibrated (it would take a blocking round trip): drift between the device's and the
//!   host's clock is not corrected there, and the clamp above bounds what it can do.
//!
//! Device queries: `vulkan.timestamp_calibration` (0 none, 1 calibrated timestamps, 2 measured
//! offset), `vulkan.timestamp_calibration_error_ns`, `vulkan.timestamp_offset_ns` (the profile
//! time of device tick 0; two calibrations of one clock agree on it within their errors),
//! `vulkan.timestamp_calibrations`, `vulkan.timestamp_queries` (queries written),
//! `vulkan.timestamp_query_pools`, `vulkan.timestamp_clamps`, `vulkan.timestamp_max_clamp_ns`
//! and `vulkan.timestamp_unavailable` (reads that found a query not available).
//!
//! [`VulkanDeviceOptions::force_measured_calibration`]: crate::VulkanDeviceOptions::force_measured_calibration

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ash::vk;
use halcyon::backend::OperationTrace;
use halcyon::profile::now_ns;
use halcyon::Result;

use crate::context::{Context, Stats};
use crate::instance::vk_fail;

/// Stamps (two queries, two command buffers) a queue's pools grow by.
pub(crate) const STAMPS_PER_POOL: u32 = 32;
/// How old a calibrated-timestamps sample may get before the next read takes a new one.
pub(crate) const RECALIBRATE_AFTER: Duration = Duration::from_secs(1);
/// Round trips the measured-offset calibration times (the shortest one is kept).
pub(crate) const MEASURE_ROUNDS: usize = 5;
/// How long the measured-offset calibration waits for one round trip.
const MEASURE_TIMEOUT: Duration = Duration::from_secs(2);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a device's timestamps are calibrated to the host clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// No timestamps: the device profiles with host times only.
    None = 0,
    /// `vkGetCalibratedTimestamps` (`VK_EXT_`/`VK_KHR_calibrated_timestamps`).
    Calibrated = 1,
    /// A timed round trip at device creation.
    Measured = 2,
}

/// One pairing of a device tick with a profile-clock time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Calibration {
    /// A device timestamp (ticks).
    ticks: u64,
    /// The profile-clock time of `ticks`.
    host_ns: u64,
    /// How far `host_ns` may be from the truth.
    pub(crate) error_ns: u64,
    /// When it was taken.
    taken: Instant,
}

/// `ticks - base` modulo `2^bits`, as the signed difference of smaller magnitude.
fn signed_delta(ticks: u64, base: u64, bits: u32) -> i64 {
    let delta = ticks.wrapping_sub(base);
    if bits >= 64 {
        return delta as i64;
    }
    let modulus = 1u64 << bits;
    let delta = delta & (modulus - 1);
    if delta >= modulus / 2 {
        delta as i64 - modulus as i64
    } else {
        delta as i64
    }
}

impl Calibration {
    /// `ticks` (a timestamp of `bits` valid bits) on the profile clock.
    fn map(&self, ticks: u64, bits: u32, period_ns: f64) -> u64 {
        let delta = signed_delta(ticks, self.ticks, bits);
        let ns = (delta as f64 * period_ns).round() as i128;
        (i128::from(self.host_ns) + ns).clamp(1, i128::from(u64::MAX)) as u64
    }

    /// The profile-clock time of device tick 0 (modulo the tick counter's wrap): what two
    /// calibrations of one device clock must agree on, within their errors.
    pub(crate) fn offset_ns(&self, period_ns: f64) -> i128 {
        i128::from(self.host_ns) - (self.ticks as f64 * period_ns).round() as i128
    }

    /// What to use after sampling `new`: `new` if this calibration disagrees with it by more
    /// than both errors (the clocks drifted apart), otherwise this one, with its error widened
    /// to cover the disagreement. Keeping the mapping when it still holds keeps the times of
    /// consecutive operations from jumping back and forth by a few nanoseconds.
    fn refresh(self, new: Calibration, period_ns: f64) -> Calibration {
        let predicted = self.map(new.ticks, 64, period_ns);
        let disagreement = predicted.abs_diff(new.host_ns);
        if disagreement > self.error_ns.saturating_add(new.error_ns) {
            new
        } else {
            Calibration {
                error_ns: self.error_ns.max(disagreement.saturating_add(new.error_ns)),
                taken: new.taken,
                ..self
            }
        }
    }
}

/// `vkGetCalibratedTimestamps{EXT,KHR}` and the host time domain it pairs with `DEVICE`.
struct Calibrated {
    device: vk::Device,
    get: vk::PFN_vkGetCalibratedTimestampsKHR,
    host: vk::TimeDomainKHR,
}

/// What device creation found for calibrated timestamps ([`probe`]).
pub(crate) struct Probe {
    /// The extension to enable, if the device offers a usable one.
    pub(crate) extension: Option<&'static CStr>,
    host: vk::TimeDomainKHR,
}

/// Finds whether `physical` offers calibrated timestamps with the `DEVICE` domain and a host
/// domain this process can read next to the profile clock (`CLOCK_MONOTONIC`, else
/// `CLOCK_MONOTONIC_RAW`; Linux only). `forced_off` skips it (the measured path).
pub(crate) fn probe(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    forced_off: bool,
) -> Probe {
    let none = Probe {
        extension: None,
        host: vk::TimeDomainKHR::DEVICE,
    };
    if forced_off || !cfg!(target_os = "linux") {
        return none;
    }
    // SAFETY: `physical` belongs to `instance`.
    let Ok(extensions) = (unsafe { instance.enumerate_device_extension_properties(physical) })
    else {
        return none;
    };
    let offers = |name: &CStr| {
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name))
    };
    let (extension, domains) = if offers(ash::khr::calibrated_timestamps::NAME) {
        let loader = ash::khr::calibrated_timestamps::Instance::new(entry, instance);
        // SAFETY: the device offers the extension, so the loader has the function; `physical`
        // belongs to the instance.
        let domains = unsafe { loader.get_physical_device_calibrateable_time_domains(physical) };
        (ash::khr::calibrated_timestamps::NAME, domains)
    } else if offers(ash::ext::calibrated_timestamps::NAME) {
        let loader = ash::ext::calibrated_timestamps::Instance::new(entry, instance);
        // SAFETY: as above.
        let domains = unsafe { loader.get_physical_device_calibrateable_time_domains(physical) };
        (ash::ext::calibrated_timestamps::NAME, domains)
    } else {
        return none;
    };
    let Ok(domains) = domains else { return none };
    if !domains.contains(&vk::TimeDomainKHR::DEVICE) {
        return none;
    }
    let host = [
        vk::TimeDomainKHR::CLOCK_MONOTONIC,
        vk::TimeDomainKHR::CLOCK_MONOTONIC_RAW,
    ]
    .into_iter()
    .find(|d| domains.contains(d));
    match host {
        Some(host) => Probe {
            extension: Some(extension),
            host,
        },
        None => none,
    }
}

/// A host clock `domain` read with `clock_gettime`, in nanoseconds.
#[cfg(target_os = "linux")]
fn host_clock_ns(domain: vk::TimeDomainKHR) -> Option<u64> {
    let clock = match domain {
        vk::TimeDomainKHR::CLOCK_MONOTONIC => libc::CLOCK_MONOTONIC,
        vk::TimeDomainKHR::CLOCK_MONOTONIC_RAW => libc::CLOCK_MONOTONIC_RAW,
        _ => return None,
    };
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clock id is one Linux has.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return None;
    }
    Some(u64::try_from(now.tv_sec).ok()? * 1_000_000_000 + u64::try_from(now.tv_nsec).ok()?)
}

#[cfg(not(target_os = "linux"))]
fn host_clock_ns(_domain: vk::TimeDomainKHR) -> Option<u64> {
    None
}

/// The profile clock minus host clock `domain`, and the error of that difference: the tightest
/// of a few brackets of [`now_ns`] between two reads of the host clock.
fn host_offset(domain: vk::TimeDomainKHR) -> Option<(i128, u64)> {
    let mut best: Option<(i128, u64)> = None;
    for _ in 0..5 {
        let before = host_clock_ns(domain)?;
        let profile = now_ns();
        let after = host_clock_ns(domain)?;
        let half = after.saturating_sub(before).div_ceil(2);
        let middle = i128::from(before) + i128::from(after.saturating_sub(before) / 2);
        if best.is_none_or(|(_, error)| half < error) {
            best = Some((i128::from(profile) - middle, half));
        }
    }
    best
}

/// The device's timestamp clock: its period and its calibration to the profile clock.
pub(crate) struct DeviceClock {
    /// Nanoseconds per tick (`timestampPeriod`).
    period_ns: f64,
    /// Present on the calibrated-timestamps path.
    calibrated: Option<Calibrated>,
    /// `None` until calibrated (and for good where that failed or timestamps are unusable).
    calibration: Mutex<Option<Calibration>>,
    /// Calibrations taken (`vulkan.timestamp_calibrations`).
    samples: AtomicU64,
}

impl DeviceClock {
    /// The clock of `device`, calibrated at once where `probe` found calibrated timestamps (the
    /// extension is enabled on `device`); otherwise [`DeviceClock::measure`] calibrates it.
    pub(crate) fn new(
        instance: &ash::Instance,
        device: &ash::Device,
        probe: &Probe,
        period_ns: f32,
    ) -> DeviceClock {
        let get = match probe.extension {
            Some(name) if name == ash::khr::calibrated_timestamps::NAME => Some(
                ash::khr::calibrated_timestamps::Device::new(instance, device)
                    .fp()
                    .get_calibrated_timestamps_khr,
            ),
            Some(_) => Some(
                ash::ext::calibrated_timestamps::Device::new(instance, device)
                    .fp()
                    .get_calibrated_timestamps_ext,
            ),
            None => None,
        };
        let calibrated = get.map(|get| Calibrated {
            device: device.handle(),
            get,
            host: probe.host,
        });
        let first = calibrated.as_ref().and_then(Self::sample);
        DeviceClock {
            period_ns: f64::from(period_ns),
            calibrated,
            calibration: Mutex::new(first),
            samples: AtomicU64::new(first.is_some() as u64),
        }
    }

    /// Calibrations taken so far.
    pub(crate) fn calibrations(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// How this clock is calibrated.
    pub(crate) fn method(&self) -> Method {
        match (lock(&self.calibration).is_some(), &self.calibrated) {
            (false, _) => Method::None,
            (true, Some(_)) => Method::Calibrated,
            (true, None) => Method::Measured,
        }
    }

    /// The current calibration, without refreshing it.
    pub(crate) fn current(&self) -> Option<Calibration> {
        *lock(&self.calibration)
    }

    /// [`Calibration::offset_ns`] of the current calibration.
    pub(crate) fn offset_ns(&self) -> Option<i128> {
        Some(self.current()?.offset_ns(self.period_ns))
    }

    /// The calibration to map with now: sampled again first on the calibrated path when the
    /// last sample is older than [`RECALIBRATE_AFTER`].
    fn calibration(&self) -> Option<Calibration> {
        let mut current = lock(&self.calibration);
        let old = (*current)?;
        if let Some(calibrated) = &self.calibrated {
            if old.taken.elapsed() >= RECALIBRATE_AFTER {
                if let Some(new) = Self::sample(calibrated) {
                    self.samples.fetch_add(1, Ordering::Relaxed);
                    *current = Some(old.refresh(new, self.period_ns));
                }
            }
        }
        *current
    }

    /// One `vkGetCalibratedTimestamps` pairing, mapped to the profile clock.
    fn sample(calibrated: &Calibrated) -> Option<Calibration> {
        let infos = [
            vk::CalibratedTimestampInfoKHR::default().time_domain(vk::TimeDomainKHR::DEVICE),
            vk::CalibratedTimestampInfoKHR::default().time_domain(calibrated.host),
        ];
        let mut stamps = [0u64; 2];
        let mut deviation = 0u64;
        // SAFETY: the device is live (the clock lives in its context) and has the extension
        // enabled; both domains were reported calibrateable; the arrays hold two entries each.
        let result = unsafe {
            (calibrated.get)(
                calibrated.device,
                2,
                infos.as_ptr(),
                stamps.as_mut_ptr(),
                &mut deviation,
            )
        };
        if result != vk::Result::SUCCESS {
            return None;
        }
        let (offset, bracket) = host_offset(calibrated.host)?;
        let host_ns = (i128::from(stamps[1]) + offset).clamp(1, i128::from(u64::MAX)) as u64;
        Some(Calibration {
            ticks: stamps[0],
            host_ns,
            error_ns: deviation.saturating_add(bracket),
            taken: Instant::now(),
        })
    }

    /// The measured-offset calibration, at device creation (never on an executor's path): a
    /// command buffer that only writes a timestamp is submitted on `queue` (of `family`, with
    /// `bits` valid timestamp bits) and waited for with a fence, [`MEASURE_ROUNDS`] times. Does
    /// nothing where the clock is calibrated already.
    ///
    /// The caller has `queue` to itself (no other thread submits to it during the call).
    pub(crate) fn measure(
        &self,
        device: &ash::Device,
        queue: vk::Queue,
        family: u32,
        bits: u32,
    ) -> Result<()> {
        if self.current().is_some() || bits == 0 {
            return Ok(());
        }
        let mut objects = MeasureObjects {
            device,
            query_pool: vk::QueryPool::null(),
            command_pool: vk::CommandPool::null(),
            fence: vk::Fence::null(),
        };
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(1);
        // SAFETY: the device is live; the info lives across the call.
        objects.query_pool = unsafe { device.create_query_pool(&info, None) }
            .map_err(|r| vk_fail("vkCreateQueryPool (calibration)", r))?;
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(family);
        // SAFETY: as above.
        objects.command_pool = unsafe { device.create_command_pool(&info, None) }
            .map_err(|r| vk_fail("vkCreateCommandPool (calibration)", r))?;
        // SAFETY: as above.
        objects.fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(|r| vk_fail("vkCreateFence (calibration)", r))?;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(objects.command_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is ours alone (just created).
        let command_buffer = unsafe { device.allocate_command_buffers(&info) }
            .map_err(|r| vk_fail("vkAllocateCommandBuffers (calibration)", r))?[0];
        // SAFETY: the command buffer is new and its pool ours alone; the query pool is a live
        // timestamp pool with one query, and the family has valid timestamp bits.
        unsafe {
            device
                .begin_command_buffer(command_buffer, &vk::CommandBufferBeginInfo::default())
                .and_then(|()| {
                    device.cmd_write_timestamp(
                        command_buffer,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        objects.query_pool,
                        0,
                    );
                    device.end_command_buffer(command_buffer)
                })
        }
        .map_err(|r| vk_fail("recording the calibration timestamp", r))?;
        let command_buffers = [command_buffer];
        let submit = vk::SubmitInfo::default().command_buffers(&command_buffers);
        let mut best: Option<Calibration> = None;
        for _ in 0..MEASURE_ROUNDS {
            // SAFETY: the previous round's submission finished (its fence was waited for), so
            // neither the query nor the fence is in use; the query pool is ours.
            unsafe {
                device.reset_query_pool(objects.query_pool, 0, 1);
                device.reset_fences(&[objects.fence])
            }
            .map_err(|r| vk_fail("vkResetFences (calibration)", r))?;
            let before = now_ns();
            // SAFETY: the caller has the queue to itself; the command buffer is executable and
            // not pending; the fence is unsignalled.
            unsafe { device.queue_submit(queue, &[submit], objects.fence) }
                .map_err(|r| vk_fail("vkQueueSubmit (calibration)", r))?;
            // SAFETY: the fence is live and was just submitted.
            unsafe {
                device.wait_for_fences(&[objects.fence], true, MEASURE_TIMEOUT.as_nanos() as u64)
            }
            .map_err(|r| vk_fail("vkWaitForFences (calibration)", r))?;
            let after = now_ns();
            let mut ticks = [0u64; 1];
            // SAFETY: the submission that writes the query completed (its fence signalled).
            unsafe {
                device.get_query_pool_results(
                    objects.query_pool,
                    0,
                    &mut ticks,
                    vk::QueryResultFlags::TYPE_64,
                )
            }
            .map_err(|r| vk_fail("vkGetQueryPoolResults (calibration)", r))?;
            let round_trip = after.saturating_sub(before);
            let sample = Calibration {
                ticks: mask(ticks[0], bits),
                host_ns: before + round_trip / 2,
                error_ns: round_trip.div_ceil(2),
                taken: Instant::now(),
            };
            if best.is_none_or(|b| sample.error_ns < b.error_ns) {
                best = Some(sample);
            }
        }
        self.samples.fetch_add(1, Ordering::Relaxed);
        *lock(&self.calibration) = best;
        Ok(())
    }
}

/// The objects of [`DeviceClock::measure`], destroyed whatever happens.
struct MeasureObjects<'a> {
    device: &'a ash::Device,
    query_pool: vk::QueryPool,
    command_pool: vk::CommandPool,
    fence: vk::Fence,
}

impl Drop for MeasureObjects<'_> {
    fn drop(&mut self) {
        // SAFETY: nothing of ours is pending: every submission's fence was waited for, and
        // when a wait failed (timeout, loss) the device is waited idle first. Null handles
        // are ignored.
        unsafe {
            if self.fence != vk::Fence::null()
                && self.device.get_fence_status(self.fence) != Ok(true)
            {
                let _ = self.device.device_wait_idle();
            }
            self.device.destroy_fence(self.fence, None);
            self.device.destroy_command_pool(self.command_pool, None);
            self.device.destroy_query_pool(self.query_pool, None);
        }
    }
}

/// The device's `vulkan.timestamp_*` queries (see the [module docs](self)); `None` for other
/// keys, and for the calibration's error and offset while there is none.
pub(crate) fn query(context: &Context, key: &str) -> Option<i64> {
    let stats = &context.stats;
    let clock = &context.clock;
    let saturate = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Some(match key {
        "vulkan.timestamp_calibration" => clock.method() as i64,
        "vulkan.timestamp_calibration_error_ns" => saturate(clock.current()?.error_ns.into()),
        "vulkan.timestamp_offset_ns" => saturate(clock.offset_ns()?),
        "vulkan.timestamp_calibrations" => saturate(clock.calibrations().into()),
        "vulkan.timestamp_queries" => context.stat(&stats.timestamp_queries),
        "vulkan.timestamp_query_pools" => context.stat(&stats.timestamp_query_pools),
        "vulkan.timestamp_clamps" => context.stat(&stats.timestamp_clamps),
        "vulkan.timestamp_max_clamp_ns" => context.stat(&stats.timestamp_max_clamp_ns),
        "vulkan.timestamp_unavailable" => context.stat(&stats.timestamp_unavailable),
        _ => return None,
    })
}

/// `ticks` with only its `bits` valid bits.
fn mask(ticks: u64, bits: u32) -> u64 {
    if bits >= 64 {
        ticks
    } else {
        ticks & ((1u64 << bits) - 1)
    }
}

/// Two timestamp queries and the two command buffers that write them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    pool: vk::QueryPool,
    /// The begin query; the end query follows it.
    first: u32,
    /// Writes `TOP_OF_PIPE` into `first`: submitted before the recording.
    pub(crate) begin: vk::CommandBuffer,
    /// Writes `BOTTOM_OF_PIPE` into `first + 1`: submitted after the recording.
    pub(crate) end: vk::CommandBuffer,
}

/// A submitted stamp and the operation it times.
pub(crate) struct Stamped {
    pub(crate) stamp: Stamp,
    pub(crate) trace: OperationTrace,
    /// The profile clock just before `vkQueueSubmit`: the device cannot have started earlier.
    pub(crate) submitted_ns: u64,
}

/// A queue's timestamp query pools and its free stamps.
pub(crate) struct QueueStamps {
    /// The queue family's `timestampValidBits`, or 0 where this queue writes no timestamps.
    bits: u32,
    pools: Mutex<Pools>,
}

#[derive(Default)]
struct Pools {
    query_pools: Vec<vk::QueryPool>,
    command_pools: Vec<vk::CommandPool>,
    free: Vec<Stamp>,
}

impl QueueStamps {
    /// A queue's stamps; `bits` 0 makes it write none.
    pub(crate) fn new(bits: u32) -> QueueStamps {
        QueueStamps {
            bits,
            pools: Mutex::new(Pools::default()),
        }
    }

    /// A free stamp for a profiled submission, growing the pools if none is free; `None` where
    /// the queue writes no timestamps or a new pool could not be made (the operation is then
    /// profiled with host times only).
    pub(crate) fn take(&self, device: &ash::Device, family: u32, stats: &Stats) -> Option<Stamp> {
        if self.bits == 0 {
            return None;
        }
        let mut pools = lock(&self.pools);
        if pools.free.is_empty() {
            Self::grow(&mut pools, device, family).ok()?;
            stats.timestamp_query_pools.fetch_add(1, Ordering::Relaxed);
        }
        pools.free.pop()
    }

    /// A new query pool of [`STAMPS_PER_POOL`] stamps, reset, with their command buffers.
    fn grow(pools: &mut Pools, device: &ash::Device, family: u32) -> Result<()> {
        let queries = 2 * STAMPS_PER_POOL;
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(queries);
        // SAFETY: the device is live; the info lives across the call.
        let query_pool = unsafe { device.create_query_pool(&info, None) }
            .map_err(|r| vk_fail("vkCreateQueryPool (timestamps)", r))?;
        pools.query_pools.push(query_pool);
        // SAFETY: the pool is new, so no submission uses it; hostQueryReset is enabled wherever
        // a queue writes timestamps.
        unsafe { device.reset_query_pool(query_pool, 0, queries) };
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(family);
        // SAFETY: the device is live; the info lives across the call.
        let command_pool = unsafe { device.create_command_pool(&info, None) }
            .map_err(|r| vk_fail("vkCreateCommandPool (timestamps)", r))?;
        pools.command_pools.push(command_pool);
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(command_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(queries);
        // SAFETY: the pool is ours alone (just created; the lock on `pools` is held).
        let buffers = unsafe { device.allocate_command_buffers(&info) }
            .map_err(|r| vk_fail("vkAllocateCommandBuffers (timestamps)", r))?;
        let record = |buffer: vk::CommandBuffer, stage: vk::PipelineStageFlags, query: u32| {
            // SAFETY: the command buffer is new and its pool ours alone; the query lies in the
            // live timestamp pool; the family has valid timestamp bits (`bits` is not 0).
            // Recorded once and submitted many times (never while pending): not one-time.
            unsafe {
                device
                    .begin_command_buffer(buffer, &vk::CommandBufferBeginInfo::default())
                    .and_then(|()| {
                        device.cmd_write_timestamp(buffer, stage, query_pool, query);
                        device.end_command_buffer(buffer)
                    })
            }
            .map_err(|r| vk_fail("recording a timestamp command buffer", r))
        };
        let mut stamps = Vec::with_capacity(STAMPS_PER_POOL as usize);
        for (i, pair) in buffers.chunks_exact(2).enumerate() {
            let first = 2 * i as u32;
            record(pair[0], vk::PipelineStageFlags::TOP_OF_PIPE, first)?;
            record(pair[1], vk::PipelineStageFlags::BOTTOM_OF_PIPE, first + 1)?;
            stamps.push(Stamp {
                pool: query_pool,
                first,
                begin: pair[0],
                end: pair[1],
            });
        }
        // Popped from the back: hand out the pool's first stamps first.
        stamps.reverse();
        pools.free.extend(stamps);
        Ok(())
    }

    /// Reads a completed submission's stamp and reports its device start and end to its trace,
    /// on the profile clock and clamped into its submit-to-now window. Call it once the queue
    /// timeline passed the submission and before its signal fence is signalled. Never waits.
    pub(crate) fn report(
        &self,
        device: &ash::Device,
        clock: &DeviceClock,
        stats: &Stats,
        stamped: &Stamped,
    ) {
        let mut ticks = [0u64; 2];
        // SAFETY: the submission that writes both queries completed (the queue timeline passed
        // it), and the stamp is not reset before it is given back; no WAIT flag, so this never
        // blocks.
        let read = unsafe {
            device.get_query_pool_results(
                stamped.stamp.pool,
                stamped.stamp.first,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64,
            )
        };
        if read.is_err() {
            stats.timestamp_unavailable.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(calibration) = clock.calibration() else {
            return;
        };
        let now = now_ns();
        let [start, end] =
            ticks.map(|t| calibration.map(mask(t, self.bits), self.bits, clock.period_ns));
        let (lower, upper) = (stamped.submitted_ns, now.max(stamped.submitted_ns));
        let (start_in, end_in) = (start.clamp(lower, upper), end.clamp(lower, upper));
        let moved = start.abs_diff(start_in).max(end.abs_diff(end_in));
        if moved > 0 {
            stats.timestamp_clamps.fetch_add(1, Ordering::Relaxed);
            stats
                .timestamp_max_clamp_ns
                .fetch_max(moved, Ordering::Relaxed);
        }
        stamped.trace.device_started(start_in);
        stamped.trace.device_ended(end_in);
    }

    /// Resets `stamp`'s queries and frees it: its submission is released (the queue completed a
    /// later one, or the device is idle).
    pub(crate) fn give_back(&self, device: &ash::Device, stamp: Stamp) {
        let mut pools = lock(&self.pools);
        // SAFETY: the submission that wrote the queries completed (or was never made), and the
        // stamp is out of the free list, so no other thread reads or resets these two queries.
        unsafe { device.reset_query_pool(stamp.pool, stamp.first, 2) };
        pools.free.push(stamp);
    }

    /// Destroys every pool (the device is idle; stamps still out are never used again).
    pub(crate) fn destroy(&self, device: &ash::Device) {
        let mut pools = lock(&self.pools);
        pools.free.clear();
        for pool in pools.command_pools.drain(..) {
            // SAFETY: the device is idle, so no command buffer of the pool is pending.
            unsafe { device.destroy_command_pool(pool, None) };
        }
        for pool in pools.query_pools.drain(..) {
            // SAFETY: the device is idle, so no submission uses the pool.
            unsafe { device.destroy_query_pool(pool, None) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ticks: u64, host_ns: u64, error_ns: u64) -> Calibration {
        Calibration {
            ticks,
            host_ns,
            error_ns,
            taken: Instant::now(),
        }
    }

    #[test]
    fn deltas_wrap_at_the_valid_bits() {
        assert_eq!(signed_delta(10, 4, 64), 6);
        assert_eq!(signed_delta(4, 10, 64), -6);
        assert_eq!(signed_delta(0, u64::MAX, 64), 1);
        // 36 valid bits: just past the wrap is just after, not 2^36 before.
        let top = (1u64 << 36) - 2;
        assert_eq!(signed_delta(3, top, 36), 5);
        assert_eq!(signed_delta(top, 3, 36), -5);
        assert_eq!(mask(u64::MAX, 36), (1 << 36) - 1);
        assert_eq!(mask(7, 64), 7);
    }

    #[test]
    fn ticks_map_through_the_period() {
        let c = at(1_000, 5_000_000, 10);
        assert_eq!(c.map(1_000, 64, 1.0), 5_000_000);
        assert_eq!(c.map(1_100, 64, 52.08), 5_000_000 + 5_208);
        assert_eq!(c.map(900, 64, 2.0), 5_000_000 - 200);
        // Before the clock's epoch: never 0.
        assert_eq!(c.map(0, 64, 1e9), 1);
    }

    #[test]
    fn a_consistent_sample_keeps_the_mapping_and_a_drifted_one_replaces_it() {
        let old = at(0, 1_000_000, 100);
        // Predicts 1_500_000 for tick 500_000; the sample says 1_500_050 ± 20.
        let kept = old.refresh(at(500_000, 1_500_050, 20), 1.0);
        assert_eq!(
            (kept.ticks, kept.host_ns, kept.error_ns),
            (0, 1_000_000, 100)
        );
        let widened = old.refresh(at(500_000, 1_500_090, 20), 1.0);
        assert_eq!((widened.host_ns, widened.error_ns), (1_000_000, 110));
        let replaced = old.refresh(at(500_000, 1_501_000, 20), 1.0);
        assert_eq!(
            (replaced.ticks, replaced.host_ns, replaced.error_ns),
            (500_000, 1_501_000, 20)
        );
    }
}
