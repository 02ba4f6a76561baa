//! The translation table itself: [`StreamApi`] for [`HostStreamApi`], each call checked against
//! the device's fault state, its handles resolved, and its work enqueued as a stream operation.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use crate::event::{HostEvent, Waited};
use crate::memory::Resolved;
use crate::worker::{Exec, Op, Stream};
use crate::{
    invalid, lock, HostModule, HostPtr, HostStreamApi, LaunchArgs, Shared, DRIVER_ID,
    FORMAT_HOST_KERNELS,
};
use halcyon::{Error, Result, StatusCode};
use halcyon::{ExecutableSource, ExecutableSpec};
use halcyon_stream::api::{
    ApiInfo, Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, GraphHandle,
    HostFunc, KernelParams, LaunchConfig, LoadedModule, MemoryPlacement, ModuleHandle, StreamApi,
    StreamHandle,
};

// SAFETY: see the trait's contract; host memory from the global allocator, handles checked
// against the table's own maps.
unsafe impl StreamApi for HostStreamApi {
    fn info(&self) -> ApiInfo {
        ApiInfo {
            driver: DRIVER_ID.into(),
            name: "host threads (one thread per stream)".into(),
            capabilities: Capabilities::HOST_FUNC
                | Capabilities::STREAM_ORDERED_ALLOC
                | Capabilities::GRAPHS
                | Capabilities::GRAPH_UPDATE
                | Capabilities::EVENT_TIMING
                | Capabilities::WRITE_VALUE,
            binding_alignment: 4,
            concurrency: 1,
            memory_bytes: None,
        }
    }

    fn create_stream(&self) -> Result<StreamHandle> {
        let shared = self.shared();
        shared.control.check()?;
        let id = shared.id();
        let stream = Arc::new(Stream::default());
        let (thread_stream, thread_shared) = (stream.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("halcyon-host-stream-{id}"))
            .spawn(move || thread_stream.run(&thread_shared))
            .map_err(|e| {
                Error::with_source(
                    StatusCode::ResourceExhausted,
                    "host stream API: cannot spawn a stream thread",
                    e,
                )
            })?;
        lock(&shared.streams).insert(id, (stream, Some(thread)));
        Ok(StreamHandle(id))
    }

    fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        let removed = lock(&self.shared().streams).remove(&stream.0);
        let (stream, _detached) =
            removed.ok_or_else(|| invalid(format!("{stream:?} is not a live stream")))?;
        // The thread runs what is queued, then ends on its own.
        stream.destroy();
        Ok(())
    }

    fn synchronize_stream(&self, stream: StreamHandle) -> Result<()> {
        let shared = self.shared();
        shared.control.check()?;
        self.not_capturing(stream, "synchronize")?;
        shared.stream(stream)?.synchronize(shared)
    }

    fn create_event(&self, flags: EventFlags) -> Result<EventHandle> {
        let shared = self.shared();
        shared.control.check()?;
        let id = shared.id();
        let timing = !flags.contains(EventFlags::DISABLE_TIMING);
        lock(&shared.events).insert(id, Arc::new(HostEvent::new(timing)));
        Ok(EventHandle(id))
    }

    fn destroy_event(&self, event: EventHandle) -> Result<()> {
        lock(&self.shared().events)
            .remove(&event.0)
            .map(drop)
            .ok_or_else(|| invalid(format!("{event:?} is not a live event")))
    }

    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        let shared = self.shared();
        if shared.panic_in_record.swap(false, Ordering::Relaxed) {
            panic!("host stream API: record_event panics (HostStreamApi::panic_in_next_record)");
        }
        shared.control.check()?;
        self.not_capturing(stream, "an event record")?;
        let event = shared.event(event)?;
        shared.stats.bump(&shared.stats.records);
        if event.timing {
            shared.stats.bump(&shared.stats.timed_records);
        }
        shared.stream(stream)?.push(|| {
            let generation = event.next_record();
            Op::Record(event, generation)
        })
    }

    fn query_event(&self, event: EventHandle) -> Result<bool> {
        let shared = self.shared();
        shared.control.check()?;
        shared.event(event)?.query()
    }

    fn synchronize_event(&self, event: EventHandle) -> Result<()> {
        let shared = self.shared();
        shared.control.check()?;
        let event = shared.event(event)?;
        match event.ticket().wait(&shared.control, &shared.closing) {
            Waited::Done(None) => Ok(()),
            Waited::Done(Some(error)) => Err(error),
            Waited::Abandoned => shared.control.check().and_then(|()| {
                Err(Error::new(
                    StatusCode::Aborted,
                    "host stream API: shut down while an event was awaited",
                ))
            }),
        }
    }

    fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let shared = self.shared();
        shared.control.check()?;
        let (start, end) = (shared.event(start)?, shared.event(end)?);
        crate::event::elapsed_ms(&start, &end)
    }

    fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        let shared = self.shared();
        shared.control.check()?;
        self.not_capturing(stream, "an event wait")?;
        let event = shared.event(event)?;
        shared.stats.bump(&shared.stats.stream_waits);
        shared.stream(stream)?.push(|| Op::Wait(event.ticket()))
    }

    fn launch_host_func(&self, stream: StreamHandle, func: HostFunc) -> Result<()> {
        let shared = self.shared();
        shared.control.check()?;
        self.not_capturing(stream, "a host function")?;
        shared.stream(stream)?.push(|| Op::HostFunc(func))
    }

    fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr> {
        // Host memory is all three: every allocation is host-visible, and pinned.
        self.shared().control.check()?;
        if placement == MemoryPlacement::Pinned
            && self
                .shared()
                .refuse_pinned
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(Error::new(
                StatusCode::Unimplemented,
                "host stream API: pinned memory was refused (HostStreamApi::refuse_pinned_memory)",
            ));
        }
        self.shared().memory.allocate(size)
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        let delay = self
            .shared()
            .free_delay_us
            .load(std::sync::atomic::Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        // Allowed after a fault, so resources can still be released.
        self.shared().memory.free(ptr)
    }

    fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>> {
        let resolved = self.shared().memory.resolve(ptr, 0).ok()?;
        NonNull::new(resolved.ptr())
    }

    fn allocate_async(&self, size: u64, stream: StreamHandle) -> Result<DevicePtr> {
        // Allocating now satisfies "usable by work enqueued after this call".
        self.shared().stream(stream)?;
        self.allocate(size, MemoryPlacement::Device)
    }

    fn free_async(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<()> {
        let shared = self.shared();
        shared.control.check()?;
        shared.memory.resolve(ptr, 0)?;
        let weak: Weak<Shared> = Arc::downgrade(shared);
        self.exec(
            stream,
            Arc::new(move || match weak.upgrade() {
                Some(shared) => shared.memory.free(ptr),
                None => Ok(()),
            }),
        )
    }

    unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        self.shared().control.check()?;
        let dst = self.shared().memory.resolve(dst, len)?;
        let src = HostPtr(src.cast_mut());
        self.exec(
            stream,
            Arc::new(move || {
                // SAFETY: the caller guarantees `src..src+len` stays valid and unmodified until
                // this runs; `dst` is `len` bytes of a live allocation (resolved above, kept
                // alive by `dst`); `copy` allows overlap.
                unsafe { std::ptr::copy(src.get(), dst.ptr(), len as usize) };
                Ok(())
            }),
        )
    }

    unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        self.shared().control.check()?;
        let src = self.shared().memory.resolve(src, len)?;
        let dst = HostPtr(dst);
        self.exec(
            stream,
            Arc::new(move || {
                // SAFETY: `src` is `len` bytes of a live allocation; the caller guarantees
                // `dst..dst+len` is valid and untouched by anything else until this runs.
                unsafe { std::ptr::copy(src.ptr(), dst.get(), len as usize) };
                Ok(())
            }),
        )?;
        if self
            .shared()
            .fail_read_after_enqueue
            .swap(false, Ordering::Relaxed)
        {
            return Err(Error::new(
                StatusCode::Internal,
                "host stream API: a device-to-host copy failed after enqueuing part of it \
                 (HostStreamApi::fail_next_read_after_enqueue)",
            ));
        }
        Ok(())
    }

    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        self.shared().control.check()?;
        let memory = &self.shared().memory;
        let (dst, src) = (memory.resolve(dst, len)?, memory.resolve(src, len)?);
        self.exec(
            stream,
            Arc::new(move || {
                // SAFETY: both ranges are `len` bytes of live allocations (resolved and held);
                // streams order this against every other access; `copy` allows overlap.
                unsafe { std::ptr::copy(src.ptr(), dst.ptr(), len as usize) };
                Ok(())
            }),
        )
    }

    fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        self.shared().control.check()?;
        let width = u64::from(pattern_len);
        if !matches!(pattern_len, 1 | 2 | 4)
            || !dst.0.is_multiple_of(width)
            || !len.is_multiple_of(width)
        {
            return Err(invalid(format!(
                "memset of {len} bytes at {dst:?} with a {pattern_len}-byte pattern: the pattern \
                 must be 1, 2 or 4 bytes and the address and length multiples of it"
            )));
        }
        let dst = self.shared().memory.resolve(dst, len)?;
        self.exec(
            stream,
            Arc::new(move || {
                // SAFETY: `len` bytes of a live allocation (resolved and held), ordered by the
                // stream against every other access.
                let bytes = unsafe { std::slice::from_raw_parts_mut(dst.ptr(), len as usize) };
                let pattern = pattern.to_le_bytes();
                for chunk in bytes.chunks_exact_mut(pattern_len as usize) {
                    chunk.copy_from_slice(&pattern[..pattern_len as usize]);
                }
                Ok(())
            }),
        )
    }

    fn write_value32(&self, stream: StreamHandle, ptr: DevicePtr, value: u32) -> Result<()> {
        self.shared().control.check()?;
        if !ptr.0.is_multiple_of(4) {
            return Err(invalid(format!(
                "write_value32 at {ptr:?}: the address must be 4-byte aligned"
            )));
        }
        let word = self.shared().memory.resolve(ptr, 4)?;
        self.exec(
            stream,
            Arc::new(move || {
                // SAFETY: 4 aligned bytes of a live allocation (resolved and held), which the
                // host may read concurrently: only ever accessed atomically while both do.
                let word = unsafe { std::sync::atomic::AtomicU32::from_ptr(word.ptr().cast()) };
                word.store(value, std::sync::atomic::Ordering::Release);
                Ok(())
            }),
        )
    }

    fn module_formats(&self) -> Vec<String> {
        vec![FORMAT_HOST_KERNELS.into()]
    }

    fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule> {
        let shared = self.shared();
        shared.control.check()?;
        let module = match (spec.format.as_str(), &spec.source) {
            (FORMAT_HOST_KERNELS, ExecutableSource::Native(object)) => {
                HostModule::from_object(&**object)?
            }
            (format, _) => {
                return Err(invalid(format!(
                    "cannot load executable format '{format}'; the host stream API loads \
                     '{FORMAT_HOST_KERNELS}' made with HostModule::spec()"
                )))
            }
        };
        let entry_points = module.kernels.iter().map(|k| k.entry.clone()).collect();
        let status_words = module.kernels.iter().map(|k| k.status_word).collect();
        let shared_memory_bytes = module
            .kernels
            .iter()
            .map(|k| k.shared_memory_bytes)
            .collect();
        let id = shared.id();
        let bytes = shared.module_bytes.load(Ordering::Relaxed);
        if bytes > 0 {
            let memory = shared.memory.allocate(bytes).map_err(|error| {
                error.context(format!("loading a module that takes {bytes} bytes"))
            })?;
            lock(&shared.module_memory).insert(id, memory);
        }
        lock(&shared.modules).insert(id, Arc::new(module));
        Ok(LoadedModule {
            module: ModuleHandle(id),
            entry_points,
            status_words,
            shared_memory_bytes,
        })
    }

    fn unload_module(&self, module: ModuleHandle) -> Result<()> {
        let shared = self.shared();
        lock(&shared.modules)
            .remove(&module.0)
            .ok_or_else(|| invalid(format!("{module:?} is not a loaded module")))?;
        lock(&shared.functions).retain(|_, (owner, _, _)| *owner != module.0);
        if let Some(memory) = lock(&shared.module_memory).remove(&module.0) {
            shared.memory.free(memory)?;
        }
        Ok(())
    }

    fn get_function(&self, module: ModuleHandle, name: &str) -> Result<FunctionHandle> {
        let shared = self.shared();
        let loaded = lock(&shared.modules)
            .get(&module.0)
            .cloned()
            .ok_or_else(|| invalid(format!("{module:?} is not a loaded module")))?;
        let index = loaded
            .kernels
            .iter()
            .position(|k| k.entry.name == name)
            .ok_or_else(|| {
                Error::new(
                    StatusCode::NotFound,
                    format!("host stream API: {module:?} has no kernel '{name}'"),
                )
            })?;
        let id = shared.id();
        lock(&shared.functions).insert(id, (module.0, loaded, index));
        Ok(FunctionHandle(id))
    }

    fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        stream: StreamHandle,
    ) -> Result<()> {
        let exec = self.kernel_exec(function, config, params)?;
        self.shared().stats.bump(&self.shared().stats.launches);
        self.exec_kernel(stream, exec, function, *config)
    }

    fn update_graph_kernel(
        &self,
        graph: GraphHandle,
        kernel: usize,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
    ) -> Result<()> {
        let exec = self.kernel_exec(function, config, params)?;
        let shared = self.shared();
        let mut graphs = lock(&shared.graphs);
        let graph = graphs
            .get_mut(&graph.0)
            .ok_or_else(|| invalid(format!("{graph:?} is not a live graph")))?;
        // Launches already enqueued hold their operations: only later ones see the change.
        Arc::make_mut(graph).replace_kernel(kernel, function, *config, exec)
    }

    fn begin_capture(&self, stream: StreamHandle) -> Result<()> {
        let shared = self.shared();
        shared.control.check()?;
        shared.stream(stream)?;
        let mut captures = lock(&shared.captures);
        if captures.contains_key(&stream.0) {
            return Err(invalid(format!("{stream:?} is already capturing a graph")));
        }
        captures.insert(stream.0, Default::default());
        Ok(())
    }

    fn end_capture(&self, stream: StreamHandle) -> Result<GraphHandle> {
        let shared = self.shared();
        let captured = lock(&shared.captures)
            .remove(&stream.0)
            .ok_or_else(|| invalid(format!("{stream:?} is not capturing a graph")))?;
        // Ending a capture is allowed after a fault (so the capture state is cleaned up), but
        // the graph is not made then.
        shared.control.check()?;
        if shared.invalidate_capture.swap(false, Ordering::Relaxed) {
            return Err(Error::new(
                StatusCode::Aborted,
                format!(
                    "the capture of {stream:?} was invalidated \
                     (HostStreamApi::invalidate_next_capture)"
                ),
            ));
        }
        let id = shared.id();
        lock(&shared.graphs).insert(id, Arc::new(captured));
        Ok(GraphHandle(id))
    }

    unsafe fn launch_graph(&self, graph: GraphHandle, stream: StreamHandle) -> Result<()> {
        let shared = self.shared();
        shared.control.check()?;
        self.not_capturing(stream, "a graph launch")?;
        let operations = lock(&shared.graphs)
            .get(&graph.0)
            .cloned()
            .ok_or_else(|| invalid(format!("{graph:?} is not a live graph")))?;
        shared.stats.bump(&shared.stats.graph_launches);
        let target = shared.stream(stream)?;
        for operation in operations.ops.iter() {
            target.push(|| Op::Exec(operation.clone()))?;
        }
        Ok(())
    }

    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        // Launches already enqueued hold their operations; the graph itself just goes.
        lock(&self.shared().graphs)
            .remove(&graph.0)
            .map(drop)
            .ok_or_else(|| invalid(format!("{graph:?} is not a live graph")))
    }
}

