//! Translating the core's resolved commands into a `VkCommandBuffer`.
//!
//! * fill: `vkCmdFillBuffer` over the 4-byte-aligned middle (1- and 2-byte patterns are
//!   replicated to 4 bytes); unaligned head and tail bytes are copied from a small host-visible
//!   staging buffer holding the pattern (`vkCmdCopyBuffer` has no alignment rules);
//! * update: `vkCmdUpdateBuffer` when aligned and at most 64 KiB, otherwise a staging copy (a
//!   queue `write` of any size arrives as one update);
//! * copy: `vkCmdCopyBuffer`;
//! * dispatch: compute pipeline, one descriptor set of storage buffers, push constants;
//! * barrier: a full memory barrier between all commands;
//! * at the end, a barrier making device writes visible to host reads (mapped memory).

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

use ash::vk;
use halcyon::backend::{BufferMemory, ExecutableBackend, Work};
use halcyon::command_buffer::{Command, Dispatch};
use halcyon::{BufferRef, Error, Result, StatusCode};

use crate::context::Context;
use crate::device::{Core, Few, VkQueue};
use crate::executable::{Pipeline, VulkanExecutable};
use crate::instance::vk_fail;
use crate::memory::VulkanMemory;

/// Runs on the reactor when the submission completed, before its fence is signalled.
pub(crate) type After = Box<dyn FnOnce() -> Result<()> + Send>;

/// Default descriptor pool capacity of a slot (grown when a recording needs more).
const SLOT_SETS: u32 = 16;
const SLOT_DESCRIPTORS: u32 = 64;
/// Reset slots a queue keeps for reuse (more are destroyed).
const MAX_FREE_SLOTS: usize = 64;
/// Recorded reusable command lists a queue keeps (least recently used are recycled).
const MAX_CACHED: usize = 64;

/// A command pool with its one command buffer and a descriptor pool, recycled per queue.
pub(crate) struct Slot {
    pool: vk::CommandPool,
    command_buffer: vk::CommandBuffer,
    descriptor_pool: vk::DescriptorPool,
    /// The descriptor pool's capacity (sets, storage-buffer descriptors).
    capacity: (u32, u32),
}

impl Slot {
    const NULL: Slot = Slot {
        pool: vk::CommandPool::null(),
        command_buffer: vk::CommandBuffer::null(),
        descriptor_pool: vk::DescriptorPool::null(),
        capacity: (0, 0),
    };

    /// Destroys the pools (and with them the command buffer and descriptor sets).
    pub(crate) fn destroy(&mut self, device: &ash::Device) {
        // SAFETY: callers guarantee no pending submission uses the slot's command buffer or
        // descriptor sets; null handles are ignored.
        unsafe {
            device.destroy_descriptor_pool(self.descriptor_pool, None);
            device.destroy_command_pool(self.pool, None);
        }
        *self = Slot::NULL;
    }
}

/// A recorded reusable command list, not in flight, ready to be submitted again.
pub(crate) struct Cached {
    /// The list it was recorded from (a `Weak` keeps the allocation, so the address cannot be
    /// reused by another list while cached).
    key: Weak<[Command]>,
    slot: Slot,
    /// Staging buffers the recording reads from (fill edges, large updates).
    staging: Vec<VulkanMemory>,
    status: Option<StatusWord>,
}

/// The status word bound to the dispatches of entry points that can fail (see
/// [`crate::SpirvModule`]): zeroed before each submission, checked on completion.
pub(crate) struct StatusWord {
    memory: VulkanMemory,
    /// The entry points bound to it, for the error message.
    entry_points: Vec<String>,
}

impl StatusWord {
    /// Zeroes the word for the next submission (the previous one, if any, completed).
    fn reset(&self) -> Result<()> {
        let ptr = self.host_ptr()?;
        // SAFETY: the word is mapped, 4 bytes long and aligned; no submission uses it now.
        unsafe { ptr.cast::<u32>().write_volatile(0) };
        self.memory.flush(0, 4)
    }

