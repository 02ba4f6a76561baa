//! Thin, checked wrappers over [`crate::sys`]: one method per HIP call, each returning a
//! [`halcyon::Result`] whose error names the call, the HIP error and its number, for example
//! `hipMalloc(1048576 bytes) failed: hipErrorOutOfMemory (2)`.
//!
//! Calls that only create objects or read device properties are safe. Calls that take a
//! stream, event, module, function, graph or pointer are `unsafe`: the caller guarantees the
//! handle came from this runtime and is still alive, and that memory stays valid until the
//! stream-ordered work using it completes.

use std::ffi::{c_int, c_uint, c_void, CStr, CString};
use std::ptr;

use halcyon::{Error, Result, StatusCode};

use crate::sys::{self, hipError_t, HipApi};

/// The [`StatusCode`] for a HIP error.
pub fn status_code(error: hipError_t) -> StatusCode {
    match error {
        sys::hipErrorInvalidValue
        | sys::hipErrorInvalidHandle
        | sys::hipErrorInvalidImage
        | 9   // hipErrorInvalidConfiguration
        | 12  // hipErrorInvalidPitchValue
        | 13  // hipErrorInvalidSymbol
        | 17  // hipErrorInvalidDevicePointer
        | 21  // hipErrorInvalidMemcpyDirection
        | 98  // hipErrorInvalidDeviceFunction
        | 218 // hipErrorInvalidKernelFile
        | 300 // hipErrorInvalidSource
        => StatusCode::InvalidArgument,
        sys::hipErrorOutOfMemory | sys::hipErrorLaunchOutOfResources => {
            StatusCode::ResourceExhausted
        }
        sys::hipErrorNotInitialized
        | sys::hipErrorInvalidContext
        | 202..=208 // context and mapping states
        | 210..=216 // mapping, ECC and context states
        | 401       // hipErrorIllegalState
        | 708..=709 // hipErrorSetOnActiveProcess, hipErrorContextIsDestroyed
        | 900..=910 // stream capture and graph states
        => StatusCode::FailedPrecondition,
        sys::hipErrorNoDevice
        | sys::hipErrorInvalidDevice
        | sys::hipErrorInsufficientDriver
        | sys::hipErrorDeinitialized
        | sys::hipErrorNotReady => StatusCode::Unavailable,
        sys::hipErrorNotFound | sys::hipErrorFileNotFound | 302 => StatusCode::NotFound,
        sys::hipErrorNoBinaryForGpu | sys::hipErrorNotSupported | 217 => {
            StatusCode::Unimplemented
        }
        702 => StatusCode::DeadlineExceeded, // hipErrorLaunchTimeOut
        sys::hipErrorIllegalAddress
        | sys::hipErrorLaunchFailure
        | 53   // hipErrorPriorLaunchFailure
        | 710  // hipErrorAssert
        | 1052 // hipErrorRuntimeMemory
        | 1053 // hipErrorRuntimeOther
        => StatusCode::Internal,
        _ => StatusCode::Unknown,
    }
}

/// The loaded HIP runtime: cheap to copy, valid for the whole process.
///
/// ```no_run
/// let hip = halcyon_hip::result::Hip::load_default()?;
/// println!("HIP runtime {}", halcyon_hip::version_string(hip.runtime_version()?));
/// hip.init()?;
/// println!("{} devices", hip.device_count()?);
/// # Ok::<(), halcyon::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Hip {
    api: &'static HipApi,
}

impl Hip {
    /// Wraps a symbol table.
    pub fn new(api: &'static HipApi) -> Self {
        Hip { api }
    }

    /// Loads the runtime from [`sys::DEFAULT_SONAMES`] (cached per process); `Unavailable`
    /// naming every soname tried and its `dlopen` error when none opens.
    pub fn load_default() -> Result<Self> {
        HipApi::load_default().map(Hip::new).map_err(load_error)
    }

