//! The caller's side of the contract: violations, and the checks every call starts with.

use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use cudarc::driver::sys::CUresult;

use crate::model::driver::{context_device, driver, MAX_DEVICES};

/// What a call returns to its export: `Err` is the `CUresult` to return.
pub(crate) type Ret = Result<(), CUresult>;

/// Violations so far.
static VIOLATIONS: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Record violations without aborting.
static RECORD_ONLY: AtomicBool = AtomicBool::new(false);
/// Each device's sticky error (its primary context's).
static STICKY: Mutex<[Option<CUresult>; MAX_DEVICES]> = Mutex::new([None; MAX_DEVICES]);

thread_local! {
    /// The context current on this thread (`cuCtxSetCurrent`), as its handle value.
    static CURRENT: Cell<usize> = const { Cell::new(0) };
    /// Set while this thread runs a host function.
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
    /// The device this thread made current with `hipSetDevice` (HIP's current device is per
    /// thread).
    static HIP_DEVICE: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Locks `mutex`, ignoring poisoning (a panic inside the fake aborts anyway).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reports a broken rule of the driver API: printed, recorded, and (unless record-only) the
/// process aborts with a backtrace.
pub(crate) fn violation(message: String) {
    let mut err = std::io::stderr().lock();
    let record_only = RECORD_ONLY.load(Ordering::Relaxed)
        || std::env::var_os("HALCYON_FAKE_GPU_RECORD_ONLY").is_some();
    let how = if record_only { " (recorded)" } else { "" };
    let _ = writeln!(err, "halcyon-fake-gpu: contract violation{how}: {message}");
    lock(&VIOLATIONS).push(message);
    if record_only {
        return;
    }
    let _ = writeln!(
        err,
        "{}\nhalcyon-fake-gpu: aborting (set HALCYON_FAKE_GPU_RECORD_ONLY=1 to only record)",
        std::backtrace::Backtrace::force_capture()
    );
    drop(err);
    std::process::abort();
}

/// Makes violations recorded only (`true`) or fatal (`false`).
pub(crate) fn set_record_only(record_only: bool) {
    RECORD_ONLY.store(record_only, Ordering::Relaxed);
}

/// Every violation so far, one per line.
pub(crate) fn violations() -> Vec<String> {
    lock(&VIOLATIONS).clone()
}

/// Device `device`'s sticky error, if it faulted.
pub(crate) fn sticky(device: u32) -> Option<CUresult> {
    lock(&STICKY)[device as usize]
}

/// Faults device `device` with `code` (its first fault wins) and says why on stderr.
pub(crate) fn fault(device: u32, code: CUresult, why: &str) {
    let mut sticky = lock(&STICKY);
    if sticky[device as usize].is_none() {
        sticky[device as usize] = Some(code);
        let _ = writeln!(
            std::io::stderr(),
            "halcyon-fake-gpu: device {device} fault {code:?}: {why}"
        );
    }
}

/// Clears device `device`'s sticky error (its context was destroyed).
pub(crate) fn clear_fault(device: u32) {
    lock(&STICKY)[device as usize] = None;
}

/// Sets the calling thread's current context.
pub(crate) fn set_current(context: usize) {
    CURRENT.with(|c| c.set(context));
}

/// The calling thread's current context (0: none).
pub(crate) fn current_context() -> usize {
    CURRENT.with(Cell::get)
}

/// The device current on the calling thread: the device of its current CUDA context, or the
/// device it made current with `hipSetDevice` (device 0 if neither, as in HIP; CUDA calls
/// that need one are refused by [`enter`] first).
pub(crate) fn current_device() -> u32 {
    HIP_DEVICE
        .with(Cell::get)
        .or_else(|| context_device(CURRENT.with(Cell::get)))
        .unwrap_or(0)
}

/// Runs `f` as a host function on this thread: every driver call inside it is a violation.
pub(crate) fn in_host_function(f: impl FnOnce()) {
    IN_HOST_FUNCTION.with(|h| h.set(true));
    f();
    IN_HOST_FUNCTION.with(|h| h.set(false));
}

/// What a call needs before it may run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Nothing (`cuDriverGetVersion`, `cuGetErrorName`, `cuInit`).
    Nothing,
    /// `cuInit` (device queries, the primary context calls).
    Init,
    /// The primary context current on the thread; fails with the sticky error after a fault.
    Context,
    /// The primary context current on the thread; works after a fault too (destroying and
    /// freeing things).
    ContextEvenFaulted,
}