    /// The value the kernels left, after the submission completed.
    fn read(&self) -> Result<u32> {
        self.memory.invalidate(0, 4)?;
        let ptr = self.host_ptr()?;
        // SAFETY: as in `reset`; the GPU finished writing it and it was invalidated.
        Ok(unsafe { ptr.cast::<u32>().read_volatile() })
    }

    fn host_ptr(&self) -> Result<std::ptr::NonNull<u8>> {
        self.memory
            .host_ptr()
            .ok_or_else(|| Error::new(StatusCode::Internal, "status word memory is not mapped"))
    }
}

/// Per-queue recycling: reset slots, and recorded reusable command lists.
#[derive(Default)]
pub(crate) struct Recycler {
    free: Mutex<Vec<Slot>>,
    cache: Mutex<Vec<Cached>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn same_list(key: &Weak<[Command]>, list: &Arc<[Command]>) -> bool {
    std::ptr::addr_eq(key.as_ptr(), Arc::as_ptr(list))
}

impl Recycler {
    /// Resets `slot` (its submission completed) and keeps it for reuse, or destroys it.
    fn recycle(&self, device: &ash::Device, mut slot: Slot) {
        if slot.pool == vk::CommandPool::null() {
            return;
        }
        // SAFETY: the submission using the slot completed (or it was never submitted); the slot
        // is owned here alone.
        let reset = unsafe {
            device
                .reset_command_pool(slot.pool, vk::CommandPoolResetFlags::empty())
                .and_then(|()| {
                    if slot.descriptor_pool == vk::DescriptorPool::null() {
                        Ok(())
                    } else {
                        device.reset_descriptor_pool(
                            slot.descriptor_pool,
                            vk::DescriptorPoolResetFlags::empty(),
                        )
                    }
                })
        };
        let mut free = lock(&self.free);
        if reset.is_ok() && free.len() < MAX_FREE_SLOTS {
            free.push(slot);
        } else {
            drop(free);
            slot.destroy(device);
        }
    }

    /// The cached recording of `list`, taken out of the cache (it is in flight until completed).
    fn take(&self, list: &Arc<[Command]>) -> Option<Cached> {
        let mut cache = lock(&self.cache);
        let at = cache.iter().position(|c| same_list(&c.key, list))?;
        Some(cache.remove(at))
    }

    /// Caches a completed recording of a list that is still alive; recycles what is evicted.
    fn insert(&self, device: &ash::Device, entry: Cached) {
        let mut evicted = Vec::new();
        {
            let mut cache = lock(&self.cache);
            let mut i = 0;
            while i < cache.len() {
                if cache[i].key.strong_count() == 0 {
                    evicted.push(cache.remove(i));
                } else {
                    i += 1;
                }
            }
            if cache.iter().any(|c| c.key.ptr_eq(&entry.key)) {
                evicted.push(entry);
            } else {
                if cache.len() >= MAX_CACHED {
                    evicted.push(cache.remove(0));
                }
                cache.push(entry);
            }
        }
        for e in evicted {
            self.recycle(device, e.slot);
        }
    }

