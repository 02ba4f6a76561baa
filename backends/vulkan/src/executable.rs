//! SPIR-V executables: validation, entry-point metadata, compute pipelines.
//!
//! Format `"spirv"` takes either
//!
//! * [`ExecutableSource::Native`] holding an `Arc<SpirvModule>` (SPIR-V words plus the
//!   entry-point metadata, which SPIR-V itself does not carry in the form dispatches need), or
//! * [`ExecutableSource::Bytes`] produced by [`SpirvModule::to_bytes`]: a small metadata header
//!   (`b"HLCNSPV1"`, entry points) followed by the SPIR-V words. Raw SPIR-V bytes without the
//!   header are refused with a message explaining how to supply the metadata.
//!
//! Every entry point's bindings are storage buffers in descriptor set 0, bindings `0..n` in
//! order; its constants are `u32` push constants at offsets `0, 4, ...`.
//!
//! **Failing a dispatch.** A compute shader has no return code, so a kernel reports failure
//! through a status word: a `uint` storage buffer at descriptor set 1, binding 0
//! ([`STATUS_SET`], [`STATUS_BINDING`]). halcyon binds a zeroed word there for every dispatch of
//! an entry point that uses it; a nonzero value when the submission completes fails the
//! submission (`StatusCode::Internal`, naming the entry point and the value), and with it
//! everything waiting on its signal. Such submissions signal their semaphores from the host
//! after the check, never on the device, so work waiting on them cannot start before the check
//! (their dependents wait on the host). Entry points that do not use the word keep the fully
//! device-side path. In WGSL:
//!
//! ```text
//! @group(1) @binding(0) var<storage, read_write> status: atomic<u32>;
//! // ... on an error: atomicMax(&status, 1u);
//! ```

use std::any::Any;
use std::ffi::CString;
use std::sync::Arc;

use ash::vk;
use halcyon::backend::{read_entry_points, write_entry_points, ExecutableBackend};
use halcyon::{EntryPoint, Error, ExecutableSource, ExecutableSpec, Result, StatusCode};

use crate::context::Context;
use crate::instance::vk_fail;

/// The executable format name.
pub const FORMAT_SPIRV: &str = "spirv";

const HEADER_MAGIC: &[u8; 8] = b"HLCNSPV1";
const SPIRV_MAGIC: u32 = 0x0723_0203;
/// The descriptor set of the status word a kernel writes to fail its dispatch.
pub const STATUS_SET: u32 = 1;
/// The binding of the status word in [`STATUS_SET`].
pub const STATUS_BINDING: u32 = 0;

/// Push-constant range size declared by every pipeline layout that takes constants (the
/// minimum `maxPushConstantsSize` Vulkan guarantees).
const PUSH_CONSTANT_BYTES: u32 = 128;

/// A SPIR-V module with the metadata of the entry points to expose, in dispatch index order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpirvModule {
    /// The SPIR-V words.
    pub words: Vec<u32>,
    /// The `GLCompute` entry points to expose (by name), with their metadata.
    pub entry_points: Vec<EntryPoint>,
}

impl SpirvModule {
    /// A module from words and entry points.
    pub fn new(words: Vec<u32>, entry_points: Vec<EntryPoint>) -> Self {
        SpirvModule {
            words,
            entry_points,
        }
    }

