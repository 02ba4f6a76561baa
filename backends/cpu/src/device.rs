//! The CPU device: the translation table from the core's device SPI to host execution.
//!
//! | core                         | CPU device                                               |
//! |------------------------------|----------------------------------------------------------|
//! | queue                        | a core [`ActionQueue`] on the device's reactor           |
//! | waits not yet reached        | pending actions on the reactor (workers never wait)       |
//! | command list                 | a [`crate::executor`] walk; dispatches tiled on the pool  |
//! | semaphore                    | host [`halcyon::Semaphore`]                              |
//! | buffer memory                | zeroed, 64-byte aligned heap memory                      |
//! | executables                  | Rust kernels, or C-ABI shared libraries                  |

use std::sync::Arc;
use std::time::Duration;

use halcyon::backend::reactor::Reactor;
use halcyon::backend::ActionQueue;
use halcyon::backend::{BufferMemory, DeviceBackend, ExecutableBackend, Work};
use halcyon::device::keys;
use halcyon::{
    BufferParams, DeviceFeatures, DeviceInfo, Error, ExecutableSource, ExecutableSpec, Fence,
    Result, StatusCode,
};

use crate::executor::Inflight;
use crate::executor::Workers;
use crate::memory::{HostMemory, ALIGNMENT};
use crate::pool::Pool;
use crate::{c_abi, executor, rust_kernel, CpuDeviceOptions, ExecutionMode};

pub(crate) struct CpuDevice {
    /// The reactor and a pool handle, handed to `inflight` on drop (see [`Inflight`]).
    teardown: Option<Teardown>,
    inflight: Arc<Inflight>,
    info: DeviceInfo,
    queues: Vec<ActionQueue>,
    pool: Option<Arc<Workers>>,
    concurrency: usize,
}

/// What the device leaves to its last issued work to drop, in field order: the reactor first
/// (its shutdown fails the actions still pending, dropping the work and pool handles they
/// hold), then a pool handle, so the pool is never dropped (and its workers joined) from the
/// reactor thread while a worker waits for that thread to end.
struct Teardown {
    _reactor: Reactor,
    _pool: Option<Arc<Workers>>,
}

impl Drop for CpuDevice {
    fn drop(&mut self) {
        if let Some(teardown) = self.teardown.take() {
            self.inflight.retire(Box::new(teardown));
        }
    }
}

impl CpuDevice {
    pub(crate) fn new(index: u32, options: &CpuDeviceOptions) -> Result<CpuDevice> {
        let reactor = Reactor::new(format!("cpu{index}"))?;
        let queue_count = options.queue_count.max(1);
        let queues = (0..queue_count)
            .map(|_| ActionQueue::new(reactor.handle()))
            .collect();
        let (pool, concurrency) = match options.mode {
            ExecutionMode::Inline => (None, 1),
            ExecutionMode::Pool { workers } => {
                let workers = if workers == 0 {
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                } else {
                    workers
                };
                (
                    Some(Arc::new(Workers::new(Pool::new(
                        workers,
                        &format!("cpu{index}"),
                        options.worker_spin,
                    )?))),
                    workers,
                )
            }
        };
        let mode = match options.mode {
            ExecutionMode::Inline => "inline".to_string(),
            ExecutionMode::Pool { .. } => format!("{concurrency} workers"),
        };
        Ok(CpuDevice {
            teardown: Some(Teardown {
                _reactor: reactor,
                _pool: pool.clone(),
            }),
            inflight: Arc::default(),
            info: DeviceInfo::new(
                format!("cpu://{index}"),
                format!("host CPU ({mode})"),
                crate::DRIVER_ID,
            )
            .with_features(DeviceFeatures::PROFILING),
            queues,
            pool,
            concurrency,
        })
    }
}

/// The machine's physical memory, from `/proc/meminfo` (`MemTotal`, in KiB); `None` where
/// there is no such file.
fn physical_memory_bytes() -> Option<i64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

