//! Raw HIP runtime symbols, opened at run time with [`libloading`].
//!
//! [`HipApi`] is a table of `extern "C"` function pointers into `libamdhip64`, resolved once.
//! Types and signatures follow `hip_runtime_api.h` of HIP 5.2 (ROCm 5.2.3, the version Debian
//! ships as `libamdhip64-5`); every symbol used here has kept its signature in later releases.
//! The memory-pool types ([`hipMemPoolProps`]) were checked against the headers of ROCm 5.2
//! through 7.x; their one layout change (ROCm 6.2) is documented on the type.
//! `hipDeviceProp_t` is deliberately absent: its layout changed between releases, so device
//! properties are read with [`HipApi::hipDeviceGetAttribute`] and friends instead.
//!
//! Required symbols must all resolve or [`HipApi::load`] fails; optional ones (present only in
//! newer runtimes, such as `hipLaunchHostFunc`, missing from HIP 5.2.3's library although its
//! header declares it) are `Option`s.
//!
//! Everything here is `unsafe` to call and unchecked; [`crate::result`] wraps it.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt;
use std::marker::{PhantomData, PhantomPinned};
use std::mem::ManuallyDrop;
use std::sync::OnceLock;

use libloading::Library;

/// A HIP status code (`hipError_t`, a C enum: `int`).
pub type hipError_t = i32;

/// `hipSuccess`.
pub const hipSuccess: hipError_t = 0;
/// `hipErrorInvalidValue`.
pub const hipErrorInvalidValue: hipError_t = 1;
/// `hipErrorOutOfMemory`.
pub const hipErrorOutOfMemory: hipError_t = 2;
/// `hipErrorNotInitialized`.
pub const hipErrorNotInitialized: hipError_t = 3;
/// `hipErrorDeinitialized`.
pub const hipErrorDeinitialized: hipError_t = 4;
/// `hipErrorInsufficientDriver`.
pub const hipErrorInsufficientDriver: hipError_t = 35;
/// `hipErrorNoDevice`: no HIP-capable device (what `hipGetDeviceCount` returns without one).
pub const hipErrorNoDevice: hipError_t = 100;
/// `hipErrorInvalidDevice` (what HIP 5.2's `hipInit` returns without an AMD GPU).
pub const hipErrorInvalidDevice: hipError_t = 101;
/// `hipErrorInvalidImage`.
pub const hipErrorInvalidImage: hipError_t = 200;
/// `hipErrorInvalidContext`.
pub const hipErrorInvalidContext: hipError_t = 201;
/// `hipErrorNoBinaryForGpu`.
pub const hipErrorNoBinaryForGpu: hipError_t = 209;
/// `hipErrorFileNotFound`.
pub const hipErrorFileNotFound: hipError_t = 301;
/// `hipErrorInvalidHandle`.
pub const hipErrorInvalidHandle: hipError_t = 400;
/// `hipErrorNotFound` (for example an unknown kernel name).
pub const hipErrorNotFound: hipError_t = 500;
/// `hipErrorNotReady`: the queried stream or event has not completed (not a failure).
pub const hipErrorNotReady: hipError_t = 600;
/// `hipErrorIllegalAddress`.
pub const hipErrorIllegalAddress: hipError_t = 700;
/// `hipErrorLaunchOutOfResources`.
pub const hipErrorLaunchOutOfResources: hipError_t = 701;
/// `hipErrorPeerAccessUnsupported`: the two devices cannot reach each other's memory.
pub const hipErrorPeerAccessUnsupported: hipError_t = 217;
/// `hipErrorPeerAccessAlreadyEnabled`: `hipDeviceEnablePeerAccess` made once already.
pub const hipErrorPeerAccessAlreadyEnabled: hipError_t = 704;
/// `hipErrorLaunchFailure`.
pub const hipErrorLaunchFailure: hipError_t = 719;
/// `hipErrorNotSupported`.
pub const hipErrorNotSupported: hipError_t = 801;
/// `hipErrorUnknown`.
pub const hipErrorUnknown: hipError_t = 999;

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident => $ptr:ident;)*) => {$(
        #[doc = concat!("The opaque object a [`", stringify!($ptr), "`] points to.")]
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
        $(#[$m])*
        pub type $ptr = *mut $name;
    )*};
}

opaque! {
    /// A stream (`hipStream_t`); null is the legacy default stream.
    ihipStream_t => hipStream_t;
    /// An event (`hipEvent_t`).
    ihipEvent_t => hipEvent_t;
    /// A loaded code object (`hipModule_t`).
    ihipModule_t => hipModule_t;
    /// A kernel in a module (`hipFunction_t`).
    ihipModuleSymbol_t => hipFunction_t;
    /// A graph (`hipGraph_t`).
    ihipGraph => hipGraph_t;
    /// An instantiated, launchable graph (`hipGraphExec_t`).
    hipGraphExec => hipGraphExec_t;
    /// A graph node (`hipGraphNode_t`).
    hipGraphNode => hipGraphNode_t;
    /// A stream-ordered memory pool (`hipMemPool_t`).
    ihipMemPoolHandle_t => hipMemPool_t;
}