/// The checks every call starts with.
pub(crate) fn enter(call: &str, needs: Needs) -> Ret {
    if IN_HOST_FUNCTION.with(Cell::get) {
        violation(format!(
            "{call} called from inside a host function (CUDA forbids any driver call there)"
        ));
        return Err(CUresult::CUDA_ERROR_NOT_PERMITTED);
    }
    if needs == Needs::Nothing {
        return Ok(());
    }
    let current = CURRENT.with(Cell::get);
    let device = context_device(current);
    let (initialized, retains) = {
        let d = driver();
        (
            d.initialized,
            device.map_or(0, |dev| d.retains[dev as usize]),
        )
    };
    if !initialized {
        violation(format!("{call} called before cuInit"));
        return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
    }
    if needs == Needs::Init {
        return Ok(());
    }
    let Some(device) = device.filter(|_| retains > 0) else {
        violation(format!(
            "{call} on thread {:?} without a usable current context (current: {current:#x}, \
             primary context references: {retains})",
            std::thread::current().name().unwrap_or("<unnamed>")
        ));
        return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
    };
    if needs == Needs::Context {
        if let Some(code) = sticky(device) {
            return Err(code);
        }
    }
    Ok(())
}

/// Records that this thread made HIP device `device` current.
/// The device `hipSetDevice` chose on this thread, if it did (RCCL's current device).
pub(crate) fn hip_device() -> Option<u32> {
    HIP_DEVICE.with(Cell::get)
}

pub(crate) fn set_hip_device(device: u32) {
    HIP_DEVICE.with(|d| d.set(Some(device)));
}

/// What a HIP call needs before it may run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum HipNeeds {
    /// Nothing but not being called from a host function (HIP initialises itself lazily, and
    /// most calls act on the object they are given, whatever device is current).
    Nothing,
    /// `hipSetDevice` called on this thread first: the call creates something on the current
    /// device (a stream, an event, memory, a module), which is device 0 on a thread that never
    /// chose one, silently the wrong device with more than one GPU.
    Device,
}

/// The checks every HIP call starts with. HIP has no sticky errors to report (on ROCm a device
/// fault aborts the process), so unlike [`enter`] this never fails a call for an earlier
/// fault; work after a fault is still dropped, and waits report it.
pub(crate) fn enter_hip(call: &str, needs: HipNeeds) -> Ret {
    if IN_HOST_FUNCTION.with(Cell::get) {
        violation(format!(
            "{call} called from inside a stream callback or host function (HIP forbids any \
             runtime call there)"
        ));
        return Err(CUresult::CUDA_ERROR_NOT_PERMITTED);
    }
    if needs == HipNeeds::Device && HIP_DEVICE.with(Cell::get).is_none() {
        violation(format!(
            "{call} on thread {:?}, which never called hipSetDevice (HIP keeps the current \
             device per thread: with more than one GPU this would act on device 0)",
            std::thread::current().name().unwrap_or("<unnamed>")
        ));
    }
    Ok(())
}

/// Checks that `what` (a handle of device `device` that a CUDA call enqueues work on) belongs
/// to the context current on the calling thread: CUDA runs the work in the current context,
/// so a stream of another device's context is a violation and `CUDA_ERROR_INVALID_CONTEXT`.
pub(crate) fn check_current(call: &str, device: u32, what: &str) -> Ret {
    let current = context_device(CURRENT.with(Cell::get));
    if current == Some(device) {
        return Ok(());
    }
    violation(format!(
        "{call} on {what} of device {device} while the current context is {} (on thread \
         {:?}): make the device's context current first",
        current.map_or("none".to_string(), |d| format!("device {d}'s")),
        std::thread::current().name().unwrap_or("<unnamed>")
    ));
    Err(CUresult::CUDA_ERROR_INVALID_CONTEXT)
}

/// Checks that two handles a call combines, `first` and `other` (each what it is and its
/// device), belong to one device: a violation and `CUDA_ERROR_INVALID_HANDLE` otherwise
/// (`hipErrorInvalidHandle` in HIP).
pub(crate) fn check_same_device(call: &str, first: (&str, u32), other: (&str, u32)) -> Ret {
    if first.1 == other.1 {
        return Ok(());
    }
    violation(format!(
        "{call} combines {} of device {} with {} of device {}",
        first.0, first.1, other.0, other.1
    ));
    Err(CUresult::CUDA_ERROR_INVALID_HANDLE)
}