    /// Destroys every slot (the device is idle).
    pub(crate) fn destroy(&self, device: &ash::Device) {
        for mut slot in lock(&self.free).drain(..) {
            slot.destroy(device);
        }
        for mut cached in lock(&self.cache).drain(..) {
            cached.slot.destroy(device);
        }
    }
}

/// What a submission recorded and must keep until the GPU finished it.
pub(crate) struct Recording {
    context: Arc<Context>,
    slot: Slot,
    /// The command list, kept (with what it holds) until the GPU finished it.
    commands: Option<Arc<[Command]>>,
    /// The memory of the buffers a reused recording addresses (a resubmission allocates
    /// nothing for them: up to four inline).
    memories: Few<Arc<dyn BufferMemory>>,
    /// Anything else kept until the GPU finished (a fresh recording's resources).
    keep: Vec<Box<dyn Any + Send>>,
    staging: Vec<VulkanMemory>,
    /// The command list recorded (to cache the recording on completion if it is reused).
    list: Option<Weak<[Command]>>,
    after: Option<After>,
    /// Set by [`Recording::release_resources`]: the list's owner still held it then.
    reusable: bool,
    /// The status word of dispatches that can fail, if the recording has any.
    status: Option<StatusWord>,
    /// The status word's descriptor set (bound at set 1 for those dispatches).
    status_set: vk::DescriptorSet,
}

fn internal(message: String) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

impl Recording {
    /// Records `work` for queue `index` (nothing to record for an empty command list), or
    /// reuses the cached recording of a resubmitted command list.
    pub(crate) fn record(core: &Arc<Core>, index: usize, work: Work) -> Result<Recording> {
        let queue = &core.queues[index];
        let mut rec = Recording {
            context: core.context.clone(),
            slot: Slot::NULL,
            commands: None,
            memories: Few::new(),
            keep: Vec::new(),
            staging: Vec::new(),
            list: None,
            reusable: false,
            after: None,
            status: None,
            status_set: vk::DescriptorSet::null(),
        };
        match work {
            Work::Commands { commands, .. } => {
                if commands.is_empty() {
                    return Ok(rec);
                }
                rec.list = Some(Arc::downgrade(&commands));
                if let Some(cached) = queue.recycler.take(&commands) {
                    // The recording stays valid while every buffer it uses still has its memory:
                    // a buffer's memory never changes, it can only be released (queue dealloca).
                    let mut released = false;
                    for command in commands.iter() {
                        command.for_each_binding(|range, _| match range.buffer().memory() {
                            Ok(memory) => rec.memories.push(memory),
                            Err(_) => released = true,
                        });
                    }
                    if !released {
                        if let Some(status) = &cached.status {
                            status.reset()?;
                        }
                        rec.slot = cached.slot;
                        rec.staging = cached.staging;
                        rec.status = cached.status;
                        rec.commands = Some(commands);
                        core.context
                            .stats
                            .recording_reuses
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return Ok(rec);
                    }
                    rec.memories.clear();
                    queue.recycler.recycle(&core.context.device, cached.slot);
                }
                rec.begin(queue)?;
                rec.descriptor_pool_for(&commands)?;
                for command in commands.iter() {
                    rec.command(command)?;
                }
                rec.commands = Some(commands);
            }
            Work::Read { source, sink } => {
                rec.begin(queue)?;
                let len = source.len();
                let staging = Arc::new(rec.host_memory(len, true)?);
                let from = rec.buffer(&source)?;
                if len > 0 {
                    let region = vk::BufferCopy {
                        src_offset: source.offset(),
                        dst_offset: 0,
                        size: len,
                    };
                    // SAFETY: recording into our command buffer; both buffers are live (kept by
                    // `keep`) and the regions lie within them.
                    unsafe {
                        rec.context.device.cmd_copy_buffer(
                            rec.slot.command_buffer,
                            from,
                            staging.buffer,
                            &[region],
                        )
                    };
                }
                rec.after = Some(Box::new(move || {
                    staging.invalidate(0, len)?;
                    let ptr = staging.host_ptr().ok_or_else(|| {
                        Error::new(StatusCode::Internal, "read staging memory is not mapped")
                    })?;
                    // SAFETY: the staging buffer is mapped, holds `len` bytes the GPU finished
                    // writing (the queue timeline passed this submission) and was invalidated.
                    sink.deliver_copy(unsafe {
                        std::slice::from_raw_parts(ptr.as_ptr(), len as usize)
                    });
                    Ok(())
                }));
            }
            Work::HostCall(_) => {
                return Err(Error::new(
                    StatusCode::Internal,
                    "host calls are not recorded into command buffers",
                ))
            }
            // Vulkan devices answer `Reach::Staged` for every other device, so the core never
            // sends them a peer copy.
            Work::PeerCopy { .. } => {
                return Err(Error::new(
                    StatusCode::Internal,
                    "a Vulkan device was sent a peer copy, which it does not offer",
                ))
            }
            Work::Collective(collective) => {
                return Err(Error::new(
                    StatusCode::Unimplemented,
                    format!(
                        "{} on a {} channel: Vulkan devices run no collectives",
                        collective.kind(),
                        collective.channel().engine()
                    ),
                ))
            }
        }
        rec.end()?;
        Ok(rec)
    }

