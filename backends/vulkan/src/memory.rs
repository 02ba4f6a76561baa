//! Buffer memory: one `VkBuffer` bound to its own `VkDeviceMemory`, persistently mapped when the
//! memory type is host-visible, with flush/invalidate for non-coherent types.

use std::ptr::NonNull;
use std::sync::Arc;

use ash::vk;
use halcyon::backend::BufferMemory;
use halcyon::{Error, MemoryType, Result, StatusCode};

use crate::context::Context;
use crate::instance::vk_fail;

/// The core's memory type bits as Vulkan property flags.
pub(crate) fn vk_properties(memory: MemoryType) -> vk::MemoryPropertyFlags {
    let mut flags = vk::MemoryPropertyFlags::empty();
    if memory.contains(MemoryType::DEVICE_LOCAL) {
        flags |= vk::MemoryPropertyFlags::DEVICE_LOCAL;
    }
    if memory.contains(MemoryType::HOST_VISIBLE) {
        flags |= vk::MemoryPropertyFlags::HOST_VISIBLE;
    }
    if memory.contains(MemoryType::HOST_COHERENT) {
        flags |= vk::MemoryPropertyFlags::HOST_COHERENT;
    }
    if memory.contains(MemoryType::HOST_CACHED) {
        flags |= vk::MemoryPropertyFlags::HOST_CACHED;
    }
    flags
}

/// Picks a memory type allowed by `type_bits` with every `required` property; `DEVICE_LOCAL` is
/// a preference (dropped if no type has it together with the rest).
pub(crate) fn choose_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    type_bits: u32,
    required: vk::MemoryPropertyFlags,
) -> Option<u32> {
    let find = |want: vk::MemoryPropertyFlags| {
        (0..props.memory_type_count).find(|&i| {
            type_bits & (1 << i) != 0
                && props.memory_types[i as usize].property_flags.contains(want)
        })
    };
    find(required).or_else(|| find(required & !vk::MemoryPropertyFlags::DEVICE_LOCAL))
}

/// The range to flush or invalidate for `[offset, offset + len)`: widened to `atom` multiples
/// and clamped to the allocation (`VK_WHOLE_SIZE` when it reaches the end).
pub fn atom_range(offset: u64, len: u64, atom: u64, allocation: u64) -> (u64, u64) {
    let atom = atom.max(1);
    let start = offset / atom * atom;
    let end = (offset + len).div_ceil(atom) * atom;
    if end >= allocation {
        (start, vk::WHOLE_SIZE)
    } else {
        (start, end - start)
    }
}

pub(crate) struct VulkanMemory {
    pub(crate) context: Arc<Context>,
    pub(crate) buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
    allocation: u64,
    ptr: Option<NonNull<u8>>,
    coherent: bool,
    pub(crate) memory_type: u32,
}

// SAFETY: the handles are plain Vulkan handles usable from any thread; the mapped pointer is
// only dereferenced through the core's mapping guards and queue ordering.
unsafe impl Send for VulkanMemory {}
// SAFETY: as above; flush/invalidate take no host-side state.
unsafe impl Sync for VulkanMemory {}

