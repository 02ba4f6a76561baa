//! Modules and kernels: entry points, and the kernels the fake can run natively (halcyon's
//! standard kernels, matched by name and parameter sizes; see [`crate::model::ptx`] for PTX).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUresult;

use crate::model::contract::{lock, sticky};
use crate::model::driver::KERNELS_RUN;
use crate::model::memory::memory;

/// A loaded module.
pub(crate) struct Module {
    pub kernels: Vec<Arc<Kernel>>,
}

/// One entry point of a module.
pub(crate) struct Kernel {
    /// Its `CUfunction` handle.
    pub function: u64,
    pub name: String,
    /// `(offset, size)` of each parameter, as `cuFuncGetParamInfo` reports them.
    pub params: Vec<(usize, usize)>,
    /// The most threads a block launching it may have
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`): see [`Entry::max_threads`].
    pub max_threads: u32,
    /// The most dynamic shared memory a launch may give it
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`): [`DEFAULT_DYNAMIC_SHARED`] until
    /// `cuFuncSetAttribute` raises it. The fake models no static shared memory.
    pub max_dynamic_shared: AtomicU32,
    pub native: Option<Native>,
    /// Set by `cuModuleUnload`: a launch still queued must not run any more.
    pub unloaded: AtomicBool,
}

/// The kernels the fake runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Native {
    /// `add_one_u32(u32* x, u32 n)`: `x[i] += 1` for `i < n`.
    AddOneU32,
    /// `saxpy_f32(const f32* x, f32* y, u32 a_bits, u32 n)`: `y[i] = a * x[i] + y[i]`.
    SaxpyF32,
    /// `fail(u32* status)`: `*status = 1`.
    Fail,
    /// `empty()`.
    Empty,
    /// `trap()`: faults the device (`CUDA_ERROR_LAUNCH_FAILED`).
    Trap,
    /// `block_sum_u32(const u32* x, u32* out, u32 n, u32 words)`: `out[b]` = the sum of
    /// block `b`'s elements of `x` (those below `n`), gathered in the top `block.x` of `words`
    /// `u32`s of dynamic shared memory: a launch giving fewer than `4 * words` bytes (or
    /// `words < block.x`) reads outside its shared memory (`CUDA_ERROR_ILLEGAL_ADDRESS`).
    BlockSumU32,
    /// `halcyon_gather(const u32* source, u32* target, u32 shape[4], u32 strides[4],
    /// u32 source_first, u32 target_first, u32 count, u32 size, u32 row, u32 source_byte,
    /// u32 target_byte, u32 pad)`: halcyon's gather kernel (`DeviceBackend::gather_kernel`),
    /// for every invocation `i = y · row + x` below `count`: the `size` bytes of the element
    /// at byte `4 · source_first + source_byte + (Σ index_k · strides_k) · size` of `source`,
    /// into byte `4 · target_first + target_byte + i · size` of `target`.
    Gather,
}

impl Native {
    /// The native kernel called `name`, if there is one.
    fn named(name: &str) -> Option<Native> {
        Some(match name {
            "add_one_u32" => Native::AddOneU32,
            "saxpy_f32" => Native::SaxpyF32,
            "fail" => Native::Fail,
            "empty" => Native::Empty,
            "trap" => Native::Trap,
            "block_sum_u32" => Native::BlockSumU32,
            "halcyon_gather" => Native::Gather,
            _ => return None,
        })
    }

    /// Its parameters' sizes.
    fn param_sizes(self) -> &'static [usize] {
        match self {
            Native::AddOneU32 => &[8, 4],
            Native::SaxpyF32 => &[8, 8, 4, 4],
            Native::Fail => &[8],
            Native::Empty | Native::Trap => &[],
            Native::BlockSumU32 => &[8, 8, 4, 4],
            Native::Gather => &[8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4],
        }
    }

    fn find(name: &str, sizes: &[usize]) -> Option<Native> {
        Native::named(name).filter(|native| native.param_sizes() == sizes)
    }
}

