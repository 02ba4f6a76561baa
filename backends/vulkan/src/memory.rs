//! Buffer memory: one `VkBuffer` per halcyon buffer, bound at an offset inside a large shared
//! `VkDeviceMemory` block, or to a dedicated `VkDeviceMemory` when it is large (over half a
//! block) or the driver requires one. The sub-allocator (`suballoc.rs`) owns the blocks; it
//! lives in the device's `Context`.
//!
//! * Host-visible memory is mapped once per block (or dedicated allocation) for its whole life;
//!   a buffer's host pointer points into that mapping.
//! * A new host-visible buffer reads as zero: its bytes are zeroed (and flushed) when it is
//!   allocated, since a sub-allocation may reuse a range another buffer wrote. Device-only
//!   memory is not zeroed (the host cannot reach it).
//! * Non-coherent memory (or any host-visible memory with
//!   [`crate::VulkanDeviceOptions::force_non_coherent`]) is flushed and invalidated in
//!   `nonCoherentAtomSize` steps ([`atom_range`]). Such a buffer's range in its block starts at
//!   an atom multiple and its length is rounded up to one, so widening a flush or invalidate
//!   to whole atoms never reaches a neighbour's bytes: an invalidate cannot discard a
//!   neighbour's unflushed host writes.
//! * Dropping the memory (the core does so only once no in-flight work uses it) destroys the
//!   buffer and returns its range to the allocator.

use std::ptr::NonNull;
use std::sync::Arc;

use ash::vk;
use halcyon::backend::BufferMemory;
use halcyon::{Error, MemoryType, Result, StatusCode};

use crate::context::Context;
use crate::instance::vk_fail;
use crate::suballoc::{lcm, Allocation, Request};

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
/// and clamped to the allocation (`VK_WHOLE_SIZE` when it reaches the end, or when the end
/// does not fit in a `u64`).
pub fn atom_range(offset: u64, len: u64, atom: u64, allocation: u64) -> (u64, u64) {
    let atom = atom.max(1);
    let start = offset / atom * atom;
    let end = offset
        .checked_add(len)
        .and_then(|end| end.div_ceil(atom).checked_mul(atom));
    match end {
        Some(end) if end < allocation => (start, end - start),
        _ => (start, vk::WHOLE_SIZE),
    }
}

/// A buffer and the memory range it is bound to.
pub(crate) struct VulkanMemory {
    pub(crate) context: Arc<Context>,
    pub(crate) buffer: vk::Buffer,
    /// `None` only while `new` has not bound the buffer yet (and in `drop`).
    allocation: Option<Allocation>,
    size: u64,
    ptr: Option<NonNull<u8>>,
    coherent: bool,
    pub(crate) memory_type: u32,
}

// SAFETY: the handles are plain Vulkan handles usable from any thread; the mapped pointer is
// only dereferenced through the core's mapping guards and queue ordering, and covers only this
// buffer's own range of the mapping.
unsafe impl Send for VulkanMemory {}
// SAFETY: as above; flush/invalidate take no host-side state.
unsafe impl Sync for VulkanMemory {}