impl VulkanMemory {
    pub(crate) fn new(
        context: &Arc<Context>,
        size: u64,
        required: vk::MemoryPropertyFlags,
    ) -> Result<VulkanMemory> {
        let usage = vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::STORAGE_BUFFER;
        let info = vk::BufferCreateInfo::default()
            .size(size.max(4))
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let device = &context.device;
        // SAFETY: the device is live; `info` lives across the call.
        let buffer = unsafe { device.create_buffer(&info, None) }
            .map_err(|r| vk_fail(&format!("vkCreateBuffer ({size} bytes)"), r))?;
        let mut memory = VulkanMemory {
            context: context.clone(),
            buffer,
            memory: vk::DeviceMemory::null(),
            size,
            allocation: 0,
            ptr: None,
            coherent: true,
            memory_type: 0,
        };
        // SAFETY: `buffer` was just created on this device.
        let requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        let type_index = choose_type(&context.memory, requirements.memory_type_bits, required)
            .ok_or_else(|| {
                Error::new(
                    StatusCode::ResourceExhausted,
                    format!(
                        "{} has no memory type with properties {required:?} for buffers",
                        context.id
                    ),
                )
            })?;
        let flags = context.memory.memory_types[type_index as usize].property_flags;
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(requirements.size)
            .memory_type_index(type_index);
        // SAFETY: the device is live; `alloc` lives across the call.
        memory.memory = unsafe { device.allocate_memory(&alloc, None) }.map_err(|r| {
            vk_fail(
                &format!(
                    "vkAllocateMemory ({} bytes, type {type_index})",
                    alloc.allocation_size
                ),
                r,
            )
        })?;
        memory.allocation = requirements.size;
        memory.memory_type = type_index;
        memory.coherent = flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        // SAFETY: buffer and memory are unbound objects of this device; offset 0 satisfies any
        // alignment and the allocation is as large as the requirements.
        unsafe { device.bind_buffer_memory(buffer, memory.memory, 0) }
            .map_err(|r| vk_fail("vkBindBufferMemory", r))?;
        if flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) {
            // SAFETY: host-visible memory, not mapped yet; mapped once for its whole life.
            let ptr = unsafe {
                device.map_memory(
                    memory.memory,
                    0,
                    vk::WHOLE_SIZE,
                    vk::MemoryMapFlags::empty(),
                )
            }
            .map_err(|r| vk_fail("vkMapMemory", r))?;
            memory.ptr = NonNull::new(ptr.cast::<u8>());
            // Fresh memory reads as zero, like the CPU backend's.
            if let Some(ptr) = memory.ptr {
                // SAFETY: the mapping covers the whole allocation, at least `size` bytes.
                unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, size as usize) };
                memory.flush(0, size)?;
            }
        }
        Ok(memory)
    }

    fn ranges(
        &self,
        offset: u64,
        len: u64,
        what: &str,
    ) -> Result<Option<vk::MappedMemoryRange<'_>>> {
        if self.coherent || self.ptr.is_none() || len == 0 {
            return Ok(None);
        }
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(Error::new(
                StatusCode::OutOfRange,
                format!("{what} of {offset}+{len} lies outside {} bytes", self.size),
            ));
        }
        let atom = self.context.limits.non_coherent_atom_size;
        let (offset, size) = atom_range(offset, len, atom, self.allocation);
        Ok(Some(
            vk::MappedMemoryRange::default()
                .memory(self.memory)
                .offset(offset)
                .size(size),
        ))
    }
}

impl BufferMemory for VulkanMemory {
    fn len(&self) -> u64 {
        self.size
    }

    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.ptr
    }

    fn flush(&self, offset: u64, len: u64) -> Result<()> {
        let Some(range) = self.ranges(offset, len, "flush")? else {
            return Ok(());
        };
        // SAFETY: the memory is mapped and the range lies within the allocation, aligned to
        // nonCoherentAtomSize (or reaching its end).
        unsafe { self.context.device.flush_mapped_memory_ranges(&[range]) }
            .map_err(|r| vk_fail("vkFlushMappedMemoryRanges", r))
    }

    fn invalidate(&self, offset: u64, len: u64) -> Result<()> {
        let Some(range) = self.ranges(offset, len, "invalidate")? else {
            return Ok(());
        };
        // SAFETY: as in `flush`.
        unsafe {
            self.context
                .device
                .invalidate_mapped_memory_ranges(&[range])
        }
        .map_err(|r| vk_fail("vkInvalidateMappedMemoryRanges", r))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for VulkanMemory {
    fn drop(&mut self) {
        // SAFETY: in-flight submissions hold an Arc to the memory they use, so the GPU no
        // longer uses it; freeing mapped memory unmaps it implicitly.
        unsafe {
            self.context.device.destroy_buffer(self.buffer, None);
            if self.memory != vk::DeviceMemory::null() {
                self.context.device.free_memory(self.memory, None);
            }
        }
    }
}
