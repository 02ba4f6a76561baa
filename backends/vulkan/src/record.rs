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
use std::sync::Arc;

use ash::vk;
use halcyon::backend::{BufferMemory, ExecutableBackend, Work};
use halcyon::command_buffer::{Command, Dispatch};
use halcyon::{BufferRef, Error, Result, StatusCode};

use crate::context::Context;
use crate::device::{Core, VkQueue};
use crate::executable::VulkanExecutable;
use crate::instance::vk_fail;
use crate::memory::VulkanMemory;

/// Runs on the reactor when the submission completed, before its fence is signalled.
pub(crate) type After = Box<dyn FnOnce() -> Result<()> + Send>;

/// What a submission recorded and must keep until the GPU finished it.
pub(crate) struct Recording {
    context: Arc<Context>,
    pool: vk::CommandPool,
    command_buffer: vk::CommandBuffer,
    descriptor_pool: vk::DescriptorPool,
    keep: Vec<Box<dyn Any + Send>>,
    after: Option<After>,
}

fn internal(message: String) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

impl Recording {
    /// Records `work` for queue `index` (nothing to record for an empty command list).
    pub(crate) fn record(core: &Arc<Core>, index: usize, work: Work) -> Result<Recording> {
        let mut rec = Recording {
            context: core.context.clone(),
            pool: vk::CommandPool::null(),
            command_buffer: vk::CommandBuffer::null(),
            descriptor_pool: vk::DescriptorPool::null(),
            keep: Vec::new(),
            after: None,
        };
        match work {
            Work::Commands(commands) => {
                if commands.is_empty() {
                    return Ok(rec);
                }
                rec.begin(&core.queues[index])?;
                rec.descriptor_pool_for(&commands)?;
                for command in commands.iter() {
                    rec.command(command)?;
                }
                rec.keep.push(Box::new(commands));
            }
            Work::Read { source, sink } => {
                rec.begin(&core.queues[index])?;
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
                            rec.command_buffer,
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
                    let bytes =
                        unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len as usize) }.to_vec();
                    sink.deliver(bytes);
                    Ok(())
                }));
            }
            Work::HostCall(_) => {
                return Err(Error::new(
                    StatusCode::Internal,
                    "host calls are not recorded into command buffers",
                ))
            }
        }
        rec.end()?;
        Ok(rec)
    }

    pub(crate) fn command_buffers(&self) -> Vec<vk::CommandBuffer> {
        if self.command_buffer == vk::CommandBuffer::null() {
            Vec::new()
        } else {
            vec![self.command_buffer]
        }
    }

    /// The GPU finished: recycles the command pool into `queue` and hands back what was kept
    /// and the completion step.
    pub(crate) fn finish(mut self, queue: &VkQueue) -> (Vec<Box<dyn Any + Send>>, Option<After>) {
        if self.pool != vk::CommandPool::null() {
            // SAFETY: the submission using the pool's command buffer completed.
            let reset = unsafe {
                self.context
                    .device
                    .reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty())
            };
            if reset.is_ok() {
                queue
                    .pools
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(self.pool);
                self.pool = vk::CommandPool::null();
                self.command_buffer = vk::CommandBuffer::null();
            }
        }
        (std::mem::take(&mut self.keep), self.after.take())
    }

    fn begin(&mut self, queue: &VkQueue) -> Result<()> {
        let device = &self.context.device;
        let recycled = queue.pools.lock().unwrap_or_else(|p| p.into_inner()).pop();
        self.pool = match recycled {
            Some(pool) => pool,
            None => {
                let info = vk::CommandPoolCreateInfo::default()
                    .queue_family_index(queue.family)
                    .flags(vk::CommandPoolCreateFlags::TRANSIENT);
                // SAFETY: the device is live; the info lives across the call.
                unsafe { device.create_command_pool(&info, None) }
                    .map_err(|r| vk_fail("vkCreateCommandPool", r))?
            }
        };
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is ours alone (taken out of the queue's free list).
        self.command_buffer = unsafe { device.allocate_command_buffers(&info) }
            .map_err(|r| vk_fail("vkAllocateCommandBuffers", r))?[0];
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a freshly allocated command buffer in the initial state.
        unsafe { device.begin_command_buffer(self.command_buffer, &begin) }
            .map_err(|r| vk_fail("vkBeginCommandBuffer", r))
    }

    fn end(&mut self) -> Result<()> {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE);
        // SAFETY: recording into our command buffer.
        unsafe {
            self.context.device.cmd_pipeline_barrier(
                self.command_buffer,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
            self.context.device.end_command_buffer(self.command_buffer)
        }
        .map_err(|r| vk_fail("vkEndCommandBuffer", r))
    }

    /// A descriptor pool with room for every dispatch of `commands`.
    fn descriptor_pool_for(&mut self, commands: &[Command]) -> Result<()> {
        let (sets, descriptors) = commands
            .iter()
            .filter_map(|c| match c {
                Command::Dispatch(d) if !d.bindings.is_empty() => Some(d.bindings.len() as u32),
                _ => None,
            })
            .fold((0u32, 0u32), |(s, n), b| (s + 1, n + b));
        if sets == 0 {
            return Ok(());
        }
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: descriptors,
        }];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(sets)
            .pool_sizes(&sizes);
        // SAFETY: the device is live; the info lives across the call.
        self.descriptor_pool = unsafe { self.context.device.create_descriptor_pool(&info, None) }
            .map_err(|r| vk_fail("vkCreateDescriptorPool", r))?;
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
        self.keep.push(Box::new(memory));
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
                .cmd_copy_buffer(self.command_buffer, from, to, &[region])
        }
    }

    fn command(&mut self, command: &Command) -> Result<()> {
        let device = self.context.device.clone();
        let cb = self.command_buffer;
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
                let (middle_start, middle_end) = (start.div_ceil(4) * 4, end / 4 * 4);
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
                if len <= 65536 && len % 4 == 0 && target.offset() % 4 == 0 {
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
                    "executable {} (format '{}') was not loaded by a Vulkan device",
                    dispatch.executable.id(),
                    dispatch.executable.format()
                ))
            })?;
        let index = dispatch.entry_point as usize;
        let pipeline = &executable.pipelines[index];
        let entry = &executable.entry_points()[index];
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
        let cb = self.command_buffer;
        if !infos.is_empty() {
            let layouts = [pipeline.set_layout];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(self.descriptor_pool)
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

impl Drop for Recording {
    fn drop(&mut self) {
        // SAFETY: a recording is dropped either unsubmitted (an error) or after its submission
        // completed; either way the GPU no longer uses its pools. Null handles are ignored.
        unsafe {
            self.context
                .device
                .destroy_descriptor_pool(self.descriptor_pool, None);
            self.context.device.destroy_command_pool(self.pool, None);
        }
    }
}