/// An entry point read from PTX: its name and parameter sizes and alignments.
pub(crate) struct Entry {
    pub name: String,
    /// `(size, alignment)` of each parameter.
    pub params: Vec<(usize, usize)>,
    /// The most threads per block it launches with: the product of its `.maxntid` (or
    /// `.reqntid`) directive's dimensions, else [`MAX_BLOCK_THREADS`]. A real driver lowers
    /// the limit further for a kernel using many registers; the fake models the limit only
    /// through these directives.
    pub max_threads: u32,
}

/// The most threads a CUDA block may have on every device the fake models.
pub(crate) const MAX_BLOCK_THREADS: u32 = 1024;
/// The dynamic shared memory a kernel may be launched with before `cuFuncSetAttribute`
/// raises its limit: CUDA's 48 KiB.
pub(crate) const DEFAULT_DYNAMIC_SHARED: u32 = 48 << 10;
/// The most shared memory a block may have once its kernel opted in
/// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`): a Hopper GPU's 227 KiB.
pub(crate) const MAX_SHARED_OPTIN: u32 = 227 << 10;

impl Entry {
    /// The entry point of kernel `name` in a module whose parameter metadata the fake does not
    /// read (an AMDGPU code object): the native kernel's parameters, or none for a kernel the
    /// fake cannot run.
    pub(crate) fn by_name(name: &str) -> Entry {
        let sizes = Native::named(name).map_or(&[][..], Native::param_sizes);
        Entry {
            name: name.to_string(),
            params: sizes.iter().map(|&size| (size, size)).collect(),
            max_threads: MAX_BLOCK_THREADS,
        }
    }
}
impl Kernel {
    /// The kernel of `entry`, with function handle `function`.
    pub(crate) fn new(function: u64, entry: &Entry) -> Kernel {
        let mut offset = 0usize;
        let params: Vec<(usize, usize)> = entry
            .params
            .iter()
            .map(|&(size, align)| {
                offset = offset.next_multiple_of(align.max(1));
                let at = offset;
                offset += size;
                (at, size)
            })
            .collect();
        let sizes: Vec<usize> = params.iter().map(|p| p.1).collect();
        Kernel {
            function,
            name: entry.name.clone(),
            native: Native::find(&entry.name, &sizes),
            params,
            max_threads: entry.max_threads,
            max_dynamic_shared: AtomicU32::new(DEFAULT_DYNAMIC_SHARED),
            unloaded: AtomicBool::new(false),
        }
    }
}

/// A kernel launch: the grid, the block and the argument values (each parameter's bytes as a
/// little-endian number), read when `cuLaunchKernel` was called.
pub(crate) struct Launch {
    pub kernel: Arc<Kernel>,
    pub native: Native,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory_bytes: u32,
    pub args: Vec<u64>,
}

impl Launch {
    pub(crate) fn name(&self) -> &str {
        &self.kernel.name
    }
}

/// A fault injected by the client for the next kernel run.
static NEXT_FAULT: Mutex<Option<CUresult>> = Mutex::new(None);

/// Makes the next kernel that runs fault the device with `code`.
pub(crate) fn fault_next_kernel(code: CUresult) {
    *lock(&NEXT_FAULT) = Some(code);
}

