//! The test's side: loading the fake (for CUDA, before anything opens libcuda), and reading
//! what it saw.

use std::ffi::{c_int, c_uint};
use std::path::PathBuf;
use std::sync::OnceLock;

use libloading::Library;

use crate::FakeStats;

/// The file cargo builds the fake into (beside the test executables that depend on it).
pub const FILE_NAME: &str = "libhalcyon_fake_gpu.so";

/// The loaded fake driver.
pub struct Fake {
    library: Library,
    path: PathBuf,
}

static OPENED: OnceLock<Result<Fake, String>> = OnceLock::new();
static STANDS_IN: OnceLock<Result<(), String>> = OnceLock::new();

impl Fake {
    /// Opens the fake (once per process) from beside the running executable (cargo puts a
    /// dependency's `cdylib` in `target/<profile>/deps`, with the test executables). This is
    /// all HIP needs: give halcyon-hip [`Fake::path`] as the runtime's name
    /// (`HipDriver::with_sonames`). `Err` if it was not built.
    pub fn open() -> Result<&'static Fake, String> {
        OPENED
            .get_or_init(|| {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let dir = exe.parent().ok_or("the executable has no directory")?;
                let candidates: Vec<PathBuf> = [Some(dir), dir.parent()]
                    .into_iter()
                    .flatten()
                    .map(|d| d.join(FILE_NAME))
                    .collect();
                let path = candidates.iter().find(|p| p.exists()).ok_or_else(|| {
                    format!("the fake GPU driver was not built (looked for {candidates:?})")
                })?;
                // SAFETY: the fake's initialisers are Rust statics with no side effects.
                let library = unsafe { Library::new(path) }
                    .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
                Ok(Fake {
                    library,
                    path: path.clone(),
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Opens the fake ([`Fake::open`]) as the process's libcuda: every later
    /// `dlopen("libcuda.so.1")` gets it (the fake's SONAME, which the loader matches before it
    /// searches any path), and so does halcyon-cuda's probe, which every driver call resolves
    /// from. Call it before anything opens libcuda. `Err` says why the fake cannot stand in
    /// for libcuda here: it was not built, or another libcuda.so.1 was loaded first.
    pub fn load() -> Result<&'static Fake, String> {
        let fake = Fake::open()?;
        STANDS_IN
            .get_or_init(|| {
                // SAFETY: opens libcuda.so.1, which is the fake already loaded (its SONAME) or
                // a driver loaded before it, and only looks up a symbol.
                let found = unsafe { Library::new("libcuda.so.1") }.is_ok_and(|library| {
                    // SAFETY: only a lookup; nothing is called.
                    let fake = unsafe {
                        library
                            .get::<unsafe extern "C" fn()>(b"halcyon_fake_gpu_stats\0")
                            .is_ok()
                    };
                    // Never closed: it may be a real driver, which must stay loaded.
                    std::mem::forget(library);
                    fake
                });
                if found {
                    Ok(())
                } else {
                    Err(
                        "libcuda.so.1 is another library than the fake (a driver was loaded \
                         before it)"
                            .into(),
                    )
                }
            })
            .clone()
            .map(|()| fake)
    }

    /// Where the library is. Besides libcuda's and HIP's APIs, the library exports NCCL's
    /// (`ncclCommInitRank`, `ncclAllReduce`, ...): a test points halcyon-cuda's NCCL loader at
    /// this path (its `unsafe` loader taking a path to libnccl) after [`Fake::load`], so that
    /// the communicators' ranks are the fake's devices and their streams the fake's.
    ///
    /// ```no_run
    /// let fake = halcyon_fake_gpu::client::Fake::load().expect("the fake driver");
    /// // The NCCL engine opens the same file as libnccl:
    /// let nccl = fake.path();
    /// # let _ = nccl;
    /// ```
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn function<T: Copy>(&self, name: &[u8]) -> T {
        // SAFETY: the fake exports each control function with the signature its caller names.
        unsafe { *self.library.get::<T>(name).expect("the fake exports it") }
    }

    /// What is alive in the driver and what it ran.
    pub fn stats(&self) -> FakeStats {
        let mut stats = FakeStats::default();
        let f: unsafe extern "C" fn(*mut FakeStats) = self.function(b"halcyon_fake_gpu_stats\0");
        // SAFETY: a valid out-pointer.
        unsafe { f(&mut stats) };
        stats
    }

    /// Every contract violation so far.
    pub fn violations(&self) -> Vec<String> {
        let f: unsafe extern "C" fn(*mut u8, usize) -> usize =
            self.function(b"halcyon_fake_gpu_violations\0");
        // SAFETY: a null buffer asks for the length only.
        let len = unsafe { f(std::ptr::null_mut(), 0) };
        let mut buffer = vec![0u8; len];
        // SAFETY: the buffer holds `len` bytes.
        let len = unsafe { f(buffer.as_mut_ptr(), buffer.len()) }.min(buffer.len());
        String::from_utf8_lossy(&buffer[..len])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Makes violations recorded only instead of aborting the process.
    pub fn record_only(&self, record_only: bool) {
        let f: extern "C" fn(c_int) = self.function(b"halcyon_fake_gpu_record_only\0");
        f(c_int::from(record_only));
    }

    /// Makes the next kernel that runs fault the device with CUDA error `code` (700,
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`, or 719, `CUDA_ERROR_LAUNCH_FAILED`).
    pub fn fault_next_kernel(&self, code: u32) {
        let f: extern "C" fn(c_uint) = self.function(b"halcyon_fake_gpu_fault_next_kernel\0");
        f(code);
    }

    /// Makes `cuMemHostGetDevicePointer` and `hipHostGetDevicePointer` answer a device
    /// address that differs from the host address (`true`), as on a system where pinned memory
    /// has no single address, or the host address again (`false`, the default). For the whole
    /// process: set it before creating devices, in a test process of its own.
    pub fn offset_mapped_pointers(&self, offset: bool) {
        let f: extern "C" fn(c_int) = self.function(b"halcyon_fake_gpu_offset_mapped_pointers\0");
        f(c_int::from(offset));
    }

    /// Makes the next NCCL collective to complete (when its last rank arrives) write nothing
    /// and set the async error of every rank of its communicator group
    /// (`ncclCommGetAsyncError`) to `code`, an `ncclResult_t` number: 1
    /// (`ncclUnhandledCudaError`), 2 (`ncclSystemError`), 3 (`ncclInternalError`), 6
    /// (`ncclRemoteError`) or 8 (`ncclTimeout`); others are `ncclSystemError`, and 0 cancels.
    /// Its ranks' streams move on.
    pub fn fault_next_collective(&self, code: u32) {
        let f: extern "C" fn(c_uint) = self.function(b"halcyon_fake_gpu_fault_next_collective\0");
        f(code);
    }

    /// Sets how long an NCCL rank waits for its peers (in `ncclCommInitRank`, or in a
    /// collective or receive its stream reached) before the fake gives up; `ZERO` restores the
    /// defaults (30 s for an initialisation, which then fails with `ncclSystemError`; 60 s for
    /// an operation, which is then a violation, completes without writing, and sets the
    /// communicator's async error to `ncclSystemError`). For the whole process.
    pub fn nccl_wait_limit(&self, limit: std::time::Duration) {
        let f: extern "C" fn(u64) = self.function(b"halcyon_fake_gpu_nccl_wait_limit_ms\0");
        let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        // A limit under a millisecond is one millisecond (0 would mean the defaults).
        f(if limit.is_zero() { 0 } else { ms.max(1) });
    }

    /// Lets every pair of devices access each other's memory (`true`, the default) or none
    /// (`false`): what `cuDeviceCanAccessPeer` and `hipDeviceCanAccessPeer` answer from now
    /// on, so a copy between two devices takes halcyon's host-staged path. For the whole
    /// process: set it before creating devices, in a test process of its own.
    pub fn set_peer_access(&self, supported: bool) {
        let f: extern "C" fn(c_int) = self.function(b"halcyon_fake_gpu_peer_access\0");
        f(c_int::from(supported));
    }

    /// The device's sticky error (0: it has not faulted).
    pub fn sticky_error(&self) -> u32 {
        let f: extern "C" fn() -> c_uint = self.function(b"halcyon_fake_gpu_sticky_error\0");
        f()
    }
}