impl DeviceBackend for CpuDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Strided views are gathered by the device's workers (`Command::Gather`).
    fn gathers(&self) -> bool {
        true
    }

    /// The provider's engine over host memory (MPI's): the CPU device's buffers are host
    /// memory.
    fn create_channel(
        &self,
        provider: &dyn halcyon::ChannelProvider,
        params: &halcyon::ChannelParams,
    ) -> Result<Box<dyn halcyon::backend::ChannelBackend>> {
        provider.host_channel(params)
    }

    fn query(&self, key: &str) -> Option<i64> {
        match key {
            keys::names::CONCURRENCY => Some(self.concurrency as i64),
            keys::names::BINDING_ALIGNMENT => Some(1),
            keys::names::MEMORY_BYTES => physical_memory_bytes(),
            keys::names::PENDING_ACTIONS => {
                Some(self.queues.iter().map(ActionQueue::pending).sum::<usize>() as i64)
            }
            keys::names::REACTOR_WAKEUPS => {
                let stats = self.queues.first()?.reactor().stats();
                Some(stats.wakeups as i64)
            }
            "buffer.alignment" => Some(ALIGNMENT as i64),
            "cpu.inline" => Some(self.pool.is_none() as i64),
            _ => None,
        }
    }

    fn queue_count(&self) -> u32 {
        self.queues.len() as u32
    }

    /// A pooled dispatch completes within microseconds of its submission when the work is
    /// small: watching for it saves the awaiting thread a wake-up. Inline work has completed
    /// before it is awaited.
    fn completion_spin(&self) -> Duration {
        match self.pool {
            Some(_) => crate::DEFAULT_COMPLETION_SPIN,
            None => Duration::ZERO,
        }
    }

    fn allocate(&self, size: u64, _params: &BufferParams) -> Result<Arc<dyn BufferMemory>> {
        // Host memory satisfies every memory type: it is device-local to the CPU, host-visible,
        // coherent and cached.
        Ok(Arc::new(HostMemory::new(size)?))
    }

    fn executable_formats(&self) -> Vec<String> {
        vec![rust_kernel::FORMAT_RUST.into(), c_abi::FORMAT_C_ABI.into()]
    }

    fn load_executable(&self, spec: &ExecutableSpec) -> Result<Box<dyn ExecutableBackend>> {
        let executable = match (spec.format.as_str(), &spec.source) {
            (rust_kernel::FORMAT_RUST, ExecutableSource::Native(object)) => {
                rust_kernel::load(&**object)?
            }
            (c_abi::FORMAT_C_ABI, ExecutableSource::Bytes(_)) if !spec.is_unchecked() => {
                return Err(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "a '{}' executable is a shared library the dynamic loader runs \
                         unchecked, so it loads only from an unchecked spec: make it with \
                         `unsafe {{ halcyon_cpu::c_library_spec(path) }}` (or \
                         `unsafe {{ ExecutableSpec::bytes_unchecked(\"{}\", bytes) }}`), \
                         vouching for the library, not with ExecutableSpec::bytes",
                        c_abi::FORMAT_C_ABI,
                        c_abi::FORMAT_C_ABI
                    ),
                ))
            }
            (c_abi::FORMAT_C_ABI, ExecutableSource::Bytes(image)) => {
                // SAFETY: the spec is unchecked: whoever made it with `c_library_spec` or
                // `ExecutableSpec::bytes_unchecked` vouched for the library, under the contract
                // `load` states.
                unsafe { c_abi::load(image)? }
            }
            (format, _) => {
                return Err(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "executable format '{format}' takes {} on the CPU device",
                        if format == rust_kernel::FORMAT_RUST {
                            "a RustKernels object (RustKernels::spec())"
                        } else {
                            "the shared library's bytes (unsafe c_library_spec(path))"
                        }
                    ),
                ))
            }
        };
        Ok(Box::new(executable))
    }

    fn submit(&self, queue: u32, wait: Fence, signal: Fence, work: Work) {
        let Some(actions) = self.queues.get(queue as usize) else {
            signal.fail(Error::new(
                StatusCode::OutOfRange,
                format!("CPU device has no queue {queue}"),
            ));
            return;
        };
        let pool = self.pool.clone();
        let inflight = self.inflight.clone();
        actions.submit(wait, signal, move |signal: &Fence| {
            executor::start(work, signal.clone(), pool, inflight.begin());
            Ok(())
        });
    }
}
