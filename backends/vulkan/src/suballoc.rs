//! The device-memory sub-allocator: buffers share large `VkDeviceMemory` blocks.
//!
//! Drivers limit how many `VkDeviceMemory` objects may exist (`maxMemoryAllocationCount`, often
//! 4096) and allocating one is slow, so buffers are not given one each. Per Vulkan memory type
//! the [`Allocator`] keeps blocks of [`block_size`] bytes (64 MiB, less on small heaps), each
//! mapped once for its whole life when the type is host-visible, and places buffers at offsets
//! inside them:
//!
//! * **Free ranges** of every block of a type are kept twice: by offset per block (a
//!   `BTreeMap`, to coalesce a freed range with its neighbours) and by `(size, block, offset)`
//!   for the whole type (a `BTreeSet`, for a best-fit search). Allocating and freeing are
//!   O(log n) in the number of free ranges.
//! * **Alignment** is the caller's: the buffer's `VkMemoryRequirements::alignment`, and for
//!   non-coherent host-visible memory also `nonCoherentAtomSize`, with the size rounded up to
//!   it (see `memory.rs`). `bufferImageGranularity` does not apply: only buffers (linear
//!   resources) are ever placed in these blocks, never optimal-tiling images.
//! * **Large allocations** (over half a block), allocations the driver requires to be
//!   dedicated, and allocations made when a new block cannot be had get a `VkDeviceMemory`
//!   of their own.
//! * **Blocks never grow**; new ones are added. When a block empties it is kept as the type's
//!   one spare if the type has none, otherwise freed at once.
//! * **Thread safety**: one mutex per memory type; statistics are atomics read without it.
//!
//! The allocator lives in the device's `Context`. Every sub-allocation is owned by a
//! `VulkanMemory`, which holds the context alive, so when the context drops only spare blocks
//! remain; [`Allocator::release_all`] frees them before the device is destroyed.

use std::collections::{BTreeMap, BTreeSet};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use ash::vk;
use halcyon::Result;

use crate::instance::vk_fail;

/// The largest block.
pub(crate) const MAX_BLOCK: u64 = 64 << 20;
/// The smallest block (unless the heap itself is smaller).
pub(crate) const MIN_BLOCK: u64 = 4 << 20;
/// Offsets and sizes inside a block are multiples of this (keeps slivers out of the free
/// lists).
const GRANULE: u64 = 16;
/// How many best-fit candidates are tried before falling back to one that surely fits.
const CANDIDATES: usize = 8;

/// The block size for a memory type on a heap of `heap_size` bytes: an eighth of the heap,
/// within [`MIN_BLOCK`, `MAX_BLOCK`] and never above the heap, in whole 64 KiB.
pub(crate) fn block_size(heap_size: u64) -> u64 {
    let size = (heap_size / 8).clamp(MIN_BLOCK, MAX_BLOCK).min(heap_size);
    (size / (64 << 10) * (64 << 10)).max(GRANULE)
}

fn align_up(value: u64, align: u64) -> Option<u64> {
    value.checked_add(align - 1).map(|v| v / align * align)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The least common multiple of two alignments (both at least 1).
pub(crate) fn lcm(a: u64, b: u64) -> u64 {
    let (a, b) = (a.max(1), b.max(1));
    a / gcd(a, b) * b
}

/// What to allocate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    /// The Vulkan memory type index.
    pub(crate) type_index: u32,
    /// Bytes the range must hold (already rounded by the caller where it needs that).
    pub(crate) size: u64,
    /// The offset must be a multiple of this.
    pub(crate) alignment: u64,
    /// `Some(buffer)` when the driver requires or prefers a dedicated allocation for it
    /// (`VkMemoryDedicatedRequirements`): it gets one, with `VkMemoryDedicatedAllocateInfo`.
    pub(crate) dedicated_for: Option<vk::Buffer>,
}

/// A range of device memory handed out by the [`Allocator`]; give it back with
/// [`Allocator::free`].
#[derive(Debug)]
pub(crate) struct Allocation {
    /// The memory object the range lies in.
    pub(crate) memory: vk::DeviceMemory,
    /// Where the range starts in `memory`.
    pub(crate) offset: u64,
    /// The range's length (at least the requested size).
    pub(crate) size: u64,
    /// The size of the whole `memory` object.
    pub(crate) memory_size: u64,
    /// The host address of byte `offset` when the memory is host-visible (mapped).
    pub(crate) ptr: Option<NonNull<u8>>,
    /// Where it came from: `None` for a dedicated allocation, else the block id.
    block: Option<u32>,
    type_index: u32,
}