    pub(crate) fn command_buffers(&self) -> crate::device::Few<vk::CommandBuffer> {
        let mut buffers = crate::device::Few::new();
        if self.slot.command_buffer != vk::CommandBuffer::null() {
            buffers.push(self.slot.command_buffer);
        }
        buffers
    }

    /// The GPU finished: caches the recording of a command list that is still alive (its
    /// owner may submit it again), or recycles the slot into `queue`; hands back what was kept
    /// and the completion step.
    /// Takes the completion step (a read's copy-out), to run as soon as the GPU finished.
    pub(crate) fn take_after(&mut self) -> Option<After> {
        self.after.take()
    }

    /// Whether a dispatch of this recording can fail through the status word: then its
    /// signals are made from the host, after [`Recording::check_status`].
    pub(crate) fn reports_status(&self) -> bool {
        self.status.is_some()
    }

    /// After completion: an error naming the entry points if a kernel set the status word.
    pub(crate) fn check_status(&self) -> Result<()> {
        let Some(status) = &self.status else {
            return Ok(());
        };
        match status.read()? {
            0 => Ok(()),
            value => Err(Error::new(
                StatusCode::KernelFailed,
                format!(
                    "a dispatch of kernel {} on {} failed: it set its status word (descriptor \
                     set {}, binding {}) to {value}",
                    status
                        .entry_points
                        .iter()
                        .map(|e| format!("'{e}'"))
                        .collect::<Vec<_>>()
                        .join(" / "),
                    self.context.id,
                    crate::STATUS_SET,
                    crate::STATUS_BINDING,
                ),
            )),
        }
    }

    /// Drops the retained user resources (buffers, executables, the command list) as soon as
    /// the GPU finished, so a deallocated block returns to its pool at once, while the Vulkan
    /// objects wait for [`Recording::finish`]. Remembers whether the list's owner still holds it.
    pub(crate) fn release_resources(&mut self) {
        self.reusable = self.list.as_ref().is_some_and(|key| key.strong_count() > 1);
        self.commands = None;
        self.memories.clear();
        self.keep.clear();
    }

    pub(crate) fn finish(mut self, queue: &VkQueue) -> (Vec<Box<dyn Any + Send>>, Option<After>) {
        let keep = std::mem::take(&mut self.keep);
        let after = self.after.take();
        let slot = std::mem::replace(&mut self.slot, Slot::NULL);
        let device = &self.context.device;
        // `keep` holds one reference to the list; another one means its owner still has it.
        match self.list.take() {
            Some(key)
                if (self.reusable || key.strong_count() > 1)
                    && slot.pool != vk::CommandPool::null() =>
            {
                let staging = std::mem::take(&mut self.staging);
                let status = self.status.take();
                queue.recycler.insert(
                    device,
                    Cached {
                        key,
                        slot,
                        staging,
                        status,
                    },
                );
            }
            _ => queue.recycler.recycle(device, slot),
        }
        (keep, after)
    }

