//! Executables of a stream device: a loaded module and one function per entry point, with
//! whether each takes a status word and the dynamic shared memory it is launched with.

use std::any::Any;
use std::sync::Arc;

use crate::api::{FunctionHandle, ModuleHandle, StreamApi};
use crate::device::core::Core;
use crate::device::reclaim::{Reclaim, Reclaimed};
use halcyon::backend::ExecutableBackend;
use halcyon::Result;
use halcyon::{EntryPoint, ExecutableSpec};

/// A module loaded through [`StreamApi::load_module`], unloaded when the last handle and the
/// last submission dispatching it are gone: by the device's reclaimer when that is a
/// submission being settled (an unload may wait for the device; see
/// [`crate::device::reclaim`]), else at once.
pub(crate) struct StreamExecutable<A: StreamApi> {
    api: Arc<A>,
    reclaim: Arc<Reclaim>,
    /// The device that loaded it.
    pub(crate) owner: u64,
    module: ModuleHandle,
    entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`.
    pub(crate) functions: Vec<FunctionHandle>,
    /// Index-aligned with `entry_points`: whether the kernel takes a status word
    /// ([`crate::LoadedModule::status_words`]).
    pub(crate) status_words: Vec<bool>,
    /// Index-aligned with `entry_points`: the dynamic shared memory each kernel is launched
    /// with ([`crate::LoadedModule::shared_memory_bytes`]).
    pub(crate) shared_memory_bytes: Vec<u32>,
}

impl<A: StreamApi> StreamExecutable<A> {
    /// Loads `spec` on `core`'s device and looks up every entry point's function. Loading
    /// allocates device memory (code, globals), so running out of it waits for the frees on
    /// their way and tries once more, as an allocation does.
    pub(crate) fn load(core: &Core<A>, spec: &ExecutableSpec) -> Result<Self> {
        let api = &core.api;
        let loaded = core.retry_out_of_memory(|| api.load_module(spec))?;
        let functions = loaded
            .entry_points
            .iter()
            .map(|entry| api.get_function(loaded.module, &entry.name))
            .collect::<Result<Vec<_>>>();
        let functions = match functions {
            Ok(functions) => functions,
            Err(error) => {
                let _ = api.unload_module(loaded.module);
                return Err(error);
            }
        };
        let status_words = (0..loaded.entry_points.len())
            .map(|index| loaded.takes_status_word(index))
            .collect();
        let shared_memory_bytes = (0..loaded.entry_points.len())
            .map(|index| loaded.shared_memory(index))
            .collect();
        Ok(StreamExecutable {
            api: api.clone(),
            reclaim: core.reclaim.clone(),
            owner: core.id,
            module: loaded.module,
            entry_points: loaded.entry_points,
            functions,
            status_words,
            shared_memory_bytes,
        })
    }
}

impl<A: StreamApi> ExecutableBackend for StreamExecutable<A> {
    fn entry_points(&self) -> &[EntryPoint] {
        &self.entry_points
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<A: StreamApi> Drop for StreamExecutable<A> {
    fn drop(&mut self) {
        // Submissions dispatching it hold the executable until their fences settled.
        if !self.reclaim.defer(Reclaimed::Module(self.module)) {
            let _ = self.api.unload_module(self.module);
        }
    }
}