/// A device ordinal (`hipDevice_t` is `int`).
pub type hipDevice_t = c_int;
/// A device address (`hipDeviceptr_t` is `void*`).
pub type hipDeviceptr_t = *mut c_void;
/// A device attribute (`hipDeviceAttribute_t`, a C enum).
pub type hipDeviceAttribute_t = c_int;
/// A copy direction (`hipMemcpyKind`, a C enum).
pub type hipMemcpyKind = c_int;
/// A stream-capture mode (`hipStreamCaptureMode`, a C enum).
pub type hipStreamCaptureMode = c_int;

/// `hipStreamCallback_t`: runs on a runtime thread once preceding work completes; it must not
/// call the HIP API.
pub type hipStreamCallback_t =
    unsafe extern "C" fn(stream: hipStream_t, status: hipError_t, user_data: *mut c_void);
/// `hipHostFn_t` (for `hipLaunchHostFunc`): same rules as [`hipStreamCallback_t`].
pub type hipHostFn_t = unsafe extern "C" fn(user_data: *mut c_void);

/// `hipMemcpyHostToHost`.
pub const hipMemcpyHostToHost: hipMemcpyKind = 0;
/// `hipMemcpyHostToDevice`.
pub const hipMemcpyHostToDevice: hipMemcpyKind = 1;
/// `hipMemcpyDeviceToHost`.
pub const hipMemcpyDeviceToHost: hipMemcpyKind = 2;
/// `hipMemcpyDeviceToDevice`.
pub const hipMemcpyDeviceToDevice: hipMemcpyKind = 3;
/// `hipMemcpyDefault`: direction inferred from the (unified) addresses.
pub const hipMemcpyDefault: hipMemcpyKind = 4;

/// `hipStreamDefault` flag.
pub const hipStreamDefault: c_uint = 0x0;
/// `hipStreamNonBlocking`: no implicit synchronisation with the null stream.
pub const hipStreamNonBlocking: c_uint = 0x1;

/// `hipDeviceScheduleBlockingSync` (`hipSetDeviceFlags`): a thread waiting for the device
/// sleeps until the work completed (an interrupt) instead of polling. Before ROCm 6.3 this
/// device flag, not an event's `hipEventBlockingSync`, decides how `hipEventSynchronize` waits
/// (hipamd and clr turn active waiting on for every device at start-up).
pub const hipDeviceScheduleBlockingSync: c_uint = 0x4;
/// `hipDeviceScheduleMask`: the scheduling bits of the device flags.
pub const hipDeviceScheduleMask: c_uint = 0x7;

/// `hipEventDefault` flag.
pub const hipEventDefault: c_uint = 0x0;
/// `hipEventBlockingSync`: `hipEventSynchronize` yields the CPU instead of spinning. HIP
/// through ROCm 6.2 ignores it (the device's scheduling flags, `hipSetDeviceFlags`, decide
/// for every event); later ROCm/clr honours it, and the newest only for an event whose
/// flags are exactly `hipEventBlockingSync` (clr `hip_event.cpp`: `flags_ ==
/// hipEventBlockingSync`), so combine it with no other flag where it must take effect.
pub const hipEventBlockingSync: c_uint = 0x1;
/// `hipEventDisableTiming`: no timestamps for `hipEventElapsedTime` (cheaper with CUDA; AMD's
/// runtime records the same timestamped marker either way).
pub const hipEventDisableTiming: c_uint = 0x2;

/// `hipHostMallocDefault` flag.
pub const hipHostMallocDefault: c_uint = 0x0;
/// `hipHostMallocPortable`: pinned for all devices.
pub const hipHostMallocPortable: c_uint = 0x1;
/// `hipHostMallocMapped`: mapped into the device address space.
pub const hipHostMallocMapped: c_uint = 0x2;
/// `hipHostMallocWriteCombined`.
pub const hipHostMallocWriteCombined: c_uint = 0x4;
/// `hipHostMallocCoherent`: fine-grained, coherent host memory.
pub const hipHostMallocCoherent: c_uint = 0x4000_0000;
/// `hipHostMallocNonCoherent`: coarse-grained host memory.
pub const hipHostMallocNonCoherent: c_uint = 0x8000_0000;
/// `hipMemAttachGlobal` (for `hipMallocManaged`): accessible from any stream on any device.
pub const hipMemAttachGlobal: c_uint = 0x1;

/// `hipStreamCaptureModeGlobal`.
pub const hipStreamCaptureModeGlobal: hipStreamCaptureMode = 0;
/// `hipStreamCaptureModeThreadLocal`.
pub const hipStreamCaptureModeThreadLocal: hipStreamCaptureMode = 1;
/// `hipStreamCaptureModeRelaxed`.
pub const hipStreamCaptureModeRelaxed: hipStreamCaptureMode = 2;

