//! Memory: host allocations behind a table of what is live, which every device-side access is
//! checked against (when the call is made, and again when the device gets to it).

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

use cudarc::driver::sys::CUresult;

use crate::model::contract::{lock, violation};
use crate::model::driver::MAX_DEVICES;

/// Each device's memory (device, managed and stream-ordered allocations together).
pub(crate) const DEVICE_BYTES: usize = 1 << 30;
/// Page-locked host memory.
pub(crate) const PINNED_BYTES: usize = 1 << 30;
/// Alignment of every allocation (`cuMemAlloc` gives at least 256).
const ALIGN: usize = 256;
/// How many bytes of freed allocations are kept allocated (quarantined) rather than given back
/// to the host allocator, so that their addresses are not reused at once: work that reaches a
/// freed allocation then finds it freed instead of finding a newer allocation at the address.
const QUARANTINE_BYTES: usize = 64 << 20;

/// What kind of memory an allocation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cuMemAlloc`.
    Device,
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemAllocHost` / `cuMemHostAlloc` (`mapped`: with `CU_MEMHOSTALLOC_DEVICEMAP`).
    Pinned { mapped: bool },
    /// `cuMemAllocFromPoolAsync` / `cuMemAllocAsync` from the pool with this handle (0: the
    /// device's default pool).
    Pool(u64),
}

impl Kind {
    fn on_device(self) -> bool {
        !matches!(self, Kind::Pinned { .. })
    }

    /// Whether only its own device reaches it (device and stream-ordered memory; managed and
    /// pinned host memory are reachable from every device).
    fn device_local(self) -> bool {
        matches!(self, Kind::Device | Kind::Pool(_))
    }
}

#[derive(Debug)]
struct Allocation {
    len: usize,
    kind: Kind,
    /// The device (context) that allocated it.
    device: u32,
}

/// The table of live allocations, by base address.
#[derive(Default)]
pub(crate) struct Memory {
    live: BTreeMap<u64, Allocation>,
    /// Quarantined freed allocations (base → length, what freed it, its device), oldest first
    /// in `quarantine`.
    freed: BTreeMap<u64, (usize, &'static str, u32)>,
    quarantine: std::collections::VecDeque<u64>,
    quarantined_bytes: usize,
    device_bytes: [usize; MAX_DEVICES],
    pinned_bytes: usize,
    /// The largest pinned allocation made so far.
    largest_pinned: usize,
}

static MEMORY: LazyLock<Mutex<Memory>> = LazyLock::new(Mutex::default);

/// The memory table, locked. Taken after the driver's lock, never before it.
pub(crate) fn memory() -> MutexGuard<'static, Memory> {
    lock(&MEMORY)
}

fn layout(len: usize) -> Option<Layout> {
    Layout::from_size_align(len, ALIGN).ok()
}

/// Gives `len` bytes at `base`, allocated by [`Memory::allocate`] and no longer in any table,
/// back to the host allocator.
fn dealloc(base: u64, len: usize) {
    let layout = layout(len).expect("allocated with it");
    // SAFETY: allocated by `allocate` with this layout; the caller removed it from every
    // table, so it is deallocated once.
    unsafe { std::alloc::dealloc(base as usize as *mut u8, layout) };
}

impl Memory {
    /// Allocates `len` zeroed bytes of `kind` for device `device`: `CUDA_ERROR_INVALID_VALUE`
    /// for 0 bytes, `CUDA_ERROR_OUT_OF_MEMORY` beyond the device's (or the host's pinned)
    /// capacity.
    pub(crate) fn allocate(
        &mut self,
        len: usize,
        kind: Kind,
        device: u32,
    ) -> Result<u64, CUresult> {
        if len == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let (used, capacity) = if kind.on_device() {
            (&mut self.device_bytes[device as usize], DEVICE_BYTES)
        } else {
            (&mut self.pinned_bytes, PINNED_BYTES)
        };
        if len > capacity - *used {
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        let layout = layout(len).ok_or(CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        *used += len;
        if !kind.on_device() {
            self.largest_pinned = self.largest_pinned.max(len);
        }
        let base = ptr as usize as u64;
        self.live.insert(base, Allocation { len, kind, device });
        Ok(base)
    }

    /// Frees the allocation whose base is `base`, if its kind is one `accept` takes. A freed
    /// base again is a violation (double free); anything else is `CUDA_ERROR_INVALID_VALUE`.
    pub(crate) fn free(
        &mut self,
        base: u64,
        accept: impl Fn(Kind) -> bool,
        call: &'static str,
    ) -> Result<Kind, CUresult> {
        match self.live.get(&base) {
            Some(a) if accept(a.kind) => {}
            Some(a) => {
                violation(format!(
                    "{call}({base:#x}) frees {:?} memory, which it does not free",
                    a.kind
                ));
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            None => {
                if let Some((len, by, _)) = self.freed.get(&base) {
                    violation(format!(
                        "{call}({base:#x}): double free ({len} bytes already freed by {by})"
                    ));
                }
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
        }
        let allocation = self.live.remove(&base).expect("checked above");
        self.account(&allocation);
        self.freed
            .insert(base, (allocation.len, call, allocation.device));
        self.quarantine.push_back(base);
        self.quarantined_bytes += allocation.len;
        while self.quarantined_bytes > QUARANTINE_BYTES {
            let Some(oldest) = self.quarantine.pop_front() else {
                break;
            };
            if let Some((len, _, _)) = self.freed.remove(&oldest) {
                self.quarantined_bytes -= len;
                dealloc(oldest, len);
            }
        }
        Ok(allocation.kind)
    }

    /// Takes `allocation` off its capacity.
    fn account(&mut self, allocation: &Allocation) {
        if allocation.kind.on_device() {
            self.device_bytes[allocation.device as usize] -= allocation.len;
        } else {
            self.pinned_bytes -= allocation.len;
        }
    }

    /// Frees everything device `device` allocated (its context went), describing each
    /// allocation that was still live.
    pub(crate) fn free_all(&mut self, device: u32) -> Vec<String> {
        let bases: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, a)| a.device == device)
            .map(|(&base, _)| base)
            .collect();
        let described = bases
            .into_iter()
            .map(|base| {
                let a = self.live.remove(&base).expect("listed above");
                self.account(&a);
                dealloc(base, a.len);
                format!("{:?} of {} bytes at {base:#x}", a.kind, a.len)
            })
            .collect();
        let freed: Vec<u64> = self
            .freed
            .iter()
            .filter(|(_, &(_, _, d))| d == device)
            .map(|(&base, _)| base)
            .collect();
        for base in freed {
            let (len, _, _) = self.freed.remove(&base).expect("listed above");
            self.quarantined_bytes -= len;
            dealloc(base, len);
        }
        self.quarantine.retain(|base| self.freed.contains_key(base));
        described
    }

    /// The live allocation holding all `len` bytes at `ptr` (an empty range: holding `ptr`).
    fn covering(&self, ptr: u64, len: usize) -> Option<(u64, &Allocation)> {
        let (&base, a) = self.live.range(..=ptr).next_back()?;
        let end = (ptr - base).checked_add(len.max(1) as u64)?;
        (end <= a.len as u64).then_some((base, a))
    }

    /// The kind of the allocation holding all `len` bytes at `ptr`, if one does.
    pub(crate) fn kind_of(&self, ptr: u64, len: usize) -> Option<Kind> {
        self.covering(ptr, len).map(|(_, a)| a.kind)
    }

    /// Whether `ptr` is the base of a live allocation whose kind `accept` takes.
    pub(crate) fn is_base(&self, ptr: u64, accept: impl Fn(Kind) -> bool) -> bool {
        self.live.get(&ptr).is_some_and(|a| accept(a.kind))
    }

    /// Whether `len` bytes at `ptr` lie within one pinned allocation.
    pub(crate) fn is_pinned(&self, ptr: u64, len: usize) -> bool {
        matches!(self.kind_of(ptr, len), Some(Kind::Pinned { .. }))
    }

    /// Checks that device `device` may reach `len` bytes at `ptr`: as [`Memory::check`], and
    /// device or stream-ordered memory must be `device`'s own, or a peer's whose memory
    /// `device` was given access to ([`crate::model::peer`]).
    pub(crate) fn check_on(&self, ptr: u64, len: usize, device: u32) -> Result<(), String> {
        self.check(ptr, len)?;
        match self.covering(ptr, len) {
            Some((base, a))
                if a.kind.device_local() && !crate::model::peer::reaches(device, a.device) =>
            {
                Err(format!(
                    "{len} bytes at {ptr:#x} lie in device {}'s {:?} memory ({} bytes at \
                     {base:#x}), which device {device} cannot reach (its peer access to \
                     device {} is not enabled)",
                    a.device, a.kind, a.len, a.device
                ))
            }
            _ => Ok(()),
        }
    }

    /// Checks that a device may reach `len` bytes at `ptr` (any live allocation: device
    /// memory, managed memory, or pinned host memory, which unified addressing maps).
    pub(crate) fn check(&self, ptr: u64, len: usize) -> Result<(), String> {
        if len == 0 || self.covering(ptr, len).is_some() {
            return Ok(());
        }
        let freed = self
            .freed
            .range(..=ptr)
            .next_back()
            .filter(|(&base, &(n, _, _))| ptr < base + n as u64);
        Err(match freed {
            Some((base, (n, by, _))) => format!(
                "{len} bytes at {ptr:#x} lie in memory already freed ({n} bytes at {base:#x}, \
                 freed by {by})"
            ),
            None => format!("{len} bytes at {ptr:#x} are not within one live allocation"),
        })
    }

    /// Live allocations.
    pub(crate) fn count(&self) -> usize {
        self.live.len()
    }

    /// The largest pinned allocation made so far, in bytes.
    pub(crate) fn largest_pinned(&self) -> usize {
        self.largest_pinned
    }

    /// Reads a `u32` at `ptr`, which [`Memory::check`] accepted.
    pub(crate) fn read_u32(&self, ptr: u64) -> u32 {
        // SAFETY: the caller checked that the 4 bytes lie in a live allocation, which this
        // guard keeps from being freed; unaligned reads are fine.
        unsafe { (ptr as usize as *const u32).read_unaligned() }
    }

    /// Writes a `u32` at `ptr`, which [`Memory::check`] accepted.
    pub(crate) fn write_u32(&mut self, ptr: u64, value: u32) {
        // SAFETY: as `read_u32`; `&mut self` holds the table's lock.
        unsafe { (ptr as usize as *mut u32).write_unaligned(value) }
    }

    /// Fills `count` elements of `width` (1, 2 or 4) bytes at `dst`, which [`Memory::check`]
    /// accepted, with `value`.
    pub(crate) fn fill(&mut self, dst: u64, value: u32, width: usize, count: usize) {
        for i in 0..count {
            let p = dst as usize + i * width;
            // SAFETY: the caller checked that the `width * count` bytes at `dst` lie in a live
            // allocation, which this guard keeps from being freed; unaligned writes are fine.
            unsafe {
                match width {
                    1 => (p as *mut u8).write(value as u8),
                    2 => (p as *mut u16).write_unaligned(value as u16),
                    _ => (p as *mut u32).write_unaligned(value),
                }
            }
        }
    }

    /// Stores `value` into the 4-aligned word at `dst` as one atomic release store, as a
    /// stream memory operation writes it: the host may read the word meanwhile.
    pub(crate) fn write_word(&mut self, dst: u64, value: u32) {
        // SAFETY: the caller checked that the 4 bytes at `dst` lie in a live allocation, which
        // this guard keeps from being freed, and that `dst` is 4-aligned; whoever reads the
        // word while the stream writes it reads it atomically.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(dst as usize as *mut u32) }
            .store(value, std::sync::atomic::Ordering::Release);
    }

    /// Copies `len` bytes between two ranges the caller checked (or host memory the caller
    /// vouches for); they may overlap.
    ///
    /// # Safety
    /// Both ranges must be valid for `len` bytes.
    pub(crate) unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) {
        // SAFETY: the caller's contract; `copy` allows overlap.
        unsafe { std::ptr::copy(src as usize as *const u8, dst as usize as *mut u8, len) }
    }
}