struct Block {
    memory: vk::DeviceMemory,
    size: u64,
    ptr: Option<NonNull<u8>>,
    /// Free ranges, offset -> size; adjacent ranges are always merged.
    free: BTreeMap<u64, u64>,
    /// Live sub-allocations.
    live: u32,
}

// SAFETY: `ptr` is the address of a persistent mapping of `memory`, valid on every thread;
// the block itself never dereferences it (owners of sub-allocations do, within their range).
unsafe impl Send for Block {}

#[derive(Default)]
struct TypePool {
    /// Blocks by id (`None`: a freed block's id, in `vacant` for reuse).
    blocks: Vec<Option<Block>>,
    vacant: Vec<u32>,
    /// Every free range of every block: (size, block id, offset).
    by_size: BTreeSet<(u64, u32, u64)>,
    /// Blocks with no live sub-allocation (kept: at most one).
    empty: u32,
}

impl TypePool {
    fn block(&mut self, id: u32) -> &mut Block {
        self.blocks[id as usize]
            .as_mut()
            .expect("a sub-allocation's block is live")
    }

    /// Finds and takes a range of `size` bytes at an `alignment` multiple.
    fn take(&mut self, size: u64, alignment: u64) -> Option<(u32, u64)> {
        let fits = |&(free_size, _, offset): &(u64, u32, u64)| {
            align_up(offset, alignment)
                .and_then(|start| start.checked_add(size))
                .is_some_and(|end| end <= offset + free_size)
        };
        // Best fit: the smallest free ranges that are long enough, while alignment padding
        // does not spoil them; then the smallest one long enough for any padding.
        let found = self
            .by_size
            .range((size, 0, 0)..)
            .take(CANDIDATES)
            .find(|r| fits(r))
            .or_else(|| {
                let padded = size.checked_add(alignment - 1)?;
                self.by_size.range((padded, 0, 0)..).find(|r| fits(r))
            })
            .copied()?;
        let (free_size, id, offset) = found;
        self.by_size.remove(&found);
        let start = align_up(offset, alignment)?;
        let end = start + size;
        let block = self.block(id);
        block.free.remove(&offset);
        let mut pieces = Vec::with_capacity(2);
        if start > offset {
            pieces.push((offset, start - offset));
        }
        if end < offset + free_size {
            pieces.push((end, offset + free_size - end));
        }
        for &(o, s) in &pieces {
            block.free.insert(o, s);
        }
        block.live += 1;
        let was_empty = block.live == 1;
        for (o, s) in pieces {
            self.by_size.insert((s, id, o));
        }
        if was_empty {
            self.empty -= 1;
        }
        Some((id, start))
    }

    /// Returns `[offset, offset + size)` of block `id`, merging it with free neighbours.
    /// Returns whether the block is now empty.
    fn give_back(&mut self, id: u32, offset: u64, size: u64) -> bool {
        let block = self.block(id);
        let (mut start, mut end) = (offset, offset + size);
        let before = block
            .free
            .range(..offset)
            .next_back()
            .map(|(&o, &s)| (o, s))
            .filter(|&(o, s)| o + s == offset);
        let after = block.free.get(&end).map(|&s| (end, s));
        if let Some((o, _)) = before {
            block.free.remove(&o);
            start = o;
        }
        if let Some((o, s)) = after {
            block.free.remove(&o);
            end = o + s;
        }
        block.free.insert(start, end - start);
        block.live -= 1;
        let empty = block.live == 0;
        for (o, s) in before.into_iter().chain(after) {
            self.by_size.remove(&(s, id, o));
        }
        self.by_size.insert((end - start, id, start));
        if empty {
            self.empty += 1;
        }
        empty
    }

    /// Adds a new, wholly free block; returns its id.
    fn add(&mut self, block: Block) -> u32 {
        let size = block.size;
        let id = match self.vacant.pop() {
            Some(id) => {
                self.blocks[id as usize] = Some(block);
                id
            }
            None => {
                self.blocks.push(Some(block));
                (self.blocks.len() - 1) as u32
            }
        };
        self.by_size.insert((size, id, 0));
        self.empty += 1;
        id
    }

