//! The operations a stream runs (and a graph holds), and what running each one does.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::CUresult;

use crate::model::contract::{fault, in_host_function, sticky, violation};
use crate::model::driver::HOST_FUNCS_RUN;
use crate::model::event::Event;
use crate::model::kernels::{self, Launch};
use crate::model::memory::{memory, Kind};

/// How long every kernel takes (`HALCYON_FAKE_GPU_KERNEL_US`, default 100 µs): long enough
/// that work is still in flight when the host goes on, as on a GPU, so that memory freed or
/// results read too early are caught rather than hidden by an instant device.
fn kernel_latency() -> Duration {
    static LATENCY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LATENCY.get_or_init(|| {
        let micros = std::env::var("HALCYON_FAKE_GPU_KERNEL_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        Duration::from_micros(micros)
    })
}
/// Where a copy reads.
#[derive(Clone)]
pub(crate) enum Source {
    /// Device-reachable memory, checked when the device gets to it.
    Checked(u64),
    /// Pageable host bytes, taken when the call was made.
    Bytes(Arc<Vec<u8>>),
}

/// One operation in a stream (or a graph).
#[derive(Clone)]
pub(crate) enum Op {
    /// Wait until `event`'s record `generation` completed.
    Wait { event: Arc<Event>, generation: u64 },
    /// Complete `event`'s record `generation`.
    Record { event: Arc<Event>, generation: u64 },
    /// Run a kernel.
    Kernel(Arc<Launch>),
    /// Copy `len` bytes; `dst_checked`: the destination is device-reachable memory (else the
    /// caller's pageable memory, which it keeps valid while it waits for the copy).
    Copy {
        dst: u64,
        dst_checked: bool,
        src: Source,
        len: usize,
        call: &'static str,
    },
    /// Copy `len` bytes from `src`, memory of device `src_device`, into `dst`, memory of
    /// device `dst_device` (a peer copy: `cuMemcpyPeerAsync`, `hipMemcpyPeerAsync`), each
    /// checked against its own device when the stream gets there.
    PeerCopy {
        dst: u64,
        dst_device: u32,
        src: u64,
        src_device: u32,
        len: usize,
        call: &'static str,
    },
    /// Fill `count` elements of `width` bytes with `value`.
    Memset {
        dst: u64,
        value: u32,
        width: usize,
        count: usize,
    },
    /// Write the 32-bit `value` at `dst` (a stream memory operation: `cuStreamWriteValue32`,
    /// `hipStreamWriteValue32`).
    WriteValue {
        dst: u64,
        value: u32,
        call: &'static str,
    },
    /// A host function.
    Host {
        func: unsafe extern "C" fn(*mut c_void),
        data: usize,
    },
    /// A HIP stream callback (`hipStreamAddCallback`): called with the stream, `hipSuccess`
    /// and its user data.
    Callback {
        func: unsafe extern "C" fn(*mut c_void, i32, *mut c_void),
        data: usize,
    },
    /// Free a stream-ordered allocation (`call` names the free).
    FreeAsync { ptr: u64, call: &'static str },
    /// An NCCL collective, send or receive of one rank (see [`crate::nccl`]).
    Nccl(Arc<crate::nccl::Task>),
}

/// An operation's device-side check failed (`why`): a contract violation, and the device
/// faults as a GPU does on an illegal address.
pub(crate) fn illegal_address(device: u32, stream: u64, what: &str, why: String) {
    let why = format!("{what} on stream {stream:#x}, when the device got to it: {why}");
    violation(why.clone());
    fault(device, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, &why);
}

impl Op {
    /// Runs the operation on `stream`, a stream of device `device`.
    pub(crate) fn run(&self, stream: u64, device: u32) {
        match self {
            Op::Wait { event, generation } => {
                let _ = event.wait(*generation);
            }
            Op::Record { event, generation } => event.complete(*generation),
            Op::Kernel(launch) => {
                std::thread::sleep(kernel_latency());
                if let Err((code, why, broken)) = kernels::run(launch, device) {
                    let why = format!("kernel {} on stream {stream:#x}: {why}", launch.name());
                    if broken {
                        violation(why.clone());
                    }
                    fault(device, code, &why);
                }
            }
            Op::Copy {
                dst,
                dst_checked,
                src,
                len,
                call,
            } => {
                let mut memory = memory();
                if sticky(device).is_some() {
                    return; // faulted meanwhile: the host may have freed what this uses
                }
                let mut checked = if *dst_checked {
                    memory.check_on(*dst, *len, device)
                } else {
                    Ok(())
                };
                if let (Ok(()), Source::Checked(src)) = (&checked, src) {
                    checked = memory.check_on(*src, *len, device);
                }
                if let Err(why) = checked {
                    drop(memory);
                    return illegal_address(device, stream, call, why);
                }
                let from = match src {
                    Source::Checked(src) => *src,
                    Source::Bytes(bytes) => bytes.as_ptr() as usize as u64,
                };
                // SAFETY: both ranges were checked against live allocations under this lock,
                // or are the call's own bytes, or caller memory it keeps valid while it waits.
                unsafe { memory.copy(*dst, from, *len) };
            }
            Op::PeerCopy {
                dst,
                dst_device,
                src,
                src_device,
                len,
                call,
            } => {
                let mut memory = memory();
                if sticky(device).is_some() {
                    return; // faulted meanwhile: the host may have freed what this uses
                }
                let checked = memory
                    .check_on(*dst, *len, *dst_device)
                    .and_then(|()| memory.check_on(*src, *len, *src_device));
                if let Err(why) = checked {
                    drop(memory);
                    return illegal_address(device, stream, call, why);
                }
                crate::model::peer::PEER_COPIES.fetch_add(1, Ordering::Relaxed);
                // SAFETY: both ranges were checked against live allocations under this lock.
                unsafe { memory.copy(*dst, *src, *len) };
            }
            Op::Memset {
                dst,
                value,
                width,
                count,
            } => {
                let mut memory = memory();
                if sticky(device).is_some() {
                    return;
                }
                let len = width * count;
                if let Err(why) = memory.check_on(*dst, len, device) {
                    drop(memory);
                    return illegal_address(device, stream, "a memset", why);
                }
                memory.fill(*dst, *value, *width, *count);
            }
            Op::WriteValue { dst, value, call } => {
                let mut memory = memory();
                if sticky(device).is_some() {
                    return; // a faulted device writes nothing more
                }
                if let Err(why) = memory.check_on(*dst, 4, device) {
                    drop(memory);
                    return illegal_address(device, stream, call, why);
                }
                memory.write_word(*dst, *value);
            }
            Op::Host { func, data } => {
                HOST_FUNCS_RUN.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the function and its user data were passed to cuLaunchHostFunc, whose
                // caller promised it may be called with them once the stream gets here.
                in_host_function(|| unsafe { func(*data as *mut c_void) });
            }
            Op::Callback { func, data } => {
                HOST_FUNCS_RUN.fetch_add(1, Ordering::Relaxed);
                // SAFETY: as for `Op::Host`, with hipStreamAddCallback's arguments.
                in_host_function(|| unsafe {
                    func(stream as usize as *mut c_void, 0, *data as *mut c_void)
                });
            }
            Op::FreeAsync { ptr, call } => {
                let mut memory = memory();
                if sticky(device).is_none()
                    && memory
                        .free(*ptr, |k| matches!(k, Kind::Pool(_)), call)
                        .is_err()
                {
                    drop(memory);
                    violation(format!(
                        "{call}({ptr:#x}) on stream {stream:#x}: when the stream got \
                         there, {ptr:#x} was no stream-ordered allocation"
                    ));
                }
            }
            Op::Nccl(task) => task.run(stream),
        }
    }
}
