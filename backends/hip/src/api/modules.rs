//! Code objects: loading (`hipModuleLoadData`, after the checks of [`HipModule`] and the
//! shared-memory check against the device's limit) and unloading, and looking up functions
//! (`hipModuleGetFunction`) by the entry points the module declared.
//!
//! A function holds its module, so a module is unloaded only once no function of it is in
//! use (see [Handles](super#handles)).

use std::sync::Arc;

use halcyon::{EntryPoint, Error, ExecutableSpec, Result, StatusCode};
use halcyon_stream::arguments::{KernelSignature, SharedMemory};
use halcyon_stream::{FunctionHandle, LoadedModule, ModuleHandle};

use super::{null_from, HipStreamApi};
use crate::code_object::ImageKind;
use crate::module::HipModule;
use crate::result::Hip;
use crate::sys;

/// A loaded `hipModule_t`, unloaded on drop, with its checked entry points.
pub(super) struct RawModule {
    hip: Hip,
    raw: sys::hipModule_t,
    entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`: whether the kernel takes a status word.
    status_words: Vec<bool>,
    /// The code object, 8-byte aligned, kept for the module's life: HIP may keep referring to
    /// the image it loaded from.
    _image: Vec<u64>,
}

/// A `hipFunction_t` of a live module, with the argument counts its entry point declared.
pub(super) struct RawFunction {
    module: Arc<RawModule>,
    pub(super) raw: sys::hipFunction_t,
    pub(super) name: String,
    /// What a launch of it passes.
    pub(super) signature: KernelSignature,
}

// SAFETY: as for `RawStream`; the image is plain owned data.
unsafe impl Send for RawModule {}
// SAFETY: as for `RawStream`.
unsafe impl Sync for RawModule {}
// SAFETY: as for `RawStream`.
unsafe impl Send for RawFunction {}
// SAFETY: as for `RawStream`.
unsafe impl Sync for RawFunction {}

impl Drop for RawModule {
    fn drop(&mut self) {
        // SAFETY: the last holder: every function of it is gone (functions hold the module),
        // and the stream layer unloads only after the kernels using it completed.
        let _ = unsafe { self.hip.module_unload(self.raw) };
    }
}

/// The shared memory (LDS) per block assumed where `hipDeviceAttributeMaxSharedMemoryPerBlock`
/// cannot be read: 64 KiB, what every AMD GPU since GCN has.
pub(crate) const DEFAULT_MAX_SHARED_MEMORY: u32 = 64 << 10;

impl HipStreamApi {
    /// [`StreamApi::load_module`](super::StreamApi::load_module).
    pub(super) fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule> {
        let module = HipModule::from_spec(spec)?;
        let image = module.image();
        let entry_points = module.entry_points().to_vec();
        let status_words: Vec<bool> = (0..entry_points.len())
            .map(|index| module.takes_status_word(index))
            .collect();
        let shared_memory_bytes: Vec<u32> = (0..entry_points.len())
            .map(|index| module.shared_memory(index))
            .collect();
        for (entry, &bytes) in entry_points.iter().zip(&shared_memory_bytes) {
            // Every code object of a bundle: which one HIP picks is known only to HIP. A
            // compressed bundle's kernels are unread: only the dynamic part is checked.
            let statik = image
                .kernels(&entry.name)
                .map(|kernel| kernel.group_segment_fixed_size)
                .max()
                .unwrap_or(0);
            SharedMemory {
                kernel: &entry.name,
                statik: Some(statik),
                dynamic: bytes,
                max: self.max_shared_memory,
                device: &format!("hip://{}", self.device),
                attribute: "hipDeviceAttributeMaxSharedMemoryPerBlock",
            }
            .check()?;
        }
        let bytes = module.code_object();
        // Padded to 4096 bytes: clr copies the first 4096 bytes of an image it cannot size (an
        // offload bundle) whatever its real length.
        let image_words = halcyon::backend::loader_image(bytes, 4096);
        // SAFETY: `loader_image` holds `bytes` then zeros in its first `len * 8` bytes.
        let view = unsafe {
            std::slice::from_raw_parts(image_words.as_ptr().cast::<u8>(), image_words.len() * 8)
        };
        let _bound = self.bind()?;
        // SAFETY: a `HipModule` is hiprtc output (`HipRtc::compile_module`) or comes from the
        // unsafe `HipModule::from_code_object_unchecked` / `from_packed` (also through an
        // unchecked spec), whose callers vouch that it is unmodified clang/hipcc output for
        // this device with metadata agreeing with its code: what HIP reads it as. HIP also
        // reads a bundle's first 4096 bytes whatever its length (clr cannot tell a bundle's
        // size), which the padding holds. The image stays alive (and unmoved) in the module
        // until after hipModuleUnload.
        let raw = self.trimming_on_oom(|| unsafe { self.hip.module_load_data(view) });
        let raw = raw.map_err(|e| {
            let built_for = if image.kind() == ImageKind::CompressedBundle {
                format!(
                    "the compressed offload bundle (CCOB, not read by halcyon): does it hold a \
                     code object for hip://{}'s architecture?",
                    self.device
                )
            } else if image.is_bundle() {
                format!(
                    "the offload bundle holds code objects for [{}]: is hip://{}'s architecture \
                     among them?",
                    image.targets().join(", "),
                    self.device
                )
            } else {
                format!(
                    "the code object was built for {}: is that hip://{}'s architecture?",
                    image.targets().join(", "),
                    self.device
                )
            };
            Error::new(e.code(), format!("{}; {built_for}", e.message()))
        })?;
        if raw.is_null() {
            return Err(null_from("hipModuleLoadData"));
        }
        let handle = raw as usize as u64;
        self.modules.insert(
            handle,
            RawModule {
                hip: self.hip,
                raw,
                entry_points: entry_points.clone(),
                status_words: status_words.clone(),
                _image: image_words,
            },
        );
        Ok(LoadedModule {
            module: ModuleHandle(handle),
            entry_points,
            status_words,
            shared_memory_bytes,
        })
    }

    /// [`StreamApi::unload_module`](super::StreamApi::unload_module).
    pub(super) fn unload_module(&self, module: ModuleHandle) -> Result<()> {
        let module = self.modules.remove(module.0)?;
        // Dropped outside the registry's lock, before the module (their `Drop`s call HIP).
        drop(
            self.functions
                .retain(|_, f| !Arc::ptr_eq(&f.module, &module)),
        );
        // hipModuleUnload runs when the last launch using one of its functions returned.
        Ok(())
    }

    /// [`StreamApi::get_function`](super::StreamApi::get_function).
    pub(super) fn get_function(
        &self,
        module_handle: ModuleHandle,
        name: &str,
    ) -> Result<FunctionHandle> {
        let module = self.modules.get(module_handle.0)?;
        let Some(index) = module.entry_points.iter().position(|e| e.name == name) else {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "HIP module has no entry point '{name}'; it declares: [{}]",
                    module
                        .entry_points
                        .iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        let _bound = self.bind()?;
        // SAFETY: a live module, held for the call.
        let raw = unsafe { self.hip.module_get_function(module.raw, name) }?;
        if raw.is_null() {
            return Err(null_from("hipModuleGetFunction"));
        }
        let handle = raw as usize as u64;
        let entry = &module.entry_points[index];
        let function = RawFunction {
            raw,
            name: name.to_string(),
            signature: KernelSignature {
                bindings: entry.binding_count as usize,
                constants: entry.constant_count as usize,
                status_word: module.status_words[index],
            },
            module: module.clone(),
        };
        self.functions.insert(handle, function);
        if !self
            .modules
            .get(module_handle.0)
            .is_ok_and(|live| Arc::ptr_eq(&live, &module))
        {
            // An unload raced this call and dropped the module's functions before the insert:
            // this one would keep the unloaded module alive until the API goes.
            drop(self.functions.remove(handle));
            return Err(self.modules.missing(module_handle.0));
        }
        Ok(FunctionHandle(handle))
    }
}
