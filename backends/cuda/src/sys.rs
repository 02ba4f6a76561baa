//! The driver calls halcyon-cuda makes, returning the driver's result as a plain number
//! ([`Code`]) instead of cudarc's `CUresult` enum.
//!
//! **Why not call `cudarc::driver::sys` directly.** cudarc declares `CUresult` as a Rust enum
//! holding exactly the codes of the CUDA version its bindings were generated from (CUDA 12.8
//! here). A newer driver returns codes those bindings lack (CUDA 13.0 added
//! `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36`, later drivers more), and a Rust enum holding a
//! value outside its variants is undefined behaviour the moment it exists, before any code
//! could look at it. cudarc also panics when a symbol is missing from the library, and its
//! loader may open another libcuda than the one the probe checked. So each function here
//! resolves the symbol from the library [`crate::probe::probe`] opened, initialised and
//! checked, declared with the same parameters as cudarc's declaration but an unsigned integer
//! result:
//!
//! * the parameter types are checked at compile time against cudarc's declaration of the same
//!   function (generated from CUDA's `cuda.h`), so this table cannot drift from the C API;
//! * the result becomes a [`Code`], which is compared with cudarc's named constants
//!   ([`Code::is`], `==`) and turned into a `CUresult` only when it is one
//!   ([`Code::known`]);
//! * a symbol the driver does not export returns [`Code::MISSING_SYMBOL`] instead of
//!   panicking, so the call fails with a `halcyon::Error` naming it; so does every call made
//!   before a successful probe.
//!
//! Each function's symbol is resolved once, on its first call after the probe. Callers keep
//! the CUDA contract of each call (valid handles, pointers, a current context); every `unsafe`
//! call site states how it does.

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void};
use std::fmt;
use std::sync::OnceLock;

use cudarc::driver::sys::{
    self, CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUevent, CUfunction,
    CUfunction_attribute, CUgraph, CUgraphExec, CUgraphNode, CUgraphNodeType, CUhostFn,
    CUjit_option, CUmemPoolProps, CUmemPool_attribute, CUmemoryPool, CUmodule, CUpointer_attribute,
    CUresult, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus, CUDA_KERNEL_NODE_PARAMS,
};

/// A CUDA driver call's result: the `CUresult` number as the driver returned it, which may be
/// a code newer than cudarc's bindings (see the [module docs](self)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Code(u32);

impl Code {
    /// `CUDA_SUCCESS`.
    pub const SUCCESS: Code = Code::of(CUresult::CUDA_SUCCESS);
    /// `CUDA_ERROR_NOT_READY`: an event or stream query found work still pending.
    pub const NOT_READY: Code = Code::of(CUresult::CUDA_ERROR_NOT_READY);
    /// `CUDA_ERROR_INVALID_VALUE`.
    pub const INVALID_VALUE: Code = Code::of(CUresult::CUDA_ERROR_INVALID_VALUE);
    /// Not a CUDA code: the function called could not be resolved, because the driver does
    /// not export it (an older driver than the call needs) or no libcuda opened at all.
    /// CUDA's codes stay below 1000.
    pub const MISSING_SYMBOL: Code = Code(u32::MAX);

    /// The code of a `CUresult` the bindings name.
    pub const fn of(result: CUresult) -> Code {
        Code(result as u32)
    }

    /// A code as a number, for example one read from a status word or a log.
    pub const fn from_number(number: u32) -> Code {
        Code(number)
    }

    /// The number, as the driver returned it.
    pub const fn number(self) -> u32 {
        self.0
    }

    /// Whether this is `CUDA_SUCCESS`.
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }

    /// Whether this is `result`.
    pub const fn is(self, result: CUresult) -> bool {
        self.0 == result as u32
    }

    /// The `CUresult` with this number, if cudarc's bindings have one; `None` for a code
    /// from a newer driver and for [`Code::MISSING_SYMBOL`].
    pub fn known(self) -> Option<CUresult> {
        KNOWN.iter().copied().find(|&r| self.is(r))
    }
}

impl From<CUresult> for Code {
    fn from(result: CUresult) -> Code {
        Code::of(result)
    }
}

impl PartialEq<CUresult> for Code {
    fn eq(&self, other: &CUresult) -> bool {
        self.is(*other)
    }
}

impl fmt::Debug for Code {
    /// The C name where the bindings have one (`CUDA_ERROR_OUT_OF_MEMORY`), else the number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.known() {
            Some(r) => write!(f, "{r:?}"),
            None if *self == Code::MISSING_SYMBOL => f.write_str("MISSING_SYMBOL"),
            None => write!(f, "CUresult({})", self.0),
        }
    }
}