    /// An executable spec (format `"spirv"`, native source).
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_SPIRV, Arc::new(self))
    }

    /// The byte form: metadata header, then the SPIR-V words (little-endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = HEADER_MAGIC.to_vec();
        write_entry_points(&mut out, &self.entry_points);
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Parses [`SpirvModule::to_bytes`] output.
    pub fn from_bytes(bytes: &[u8]) -> Result<SpirvModule> {
        let bad = |what: &str| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("malformed halcyon SPIR-V executable: {what}"),
            )
        };
        if bytes.len() >= 4
            && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == SPIRV_MAGIC
        {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                "raw SPIR-V carries no entry-point metadata (binding and constant counts): pass \
                 a halcyon_vulkan::SpirvModule (SpirvModule::spec) or its to_bytes() form",
            ));
        }
        let rest = bytes.strip_prefix(HEADER_MAGIC).ok_or_else(|| {
            bad("missing the b\"HLCNSPV1\" header (build it with SpirvModule::to_bytes)")
        })?;
        let (entry_points, code) = read_entry_points(rest, "halcyon SPIR-V executable")?;
        if code.len() % 4 != 0 {
            return Err(bad(&format!(
                "the SPIR-V part is {} bytes, not a multiple of 4",
                code.len()
            )));
        }
        let words = code
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(SpirvModule {
            words,
            entry_points,
        })
    }

    /// Checks the magic number, the header, and that every declared entry point is a
    /// `GLCompute` entry point of the module whose `LocalSize` (if stated) matches.
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Error::new(StatusCode::InvalidArgument, m);
        if self.words.len() < 5 {
            return Err(invalid(format!(
                "SPIR-V module is {} words long; a module has at least a 5-word header",
                self.words.len()
            )));
        }
        if self.words[0] != SPIRV_MAGIC {
            return Err(invalid(format!(
                "not SPIR-V: magic number {:#010x}, expected {SPIRV_MAGIC:#010x}",
                self.words[0]
            )));
        }
        if self.entry_points.is_empty() {
            return Err(invalid("SPIR-V executable declares no entry points".into()));
        }
        // (execution model, id, name) of each OpEntryPoint; (id, local size) of LocalSize modes.
        let mut entries = Vec::new();
        let mut sizes = Vec::new();
        let mut i = 5;
        while i < self.words.len() {
            let count = (self.words[i] >> 16) as usize;
            let opcode = self.words[i] & 0xffff;
            if count == 0 || i + count > self.words.len() {
                return Err(invalid(format!(
                    "malformed SPIR-V: instruction at word {i} has length {count}"
                )));
            }
            let operands = &self.words[i + 1..i + count];
            match opcode {
                15 if operands.len() >= 3 => {
                    entries.push((operands[0], operands[1], literal_string(&operands[2..])));
                }
                16 if operands.len() >= 5 && operands[1] == 17 => {
                    sizes.push((operands[0], [operands[2], operands[3], operands[4]]));
                }
                _ => {}
            }
            i += count;
        }
        for declared in &self.entry_points {
            let found = entries
                .iter()
                .find(|(model, _, name)| *model == 5 && *name == declared.name);
            let Some((_, id, _)) = found else {
                let names: Vec<&str> = entries.iter().map(|(_, _, n)| n.as_str()).collect();
                return Err(Error::new(
                    StatusCode::NotFound,
                    format!(
                        "SPIR-V module has no GLCompute entry point '{}'; it has: [{}]",
                        declared.name,
                        names.join(", ")
                    ),
                ));
            };
            if let Some((_, size)) = sizes.iter().find(|(target, _)| target == id) {
                if *size != declared.workgroup_size {
                    return Err(invalid(format!(
                        "entry point '{}' declares workgroup size {:?} but its SPIR-V LocalSize \
                         is {size:?}",
                        declared.name, declared.workgroup_size
                    )));
                }
            }
            if declared.constant_count * 4 > PUSH_CONSTANT_BYTES {
                return Err(invalid(format!(
                    "entry point '{}' takes {} constants; at most {} fit in push constants",
                    declared.name,
                    declared.constant_count,
                    PUSH_CONSTANT_BYTES / 4
                )));
            }
        }
        Ok(())
    }
}