    /// Removes wholly free block `id` and returns it (for `vkFreeMemory`).
    fn remove(&mut self, id: u32) -> Block {
        let block = self.blocks[id as usize]
            .take()
            .expect("removing a live block");
        debug_assert_eq!(block.live, 0);
        self.by_size.remove(&(block.size, id, 0));
        self.vacant.push(id);
        self.empty -= 1;
        block
    }
}

/// Per-type pools of memory blocks (see the module docs).
pub(crate) struct Allocator {
    pools: Vec<Mutex<TypePool>>,
    /// Per memory type: block size and whether it is host-visible.
    block_sizes: Vec<u64>,
    host_visible: Vec<bool>,
    blocks: AtomicU64,
    block_bytes: AtomicU64,
    dedicated: AtomicU64,
    suballocations: AtomicU64,
}

impl Allocator {
    /// An allocator for the memory types in `props`; allocates nothing yet.
    pub(crate) fn new(props: &vk::PhysicalDeviceMemoryProperties) -> Allocator {
        let types = &props.memory_types[..props.memory_type_count as usize];
        Allocator {
            pools: types.iter().map(|_| Mutex::default()).collect(),
            block_sizes: types
                .iter()
                .map(|t| block_size(props.memory_heaps[t.heap_index as usize].size))
                .collect(),
            host_visible: types
                .iter()
                .map(|t| {
                    t.property_flags
                        .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                })
                .collect(),
            blocks: AtomicU64::new(0),
            block_bytes: AtomicU64::new(0),
            dedicated: AtomicU64::new(0),
            suballocations: AtomicU64::new(0),
        }
    }

    /// Blocks currently allocated (all types, spares included).
    pub(crate) fn blocks(&self) -> i64 {
        self.blocks.load(Ordering::Relaxed) as i64
    }

    /// Bytes of all current blocks.
    pub(crate) fn block_bytes(&self) -> i64 {
        self.block_bytes.load(Ordering::Relaxed) as i64
    }

    /// Live dedicated allocations (one `VkDeviceMemory` each).
    pub(crate) fn dedicated_allocations(&self) -> i64 {
        self.dedicated.load(Ordering::Relaxed) as i64
    }

    /// Live sub-allocations (ranges inside blocks).
    pub(crate) fn suballocations(&self) -> i64 {
        self.suballocations.load(Ordering::Relaxed) as i64
    }