/// Every `CUresult` of cudarc's bindings, the only values [`Code::known`] ever turns into the
/// enum. A name missing from the bindings fails to compile; one missing here reads as a code
/// from a newer driver.
const KNOWN: &[CUresult] = {
    use CUresult::*;
    &[
        CUDA_SUCCESS,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_DEINITIALIZED,
        CUDA_ERROR_PROFILER_DISABLED,
        CUDA_ERROR_PROFILER_NOT_INITIALIZED,
        CUDA_ERROR_PROFILER_ALREADY_STARTED,
        CUDA_ERROR_PROFILER_ALREADY_STOPPED,
        CUDA_ERROR_STUB_LIBRARY,
        CUDA_ERROR_DEVICE_UNAVAILABLE,
        CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_DEVICE_NOT_LICENSED,
        CUDA_ERROR_INVALID_IMAGE,
        CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_CONTEXT_ALREADY_CURRENT,
        CUDA_ERROR_MAP_FAILED,
        CUDA_ERROR_UNMAP_FAILED,
        CUDA_ERROR_ARRAY_IS_MAPPED,
        CUDA_ERROR_ALREADY_MAPPED,
        CUDA_ERROR_NO_BINARY_FOR_GPU,
        CUDA_ERROR_ALREADY_ACQUIRED,
        CUDA_ERROR_NOT_MAPPED,
        CUDA_ERROR_NOT_MAPPED_AS_ARRAY,
        CUDA_ERROR_NOT_MAPPED_AS_POINTER,
        CUDA_ERROR_ECC_UNCORRECTABLE,
        CUDA_ERROR_UNSUPPORTED_LIMIT,
        CUDA_ERROR_CONTEXT_ALREADY_IN_USE,
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        CUDA_ERROR_INVALID_PTX,
        CUDA_ERROR_INVALID_GRAPHICS_CONTEXT,
        CUDA_ERROR_NVLINK_UNCORRECTABLE,
        CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        CUDA_ERROR_JIT_COMPILATION_DISABLED,
        CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
        CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
        CUDA_ERROR_CONTAINED,
        CUDA_ERROR_INVALID_SOURCE,
        CUDA_ERROR_FILE_NOT_FOUND,
        CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND,
        CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,
        CUDA_ERROR_OPERATING_SYSTEM,
        CUDA_ERROR_INVALID_HANDLE,
        CUDA_ERROR_ILLEGAL_STATE,
        CUDA_ERROR_LOSSY_QUERY,
        CUDA_ERROR_NOT_FOUND,
        CUDA_ERROR_NOT_READY,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        CUDA_ERROR_LAUNCH_TIMEOUT,
        CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING,
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
        CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
        CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
        CUDA_ERROR_CONTEXT_IS_DESTROYED,
        CUDA_ERROR_ASSERT,
        CUDA_ERROR_TOO_MANY_PEERS,
        CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUDA_ERROR_MISALIGNED_ADDRESS,
        CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUDA_ERROR_INVALID_PC,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        CUDA_ERROR_TENSOR_MEMORY_LEAK,
        CUDA_ERROR_NOT_PERMITTED,
        CUDA_ERROR_NOT_SUPPORTED,
        CUDA_ERROR_SYSTEM_NOT_READY,
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        CUDA_ERROR_MPS_CONNECTION_FAILED,
        CUDA_ERROR_MPS_RPC_FAILURE,
        CUDA_ERROR_MPS_SERVER_NOT_READY,
        CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,
        CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,
        CUDA_ERROR_MPS_CLIENT_TERMINATED,
        CUDA_ERROR_CDP_NOT_SUPPORTED,
        CUDA_ERROR_CDP_VERSION_MISMATCH,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        CUDA_ERROR_STREAM_CAPTURE_MERGE,
        CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
        CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
        CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        CUDA_ERROR_CAPTURED_EVENT,
        CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
        CUDA_ERROR_TIMEOUT,
        CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
        CUDA_ERROR_EXTERNAL_DEVICE,
        CUDA_ERROR_INVALID_CLUSTER_SIZE,
        CUDA_ERROR_FUNCTION_NOT_LOADED,
        CUDA_ERROR_INVALID_RESOURCE_TYPE,
        CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
        CUDA_ERROR_KEY_ROTATION,
        CUDA_ERROR_UNKNOWN,
    ]
};