/// `hipDeviceAttributeIntegrated`: the device shares memory with the host (APU).
pub const hipDeviceAttributeIntegrated: hipDeviceAttribute_t = 16;
/// `hipDeviceAttributeComputeCapabilityMajor` (AMD: the gfx major version).
pub const hipDeviceAttributeComputeCapabilityMajor: hipDeviceAttribute_t = 23;
/// `hipDeviceAttributeManagedMemory`: `hipMallocManaged` is supported.
pub const hipDeviceAttributeManagedMemory: hipDeviceAttribute_t = 24;
/// `hipDeviceAttributeMaxGridDimX`: most blocks in x (`INT32_MAX` on AMD).
pub const hipDeviceAttributeMaxGridDimX: hipDeviceAttribute_t = 29;
/// `hipDeviceAttributeMaxGridDimY`: most blocks in y (65536 on AMD from ROCm 5.7 on; HIP 5.2
/// reports `INT32_MAX`).
pub const hipDeviceAttributeMaxGridDimY: hipDeviceAttribute_t = 30;
/// `hipDeviceAttributeMaxGridDimZ`: most blocks in z (as for y).
pub const hipDeviceAttributeMaxGridDimZ: hipDeviceAttribute_t = 31;
/// `hipDeviceAttributeMaxThreadsPerBlock`.
pub const hipDeviceAttributeMaxThreadsPerBlock: hipDeviceAttribute_t = 56;
/// `hipDeviceAttributeComputeCapabilityMinor`.
pub const hipDeviceAttributeComputeCapabilityMinor: hipDeviceAttribute_t = 61;
/// `hipDeviceAttributeMultiprocessorCount` (compute units).
pub const hipDeviceAttributeMultiprocessorCount: hipDeviceAttribute_t = 63;
/// `hipDeviceAttributeMaxSharedMemoryPerBlock`.
pub const hipDeviceAttributeMaxSharedMemoryPerBlock: hipDeviceAttribute_t = 74;
/// `hipDeviceAttributeWarpSize` (wavefront size: 32 or 64).
pub const hipDeviceAttributeWarpSize: hipDeviceAttribute_t = 87;
/// `hipDeviceAttributeMemoryPoolsSupported`: stream-ordered allocation is supported.
pub const hipDeviceAttributeMemoryPoolsSupported: hipDeviceAttribute_t = 88;

// ---- memory pools ----
//
// Checked against `include/hip/hip_runtime_api.h` of ROCm/HIP at the tags rocm-5.2.3 (the
// release Debian ships as libamdhip64-5), rocm-5.7.1, rocm-6.0.0, rocm-6.1.2, rocm-6.2.0 and
// rocm-6.2.2 and at the 6.3 development head (amd-staging c5e11fca), and against the ROCm 7.x
// header in ROCm/rocm-systems (projects/hip, commit 003a5d10). The enums are C enums (`int`;
// every value fits) with the same values in all of them (7.x only adds members, such as
// `hipMemLocationTypeHost = 2`, not used here), and the five pool functions below have the
// same signatures in all of them. The pool API first appears in ROCm 5.2 (header and
// ROCm/hipamd library; the symbols sit in the library's `hip_5.1` version node), so older
// runtimes lack the optional symbols. `hipMemPoolProps` changed at ROCm 6.2 (ROCm/HIP
// ff118347a, "maxSize param for Mem pool props"): see its docs.

/// A memory location type (`hipMemLocationType`, a C enum: `int`).
pub type hipMemLocationType = c_int;
/// `hipMemLocationTypeInvalid`.
pub const hipMemLocationTypeInvalid: hipMemLocationType = 0;
/// `hipMemLocationTypeDevice`: `id` is a HIP device ordinal.
pub const hipMemLocationTypeDevice: hipMemLocationType = 1;

/// An allocation type (`hipMemAllocationType`, a C enum: `int`).
pub type hipMemAllocationType = c_int;
/// `hipMemAllocationTypeInvalid`.
pub const hipMemAllocationTypeInvalid: hipMemAllocationType = 0;
/// `hipMemAllocationTypePinned`: memory that does not migrate while in use (the only type a
/// pool accepts).
pub const hipMemAllocationTypePinned: hipMemAllocationType = 1;

/// Export handle types of a pool's allocations (`hipMemAllocationHandleType`, a C enum of
/// flags: `int`).
pub type hipMemAllocationHandleType = c_int;
/// `hipMemHandleTypeNone`: not exportable (no IPC).
pub const hipMemHandleTypeNone: hipMemAllocationHandleType = 0;