/// Which of `module`'s declared entry points use the status word (set [`STATUS_SET`],
/// binding [`STATUS_BINDING`]): those whose function, or a function it calls, names the
/// variable. Conservative: an operand word that merely equals the variable's id also counts,
/// which costs that entry point the device-side signal path, never correctness.
fn status_users(module: &SpirvModule) -> Vec<bool> {
    let words = &module.words;
    let (mut sets, mut bindings) = (Vec::new(), Vec::new());
    let mut entries = Vec::new();
    // Function id -> (functions it calls, whether it names the status variable's id); the
    // variable is known only after the decorations, so operands are kept per function.
    let mut functions: Vec<(u32, Vec<u32>, Vec<u32>)> = Vec::new();
    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let opcode = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            break;
        }
        let operands = &words[i + 1..i + count];
        match opcode {
            // OpEntryPoint GLCompute %id "name"
            15 if operands.len() >= 3 && operands[0] == 5 => {
                entries.push((operands[1], literal_string(&operands[2..])));
            }
            // OpDecorate %id DescriptorSet n / Binding n
            71 if operands.len() >= 3 && operands[1] == 34 => sets.push((operands[0], operands[2])),
            71 if operands.len() >= 3 && operands[1] == 33 => {
                bindings.push((operands[0], operands[2]))
            }
            // OpFunction %type %id ...
            54 if operands.len() >= 2 => functions.push((operands[1], Vec::new(), Vec::new())),
            // OpFunctionCall %type %result %function ...
            57 if operands.len() >= 3 => {
                if let Some(f) = functions.last_mut() {
                    f.1.push(operands[2]);
                    f.2.extend_from_slice(&operands[3..]);
                }
            }
            _ => {
                if let Some(f) = functions.last_mut() {
                    if opcode != 56 {
                        f.2.extend_from_slice(operands);
                    }
                }
            }
        }
        i += count;
    }
    let status: Vec<u32> = sets
        .iter()
        .filter(|(id, set)| *set == STATUS_SET && bindings.contains(&(*id, STATUS_BINDING)))
        .map(|(id, _)| *id)
        .collect();
    let uses = |root: u32| {
        let mut seen = vec![root];
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            let Some((_, calls, operands)) = functions.iter().find(|f| f.0 == id) else {
                continue;
            };
            if operands.iter().any(|w| status.contains(w)) {
                return true;
            }
            for &callee in calls {
                if !seen.contains(&callee) {
                    seen.push(callee);
                    stack.push(callee);
                }
            }
        }
        false
    };
    module
        .entry_points
        .iter()
        .map(|declared| {
            !status.is_empty()
                && entries
                    .iter()
                    .find(|(_, name)| *name == declared.name)
                    .is_some_and(|(id, _)| uses(*id))
        })
        .collect()
}

fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One entry point's pipeline objects.
pub(crate) struct Pipeline {
    pub(crate) set_layout: vk::DescriptorSetLayout,
    /// The status word's set layout, for an entry point that uses it (else null).
    pub(crate) status_layout: vk::DescriptorSetLayout,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) pipeline: vk::Pipeline,
}

impl Pipeline {
    /// Whether the entry point writes the status word (its dispatches can fail).
    pub(crate) fn uses_status(&self) -> bool {
        self.status_layout != vk::DescriptorSetLayout::null()
    }
}

pub(crate) struct VulkanExecutable {
    context: Arc<Context>,
    entry_points: Vec<EntryPoint>,
    pub(crate) pipelines: Vec<Pipeline>,
    module: vk::ShaderModule,
}

impl VulkanExecutable {
    /// Whether this executable was loaded by the device of `context` (its pipelines and layouts
    /// are objects of that `VkDevice` only).
    pub(crate) fn loaded_by(&self, context: &Arc<Context>) -> bool {
        Arc::ptr_eq(&self.context, context)
    }

    pub(crate) fn load(context: &Arc<Context>, spec: &ExecutableSpec) -> Result<VulkanExecutable> {
        let parsed;
        let module: &SpirvModule = match &spec.source {
            ExecutableSource::Native(object) => {
                (&**object as &dyn Any).downcast_ref::<SpirvModule>().ok_or_else(|| {
                    Error::new(
                        StatusCode::InvalidArgument,
                        "a native 'spirv' executable source must be an Arc<halcyon_vulkan::SpirvModule>",
                    )
                })?
            }
            ExecutableSource::Bytes(bytes) => {
                parsed = SpirvModule::from_bytes(bytes)?;
                &parsed
            }
        };
        module.validate()?;
        let mut executable = VulkanExecutable {
            context: context.clone(),
            entry_points: module.entry_points.clone(),
            pipelines: Vec::new(),
            module: vk::ShaderModule::null(),
        };
        let device = &context.device;
        let info = vk::ShaderModuleCreateInfo::default().code(&module.words);
        // SAFETY: the words were validated to start with the SPIR-V header; the info lives
        // across the call.
        executable.module = unsafe { device.create_shader_module(&info, None) }
            .map_err(|r| vk_fail("vkCreateShaderModule", r))?;
        for (entry, status) in module.entry_points.iter().zip(status_users(module)) {
            let pipeline = executable.pipeline(entry, status)?;
            executable.pipelines.push(pipeline);
        }
        Ok(executable)
    }