    /// Loads the runtime from the first of `sonames` that opens (paths work too).
    ///
    /// # Safety
    /// As for [`HipApi::load`]: each of `sonames` that opens must be a HIP runtime.
    pub unsafe fn load(sonames: &[&str]) -> Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { HipApi::load(sonames) }
            .map(Hip::new)
            .map_err(load_error)
    }

    /// Loads the runtime as [`Hip::load`] does, treating the optional symbols named in
    /// `absent` as missing (see [`HipApi::load_without`]): to run the fallbacks an older
    /// runtime takes.
    ///
    /// # Safety
    /// As for [`HipApi::load`]: each of `sonames` that opens must be a HIP runtime.
    pub unsafe fn load_without(sonames: &[&str], absent: &[&str]) -> Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { HipApi::load_without(sonames, absent) }
            .map(Hip::new)
            .map_err(load_error)
    }

    /// The raw symbol table.
    pub fn api(self) -> &'static HipApi {
        self.api
    }

    /// `hipGetErrorName`, for example `hipErrorOutOfMemory`.
    pub fn error_name(self, error: hipError_t) -> String {
        // SAFETY: hipGetErrorName accepts any value and returns a static string (or null).
        let name = unsafe { (self.api.hipGetErrorName)(error) };
        static_str(name).unwrap_or_else(|| "hipErrorUnknown".to_string())
    }

    /// `hipGetErrorString`: a description (HIP 5.2 returns the name again).
    pub fn error_string(self, error: hipError_t) -> String {
        // SAFETY: hipGetErrorString accepts any value and returns a static string (or null).
        let text = unsafe { (self.api.hipGetErrorString)(error) };
        static_str(text).unwrap_or_default()
    }

    /// The error for `error` returned by `call`: `"{call} failed: {name} ({number})"`, plus the
    /// description where it says more than the name.
    pub fn error(self, error: hipError_t, call: &str) -> Error {
        let name = self.error_name(error);
        let text = self.error_string(error);
        let mut message = format!("{call} failed: {name} ({error})");
        if !text.is_empty() && text != name {
            message.push_str(": ");
            message.push_str(&text);
        }
        Error::new(status_code(error), message)
    }

    /// `Ok` for `hipSuccess`, otherwise [`Hip::error`] with the call described by `call`
    /// (only evaluated on failure).
    pub fn check(self, error: hipError_t, call: impl FnOnce() -> String) -> Result<()> {
        if error == sys::hipSuccess {
            Ok(())
        } else {
            Err(self.error(error, &call()))
        }
    }

    /// For queries: `Ok(true)` on success, `Ok(false)` on `hipErrorNotReady`.
    fn check_ready(self, error: hipError_t, call: impl FnOnce() -> String) -> Result<bool> {
        match error {
            sys::hipSuccess => Ok(true),
            sys::hipErrorNotReady => Ok(false),
            _ => Err(self.error(error, &call())),
        }
    }

    /// The runtime's name and version, `HIP 5.2.21153 (libamdhip64.so.5)`, or the reason the
    /// version could not be read.
    pub fn describe(self) -> String {
        match self.runtime_version() {
            Ok(v) => format!("HIP {} ({})", crate::version_string(v), self.api.soname()),
            Err(e) => format!("HIP ({}; {})", self.api.soname(), e.message()),
        }
    }

    // ---- initialisation, versions, devices ----

    /// `hipInit(0)`.
    pub fn init(self) -> Result<()> {
        // SAFETY: hipInit takes only a flags value (which must be 0).
        let e = unsafe { (self.api.hipInit)(0) };
        self.check(e, || "hipInit(0)".into())
    }

    /// `hipDriverGetVersion`: `major * 10_000_000 + minor * 100_000 + patch`.
    pub fn driver_version(self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipDriverGetVersion)(&mut v) };
        self.check(e, || "hipDriverGetVersion".into()).map(|()| v)
    }

    /// `hipRuntimeGetVersion`: `major * 10_000_000 + minor * 100_000 + patch`.
    pub fn runtime_version(self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipRuntimeGetVersion)(&mut v) };
        self.check(e, || "hipRuntimeGetVersion".into()).map(|()| v)
    }

    /// `hipGetDeviceCount`.
    pub fn device_count(self) -> Result<i32> {
        let mut n: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipGetDeviceCount)(&mut n) };
        self.check(e, || "hipGetDeviceCount".into()).map(|()| n)
    }

    /// `hipSetDevice`: makes `device` current for the calling thread.
    pub fn set_device(self, device: i32) -> Result<()> {
        // SAFETY: any ordinal is accepted; invalid ones return an error.
        let e = unsafe { (self.api.hipSetDevice)(device) };
        self.check(e, || format!("hipSetDevice({device})"))
    }

    /// `hipGetDevice`: the device current for the calling thread.
    pub fn get_device(self) -> Result<i32> {
        let mut device: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipGetDevice)(&mut device) };
        self.check(e, || "hipGetDevice".into()).map(|()| device)
    }

    /// `hipDeviceGet`.
    pub fn device_get(self, ordinal: i32) -> Result<sys::hipDevice_t> {
        let mut d: sys::hipDevice_t = 0;
        // SAFETY: the out-pointer is valid for one int; any ordinal is accepted.
        let e = unsafe { (self.api.hipDeviceGet)(&mut d, ordinal) };
        self.check(e, || format!("hipDeviceGet({ordinal})"))
            .map(|()| d)
    }

    /// `hipDeviceGetName`.
    pub fn device_name(self, device: sys::hipDevice_t) -> Result<String> {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for `len` bytes; HIP writes a NUL-terminated string
        // of at most `len` bytes.
        let e = unsafe {
            (self.api.hipDeviceGetName)(buf.as_mut_ptr().cast(), buf.len() as c_int, device)
        };
        self.check(e, || format!("hipDeviceGetName(device {device})"))?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// `hipDeviceGetAttribute` (`sys::hipDeviceAttribute*`).
    pub fn device_attribute(
        self,
        attribute: sys::hipDeviceAttribute_t,
        device: sys::hipDevice_t,
    ) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: the out-pointer is valid for one int; invalid arguments return an error.
        let e = unsafe { (self.api.hipDeviceGetAttribute)(&mut v, attribute, device) };
        self.check(e, || {
            format!("hipDeviceGetAttribute(attribute {attribute}, device {device})")
        })
        .map(|()| v)
    }

    /// `hipDeviceTotalMem`, in bytes.
    pub fn device_total_mem(self, device: sys::hipDevice_t) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: the out-pointer is valid for one size_t.
        let e = unsafe { (self.api.hipDeviceTotalMem)(&mut bytes, device) };
        self.check(e, || format!("hipDeviceTotalMem(device {device})"))
            .map(|()| bytes)
    }

    // ---- streams ----

    /// `hipStreamCreateWithFlags` (`sys::hipStreamNonBlocking`, ...) on the current device.
    pub fn stream_create(self, flags: c_uint) -> Result<sys::hipStream_t> {
        let mut s: sys::hipStream_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one handle.
        let e = unsafe { (self.api.hipStreamCreateWithFlags)(&mut s, flags) };
        self.check(e, || format!("hipStreamCreateWithFlags(flags {flags:#x})"))
            .map(|()| s)
    }

    /// `hipStreamDestroy`.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime and is not used afterwards.
    pub unsafe fn stream_destroy(self, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamDestroy)(stream) };
        self.check(e, || "hipStreamDestroy".into())
    }

    /// `hipStreamSynchronize`: blocks the calling thread until `stream` is idle.
    ///
    /// # Safety
    /// `stream` is null or a live stream of this runtime.
    pub unsafe fn stream_synchronize(self, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamSynchronize)(stream) };
        self.check(e, || "hipStreamSynchronize".into())
    }

    /// `hipStreamQuery`: `true` when all work on `stream` has completed.
    ///
    /// # Safety
    /// `stream` is null or a live stream of this runtime.
    pub unsafe fn stream_query(self, stream: sys::hipStream_t) -> Result<bool> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamQuery)(stream) };
        self.check_ready(e, || "hipStreamQuery".into())
    }

    /// `hipStreamWaitEvent(stream, event, 0)`: later work on `stream` waits for `event`.
    ///
    /// # Safety
    /// `stream` and `event` are live objects of this runtime.
    pub unsafe fn stream_wait_event(
        self,
        stream: sys::hipStream_t,
        event: sys::hipEvent_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamWaitEvent)(stream, event, 0) };
        self.check(e, || "hipStreamWaitEvent".into())
    }

    /// `hipStreamAddCallback(stream, callback, user_data, 0)`: `callback` runs on a runtime
    /// thread once earlier work on `stream` completes, and blocks later work until it returns.
    ///
    /// # Safety
    /// `stream` is a live stream; `user_data` stays valid until `callback` runs; `callback`
    /// does not call the HIP API and does not unwind.
    pub unsafe fn stream_add_callback(
        self,
        stream: sys::hipStream_t,
        callback: sys::hipStreamCallback_t,
        user_data: *mut c_void,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamAddCallback)(stream, callback, user_data, 0) };
        self.check(e, || "hipStreamAddCallback".into())
    }

    /// `hipSetDeviceFlags`: sets the flags of the thread's current device; `Unimplemented`
    /// where the runtime lacks the call.
    pub fn set_device_flags(self, flags: c_uint) -> Result<()> {
        let f = self.optional(self.api.hipSetDeviceFlags, "hipSetDeviceFlags")?;
        // SAFETY: any flags are accepted; unsupported ones return an error.
        let e = unsafe { f(flags) };
        self.check(e, || format!("hipSetDeviceFlags({flags:#x})"))
    }

    /// `hipGetDeviceFlags`: the flags of the thread's current device; `Unimplemented` where
    /// the runtime lacks the call.
    pub fn device_flags(self) -> Result<c_uint> {
        let f = self.optional(self.api.hipGetDeviceFlags, "hipGetDeviceFlags")?;
        let mut flags: c_uint = 0;
        // SAFETY: the out-pointer is valid for one unsigned int.
        let e = unsafe { f(&mut flags) };
        self.check(e, || "hipGetDeviceFlags".into()).map(|()| flags)
    }

    /// Whether `hipLaunchHostFunc` is available (not in HIP 5.2.3's library).
    pub fn has_launch_host_func(self) -> bool {
        self.api.hipLaunchHostFunc.is_some()
    }

    /// `hipLaunchHostFunc`; `Unimplemented` where the runtime lacks it (use
    /// [`Hip::stream_add_callback`]).
    ///
    /// # Safety
    /// As [`Hip::stream_add_callback`].
    pub unsafe fn launch_host_func(
        self,
        stream: sys::hipStream_t,
        function: sys::hipHostFn_t,
        user_data: *mut c_void,
    ) -> Result<()> {
        let f = self.optional(self.api.hipLaunchHostFunc, "hipLaunchHostFunc")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(stream, function, user_data) };
        self.check(e, || "hipLaunchHostFunc".into())
    }

    fn optional<F>(self, f: Option<F>, name: &str) -> Result<F> {
        f.ok_or_else(|| {
            Error::new(
                StatusCode::Unimplemented,
                format!(
                    "{name} is not exported by {} (HIP {})",
                    self.api.soname(),
                    self.runtime_version()
                        .map(crate::version_string)
                        .unwrap_or_else(|_| "?".into())
                ),
            )
        })
    }

    // ---- events ----

    /// `hipEventCreateWithFlags` (`sys::hipEventDisableTiming`, ...).
    pub fn event_create(self, flags: c_uint) -> Result<sys::hipEvent_t> {
        let mut ev: sys::hipEvent_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one handle.
        let e = unsafe { (self.api.hipEventCreateWithFlags)(&mut ev, flags) };
        self.check(e, || format!("hipEventCreateWithFlags(flags {flags:#x})"))
            .map(|()| ev)
    }

    /// `hipEventRecord`: `event` completes when the work on `stream` before it does.
    ///
    /// # Safety
    /// `event` is a live event, `stream` null or a live stream, of this runtime.
    pub unsafe fn event_record(
        self,
        event: sys::hipEvent_t,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventRecord)(event, stream) };
        self.check(e, || "hipEventRecord".into())
    }

    /// `hipEventQuery`: `true` when the recorded work has completed (or nothing was recorded).
    ///
    /// # Safety
    /// `event` is a live event of this runtime.
    pub unsafe fn event_query(self, event: sys::hipEvent_t) -> Result<bool> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventQuery)(event) };
        self.check_ready(e, || "hipEventQuery".into())
    }

    /// `hipEventSynchronize`: blocks the calling thread until `event` completes.
    ///
    /// # Safety
    /// `event` is a live event of this runtime.
    pub unsafe fn event_synchronize(self, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventSynchronize)(event) };
        self.check(e, || "hipEventSynchronize".into())
    }

    /// `hipEventDestroy`.
    ///
    /// # Safety
    /// `event` is a live event of this runtime and is not used afterwards.
    pub unsafe fn event_destroy(self, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventDestroy)(event) };
        self.check(e, || "hipEventDestroy".into())
    }

    // ---- memory ----

    /// `hipMalloc`: device memory on the current device.
    pub fn malloc(self, size: usize) -> Result<sys::hipDeviceptr_t> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer.
        let e = unsafe { (self.api.hipMalloc)(&mut p, size) };
        self.check(e, || format!("hipMalloc({size} bytes)"))
            .map(|()| p)
    }

    /// `hipFree`.
    ///
    /// # Safety
    /// `ptr` came from [`Hip::malloc`] (or is null), is freed once, and no pending work uses it.
    pub unsafe fn free(self, ptr: sys::hipDeviceptr_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipFree)(ptr) };
        self.check(e, || "hipFree".into())
    }

    /// `hipHostMalloc`: pinned host memory (`sys::hipHostMalloc*` flags).
    pub fn host_malloc(self, size: usize, flags: c_uint) -> Result<*mut c_void> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer.
        let e = unsafe { (self.api.hipHostMalloc)(&mut p, size, flags) };
        self.check(e, || {
            format!("hipHostMalloc({size} bytes, flags {flags:#x})")
        })
        .map(|()| p)
    }

    /// `hipHostFree`.
    ///
    /// # Safety
    /// `ptr` came from [`Hip::host_malloc`] (or is null), is freed once, and no pending work
    /// uses it.
    pub unsafe fn host_free(self, ptr: *mut c_void) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipHostFree)(ptr) };
        self.check(e, || "hipHostFree".into())
    }

    /// `hipHostGetDevicePointer`: the device address of memory from [`Hip::host_malloc`] with
    /// `sys::hipHostMallocMapped`.
    ///
    /// # Safety
    /// `ptr` came from [`Hip::host_malloc`] and has not been freed.
    pub unsafe fn host_get_device_pointer(self, ptr: *mut c_void) -> Result<sys::hipDeviceptr_t> {
        let mut d: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer; `ptr` is guaranteed by the caller.
        let e = unsafe { (self.api.hipHostGetDevicePointer)(&mut d, ptr, 0) };
        self.check(e, || "hipHostGetDevicePointer".into())
            .map(|()| d)
    }

    /// `hipMallocManaged`: device-local, host-visible memory (`sys::hipMemAttachGlobal`).
    pub fn malloc_managed(self, size: usize, flags: c_uint) -> Result<*mut c_void> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer.
        let e = unsafe { (self.api.hipMallocManaged)(&mut p, size, flags) };
        self.check(e, || {
            format!("hipMallocManaged({size} bytes, flags {flags:#x})")
        })
        .map(|()| p)
    }

    /// Whether stream-ordered allocation (`hipMallocAsync`/`hipFreeAsync`) is exported.
    pub fn has_stream_ordered_alloc(self) -> bool {
        self.api.hipMallocAsync.is_some() && self.api.hipFreeAsync.is_some()
    }

    /// `hipMallocAsync`: device memory usable by work on `stream` issued after this call.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime.
    pub unsafe fn malloc_async(
        self,
        size: usize,
        stream: sys::hipStream_t,
    ) -> Result<sys::hipDeviceptr_t> {
        let f = self.optional(self.api.hipMallocAsync, "hipMallocAsync")?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the stream is guaranteed by the caller.
        let e = unsafe { f(&mut p, size, stream) };
        self.check(e, || format!("hipMallocAsync({size} bytes)"))
            .map(|()| p)
    }

    /// `hipFreeAsync`: frees `ptr` once earlier work on `stream` completes.
    ///
    /// # Safety
    /// `ptr` came from this runtime's allocator and is freed once; `stream` is live; work on
    /// other streams using `ptr` is ordered before this call.
    pub unsafe fn free_async(
        self,
        ptr: sys::hipDeviceptr_t,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let f = self.optional(self.api.hipFreeAsync, "hipFreeAsync")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(ptr, stream) };
        self.check(e, || "hipFreeAsync".into())
    }

    /// Whether the memory-pool calls [`HipStreamApi`](crate::HipStreamApi) uses for its own
    /// pool are all exported (`hipMemPoolCreate`, `hipMemPoolDestroy`,
    /// `hipMallocFromPoolAsync`, `hipMemPoolSetAttribute`, `hipMemPoolTrimTo`; ROCm 5.2 and
    /// later), as well as `hipFreeAsync`.
    pub fn has_mem_pools(self) -> bool {
        let a = self.api;
        a.hipMemPoolCreate.is_some()
            && a.hipMemPoolDestroy.is_some()
            && a.hipMallocFromPoolAsync.is_some()
            && a.hipMemPoolSetAttribute.is_some()
            && a.hipMemPoolTrimTo.is_some()
            && a.hipFreeAsync.is_some()
    }

    /// `hipMemPoolCreate`: a new memory pool with the properties `props` (see
    /// [`sys::hipMemPoolProps`]).
    pub fn mem_pool_create(self, props: &sys::hipMemPoolProps) -> Result<sys::hipMemPool_t> {
        let f = self.optional(self.api.hipMemPoolCreate, "hipMemPoolCreate")?;
        let mut pool: sys::hipMemPool_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one handle; `props` is a valid hipMemPoolProps
        // (its layout is that of every release's header; see `sys`), read during the call.
        let e = unsafe { f(&mut pool, props) };
        self.check(e, || {
            format!(
                "hipMemPoolCreate(device {}, allocation type {}, handle types {:#x})",
                props.location.id, props.allocType, props.handleTypes
            )
        })
        .map(|()| pool)
    }

    /// `hipMemPoolDestroy`. Memory still allocated from the pool, or freed by work not yet
    /// completed, keeps the pool alive in the runtime until it is gone.
    ///
    /// # Safety
    /// `pool` came from [`Hip::mem_pool_create`], is destroyed once, and is not used afterwards.
    pub unsafe fn mem_pool_destroy(self, pool: sys::hipMemPool_t) -> Result<()> {
        let f = self.optional(self.api.hipMemPoolDestroy, "hipMemPoolDestroy")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(pool) };
        self.check(e, || "hipMemPoolDestroy".into())
    }

    /// `hipMallocFromPoolAsync`: device memory from `pool`, usable by work on `stream` issued
    /// after this call; freed with [`Hip::free_async`].
    ///
    /// # Safety
    /// `pool` is a live pool and `stream` a live stream of this runtime.
    pub unsafe fn malloc_from_pool_async(
        self,
        size: usize,
        pool: sys::hipMemPool_t,
        stream: sys::hipStream_t,
    ) -> Result<sys::hipDeviceptr_t> {
        let f = self.optional(self.api.hipMallocFromPoolAsync, "hipMallocFromPoolAsync")?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the pool and stream are guaranteed by the caller.
        let e = unsafe { f(&mut p, size, pool, stream) };
        self.check(e, || format!("hipMallocFromPoolAsync({size} bytes)"))
            .map(|()| p)
    }

    /// `hipMemPoolSetAttribute(pool, hipMemPoolAttrReleaseThreshold, &bytes)`: how many bytes
    /// of freed memory `pool` keeps instead of releasing them at a synchronisation.
    ///
    /// # Safety
    /// `pool` is a live pool of this runtime.
    pub unsafe fn mem_pool_set_release_threshold(
        self,
        pool: sys::hipMemPool_t,
        bytes: u64,
    ) -> Result<()> {
        let f = self.optional(self.api.hipMemPoolSetAttribute, "hipMemPoolSetAttribute")?;
        let mut value: u64 = bytes;
        // SAFETY: the pool is guaranteed by the caller; this attribute's value is a uint64_t,
        // which `value` is, read during the call.
        let e = unsafe {
            f(
                pool,
                sys::hipMemPoolAttrReleaseThreshold,
                (&mut value as *mut u64).cast(),
            )
        };
        self.check(e, || {
            format!("hipMemPoolSetAttribute(hipMemPoolAttrReleaseThreshold, {bytes})")
        })
    }

    /// `hipMemPoolTrimTo`: releases the pool's freed memory until it holds at most
    /// `min_bytes_to_hold` (memory still allocated, or freed by work not yet known complete,
    /// stays).
    ///
    /// # Safety
    /// `pool` is a live pool of this runtime.
    pub unsafe fn mem_pool_trim_to(
        self,
        pool: sys::hipMemPool_t,
        min_bytes_to_hold: usize,
    ) -> Result<()> {
        let f = self.optional(self.api.hipMemPoolTrimTo, "hipMemPoolTrimTo")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(pool, min_bytes_to_hold) };
        self.check(e, || format!("hipMemPoolTrimTo({min_bytes_to_hold})"))
    }

    /// `hipMemcpyAsync` of `size` bytes (`sys::hipMemcpy*` kinds).
    ///
    /// # Safety
    /// `dst` and `src` are valid for `size` bytes of the kind given until the copy completes
    /// on `stream` (null or live).
    pub unsafe fn memcpy_async(
        self,
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: sys::hipMemcpyKind,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipMemcpyAsync)(dst, src, size, kind, stream) };
        self.check(e, || format!("hipMemcpyAsync({size} bytes, kind {kind})"))
    }

    /// `hipMemsetD8Async`: `count` bytes.
    ///
    /// # Safety
    /// `dst` is device memory valid for `count` bytes until the fill completes on `stream`.
    pub unsafe fn memset_d8_async(
        self,
        dst: sys::hipDeviceptr_t,
        value: u8,
        count: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipMemsetD8Async)(dst, value, count, stream) };
        self.check(e, || format!("hipMemsetD8Async({count} x u8 {value:#x})"))
    }

    /// `hipMemsetD16Async`: `count` 16-bit elements.
    ///
    /// # Safety
    /// `dst` is 2-aligned device memory valid for `count` elements until the fill completes.
    pub unsafe fn memset_d16_async(
        self,
        dst: sys::hipDeviceptr_t,
        value: u16,
        count: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipMemsetD16Async)(dst, value, count, stream) };
        self.check(e, || format!("hipMemsetD16Async({count} x u16 {value:#x})"))
    }

    /// `hipMemsetD32Async`: `count` 32-bit elements (the bits of `value`).
    ///
    /// # Safety
    /// `dst` is 4-aligned device memory valid for `count` elements until the fill completes.
    pub unsafe fn memset_d32_async(
        self,
        dst: sys::hipDeviceptr_t,
        value: u32,
        count: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller; HIP takes the pattern as a signed int, the same
        // bits.
        let e = unsafe {
            (self.api.hipMemsetD32Async)(
                dst,
                c_int::from_ne_bytes(value.to_ne_bytes()),
                count,
                stream,
            )
        };
        self.check(e, || format!("hipMemsetD32Async({count} x u32 {value:#x})"))
    }

    // ---- modules and kernels ----

    /// `hipModuleLoadData`: loads a code object (HSACO ELF or offload bundle) on the current
    /// device.
    ///
    /// # Safety
    /// `image` is a complete code object or offload bundle: HIP reads a code object's size from
    /// the headers inside it, a bundle's entries from its table, and may read a bundle's first
    /// 4096 bytes whatever its size (so `image` holds at least 4096 bytes).
    pub unsafe fn module_load_data(self, image: &[u8]) -> Result<sys::hipModule_t> {
        let mut m: sys::hipModule_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the image's integrity is guaranteed by the caller.
        let e = unsafe { (self.api.hipModuleLoadData)(&mut m, image.as_ptr().cast()) };
        self.check(e, || format!("hipModuleLoadData({} bytes)", image.len()))
            .map(|()| m)
    }

    /// `hipModuleUnload`.
    ///
    /// # Safety
    /// `module` is live, unloaded once, and none of its functions is used or running after.
    pub unsafe fn module_unload(self, module: sys::hipModule_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipModuleUnload)(module) };
        self.check(e, || "hipModuleUnload".into())
    }

    /// `hipModuleGetFunction`; `InvalidArgument` when `name` contains a NUL.
    ///
    /// # Safety
    /// `module` is a live module of this runtime.
    pub unsafe fn module_get_function(
        self,
        module: sys::hipModule_t,
        name: &str,
    ) -> Result<sys::hipFunction_t> {
        let cname = CString::new(name).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("kernel name {name:?} contains a NUL byte"),
            )
        })?;
        let mut f: sys::hipFunction_t = ptr::null_mut();
        // SAFETY: the out-pointer and the name are valid; the module is guaranteed by the
        // caller.
        let e = unsafe { (self.api.hipModuleGetFunction)(&mut f, module, cname.as_ptr()) };
        self.check(e, || format!("hipModuleGetFunction(\"{name}\")"))
            .map(|()| f)
    }

    /// `hipModuleLaunchKernel` with `grid` blocks of `block` threads.
    ///
    /// # Safety
    /// `function` and `stream` are live; `kernel_params` (or `extra`) matches the kernel's
    /// parameters exactly; everything the kernel touches stays valid until it completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn module_launch_kernel(
        self,
        function: sys::hipFunction_t,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: sys::hipStream_t,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe {
            (self.api.hipModuleLaunchKernel)(
                function,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                stream,
                kernel_params,
                extra,
            )
        };
        self.check(e, || {
            format!("hipModuleLaunchKernel(grid {grid:?}, block {block:?}, {shared_mem_bytes} bytes shared)")
        })
    }

    // ---- graphs ----

    /// Whether stream capture and graph launch are exported.
    pub fn has_graphs(self) -> bool {
        let a = self.api;
        a.hipStreamBeginCapture.is_some()
            && a.hipStreamEndCapture.is_some()
            && a.hipGraphInstantiate.is_some()
            && a.hipGraphLaunch.is_some()
            && a.hipGraphDestroy.is_some()
            && a.hipGraphExecDestroy.is_some()
    }

    /// `hipStreamBeginCapture`: later work on `stream` is recorded, not run.
    ///
    /// # Safety
    /// `stream` is a live, non-null stream not already capturing.
    pub unsafe fn stream_begin_capture(
        self,
        stream: sys::hipStream_t,
        mode: sys::hipStreamCaptureMode,
    ) -> Result<()> {
        let f = self.optional(self.api.hipStreamBeginCapture, "hipStreamBeginCapture")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(stream, mode) };
        self.check(e, || format!("hipStreamBeginCapture(mode {mode})"))
    }

    /// `hipStreamEndCapture`: the recorded graph.
    ///
    /// # Safety
    /// `stream` is a live stream that is capturing.
    pub unsafe fn stream_end_capture(self, stream: sys::hipStream_t) -> Result<sys::hipGraph_t> {
        let f = self.optional(self.api.hipStreamEndCapture, "hipStreamEndCapture")?;
        let mut g: sys::hipGraph_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the stream is guaranteed by the caller.
        let e = unsafe { f(stream, &mut g) };
        self.check(e, || "hipStreamEndCapture".into()).map(|()| g)
    }

    /// `hipGraphInstantiate`; the error message includes the runtime's log, if any.
    ///
    /// # Safety
    /// `graph` is a live graph of this runtime.
    pub unsafe fn graph_instantiate(self, graph: sys::hipGraph_t) -> Result<sys::hipGraphExec_t> {
        let f = self.optional(self.api.hipGraphInstantiate, "hipGraphInstantiate")?;
        let mut exec: sys::hipGraphExec_t = ptr::null_mut();
        let mut log = [0u8; 1024];
        // SAFETY: the out-pointers and the log buffer are valid for their sizes; the graph is
        // guaranteed by the caller.
        let e = unsafe {
            f(
                &mut exec,
                graph,
                ptr::null_mut(),
                log.as_mut_ptr().cast(),
                log.len(),
            )
        };
        self.check(e, || {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..end]);
            if log.trim().is_empty() {
                "hipGraphInstantiate".into()
            } else {
                format!("hipGraphInstantiate (log: {})", log.trim())
            }
        })
        .map(|()| exec)
    }

    /// `hipGraphLaunch`.
    ///
    /// # Safety
    /// `exec` and `stream` are live; everything the graph touches stays valid until it
    /// completes.
    pub unsafe fn graph_launch(
        self,
        exec: sys::hipGraphExec_t,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let f = self.optional(self.api.hipGraphLaunch, "hipGraphLaunch")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(exec, stream) };
        self.check(e, || "hipGraphLaunch".into())
    }

    /// `hipGraphDestroy`.
    ///
    /// # Safety
    /// `graph` is live and not used afterwards.
    pub unsafe fn graph_destroy(self, graph: sys::hipGraph_t) -> Result<()> {
        let f = self.optional(self.api.hipGraphDestroy, "hipGraphDestroy")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(graph) };
        self.check(e, || "hipGraphDestroy".into())
    }

    /// `hipGraphExecDestroy`.
    ///
    /// # Safety
    /// `exec` is live, not running, and not used afterwards.
    pub unsafe fn graph_exec_destroy(self, exec: sys::hipGraphExec_t) -> Result<()> {
        let f = self.optional(self.api.hipGraphExecDestroy, "hipGraphExecDestroy")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(exec) };
        self.check(e, || "hipGraphExecDestroy".into())
    }
}

/// The error for a failed load, `Unavailable`.
pub fn load_error(e: sys::LoadError) -> Error {
    Error::new(StatusCode::Unavailable, e.to_string())
}

/// Copies a static C string the runtime returned; `None` for null.
fn static_str(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null strings from hipGetErrorName/hipGetErrorString are static and
    // NUL-terminated.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}