/// A memory pool attribute (`hipMemPoolAttr`, a C enum: `int`).
pub type hipMemPoolAttr = c_int;
/// `hipMemPoolAttrReleaseThreshold` (value type `uint64_t`): bytes of freed memory the pool
/// keeps instead of releasing them at the next synchronisation (default 0).
pub const hipMemPoolAttrReleaseThreshold: hipMemPoolAttr = 4;

/// `hipMemLocation`: where a pool's memory resides.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipMemLocation {
    /// What `id` means ([`hipMemLocationTypeDevice`]); `type` in C, a Rust keyword.
    pub type_: hipMemLocationType,
    /// A device ordinal, for [`hipMemLocationTypeDevice`].
    pub id: c_int,
}

/// `hipMemPoolProps`, in the ROCm 6.2+ layout.
///
/// It is 88 bytes, 8-aligned, in every release, but ROCm 6.2 carved `maxSize` out of the
/// front of `reserved`:
///
/// | offset | ROCm 5.2 – 6.1                        | ROCm 6.2 and later                   |
/// |--------|---------------------------------------|--------------------------------------|
/// | 0      | `hipMemAllocationType allocType`      | same                                 |
/// | 4      | `hipMemAllocationHandleType handleTypes` | same                              |
/// | 8      | `hipMemLocation location` (`type`, `id`) | same                              |
/// | 16     | `void* win32SecurityAttributes`       | same                                 |
/// | 24     | `unsigned char reserved[64]`, must be 0 | `size_t maxSize`, 0: no limit but the system's |
/// | 32     | (`reserved` continues to byte 88)     | `unsigned char reserved[56]`, must be 0 |
///
/// Bytes 24..32 are `maxSize` on 6.2+ and reserved (must be zero) before, so a value whose
/// `maxSize` is 0, as [`hipMemPoolProps::default`] gives, is the same valid request to every
/// release: the 6.x runtime (ROCm/clr `hipamd/src/hip_mempool_impl.cpp`) only limits a pool
/// whose `maxSize` is nonzero, and its own default pool is made with 0. Leave `maxSize` at 0
/// for runtimes before 6.2.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipMemPoolProps {
    /// [`hipMemAllocationTypePinned`].
    pub allocType: hipMemAllocationType,
    /// Export handle types ([`hipMemHandleTypeNone`]).
    pub handleTypes: hipMemAllocationHandleType,
    /// Where allocations reside.
    pub location: hipMemLocation,
    /// Windows only (`LPSECURITYATTRIBUTES`); null.
    pub win32SecurityAttributes: *mut c_void,
    /// Maximum pool size in bytes, 0 for the system's limit (ROCm 6.2+; reserved before, where
    /// it must stay 0).
    pub maxSize: usize,
    /// Reserved, must be zero.
    pub reserved: [u8; 56],
}

impl Default for hipMemPoolProps {
    /// All zero: invalid type and location (set them), no handle types, no size limit.
    fn default() -> Self {
        hipMemPoolProps {
            allocType: hipMemAllocationTypeInvalid,
            handleTypes: hipMemHandleTypeNone,
            location: hipMemLocation {
                type_: hipMemLocationTypeInvalid,
                id: 0,
            },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            reserved: [0; 56],
        }
    }
}

