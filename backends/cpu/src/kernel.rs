//! The kernel interface both executable formats (Rust kernels and C-ABI libraries) implement.

use std::sync::Arc;

use halcyon::EntryPoint;

use crate::access::Access;

/// One value per binding of a dispatch, inline for up to four bindings.
pub type PerBinding<T> = smallvec::SmallVec<[T; 4]>;

/// What one dispatch hands every workgroup: prepared once per dispatch, shared by all workers.
pub struct DispatchState {
    /// Workgroup count in x, y, z.
    pub workgroup_count: [u32; 3],
    /// Invocations per workgroup (from the entry point).
    pub workgroup_size: [u32; 3],
    /// Push constants.
    pub constants: Arc<[u32]>,
    /// Host address of each binding's first byte.
    pub binding_ptrs: PerBinding<*mut u8>,
    /// Length of each binding in bytes.
    pub binding_lengths: PerBinding<u64>,
    /// How Rust kernels access the bindings in this dispatch (see [`crate::access`]).
    pub(crate) access: Access,
}

impl DispatchState {
    /// The state of one dispatch over bindings at `binding_ptrs` of `binding_lengths` bytes.
    pub(crate) fn new(
        workgroup_count: [u32; 3],
        workgroup_size: [u32; 3],
        constants: Arc<[u32]>,
        binding_ptrs: PerBinding<*mut u8>,
        binding_lengths: PerBinding<u64>,
    ) -> DispatchState {
        let access = Access::new(
            crate::access::Kind::Dispatch,
            &binding_ptrs,
            &binding_lengths,
        );
        DispatchState {
            workgroup_count,
            workgroup_size,
            constants,
            binding_ptrs,
            binding_lengths,
            access,
        }
    }
}

// SAFETY: the pointers refer to buffer memory the dispatch keeps alive (its `Work` holds the
// buffers) for as long as any workgroup runs; concurrent access is the kernel's contract, as on
// any device (and, for Rust kernels, checked by `access`).
unsafe impl Send for DispatchState {}
// SAFETY: as above; `DispatchState` itself is never mutated while shared.
unsafe impl Sync for DispatchState {}

/// One entry point's code.
pub(crate) trait Kernel: Send + Sync + 'static {
    /// Runs workgroup `workgroup_id` of a dispatch. An `Err` fails the dispatch with that
    /// message.
    fn run(&self, dispatch: &DispatchState, workgroup_id: [u32; 3]) -> Result<(), String>;
}

/// A loaded CPU executable: entry points and their kernels, index-aligned.
pub(crate) struct CpuExecutable {
    pub(crate) entry_points: Vec<EntryPoint>,
    pub(crate) kernels: Vec<Arc<dyn Kernel>>,
    /// Keeps a loaded library (C ABI) mapped while the kernels may run.
    pub(crate) _keep_alive: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl halcyon::backend::ExecutableBackend for CpuExecutable {
    fn entry_points(&self) -> &[EntryPoint] {
        &self.entry_points
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl std::fmt::Debug for DispatchState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchState")
            .field("workgroup_count", &self.workgroup_count)
            .field("workgroup_size", &self.workgroup_size)
            .field("constants", &self.constants)
            .field("binding_lengths", &self.binding_lengths)
            .finish_non_exhaustive()
    }
}