    fn pipeline(&self, entry: &EntryPoint, status: bool) -> Result<Pipeline> {
        let device = &self.context.device;
        let bindings: Vec<_> = (0..entry.binding_count)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        let mut pipeline = Pipeline {
            set_layout: vk::DescriptorSetLayout::null(),
            status_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
        };
        // SAFETY: the device is live; the info lives across the call.
        pipeline.set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }
            .map_err(|r| vk_fail("vkCreateDescriptorSetLayout", r))?;
        if status {
            let word = [vk::DescriptorSetLayoutBinding::default()
                .binding(STATUS_BINDING)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)];
            let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&word);
            // SAFETY: the device is live; the info lives across the call.
            match unsafe { device.create_descriptor_set_layout(&info, None) } {
                Ok(layout) => pipeline.status_layout = layout,
                Err(r) => {
                    destroy_pipeline(device, &pipeline);
                    return Err(vk_fail("vkCreateDescriptorSetLayout (status word)", r));
                }
            }
        }
        let both = [pipeline.set_layout, pipeline.status_layout];
        let set_layouts = if status { &both[..] } else { &both[..1] };
        let ranges = [vk::PushConstantRange {
            stage_flags: vk::ShaderStageFlags::COMPUTE,
            offset: 0,
            size: PUSH_CONSTANT_BYTES,
        }];
        let mut info = vk::PipelineLayoutCreateInfo::default().set_layouts(set_layouts);
        if entry.constant_count > 0 {
            info = info.push_constant_ranges(&ranges);
        }
        let destroy = |p: &Pipeline| destroy_pipeline(device, p);
        // SAFETY: as above.
        pipeline.layout = match unsafe { device.create_pipeline_layout(&info, None) } {
            Ok(layout) => layout,
            Err(r) => {
                destroy(&pipeline);
                return Err(vk_fail("vkCreatePipelineLayout", r));
            }
        };
        let name = CString::new(entry.name.clone()).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("entry point name {:?} contains a NUL byte", entry.name),
            )
        })?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(self.module)
            .name(&name);
        let create = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(pipeline.layout)];
        // SAFETY: module, layout and cache are live objects of this device; the infos live
        // across the call.
        let created =
            unsafe { device.create_compute_pipelines(self.context.pipeline_cache, &create, None) };
        match created {
            Ok(p) => pipeline.pipeline = p[0],
            Err((_, r)) => {
                destroy(&pipeline);
                return Err(vk_fail(
                    &format!("vkCreateComputePipelines for entry point '{}'", entry.name),
                    r,
                ));
            }
        }
        Ok(pipeline)
    }
}

fn destroy_pipeline(device: &ash::Device, p: &Pipeline) {
    // SAFETY: the objects belong to this device and no submission uses them any more (in-flight
    // submissions keep the executable alive); null handles are ignored by Vulkan.
    unsafe {
        device.destroy_pipeline(p.pipeline, None);
        device.destroy_pipeline_layout(p.layout, None);
        device.destroy_descriptor_set_layout(p.set_layout, None);
        device.destroy_descriptor_set_layout(p.status_layout, None);
    }
}

impl ExecutableBackend for VulkanExecutable {
    fn entry_points(&self) -> &[EntryPoint] {
        &self.entry_points
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for VulkanExecutable {
    fn drop(&mut self) {
        for p in &self.pipelines {
            destroy_pipeline(&self.context.device, p);
        }
        // SAFETY: the pipelines made from the module are destroyed; null is ignored.
        unsafe { self.context.device.destroy_shader_module(self.module, None) }
    }
}