impl HostStreamApi {
    /// The operation a launch of `function` with `config` and `params` runs, checked as
    /// `launch_kernel` checks it.
    fn kernel_exec(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
    ) -> Result<Exec> {
        let status = params.status;
        let shared = self.shared();
        shared.control.check()?;
        let (module, index) = lock(&shared.functions)
            .get(&function.0)
            .map(|(_, m, i)| (m.clone(), *i))
            .ok_or_else(|| invalid(format!("{function:?} is not a live function")))?;
        let kernel = &module.kernels[index];
        if kernel.status_word != status.is_some() {
            return Err(invalid(if kernel.status_word {
                format!(
                    "kernel '{}' takes a status word: pass its address in KernelParams::status",
                    kernel.entry.name
                )
            } else {
                format!(
                    "kernel '{}' takes no status word: leave KernelParams::status empty",
                    kernel.entry.name
                )
            }));
        }
        if config.block.contains(&0) {
            return Err(invalid(format!("block size {:?} has a zero", config.block)));
        }
        let resolved = params
            .bindings
            .iter()
            .map(|&ptr| shared.memory.resolve(ptr, 0))
            .collect::<Result<Vec<_>>>()?;
        let status = match status {
            None => None,
            Some(word) => Some(self.resolve_status_word(word, &resolved)?),
        };
        let constants = params.constants.to_vec();
        let LaunchConfig {
            grid,
            block,
            shared_memory_bytes,
        } = *config;
        Ok(Arc::new(move || {
            let kernel = &module.kernels[index];
            let bindings: Vec<(*mut u8, usize)> =
                resolved.iter().map(|r| (r.ptr(), r.available)).collect();
            // SAFETY: `status` is 4 bytes of a live allocation the closure holds, 4-byte
            // aligned, that no binding of this launch overlaps (both checked in
            // `resolve_status_word`); the stream orders this launch against every other
            // operation, and within it the word is only accessed atomically.
            let word = status
                .as_ref()
                .map(|r| unsafe { AtomicU32::from_ptr(r.ptr().cast::<u32>()) });
            for z in 0..grid[2] {
                for y in 0..grid[1] {
                    for x in 0..grid[0] {
                        let args = LaunchArgs {
                            block_id: [x, y, z],
                            grid,
                            block,
                            constants: &constants,
                            bindings: &bindings,
                            status: word,
                            shared_memory_bytes,
                        };
                        (kernel.run)(&args).map_err(|message| {
                            Error::new(
                                StatusCode::Internal,
                                format!(
                                    "host kernel '{}' failed in block {:?}: {message}",
                                    kernel.entry.name,
                                    [x, y, z]
                                ),
                            )
                        })?;
                    }
                }
            }
            Ok(())
        }))
    }

    /// Resolves a launch's status word: 4 bytes of a live allocation, 4-byte aligned, outside
    /// every binding's range (a binding reaches to the end of its allocation), so a kernel may
    /// write the word while it holds binding slices.
    fn resolve_status_word(&self, word: DevicePtr, bindings: &[Resolved]) -> Result<Resolved> {
        if !word.0.is_multiple_of(4) {
            return Err(invalid(format!(
                "the status word at {word:?} is not 4-byte aligned"
            )));
        }
        let resolved = self.shared().memory.resolve(word, 4)?;
        let start = resolved.ptr() as usize;
        let overlaps = bindings.iter().any(|b| {
            let from = b.ptr() as usize;
            start < from + b.available && from < start + 4
        });
        if overlaps {
            return Err(invalid(format!(
                "the status word at {word:?} lies within a binding of the launch; pass a word \
                 of its own"
            )));
        }
        Ok(resolved)
    }
}