/// Resolves `name` (NUL-terminated) in the library the probe opened, as a function of type
/// `F`: `None` before a successful probe (nothing to resolve from yet), `Some(None)` for a
/// symbol the library lacks.
///
/// # Safety
///
/// `F` must be the function's C signature.
unsafe fn resolve<F: Copy>(name: &'static str) -> Option<Option<F>> {
    let library = crate::probe::library()?;
    // SAFETY: the caller's contract; the library stays loaded for the process (it lives in a
    // static), so the pointer stays valid.
    Some(unsafe { library.get::<F>(name.as_bytes()).ok().map(|s| *s) })
}

/// Whether the library the probe opened exports `name` (NUL-terminated): for optional calls
/// whose absence turns a capability off instead of failing later.
pub fn exports(name: &'static str) -> bool {
    // SAFETY: the symbol is looked up as an untyped function pointer and never called.
    let found = unsafe { resolve::<unsafe extern "C" fn()>(name) };
    matches!(found, Some(Some(_)))
}

/// Declares each driver function with cudarc's parameter types and a [`Code`] result.
macro_rules! driver_calls {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?); )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// The CUDA driver API's contract for this call, and a successful
        /// [`crate::probe::probe`] before it.
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub unsafe fn $name($($arg: $ty),*) -> Code {
            // The same parameters as cudarc's declaration, which is generated from cuda.h.
            const _: unsafe fn($($ty),*) -> CUresult = sys::$name;
            type F = unsafe extern "C" fn($($ty),*) -> u32;
            static FUNCTION: OnceLock<Option<F>> = OnceLock::new();
            let function = match FUNCTION.get() {
                Some(function) => *function,
                // SAFETY: `F` is cudarc's C signature with the enum result read as its
                // `repr(u32)` number, which has the same ABI.
                None => match unsafe { resolve::<F>(concat!(stringify!($name), "\0")) } {
                    // Cached only once there is a library to resolve from.
                    Some(resolved) => *FUNCTION.get_or_init(|| resolved),
                    None => None,
                },
            };
            match function {
                // SAFETY: the caller upholds the call's contract.
                Some(f) => Code(unsafe { f($($arg),*) }),
                None => Code::MISSING_SYMBOL,
            }
        }
    )*};
}