    fn begin(&mut self, queue: &VkQueue) -> Result<()> {
        let device = &self.context.device;
        let recycled = lock(&queue.recycler.free).pop();
        self.slot = match recycled {
            Some(slot) => slot,
            None => {
                let info = vk::CommandPoolCreateInfo::default()
                    .queue_family_index(queue.family)
                    .flags(vk::CommandPoolCreateFlags::TRANSIENT);
                // SAFETY: the device is live; the info lives across the call.
                let pool = unsafe { device.create_command_pool(&info, None) }
                    .map_err(|r| vk_fail("vkCreateCommandPool", r))?;
                // Owned by `self` from here: dropped (destroyed) on error.
                self.slot = Slot { pool, ..Slot::NULL };
                let info = vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: the pool is ours alone (just created).
                let command_buffer = unsafe { device.allocate_command_buffers(&info) }
                    .map_err(|r| vk_fail("vkAllocateCommandBuffers", r))?[0];
                Slot {
                    pool,
                    command_buffer,
                    ..Slot::NULL
                }
            }
        };
        // Not ONE_TIME_SUBMIT: a reused command list's recording is submitted again (never
        // while still pending: it is cached only once its submission completed).
        let begin = vk::CommandBufferBeginInfo::default();
        // SAFETY: the command buffer is in the initial state (freshly allocated, or its pool was
        // reset when the slot was recycled) and its pool is ours alone.
        unsafe { device.begin_command_buffer(self.slot.command_buffer, &begin) }
            .map_err(|r| vk_fail("vkBeginCommandBuffer", r))
    }

    fn end(&mut self) -> Result<()> {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE);
        // SAFETY: recording into our command buffer.
        unsafe {
            self.context.device.cmd_pipeline_barrier(
                self.slot.command_buffer,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
            self.context
                .device
                .end_command_buffer(self.slot.command_buffer)
        }
        .map_err(|r| vk_fail("vkEndCommandBuffer", r))
    }