/// The sonames [`HipApi::load_default`] tries, in order: the unversioned development link
/// (a full ROCm install, or `LD_LIBRARY_PATH` pointing at one), then the runtime sonames of
/// ROCm 7 (`libamdhip64.so.7`; TheRock's installs ship only the versioned names), ROCm 6 and
/// ROCm 5 (Debian's `libamdhip64-5`).
pub const DEFAULT_SONAMES: &[&str] = &[
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// Why the HIP runtime could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// No candidate opened: `(soname, dlopen error)` for each one tried.
    NotFound(Vec<(String, String)>),
    /// A library opened but lacks a required symbol.
    MissingSymbol {
        /// The library that opened.
        soname: String,
        /// The missing symbol.
        symbol: &'static str,
        /// The dlsym error.
        error: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound(tried) => {
                f.write_str("no HIP runtime: ")?;
                for (i, (soname, error)) in tried.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "dlopen {soname}: {error}")?;
                }
                if tried.is_empty() {
                    f.write_str("no library names to try")?;
                }
                f.write_str(" (install ROCm, or Debian's libamdhip64-5)")
            }
            LoadError::MissingSymbol {
                soname,
                symbol,
                error,
            } => write!(
                f,
                "{soname} lacks the required symbol {symbol} ({error}); HIP 5.2 or later is needed"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

macro_rules! hip_api {
    (
        required { $( $(#[$rm:meta])* fn $r:ident( $($ra:ident: $rt:ty),* $(,)? ) -> $rr:ty; )* }
        optional { $( $(#[$om:meta])* fn $o:ident( $($oa:ident: $ot:ty),* $(,)? ) -> $or:ty; )* }
    ) => {
        /// The HIP runtime's entry points.
        ///
        /// Fields are raw function pointers: calling one is `unsafe` and unchecked. They are
        /// valid for as long as this value lives; the library is never unloaded
        /// (`dlclose` of a HIP runtime is not safe), so in practice they stay valid for the
        /// whole process, and [`HipApi::load`] hands out `&'static` tables.
        pub struct HipApi {
            $( $(#[$rm])* pub $r: unsafe extern "C" fn($($rt),*) -> $rr, )*
            $( $(#[$om])* pub $o: Option<unsafe extern "C" fn($($ot),*) -> $or>, )*
            soname: String,
            _library: ManuallyDrop<Library>,
        }

        impl HipApi {
            /// Resolves every symbol from `library`, opened as `soname`.
            ///
            /// The library is never closed, not even when a required symbol is missing: the
            /// library may still be a (too old) HIP runtime, whose teardown is not safe to run.
            ///
            /// # Safety
            /// `library` must be a HIP runtime whose symbols of these names have the
            /// signatures of `hip_runtime_api.h` (HIP 5.2 or later).
            unsafe fn resolve(
                library: Library,
                soname: &str,
                absent: &[&str],
            ) -> Result<Self, LoadError> {
                let library = ManuallyDrop::new(library);
                $(
                    // SAFETY: the caller guarantees the symbol has this C signature; the
                    // pointer is copied out and stays valid because the library is kept
                    // (and never unloaded) in the returned table.
                    let $r = unsafe {
                        *library
                            .get::<unsafe extern "C" fn($($rt),*) -> $rr>(
                                concat!(stringify!($r), "\0").as_bytes(),
                            )
                            .map_err(|e| LoadError::MissingSymbol {
                                soname: soname.to_string(),
                                symbol: stringify!($r),
                                error: e.to_string(),
                            })?
                    };
                )*
                $(
                    // SAFETY: as above; an absent optional symbol is `None`, and so is one
                    // the caller asked to treat as absent.
                    let $o = (!absent.contains(&stringify!($o))).then(|| unsafe {
                        library
                            .get::<unsafe extern "C" fn($($ot),*) -> $or>(
                                concat!(stringify!($o), "\0").as_bytes(),
                            )
                            .ok()
                            .map(|symbol| *symbol)
                    }).flatten();
                )*
                Ok(HipApi {
                    $( $r, )*
                    $( $o, )*
                    soname: soname.to_string(),
                    _library: library,
                })
            }

            /// The names of the optional symbols this library has.
            pub fn optional_symbols(&self) -> Vec<&'static str> {
                let mut present = Vec::new();
                $( if self.$o.is_some() { present.push(stringify!($o)); } )*
                present
            }
        }
    };
}

hip_api! {
    required {
        /// `hipError_t hipInit(unsigned int flags)`.
        fn hipInit(flags: c_uint) -> hipError_t;
        /// `hipError_t hipGetDeviceCount(int* count)`.
        fn hipGetDeviceCount(count: *mut c_int) -> hipError_t;
        /// `hipError_t hipSetDevice(int deviceId)`.
        fn hipSetDevice(device_id: c_int) -> hipError_t;
        /// `hipError_t hipGetDevice(int* deviceId)`.
        fn hipGetDevice(device_id: *mut c_int) -> hipError_t;
        /// `hipError_t hipDeviceGet(hipDevice_t* device, int ordinal)`.
        fn hipDeviceGet(device: *mut hipDevice_t, ordinal: c_int) -> hipError_t;
        /// `hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device)`.
        fn hipDeviceGetName(name: *mut c_char, len: c_int, device: hipDevice_t) -> hipError_t;
        /// `hipError_t hipDeviceGetAttribute(int* pi, hipDeviceAttribute_t attr, int deviceId)`.
        fn hipDeviceGetAttribute(
            pi: *mut c_int,
            attr: hipDeviceAttribute_t,
            device_id: c_int,
        ) -> hipError_t;
        /// `hipError_t hipDeviceTotalMem(size_t* bytes, hipDevice_t device)`.
        fn hipDeviceTotalMem(bytes: *mut usize, device: hipDevice_t) -> hipError_t;
        /// `const char* hipGetErrorName(hipError_t)`: a static string.
        fn hipGetErrorName(error: hipError_t) -> *const c_char;
        /// `const char* hipGetErrorString(hipError_t)`: a static string.
        fn hipGetErrorString(error: hipError_t) -> *const c_char;
        /// `hipError_t hipDriverGetVersion(int* driverVersion)`.
        fn hipDriverGetVersion(version: *mut c_int) -> hipError_t;
        /// `hipError_t hipRuntimeGetVersion(int* runtimeVersion)`.
        fn hipRuntimeGetVersion(version: *mut c_int) -> hipError_t;
        /// `hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags)`.
        fn hipStreamCreateWithFlags(stream: *mut hipStream_t, flags: c_uint) -> hipError_t;
        /// `hipError_t hipStreamDestroy(hipStream_t stream)`.
        fn hipStreamDestroy(stream: hipStream_t) -> hipError_t;
        /// `hipError_t hipStreamSynchronize(hipStream_t stream)`.
        fn hipStreamSynchronize(stream: hipStream_t) -> hipError_t;
        /// `hipError_t hipStreamQuery(hipStream_t stream)`: `hipErrorNotReady` while busy.
        fn hipStreamQuery(stream: hipStream_t) -> hipError_t;
        /// `hipError_t hipStreamWaitEvent(hipStream_t, hipEvent_t, unsigned int flags)`.
        fn hipStreamWaitEvent(stream: hipStream_t, event: hipEvent_t, flags: c_uint) -> hipError_t;
        /// `hipError_t hipStreamAddCallback(hipStream_t, hipStreamCallback_t, void*, unsigned)`.
        fn hipStreamAddCallback(
            stream: hipStream_t,
            callback: hipStreamCallback_t,
            user_data: *mut c_void,
            flags: c_uint,
        ) -> hipError_t;
        /// `hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned flags)`.
        fn hipEventCreateWithFlags(event: *mut hipEvent_t, flags: c_uint) -> hipError_t;
        /// `hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)`.
        fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> hipError_t;
        /// `hipError_t hipEventQuery(hipEvent_t event)`: `hipErrorNotReady` while pending.
        fn hipEventQuery(event: hipEvent_t) -> hipError_t;
        /// `hipError_t hipEventSynchronize(hipEvent_t event)`.
        fn hipEventSynchronize(event: hipEvent_t) -> hipError_t;
        /// `hipError_t hipEventDestroy(hipEvent_t event)`.
        fn hipEventDestroy(event: hipEvent_t) -> hipError_t;
        /// `hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop)`:
        /// `hipErrorInvalidHandle` for an event created with `hipEventDisableTiming` or never
        /// recorded, `hipErrorNotReady` while a record is pending.
        fn hipEventElapsedTime(ms: *mut f32, start: hipEvent_t, stop: hipEvent_t) -> hipError_t;
        /// `hipError_t hipMalloc(void** ptr, size_t size)`.
        fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> hipError_t;
        /// `hipError_t hipFree(void* ptr)`.
        fn hipFree(ptr: *mut c_void) -> hipError_t;
        /// `hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags)`.
        fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t;
        /// `hipError_t hipHostFree(void* ptr)`.
        fn hipHostFree(ptr: *mut c_void) -> hipError_t;
        /// `hipError_t hipHostGetDevicePointer(void** devPtr, void* hstPtr, unsigned int
        /// flags)`.
        fn hipHostGetDevicePointer(
            dev_ptr: *mut *mut c_void,
            host_ptr: *mut c_void,
            flags: c_uint,
        ) -> hipError_t;
        /// `hipError_t hipMallocManaged(void** dev_ptr, size_t size, unsigned int flags)`.
        fn hipMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t;
        /// `hipError_t hipMemcpyAsync(void* dst, const void* src, size_t, hipMemcpyKind,
        /// hipStream_t)`.
        fn hipMemcpyAsync(
            dst: *mut c_void,
            src: *const c_void,
            size: usize,
            kind: hipMemcpyKind,
            stream: hipStream_t,
        ) -> hipError_t;
        /// `hipError_t hipMemsetD8Async(hipDeviceptr_t, unsigned char, size_t count,
        /// hipStream_t)`.
        fn hipMemsetD8Async(
            dst: hipDeviceptr_t,
            value: u8,
            count: usize,
            stream: hipStream_t,
        ) -> hipError_t;
        /// `hipError_t hipMemsetD16Async(hipDeviceptr_t, unsigned short, size_t count,
        /// hipStream_t)`.
        fn hipMemsetD16Async(
            dst: hipDeviceptr_t,
            value: u16,
            count: usize,
            stream: hipStream_t,
        ) -> hipError_t;
        /// `hipError_t hipMemsetD32Async(hipDeviceptr_t, int value, size_t count, hipStream_t)`
        /// (HIP takes a signed `int`, CUDA an `unsigned int`).
        fn hipMemsetD32Async(
            dst: hipDeviceptr_t,
            value: c_int,
            count: usize,
            stream: hipStream_t,
        ) -> hipError_t;
        /// `hipError_t hipModuleLoadData(hipModule_t* module, const void* image)`.
        fn hipModuleLoadData(module: *mut hipModule_t, image: *const c_void) -> hipError_t;
        /// `hipError_t hipModuleUnload(hipModule_t module)`.
        fn hipModuleUnload(module: hipModule_t) -> hipError_t;
        /// `hipError_t hipModuleGetFunction(hipFunction_t*, hipModule_t, const char* kname)`.
        fn hipModuleGetFunction(
            function: *mut hipFunction_t,
            module: hipModule_t,
            name: *const c_char,
        ) -> hipError_t;
        /// `hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gridDimX, gridDimY,
        /// gridDimZ, blockDimX, blockDimY, blockDimZ, unsigned sharedMemBytes, hipStream_t,
        /// void** kernelParams, void** extra)`.
        fn hipModuleLaunchKernel(
            function: hipFunction_t,
            grid_x: c_uint,
            grid_y: c_uint,
            grid_z: c_uint,
            block_x: c_uint,
            block_y: c_uint,
            block_z: c_uint,
            shared_mem_bytes: c_uint,
            stream: hipStream_t,
            kernel_params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> hipError_t;
    }
    optional {
        /// `hipError_t hipSetDeviceFlags(unsigned flags)`: of the thread's current device.
        fn hipSetDeviceFlags(flags: c_uint) -> hipError_t;
        /// `hipError_t hipGetDeviceFlags(unsigned* flags)`: of the thread's current device.
        fn hipGetDeviceFlags(flags: *mut c_uint) -> hipError_t;
        /// `hipError_t hipLaunchHostFunc(hipStream_t, hipHostFn_t, void* userData)`;
        /// declared by HIP 5.2's header but not exported by its library.
        fn hipLaunchHostFunc(
            stream: hipStream_t,
            function: hipHostFn_t,
            user_data: *mut c_void,
        ) -> hipError_t;
        /// `hipError_t hipStreamWriteValue32(hipStream_t, void* ptr, uint32_t value, unsigned
        /// flags)`.
        fn hipStreamWriteValue32(
            stream: hipStream_t,
            ptr: *mut c_void,
            value: u32,
            flags: c_uint,
        ) -> hipError_t;
        /// `hipError_t hipDeviceCanAccessPeer(int* canAccessPeer, int deviceId, int
        /// peerDeviceId)`.
        fn hipDeviceCanAccessPeer(can_access: *mut c_int, device: c_int, peer: c_int)
            -> hipError_t;
        /// `hipError_t hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags)`: from
        /// the thread's current device.
        fn hipDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> hipError_t;
        /// `hipError_t hipMemcpyPeerAsync(void* dst, int dstDeviceId, const void* src, int
        /// srcDevice, size_t sizeBytes, hipStream_t stream)`.
        fn hipMemcpyPeerAsync(
            dst: *mut c_void,
            dst_device: c_int,
            src: *const c_void,
            src_device: c_int,
            size: usize,
            stream: hipStream_t,
        ) -> hipError_t;
        /// `hipError_t hipMallocAsync(void** dev_ptr, size_t size, hipStream_t stream)`.
        fn hipMallocAsync(ptr: *mut *mut c_void, size: usize, stream: hipStream_t) -> hipError_t;
        /// `hipError_t hipFreeAsync(void* dev_ptr, hipStream_t stream)`.
        fn hipFreeAsync(ptr: *mut c_void, stream: hipStream_t) -> hipError_t;
        /// `hipError_t hipMemPoolCreate(hipMemPool_t* mem_pool, const hipMemPoolProps*
        /// pool_props)`.
        fn hipMemPoolCreate(pool: *mut hipMemPool_t, props: *const hipMemPoolProps) -> hipError_t;
        /// `hipError_t hipMemPoolDestroy(hipMemPool_t mem_pool)`.
        fn hipMemPoolDestroy(pool: hipMemPool_t) -> hipError_t;
        /// `hipError_t hipMallocFromPoolAsync(void** dev_ptr, size_t size, hipMemPool_t
        /// mem_pool, hipStream_t stream)`.
        fn hipMallocFromPoolAsync(
            ptr: *mut *mut c_void,
            size: usize,
            pool: hipMemPool_t,
            stream: hipStream_t,
        ) -> hipError_t;
        /// `hipError_t hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr,
        /// void* value)`.
        fn hipMemPoolSetAttribute(
            pool: hipMemPool_t,
            attr: hipMemPoolAttr,
            value: *mut c_void,
        ) -> hipError_t;
        /// `hipError_t hipMemPoolTrimTo(hipMemPool_t mem_pool, size_t min_bytes_to_hold)`.
        fn hipMemPoolTrimTo(pool: hipMemPool_t, min_bytes_to_hold: usize) -> hipError_t;
        /// `hipError_t hipStreamBeginCapture(hipStream_t, hipStreamCaptureMode)`.
        fn hipStreamBeginCapture(stream: hipStream_t, mode: hipStreamCaptureMode) -> hipError_t;
        /// `hipError_t hipStreamEndCapture(hipStream_t, hipGraph_t* pGraph)`.
        fn hipStreamEndCapture(stream: hipStream_t, graph: *mut hipGraph_t) -> hipError_t;
        /// `hipError_t hipGraphInstantiate(hipGraphExec_t*, hipGraph_t, hipGraphNode_t*
        /// pErrorNode, char* pLogBuffer, size_t bufferSize)`.
        fn hipGraphInstantiate(
            exec: *mut hipGraphExec_t,
            graph: hipGraph_t,
            error_node: *mut hipGraphNode_t,
            log_buffer: *mut c_char,
            buffer_size: usize,
        ) -> hipError_t;
        /// `hipError_t hipGraphLaunch(hipGraphExec_t, hipStream_t)`.
        fn hipGraphLaunch(exec: hipGraphExec_t, stream: hipStream_t) -> hipError_t;
        /// `hipError_t hipGraphDestroy(hipGraph_t)`.
        fn hipGraphDestroy(graph: hipGraph_t) -> hipError_t;
        /// `hipError_t hipGraphExecDestroy(hipGraphExec_t)`.
        fn hipGraphExecDestroy(exec: hipGraphExec_t) -> hipError_t;
    }
}

// SAFETY: the table holds plain function pointers into a library that is never unloaded, and
// the HIP runtime API is thread-safe.
unsafe impl Send for HipApi {}
// SAFETY: as above; the table is immutable after loading.
unsafe impl Sync for HipApi {}

impl fmt::Debug for HipApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipApi")
            .field("soname", &self.soname)
            .field("optional_symbols", &self.optional_symbols())
            .finish_non_exhaustive()
    }
}

impl HipApi {
    /// Opens the first of `sonames` that `dlopen` accepts and resolves the HIP symbols from it.
    ///
    /// The table is leaked on purpose: the library is never unloaded, so the function pointers
    /// are valid for the rest of the process. Call this once per library (see
    /// [`HipApi::load_default`], which caches).
    ///
    /// # Safety
    /// Opening a library runs its initialisers, and its symbols of HIP's names are then called
    /// with HIP's signatures: each of `sonames` that opens must be a HIP runtime (or nothing
    /// that breaks under those assumptions, such as a library without those names, which is
    /// skipped). The default names ([`HipApi::load_default`]) are the runtime's own.
    pub unsafe fn load(sonames: &[&str]) -> Result<&'static HipApi, LoadError> {
        // SAFETY: the caller's contract.
        unsafe { HipApi::load_without(sonames, &[]) }
    }

    /// Loads the runtime as [`HipApi::load`] does, with the optional symbols named in `absent`
    /// left unresolved (`None`), as on an older runtime that lacks them: for example
    /// `&["hipLaunchHostFunc"]` gives HIP 5.2's host functions (stream callbacks) on any
    /// runtime. Names that are not optional symbols are ignored.
    ///
    /// A library that opens but lacks a required symbol (an older or unrelated library under
    /// one of the names, for example a stale development link ahead of a newer runtime's
    /// versioned soname) does not end the search: the next name is tried. When none yields a
    /// table, the error is the first [`LoadError::MissingSymbol`] if any library opened (it
    /// says what to upgrade), else [`LoadError::NotFound`] naming every `dlopen` error.
    ///
    /// # Safety
    /// Opening a library runs its initialisers, and its symbols of HIP's names are then called
    /// with HIP's signatures: each of `sonames` that opens must be a HIP runtime (or nothing
    /// that breaks under those assumptions, such as a library without those names, which is
    /// skipped). The default names ([`HipApi::load_default`]) are the runtime's own.
    pub unsafe fn load_without(
        sonames: &[&str],
        absent: &[&str],
    ) -> Result<&'static HipApi, LoadError> {
        let mut tried = Vec::new();
        let mut incomplete = None;
        for &soname in sonames {
            // SAFETY: the caller's contract: a library that opens is a HIP runtime, whose
            // initialisers are sound to run at any time (they register the runtime, they do
            // not touch the GPU).
            match unsafe { Library::new(soname) } {
                Ok(library) => {
                    // SAFETY: the caller's contract: its symbols of the names declared above
                    // have those signatures; one lacking any required name is rejected before
                    // a pointer is used (and kept loaded: see below).
                    match unsafe { HipApi::resolve(library, soname, absent) } {
                        Ok(api) => return Ok(Box::leak(Box::new(api))),
                        Err(e) => {
                            incomplete.get_or_insert(e);
                        }
                    }
                }
                Err(e) => tried.push((soname.to_string(), e.to_string())),
            }
        }
        Err(incomplete.unwrap_or(LoadError::NotFound(tried)))
    }

    /// [`HipApi::load`] of [`DEFAULT_SONAMES`], once per process; later calls return the same
    /// result.
    pub fn load_default() -> Result<&'static HipApi, LoadError> {
        static DEFAULT: OnceLock<Result<&'static HipApi, LoadError>> = OnceLock::new();
        DEFAULT
            // SAFETY: the HIP runtime's own sonames.
            .get_or_init(|| unsafe { HipApi::load(DEFAULT_SONAMES) })
            .clone()
    }

    /// The soname that opened.
    pub fn soname(&self) -> &str {
        &self.soname
    }
}

#[cfg(test)]
mod tests;