driver_calls! {
    /// `cuInit`.
    fn cuInit(flags: c_uint);
    /// `cuDeviceGetCount`.
    fn cuDeviceGetCount(count: *mut c_int);
    /// `cuDeviceGet`.
    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int);
    /// `cuDeviceGetAttribute`.
    fn cuDeviceGetAttribute(value: *mut c_int, attribute: CUdevice_attribute, device: CUdevice);
    /// `cuDeviceGetName`.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice);
    /// `cuDeviceTotalMem` (`_v2`).
    fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice);
    /// `cuDevicePrimaryCtxRetain`.
    fn cuDevicePrimaryCtxRetain(context: *mut CUcontext, device: CUdevice);
    /// `cuDevicePrimaryCtxRelease` (`_v2`).
    fn cuDevicePrimaryCtxRelease_v2(device: CUdevice);
    /// `cuDevicePrimaryCtxGetState`.
    fn cuDevicePrimaryCtxGetState(device: CUdevice, flags: *mut c_uint, active: *mut c_int);
    /// `cuDeviceCanAccessPeer`.
    fn cuDeviceCanAccessPeer(can_access: *mut c_int, device: CUdevice, peer: CUdevice);
    /// `cuCtxEnablePeerAccess`.
    fn cuCtxEnablePeerAccess(peer: CUcontext, flags: c_uint);
    /// `cuCtxSetCurrent`.
    fn cuCtxSetCurrent(context: CUcontext);
    /// `cuCtxGetCurrent`.
    fn cuCtxGetCurrent(context: *mut CUcontext);
    /// `cuStreamCreate`.
    fn cuStreamCreate(stream: *mut CUstream, flags: c_uint);
    /// `cuStreamDestroy` (`_v2`).
    fn cuStreamDestroy_v2(stream: CUstream);
    /// `cuStreamSynchronize`.
    fn cuStreamSynchronize(stream: CUstream);
    /// `cuStreamWaitEvent`.
    fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint);
    /// `cuStreamBeginCapture` (`_v2`).
    fn cuStreamBeginCapture_v2(stream: CUstream, mode: CUstreamCaptureMode);
    /// `cuStreamEndCapture`.
    fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph);
    /// `cuStreamIsCapturing`.
    fn cuStreamIsCapturing(stream: CUstream, status: *mut CUstreamCaptureStatus);
    /// `cuEventCreate`.
    fn cuEventCreate(event: *mut CUevent, flags: c_uint);
    /// `cuEventDestroy` (`_v2`).
    fn cuEventDestroy_v2(event: CUevent);
    /// `cuEventRecord`.
    fn cuEventRecord(event: CUevent, stream: CUstream);
    /// `cuEventQuery`: [`Code::NOT_READY`] while work before the event is pending.
    fn cuEventQuery(event: CUevent);
    /// `cuEventSynchronize`.
    fn cuEventSynchronize(event: CUevent);
    /// `cuEventElapsedTime`: the unversioned symbol, which every driver exports (CUDA 13's
    /// header maps the name to `cuEventElapsedTime_v2`, added in 12.8, and cudarc declares the
    /// old one only up to 12.9; drivers keep it for binaries built against older toolkits).
    fn cuEventElapsedTime(milliseconds: *mut f32, start: CUevent, end: CUevent);
    /// `cuLaunchHostFunc`.
    fn cuLaunchHostFunc(stream: CUstream, function: CUhostFn, user_data: *mut c_void);
    /// `cuMemAlloc` (`_v2`).
    fn cuMemAlloc_v2(pointer: *mut CUdeviceptr, bytes: usize);
    /// `cuMemAllocManaged`.
    fn cuMemAllocManaged(pointer: *mut CUdeviceptr, bytes: usize, flags: c_uint);
    /// `cuMemAllocHost` (`_v2`).
    fn cuMemAllocHost_v2(pointer: *mut *mut c_void, bytes: usize);
    /// `cuMemHostAlloc`.
    fn cuMemHostAlloc(pointer: *mut *mut c_void, bytes: usize, flags: c_uint);
    /// `cuMemHostGetDevicePointer` (`_v2`).
    fn cuMemHostGetDevicePointer_v2(device: *mut CUdeviceptr, host: *mut c_void, flags: c_uint);
    /// `cuMemFree` (`_v2`).
    fn cuMemFree_v2(pointer: CUdeviceptr);
    /// `cuMemFreeHost`.
    fn cuMemFreeHost(pointer: *mut c_void);
    /// `cuPointerGetAttribute`.
    fn cuPointerGetAttribute(data: *mut c_void, attribute: CUpointer_attribute, pointer: CUdeviceptr);
    /// `cuMemPoolCreate`.
    fn cuMemPoolCreate(pool: *mut CUmemoryPool, properties: *const CUmemPoolProps);
    /// `cuMemPoolDestroy`.
    fn cuMemPoolDestroy(pool: CUmemoryPool);
    /// `cuMemPoolSetAttribute`.
    fn cuMemPoolSetAttribute(pool: CUmemoryPool, attribute: CUmemPool_attribute, value: *mut c_void);
    /// `cuMemPoolTrimTo`.
    fn cuMemPoolTrimTo(pool: CUmemoryPool, keep_bytes: usize);
    /// `cuMemAllocAsync`.
    fn cuMemAllocAsync(pointer: *mut CUdeviceptr, bytes: usize, stream: CUstream);
    /// `cuMemAllocFromPoolAsync`.
    fn cuMemAllocFromPoolAsync(pointer: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream);
    /// `cuMemFreeAsync`.
    fn cuMemFreeAsync(pointer: CUdeviceptr, stream: CUstream);
    /// `cuMemcpyDtoH` (`_v2`): synchronous, for benchmarks' raw baselines.
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize);
    /// `cuMemcpyHtoD` (`_v2`): synchronous, for benchmarks' raw baselines.
    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize);
    /// `cuMemsetD8` (`_v2`): synchronous, for benchmarks' raw baselines.
    fn cuMemsetD8_v2(dst: CUdeviceptr, value: c_uchar, count: usize);
    /// `cuMemcpyHtoDAsync` (`_v2`).
    fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream);
    /// `cuMemcpyDtoHAsync` (`_v2`).
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream);
    /// `cuMemcpyDtoDAsync` (`_v2`).
    fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream);
    /// `cuMemcpyAsync` (unified addressing: any two addresses the current context reaches).
    fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream);
    /// `cuMemcpyPeerAsync`.
    fn cuMemcpyPeerAsync(
        dst: CUdeviceptr,
        dst_context: CUcontext,
        src: CUdeviceptr,
        src_context: CUcontext,
        bytes: usize,
        stream: CUstream,
    );
    /// `cuMemsetD8Async`.
    fn cuMemsetD8Async(dst: CUdeviceptr, value: c_uchar, count: usize, stream: CUstream);
    /// `cuMemsetD16Async`.
    fn cuMemsetD16Async(dst: CUdeviceptr, value: c_ushort, count: usize, stream: CUstream);
    /// `cuMemsetD32Async`.
    fn cuMemsetD32Async(dst: CUdeviceptr, value: c_uint, count: usize, stream: CUstream);
    /// `cuStreamWriteValue32` (`_v2`, the stream memory operations available by default since
    /// CUDA 11.7).
    fn cuStreamWriteValue32_v2(stream: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint);
    /// `cuModuleLoadData`.
    fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void);
    /// `cuModuleLoadDataEx`.
    fn cuModuleLoadDataEx(
        module: *mut CUmodule,
        image: *const c_void,
        option_count: c_uint,
        options: *mut CUjit_option,
        option_values: *mut *mut c_void,
    );
    /// `cuModuleUnload`.
    fn cuModuleUnload(module: CUmodule);
    /// `cuModuleGetFunction`.
    fn cuModuleGetFunction(function: *mut CUfunction, module: CUmodule, name: *const c_char);
    /// `cuFuncGetAttribute`.
    fn cuFuncGetAttribute(value: *mut c_int, attribute: CUfunction_attribute, function: CUfunction);
    /// `cuFuncSetAttribute`.
    fn cuFuncSetAttribute(function: CUfunction, attribute: CUfunction_attribute, value: c_int);
    /// `cuFuncGetParamInfo` (CUDA 12.4).
    fn cuFuncGetParamInfo(function: CUfunction, index: usize, offset: *mut usize, size: *mut usize);
    /// `cuLaunchKernel`.
    fn cuLaunchKernel(
        function: CUfunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_bytes: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
    /// `cuGraphInstantiateWithFlags`.
    fn cuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: CUgraph, flags: c_ulonglong);
    /// `cuGraphDestroy`.
    fn cuGraphDestroy(graph: CUgraph);
    /// `cuGraphLaunch`.
    fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream);
    /// `cuGraphExecDestroy`.
    fn cuGraphExecDestroy(exec: CUgraphExec);
    /// `cuGraphGetRootNodes`.
    fn cuGraphGetRootNodes(graph: CUgraph, nodes: *mut CUgraphNode, count: *mut usize);
    /// `cuGraphNodeGetDependentNodes`.
    fn cuGraphNodeGetDependentNodes(node: CUgraphNode, nodes: *mut CUgraphNode, count: *mut usize);
    /// `cuGraphNodeGetType`.
    fn cuGraphNodeGetType(node: CUgraphNode, kind: *mut CUgraphNodeType);
    /// `cuGraphKernelNodeGetParams` (`_v2`, CUDA 12.0).
    fn cuGraphKernelNodeGetParams_v2(node: CUgraphNode, params: *mut CUDA_KERNEL_NODE_PARAMS);
    /// `cuGraphExecKernelNodeSetParams` (`_v2`, CUDA 12.0).
    fn cuGraphExecKernelNodeSetParams_v2(
        exec: CUgraphExec,
        node: CUgraphNode,
        params: *const CUDA_KERNEL_NODE_PARAMS,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_compare_with_the_bindings_names() {
        assert!(Code::SUCCESS.is_success());
        assert_eq!(Code::NOT_READY, CUresult::CUDA_ERROR_NOT_READY);
        assert_eq!(Code::NOT_READY.number(), 600);
        assert_eq!(
            Code::from_number(2).known(),
            Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        );
        assert_eq!(
            format!("{:?}", Code::from_number(2)),
            "CUDA_ERROR_OUT_OF_MEMORY"
        );
    }

    #[test]
    fn codes_the_bindings_lack_stay_numbers() {
        // CUDA 13.0's CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER is not in CUDA 12.8's enum.
        let newer = Code::from_number(36);
        assert_eq!(newer.known(), None);
        assert_eq!(format!("{newer:?}"), "CUresult(36)");
        assert_eq!(Code::MISSING_SYMBOL.known(), None);
        assert_eq!(format!("{:?}", Code::MISSING_SYMBOL), "MISSING_SYMBOL");
    }

    #[test]
    fn every_known_code_is_listed_once() {
        let mut numbers: Vec<u32> = KNOWN.iter().map(|&r| r as u32).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), KNOWN.len());
        assert!(numbers.iter().all(|&n| n < 1000));
    }

    #[test]
    fn calls_before_a_successful_probe_fail_instead_of_panicking() {
        // SAFETY: cuInit(0) is valid at any time; before a probe nothing is called.
        let r = unsafe { cuInit(0) };
        if crate::probe::library().is_none() {
            assert_eq!(r, Code::MISSING_SYMBOL);
        }
        if crate::probe::probe().is_ok() {
            // SAFETY: as above, now through the probed library.
            let r = unsafe { cuInit(0) };
            assert!(r.is_success(), "every libcuda exports cuInit: {r:?}");
        }
    }
}