impl VulkanMemory {
    /// A buffer of `size` bytes in a memory type with the `required` properties (see
    /// [`choose_type`]); host-visible memory is mapped and reads as zero.
    pub(crate) fn new(
        context: &Arc<Context>,
        size: u64,
        required: vk::MemoryPropertyFlags,
    ) -> Result<VulkanMemory> {
        let usage = vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::STORAGE_BUFFER;
        // With transfer-family queues in use, buffers are shared between the two families
        // (no ownership transfers; semaphores order the accesses).
        let families = &context.queue_families;
        let info = vk::BufferCreateInfo::default()
            .size(size.max(4))
            .usage(usage);
        let info = if families.len() > 1 {
            info.sharing_mode(vk::SharingMode::CONCURRENT)
                .queue_family_indices(families)
        } else {
            info.sharing_mode(vk::SharingMode::EXCLUSIVE)
        };
        let device = &context.device;
        // SAFETY: the device is live; `info` lives across the call.
        let buffer = unsafe { device.create_buffer(&info, None) }
            .map_err(|r| vk_fail(&format!("vkCreateBuffer ({size} bytes)"), r))?;
        // From here on `drop` destroys the buffer if anything fails.
        let mut memory = VulkanMemory {
            context: context.clone(),
            buffer,
            allocation: None,
            size,
            ptr: None,
            coherent: true,
            memory_type: 0,
        };
        let mut dedicated = vk::MemoryDedicatedRequirements::default();
        let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        // SAFETY: `buffer` was just created on this device (Vulkan 1.1 core query); the info
        // and the output chain live across the call.
        unsafe {
            device.get_buffer_memory_requirements2(
                &vk::BufferMemoryRequirementsInfo2::default().buffer(buffer),
                &mut requirements,
            )
        };
        let requirements = requirements.memory_requirements;
        // A driver's preference is honoured for buffers of 1 MiB and more; small ones share
        // blocks regardless (thousands of dedicated allocations would exhaust
        // maxMemoryAllocationCount).
        let dedicated = dedicated.requires_dedicated_allocation == vk::TRUE
            || (dedicated.prefers_dedicated_allocation == vk::TRUE && requirements.size >= 1 << 20);
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
        let host_visible = flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
        memory.memory_type = type_index;
        memory.coherent = !host_visible
            || (flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT)
                && !context.options.force_non_coherent);
        let (mut alignment, mut reserve) = (requirements.alignment, requirements.size);
        if !memory.coherent {
            // Whole atoms: flushes and invalidates of this range never touch a neighbour's.
            let atom = context.limits.non_coherent_atom_size.max(1);
            alignment = lcm(alignment, atom);
            reserve = reserve.div_ceil(atom).checked_mul(atom).ok_or_else(|| {
                Error::new(
                    StatusCode::ResourceExhausted,
                    format!("a buffer of {size} bytes cannot be rounded up to whole atoms"),
                )
            })?;
        }
        let allocation = context.allocator.allocate(
            device,
            Request {
                type_index,
                size: reserve,
                alignment,
                dedicated_for: dedicated.then_some(buffer),
            },
        )?;
        let (handle, offset) = (allocation.memory, allocation.offset);
        memory.ptr = allocation.ptr;
        memory.allocation = Some(allocation);
        // SAFETY: an unbound buffer of this device; the range at `offset` is as large as the
        // requirements and aligned to them, and no other buffer is bound to it.
        unsafe { device.bind_buffer_memory(buffer, handle, offset) }
            .map_err(|r| vk_fail("vkBindBufferMemory", r))?;
        if let Some(ptr) = memory.ptr {
            // Fresh memory reads as zero, like the CPU backend's (a reused range held another
            // buffer's bytes).
            // SAFETY: the mapping covers this allocation, at least `size` bytes from `ptr`,
            // and no one else uses the range.
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, size as usize) };
            memory.flush(0, size)?;
        }
        Ok(memory)
    }

    fn ranges(
        &self,
        offset: u64,
        len: u64,
        what: &str,
    ) -> Result<Option<vk::MappedMemoryRange<'_>>> {
        let Some(allocation) = &self.allocation else {
            return Ok(None);
        };
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
        // The allocation starts at an atom multiple and is a whole number of atoms long (or
        // is dedicated and ends with its memory), so the widened range stays inside it.
        let (offset, size) = atom_range(
            allocation.offset + offset,
            len,
            atom,
            allocation.memory_size,
        );
        debug_assert!(
            offset >= allocation.offset
                && if size == vk::WHOLE_SIZE {
                    allocation.offset + allocation.size >= allocation.memory_size
                } else {
                    offset + size <= allocation.offset + allocation.size
                },
            "{what} range {offset}+{size} leaves allocation {}+{}",
            allocation.offset,
            allocation.size
        );
        Ok(Some(
            vk::MappedMemoryRange::default()
                .memory(allocation.memory)
                .offset(offset)
                .size(size),
        ))
    }
}