/// Runs `launch`: `Err((code, why, broken))` faults the device; `broken` when the caller broke
/// the contract (memory it passed was freed before the kernel ran, or never was memory).
/// `device` is the device of the stream it runs on: memory only another device reaches is
/// such a broken contract too.
pub(crate) fn run(launch: &Launch, device: u32) -> Result<(), (CUresult, String, bool)> {
    KERNELS_RUN.fetch_add(1, Ordering::Relaxed);
    if let Some(code) = lock(&NEXT_FAULT).take() {
        return Err((code, "a fault injected by the test".into(), false));
    }
    let [gx, gy, gz] = launch.grid.map(u64::from);
    let [bx, by, bz] = launch.block.map(u64::from);
    // Threads with the same x index do the same thing: run each x once per such thread.
    let repeat = gy * gz * by * bz;
    let threads = gx * bx;
    let args = &launch.args;
    let mut memory = memory();
    if sticky(device).is_some() {
        return Ok(()); // faulted meanwhile: the host may have freed what this uses
    }
    if launch.kernel.unloaded.load(Ordering::Acquire) {
        return Err((
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            "its module was unloaded before the kernel ran".into(),
            true,
        ));
    }
    let check = |memory: &crate::model::memory::Memory, ptr: u64, len: u64, what: &str| {
        memory.check_on(ptr, len as usize, device).map_err(|why| {
            (
                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                format!("{what}: {why}"),
                true,
            )
        })
    };
    match launch.native {
        Native::AddOneU32 => {
            let (x, n) = (args[0], args[1] as u32);
            let count = u64::from(n).min(threads);
            check(&memory, x, 4 * count, "x")?;
            for _ in 0..repeat {
                for i in 0..count {
                    let v = memory.read_u32(x + 4 * i);
                    memory.write_u32(x + 4 * i, v.wrapping_add(1));
                }
            }
        }
        Native::SaxpyF32 => {
            let (x, y, a, n) = (args[0], args[1], f32::from_bits(args[2] as u32), args[3]);
            let count = (n & 0xffff_ffff).min(threads);
            check(&memory, x, 4 * count, "x")?;
            check(&memory, y, 4 * count, "y")?;
            for _ in 0..repeat {
                for i in 0..count {
                    let xi = f32::from_bits(memory.read_u32(x + 4 * i));
                    let yi = f32::from_bits(memory.read_u32(y + 4 * i));
                    memory.write_u32(y + 4 * i, (a * xi + yi).to_bits());
                }
            }
        }
        Native::Fail => {
            check(&memory, args[0], 4, "status")?;
            memory.write_u32(args[0], 1);
        }
        Native::BlockSumU32 => {
            let (x, out, n, words) = (args[0], args[1], args[2] as u32, args[3]);
            if words < bx || 4 * words > u64::from(launch.shared_memory_bytes) {
                return Err((
                    CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                    format!(
                        "shared memory out of bounds: the kernel addresses {} bytes, the \
                         launch gave {}",
                        4 * words.max(bx),
                        launch.shared_memory_bytes
                    ),
                    false,
                ));
            }
            let count = u64::from(n).min(threads);
            check(&memory, x, 4 * count, "x")?;
            check(&memory, out, 4 * gx, "out")?;
            for block in 0..gx {
                let sum = (block * bx..(block + 1) * bx)
                    .filter(|&i| i < count)
                    .fold(0u32, |sum, i| sum.wrapping_add(memory.read_u32(x + 4 * i)));
                memory.write_u32(out + 4 * block, sum);
            }
        }
        Native::Gather => {
            let (source, target) = (args[0], args[1]);
            let c: Vec<u64> = args[2..18].to_vec();
            let (shape, strides) = (&c[0..4], &c[4..8]);
            let (source_first, target_first, count, size, row) = (c[8], c[9], c[10], c[11], c[12]);
            let (source_byte, target_byte) = (c[13], c[14]);
            let invocations = row * u64::from(launch.grid[1]);
            for i in 0..count.min(invocations) {
                let (mut rest, mut at) = (i, 0u64);
                for k in (0..4).rev() {
                    let d = shape[k].max(1);
                    at += (rest % d) * strides[k];
                    rest /= d;
                }
                let from = source + 4 * source_first + source_byte + at * size;
                let to = target + 4 * target_first + target_byte + i * size;
                check(&memory, from, size, "the gather's source")?;
                check(&memory, to, size, "the gather's target")?;
                // SAFETY: both ranges were just checked to lie in live allocations.
                unsafe { memory.copy(to, from, size as usize) };
            }
        }
        Native::Empty => {}
        Native::Trap => {
            return Err((
                CUresult::CUDA_ERROR_LAUNCH_FAILED,
                "trap instruction".into(),
                false,
            ))
        }
    }
    Ok(())
}