    fn pool(&self, type_index: u32) -> MutexGuard<'_, TypePool> {
        self.pools[type_index as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `request.size` bytes of memory type `request.type_index`, host-mapped if the
    /// type is host-visible. The contents are undefined.
    pub(crate) fn allocate(&self, device: &ash::Device, request: Request) -> Result<Allocation> {
        let t = request.type_index;
        let block_size = self.block_sizes[t as usize];
        // Offsets and sizes in GRANULE steps: every range starts and ends at a multiple.
        let alignment = lcm(request.alignment, GRANULE);
        if request.dedicated_for.is_some()
            || request.size > block_size / 2
            || alignment > block_size / 4
        {
            return self.dedicated(device, request);
        }
        let size = align_up(request.size.max(1), GRANULE).expect("size is below a block");
        let mut pool = self.pool(t);
        let (id, offset) = match pool.take(size, alignment) {
            Some(found) => found,
            None => {
                let block = match self.new_block(device, t, block_size) {
                    Ok(block) => block,
                    // No room for another block: perhaps there is for just this range.
                    Err(_) => {
                        drop(pool);
                        return self.dedicated(device, request);
                    }
                };
                pool.add(block);
                // The new block's free range holds `size` plus any padding (size is at most
                // half a block, alignment at most a quarter), so the fallback search finds it.
                pool.take(size, alignment)
                    .expect("a new block holds any range up to half its size")
            }
        };
        let block = pool.block(id);
        let ptr = block.ptr.map(|p| {
            // SAFETY: `offset + size` lies within the block, which the mapping covers whole.
            unsafe { NonNull::new_unchecked(p.as_ptr().add(offset as usize)) }
        });
        let allocation = Allocation {
            memory: block.memory,
            offset,
            size,
            memory_size: block.size,
            ptr,
            block: Some(id),
            type_index: t,
        };
        self.suballocations.fetch_add(1, Ordering::Relaxed);
        Ok(allocation)
    }

    /// Gives `allocation` back: a dedicated one is freed, a sub-allocation returns to its
    /// block (and an emptied block beyond the type's one spare is freed).
    ///
    /// # Safety
    ///
    /// `device` is the device the allocation was made on, and neither the device nor the host
    /// uses the range any more (no pending work, no resource bound to it, no host access).
    pub(crate) unsafe fn free(&self, device: &ash::Device, allocation: Allocation) {
        let Some(id) = allocation.block else {
            // SAFETY: the caller guarantees nothing uses the memory; a dedicated allocation
            // holds nothing else (freeing it unmaps it).
            unsafe { device.free_memory(allocation.memory, None) };
            self.dedicated.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        self.suballocations.fetch_sub(1, Ordering::Relaxed);
        let mut pool = self.pool(allocation.type_index);
        if !pool.give_back(id, allocation.offset, allocation.size) {
            return;
        }
        // `empty` counts this block too: keep it if it is the only empty one.
        if pool.empty > 1 {
            let block = pool.remove(id);
            drop(pool);
            self.free_block(device, block);
        }
    }

    /// Frees every block.
    ///
    /// # Safety
    ///
    /// No allocation of this allocator may be live or used any more (the device is about to
    /// be destroyed).
    pub(crate) unsafe fn release_all(&self, device: &ash::Device) {
        for pool in &self.pools {
            let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
            let blocks: Vec<Block> = pool.blocks.drain(..).flatten().collect();
            *pool = TypePool::default();
            drop(pool);
            for block in blocks {
                debug_assert_eq!(block.live, 0, "a block is freed with live sub-allocations");
                self.free_block(device, block);
            }
        }
    }

    fn free_block(&self, device: &ash::Device, block: Block) {
        // SAFETY: the block has no live sub-allocation (or, from `release_all`, none that is
        // still used), so neither the device nor the host uses it; freeing unmaps it.
        unsafe { device.free_memory(block.memory, None) };
        self.blocks.fetch_sub(1, Ordering::Relaxed);
        self.block_bytes.fetch_sub(block.size, Ordering::Relaxed);
    }

    /// Allocates (and maps, if host-visible) `size` bytes of type `t`.
    fn memory(
        &self,
        device: &ash::Device,
        t: u32,
        size: u64,
        dedicated_for: Option<vk::Buffer>,
    ) -> Result<(vk::DeviceMemory, Option<NonNull<u8>>)> {
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default();
        let mut info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(t);
        if let Some(buffer) = dedicated_for {
            dedicated = dedicated.buffer(buffer);
            info = info.push_next(&mut dedicated);
        }
        // SAFETY: the device is live; `info` and its chain live across the call.
        let memory = unsafe { device.allocate_memory(&info, None) }
            .map_err(|r| vk_fail(&format!("vkAllocateMemory ({size} bytes, type {t})"), r))?;
        if !self.host_visible[t as usize] {
            return Ok((memory, None));
        }
        // SAFETY: host-visible memory, just allocated and not mapped; mapped once for its life.
        let mapped =
            unsafe { device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) };
        match mapped {
            Ok(ptr) => Ok((memory, NonNull::new(ptr.cast::<u8>()))),
            Err(r) => {
                // SAFETY: nothing uses the memory yet.
                unsafe { device.free_memory(memory, None) };
                Err(vk_fail("vkMapMemory", r))
            }
        }
    }

    fn new_block(&self, device: &ash::Device, t: u32, size: u64) -> Result<Block> {
        let (memory, ptr) = self.memory(device, t, size, None)?;
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.block_bytes.fetch_add(size, Ordering::Relaxed);
        Ok(Block {
            memory,
            size,
            ptr,
            free: BTreeMap::from([(0, size)]),
            live: 0,
        })
    }

    fn dedicated(&self, device: &ash::Device, request: Request) -> Result<Allocation> {
        let size = request.size.max(1);
        let (memory, ptr) = self.memory(device, request.type_index, size, request.dedicated_for)?;
        self.dedicated.fetch_add(1, Ordering::Relaxed);
        Ok(Allocation {
            memory,
            offset: 0,
            size,
            memory_size: size,
            ptr,
            block: None,
            type_index: request.type_index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool_with(sizes: &[u64]) -> TypePool {
        let mut pool = TypePool::default();
        for &size in sizes {
            pool.add(Block {
                memory: vk::DeviceMemory::null(),
                size,
                ptr: None,
                free: BTreeMap::from([(0, size)]),
                live: 0,
            });
        }
        pool
    }

    /// The free lists of a pool agree with each other and cover exactly the unused bytes.
    fn check(pool: &TypePool, used: &[(u32, u64, u64)]) {
        let mut from_blocks = BTreeSet::new();
        for (id, block) in pool.blocks.iter().enumerate() {
            let Some(block) = block else { continue };
            let mut covered: Vec<(u64, u64)> = block.free.iter().map(|(&o, &s)| (o, s)).collect();
            covered.extend(
                used.iter()
                    .filter(|u| u.0 == id as u32)
                    .map(|&(_, o, s)| (o, s)),
            );
            covered.sort();
            let mut at = 0;
            for (o, s) in covered {
                assert_eq!(o, at, "gap or overlap in block {id}");
                at = o + s;
            }
            assert_eq!(at, block.size);
            let frees: Vec<_> = block.free.iter().collect();
            for pair in frees.windows(2) {
                assert!(pair[0].0 + pair[0].1 < *pair[1].0, "unmerged neighbours");
            }
            from_blocks.extend(block.free.iter().map(|(&o, &s)| (s, id as u32, o)));
        }
        assert_eq!(from_blocks, pool.by_size);
    }

    #[test]
    fn block_sizes_follow_the_heap() {
        assert_eq!(block_size(2 << 30), MAX_BLOCK);
        assert_eq!(block_size(256 << 20), 32 << 20);
        assert_eq!(block_size(16 << 20), MIN_BLOCK);
        assert_eq!(block_size(1 << 20), 1 << 20);
        assert_eq!(lcm(64, 16), 64);
        assert_eq!(lcm(48, 64), 192);
    }

    #[test]
    fn takes_aligned_best_fit_ranges_and_coalesces() {
        let mut pool = pool_with(&[4096]);
        let mut used = Vec::new();
        for (size, align) in [(100, 16), (48, 256), (1000, 64), (16, 16)] {
            let (id, offset) = pool.take(size, align).unwrap();
            assert_eq!(offset % align, 0);
            used.push((id, offset, size));
            check(&pool, &used);
        }
        assert_eq!(pool.empty, 0);
        // The 256-aligned one left a hole [112, 256) before it: a small request fills it.
        let (_, offset) = pool.take(128, 16).unwrap();
        assert!(offset < 256, "best fit ignored the hole: {offset}");
        used.push((0, offset, 128));
        check(&pool, &used);
        assert!(pool.take(4096, 16).is_none());
        // Free in a scrambled order; the block ends as one free range.
        for i in [2, 0, 4, 1, 3] {
            let (id, offset, size) = used[i];
            let empty = pool.give_back(id, offset, size);
            used[i].2 = 0;
            let live: Vec<_> = used.iter().copied().filter(|u| u.2 > 0).collect();
            check(&pool, &live);
            assert_eq!(empty, live.is_empty());
        }
        assert_eq!(pool.block(0).free, BTreeMap::from([(0, 4096)]));
    }

    #[test]
    fn spreads_over_blocks_and_reuses_ids() {
        let mut pool = pool_with(&[1024, 1024]);
        assert_eq!(pool.empty, 2);
        let a = pool.take(1024, 16).unwrap();
        let b = pool.take(1024, 16).unwrap();
        assert_ne!(a.0, b.0);
        assert!(pool.take(16, 16).is_none());
        assert_eq!(pool.empty, 0);
        assert!(pool.give_back(a.0, a.1, 1024));
        assert_eq!(pool.empty, 1);
        let removed = pool.remove(a.0);
        assert_eq!(removed.size, 1024);
        check(&pool, &[(b.0, 0, 1024)]);
        let id = pool.add(Block {
            memory: vk::DeviceMemory::null(),
            size: 512,
            ptr: None,
            free: BTreeMap::from([(0, 512)]),
            live: 0,
        });
        assert_eq!(id, a.0, "a freed block's id is reused");
        check(&pool, &[(b.0, 0, 1024)]);
    }
}