// SAFETY: `ptr` is the persistent mapping of this allocation's `size` bytes (unmapped only when
// the allocation is freed on drop); flush and invalidate check their range.
unsafe impl BufferMemory for VulkanMemory {
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
        // longer uses the buffer.
        unsafe { self.context.device.destroy_buffer(self.buffer, None) };
        if let Some(allocation) = self.allocation.take() {
            // SAFETY: the allocation was made on this device; the buffer bound to it is gone,
            // no work uses it (see above), and the host pointer dies with `self`.
            unsafe {
                self.context
                    .allocator
                    .free(&self.context.device, allocation)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::VulkanDeviceOptions;

    fn context(force_non_coherent: bool) -> Option<Arc<Context>> {
        let options = VulkanDeviceOptions::default().with_force_non_coherent(force_non_coherent);
        match Context::new(0, options) {
            Ok((context, _)) => Some(context),
            Err(error) if error.code() == StatusCode::Unavailable => {
                eprintln!("skipping: no Vulkan: {error}");
                None
            }
            Err(error) => panic!("cannot create vulkan://0: {error}"),
        }
    }

    /// The `[start, end)` a flush or invalidate of `[offset, offset + len)` of `memory` covers
    /// in its `VkDeviceMemory`, if it makes one.
    fn covered(memory: &VulkanMemory, offset: u64, len: u64) -> Option<(u64, u64)> {
        let range = memory.ranges(offset, len, "test").unwrap()?;
        let allocation = memory.allocation.as_ref().unwrap();
        let end = if range.size == vk::WHOLE_SIZE {
            allocation.memory_size
        } else {
            range.offset + range.size
        };
        Some((range.offset, end))
    }

    /// With `force_non_coherent`, host-visible memory of every kind flushes and invalidates in
    /// whole atoms that stay inside the buffer's own range, even for odd sizes side by side.
    #[test]
    fn forced_non_coherent_ranges_stay_in_whole_own_atoms() {
        let Some(context) = context(true) else { return };
        let atom = context.limits.non_coherent_atom_size.max(1);
        let visible = vk::MemoryPropertyFlags::HOST_VISIBLE;
        let kinds = [
            visible | vk::MemoryPropertyFlags::HOST_COHERENT,
            visible | vk::MemoryPropertyFlags::HOST_CACHED,
            visible,
        ];
        let mut owned: Vec<(vk::DeviceMemory, u64, u64)> = Vec::new();
        let mut buffers = Vec::new();
        for (i, size) in [1029u64, 3, 77, 4099, 1, 333, 2053].into_iter().enumerate() {
            let memory = VulkanMemory::new(&context, size, kinds[i % kinds.len()]).unwrap();
            let allocation = memory.allocation.as_ref().unwrap();
            assert!(!memory.coherent, "force_non_coherent left a type coherent");
            assert_eq!(allocation.offset % atom, 0, "starts inside an atom");
            assert_eq!(allocation.size % atom, 0, "ends inside an atom");
            assert!(allocation.size >= size);
            for (offset, len) in [(0, size), (size - 1, 1), (size / 2, size - size / 2)] {
                let (start, end) = covered(&memory, offset, len).expect("no flush range");
                let own_end = allocation.offset + allocation.size;
                assert!(
                    start % atom == 0 && (end % atom == 0 || end == allocation.memory_size),
                    "{start}..{end} is not in whole atoms"
                );
                assert!(
                    start <= allocation.offset + offset && end >= allocation.offset + offset + len,
                    "{start}..{end} misses {offset}+{len}"
                );
                assert!(
                    start >= allocation.offset && end <= own_end,
                    "{start}..{end} leaves the buffer's {}..{own_end}",
                    allocation.offset
                );
            }
            owned.push((allocation.memory, allocation.offset, allocation.size));
            buffers.push(memory);
        }
        for (i, a) in owned.iter().enumerate() {
            for b in &owned[i + 1..] {
                assert!(
                    a.0 != b.0 || a.1 + a.2 <= b.1 || b.1 + b.2 <= a.1,
                    "ranges {a:?} and {b:?} overlap"
                );
            }
        }
        assert!(
            covered(&buffers[0], 0, 0).is_none(),
            "an empty range flushes"
        );
        assert_eq!(
            buffers[0].ranges(1000, 30, "test").unwrap_err().code(),
            StatusCode::OutOfRange
        );
    }

    /// Without the option, memory the driver reports coherent is never flushed; non-coherent
    /// memory is.
    #[test]
    fn coherent_memory_is_not_flushed_unless_forced() {
        let Some(context) = context(false) else {
            return;
        };
        let memory =
            VulkanMemory::new(&context, 100, vk::MemoryPropertyFlags::HOST_VISIBLE).unwrap();
        let flags = context.memory.memory_types[memory.memory_type as usize].property_flags;
        let coherent = flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        assert_eq!(memory.coherent, coherent);
        assert_eq!(covered(&memory, 0, 100).is_some(), !coherent);
    }

    /// Sub-allocated buffers are bound at offsets their requirements allow.
    #[test]
    fn bind_offsets_meet_the_requirements() {
        let Some(context) = context(false) else {
            return;
        };
        for size in [1u64, 4, 100, 4096, 65537] {
            let memory =
                VulkanMemory::new(&context, size, vk::MemoryPropertyFlags::DEVICE_LOCAL).unwrap();
            // SAFETY: a live buffer of this device.
            let requirements =
                unsafe { context.device.get_buffer_memory_requirements(memory.buffer) };
            let allocation = memory.allocation.as_ref().unwrap();
            assert_eq!(allocation.offset % requirements.alignment.max(1), 0);
            assert!(allocation.size >= requirements.size);
            assert!(allocation.offset + allocation.size <= allocation.memory_size);
        }
    }
}