    /// A descriptor pool with room for every dispatch of `commands`.
    fn descriptor_pool_for(&mut self, commands: &[Command]) -> Result<()> {
        let too_many = || {
            internal(format!(
                "a command list of {} commands needs more descriptors than a Vulkan descriptor \
                 pool can count: split it into several command lists",
                commands.len()
            ))
        };
        let (mut sets, mut descriptors) = (0u32, 0u32);
        for command in commands {
            if let Command::Dispatch(d) = command {
                if !d.bindings.is_empty() {
                    let bindings = u32::try_from(d.bindings.len()).map_err(|_| too_many())?;
                    sets = sets.checked_add(1).ok_or_else(too_many)?;
                    descriptors = descriptors.checked_add(bindings).ok_or_else(too_many)?;
                }
            }
        }
        let status = commands.iter().any(|c| match c {
            Command::Dispatch(d) => pipeline_of(d).is_some_and(|p| p.uses_status()),
            _ => false,
        });
        if status {
            // One set with the one status word, shared by every such dispatch.
            sets = sets.checked_add(1).ok_or_else(too_many)?;
            descriptors = descriptors.checked_add(1).ok_or_else(too_many)?;
        }
        if sets == 0 {
            return Ok(());
        }
        let (have_sets, have_descriptors) = self.slot.capacity;
        if sets <= have_sets && descriptors <= have_descriptors {
            return Ok(());
        }
        let (sets, descriptors) = (sets.max(SLOT_SETS), descriptors.max(SLOT_DESCRIPTORS));
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: descriptors,
        }];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(sets)
            .pool_sizes(&sizes);
        let device = &self.context.device;
        // SAFETY: the slot is ours alone and its (too small) pool's sets are unused: it was
        // reset when the slot was recycled. Null is ignored.
        unsafe { device.destroy_descriptor_pool(self.slot.descriptor_pool, None) };
        self.slot.descriptor_pool = vk::DescriptorPool::null();
        self.slot.capacity = (0, 0);
        // SAFETY: the device is live; the info lives across the call.
        self.slot.descriptor_pool = unsafe { device.create_descriptor_pool(&info, None) }
            .map_err(|r| vk_fail("vkCreateDescriptorPool", r))?;
        self.slot.capacity = (sets, descriptors);
        Ok(())
    }

    /// A mapped host-visible buffer of `len` bytes (staging), kept until completion.
    fn host_memory(&mut self, len: u64, cached: bool) -> Result<VulkanMemory> {
        let visible = vk::MemoryPropertyFlags::HOST_VISIBLE;
        if cached {
            if let Ok(m) = VulkanMemory::new(
                &self.context,
                len,
                visible | vk::MemoryPropertyFlags::HOST_CACHED,
            ) {
                return Ok(m);
            }
        }
        VulkanMemory::new(&self.context, len, visible)
    }

    /// A staging buffer holding `bytes`, kept alive by the recording.
    fn upload(&mut self, bytes: &[u8]) -> Result<vk::Buffer> {
        let memory = self.host_memory(bytes.len() as u64, false)?;
        let ptr = memory
            .host_ptr()
            .ok_or_else(|| Error::new(StatusCode::Internal, "staging memory is not host-mapped"))?;
        // SAFETY: the mapping holds at least `bytes.len()` bytes and nothing else uses it yet.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.as_ptr(), bytes.len()) };
        memory.flush(0, bytes.len() as u64)?;
        let handle = memory.buffer;
        self.staging.push(memory);
        Ok(handle)
    }

    /// The `VkBuffer` behind a range (kept alive until completion).
    fn buffer(&mut self, range: &BufferRef) -> Result<vk::Buffer> {
        let memory = range.buffer().memory()?;
        let vulkan = memory
            .as_any()
            .downcast_ref::<VulkanMemory>()
            .ok_or_else(|| {
                internal(format!(
                    "buffer {} was not allocated by a Vulkan device",
                    range.buffer().id()
                ))
            })?;
        if !Arc::ptr_eq(&vulkan.context, &self.context) {
            return Err(internal(format!(
                "buffer {} belongs to another Vulkan device than {}",
                range.buffer().id(),
                self.context.id
            )));
        }
        let handle = vulkan.buffer;
        self.keep.push(Box::new(memory));
        Ok(handle)
    }

    fn copy(&self, from: vk::Buffer, from_offset: u64, to: vk::Buffer, to_offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let region = vk::BufferCopy {
            src_offset: from_offset,
            dst_offset: to_offset,
            size: len,
        };
        // SAFETY: recording into our command buffer; both buffers are kept alive and the
        // regions lie within them (core-validated ranges, or staging we sized).
        unsafe {
            self.context
                .device
                .cmd_copy_buffer(self.slot.command_buffer, from, to, &[region])
        }
    }

    fn command(&mut self, command: &Command) -> Result<()> {
        let device = self.context.device.clone();
        let cb = self.slot.command_buffer;
        match command {
            Command::Fill {
                target,
                pattern,
                pattern_len,
            } => {
                let buffer = self.buffer(target)?;
                let bytes = pattern.to_le_bytes();
                let n = *pattern_len as usize;
                let mut word = [0u8; 4];
                for (i, b) in word.iter_mut().enumerate() {
                    *b = bytes[i % n];
                }
                let (start, end) = (target.offset(), target.end());
                let middle_start = start.checked_next_multiple_of(4).ok_or_else(|| {
                    internal(format!(
                        "fill of {target:?} starts past the last 4-byte word"
                    ))
                })?;
                let middle_end = end / 4 * 4;
                if middle_start < middle_end {
                    // SAFETY: recording into our command buffer; the range is 4-byte aligned
                    // and lies within the live buffer.
                    unsafe {
                        device.cmd_fill_buffer(
                            cb,
                            buffer,
                            middle_start,
                            middle_end - middle_start,
                            u32::from_le_bytes(word),
                        )
                    };
                }
                if start % 4 != 0 || end % 4 != 0 {
                    // Whole patterns start at multiples of the pattern length (checked by the
                    // core), so byte `a` of the target holds `word[a % 4]`.
                    let mut twice = word.to_vec();
                    twice.extend_from_slice(&word);
                    let staging = self.upload(&twice)?;
                    if middle_start >= middle_end {
                        self.copy(staging, start % 4, buffer, start, end - start);
                    } else {
                        self.copy(staging, start % 4, buffer, start, middle_start - start);
                        self.copy(staging, 0, buffer, middle_end, end - middle_end);
                    }
                }
            }
            Command::Update { target, data } => {
                let buffer = self.buffer(target)?;
                let len = data.len() as u64;
                if len == 0 {
                    return Ok(());
                }
                if len <= 65536 && len.is_multiple_of(4) && target.offset() % 4 == 0 {
                    // SAFETY: recording into our command buffer; aligned, at most 64 KiB, within
                    // the live buffer.
                    unsafe { device.cmd_update_buffer(cb, buffer, target.offset(), data) };
                } else {
                    let staging = self.upload(data)?;
                    self.copy(staging, 0, buffer, target.offset(), len);
                }
            }
            Command::Copy { source, target } => {
                let from = self.buffer(source)?;
                let to = self.buffer(target)?;
                self.copy(from, source.offset(), to, target.offset(), target.len());
            }
            Command::Dispatch(dispatch) => self.dispatch(dispatch)?,
            // Vulkan devices say they run no gathers (`DeviceBackend::gathers`), so the core
            // gathers on the host instead of sending one.
            Command::Gather { .. } => {
                return Err(Error::new(
                    StatusCode::Internal,
                    "a gather reached a Vulkan device, which runs none",
                ))
            }
            Command::Barrier => {
                let barrier = vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
                    .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE);
                // SAFETY: recording into our command buffer.
                unsafe {
                    device.cmd_pipeline_barrier(
                        cb,
                        vk::PipelineStageFlags::ALL_COMMANDS,
                        vk::PipelineStageFlags::ALL_COMMANDS,
                        vk::DependencyFlags::empty(),
                        &[barrier],
                        &[],
                        &[],
                    )
                };
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, dispatch: &Dispatch<BufferRef>) -> Result<()> {
        let executable = dispatch
            .executable
            .backend()
            .as_any()
            .downcast_ref::<VulkanExecutable>()
            .ok_or_else(|| {
                internal(format!(
                    "{} (format '{}') was not loaded by a Vulkan device",
                    dispatch.executable,
                    dispatch.executable.format()
                ))
            })?;
        // Its pipelines and layouts are objects of the VkDevice that loaded it: binding them
        // in this device's command buffer (or allocating sets with its layouts here) is invalid
        // usage (VUID-vkCmdBindPipeline-commonparent), so refuse another device's executable.
        if !executable.loaded_by(&self.context) {
            return Err(internal(format!(
                "{} (format '{}') was loaded by another Vulkan device than {}; load \
                 it on the device that dispatches it",
                dispatch.executable,
                dispatch.executable.format(),
                self.context.id
            )));
        }
        let index = dispatch.entry_point as usize;
        let pipeline = &executable.pipelines[index];
        let entry = &executable.entry_points()[index];
        // Workgroup counts past maxComputeWorkGroupCount (VUID-vkCmdDispatch-groupCountX-00386
        // and its y, z siblings) never get here: the core refuses them at submission, from the
        // device's dispatch.max_workgroup_count.* answers.
        let alignment = self
            .context
            .limits
            .min_storage_buffer_offset_alignment
            .max(1);
        let mut infos = Vec::new();
        for (i, range) in dispatch.bindings.iter().enumerate() {
            if range.offset() % alignment != 0 {
                return Err(internal(format!(
                    "binding {i} of dispatch '{}' starts at offset {}, which is not a multiple \
                     of the device's storage buffer alignment {alignment} (query \
                     buffer.binding_alignment)",
                    entry.name,
                    range.offset()
                )));
            }
            if range.is_empty() {
                return Err(internal(format!(
                    "binding {i} of dispatch '{}' is empty; Vulkan storage buffer bindings \
                     need at least one byte",
                    entry.name
                )));
            }
            let least = executable.min_binding_size(index, i);
            if range.len() < least {
                return Err(internal(format!(
                    "binding {i} of dispatch '{}' is {} bytes, but the shader's buffer there \
                     needs at least {least} bytes (its fixed-size part)",
                    entry.name,
                    range.len()
                )));
            }
            let buffer = self.buffer(range)?;
            infos.push(vk::DescriptorBufferInfo {
                buffer,
                offset: range.offset(),
                range: range.len(),
            });
        }
        self.keep.push(Box::new(dispatch.executable.clone()));
        if dispatch.workgroups.contains(&0) {
            return Ok(());
        }
        let device = self.context.device.clone();
        let cb = self.slot.command_buffer;
        if !infos.is_empty() {
            let layouts = [pipeline.set_layout];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(self.slot.descriptor_pool)
                .set_layouts(&layouts);
            // SAFETY: the pool was sized for every dispatch of this recording and is ours.
            let set = unsafe { device.allocate_descriptor_sets(&info) }
                .map_err(|r| vk_fail("vkAllocateDescriptorSets", r))?[0];
            let writes: Vec<_> = infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(i as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(std::slice::from_ref(info))
                })
                .collect();
            // SAFETY: the set is fresh and unused; the buffers are live.
            unsafe {
                device.update_descriptor_sets(&writes, &[]);
                device.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    pipeline.layout,
                    0,
                    &[set],
                    &[],
                );
            }
        }
        if pipeline.uses_status() {
            let set = self.status_set(&entry.name, pipeline)?;
            // SAFETY: recording into our command buffer; the set holds the live status word and
            // matches the layout's set 1.
            unsafe {
                device.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    pipeline.layout,
                    crate::STATUS_SET,
                    &[set],
                    &[],
                )
            };
        }
        let constants: Vec<u8> = dispatch
            .constants
            .iter()
            .flat_map(|c| c.to_le_bytes())
            .collect();
        let [x, y, z] = dispatch.workgroups;
        // SAFETY: recording into our command buffer; the pipeline and layout are live (the
        // executable is kept), and the constants fit the layout's push-constant range.
        unsafe {
            device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline.pipeline);
            if !constants.is_empty() {
                device.cmd_push_constants(
                    cb,
                    pipeline.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &constants,
                );
            }
            device.cmd_dispatch(cb, x, y, z);
        }
        Ok(())
    }
}

impl Recording {
    /// The status word's descriptor set, made on first use (with the word itself); records
    /// `entry` as one of the kernels that may set it.
    fn status_set(&mut self, entry: &str, pipeline: &Pipeline) -> Result<vk::DescriptorSet> {
        if self.status.is_none() {
            let memory = self.host_memory(4, false)?;
            let status = StatusWord {
                memory,
                entry_points: Vec::new(),
            };
            status.reset()?;
            self.status = Some(status);
        }
        let status = self.status.as_mut().expect("created above");
        if !status.entry_points.iter().any(|e| e == entry) {
            status.entry_points.push(entry.to_string());
        }
        if self.status_set == vk::DescriptorSet::null() {
            let device = &self.context.device;
            let layouts = [pipeline.status_layout];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(self.slot.descriptor_pool)
                .set_layouts(&layouts);
            // SAFETY: the pool was sized with one set for the status word and is ours.
            let set = unsafe { device.allocate_descriptor_sets(&info) }
                .map_err(|r| vk_fail("vkAllocateDescriptorSets (status word)", r))?[0];
            let word = [vk::DescriptorBufferInfo {
                buffer: status.memory.buffer,
                offset: 0,
                range: 4,
            }];
            let write = vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(crate::STATUS_BINDING)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&word);
            // SAFETY: the set is fresh and unused; the word's buffer is live (owned by `self`).
            unsafe { device.update_descriptor_sets(&[write], &[]) };
            self.status_set = set;
        }
        Ok(self.status_set)
    }
}

/// The Vulkan pipeline of a dispatch, if its executable is a Vulkan one.
fn pipeline_of(dispatch: &Dispatch<BufferRef>) -> Option<&Pipeline> {
    dispatch
        .executable
        .backend()
        .as_any()
        .downcast_ref::<VulkanExecutable>()?
        .pipelines
        .get(dispatch.entry_point as usize)
}

impl Drop for Recording {
    fn drop(&mut self) {
        // A recording still holding its slot is dropped unsubmitted (an error) or after its
        // submission completed: the GPU no longer uses it.
        self.slot.destroy(&self.context.device);
    }
}
