//! Compute executables: [`SpirvModule`] (WGSL or SPIR-V checked and reflected by naga, or raw
//! SPIR-V vouched for by the caller), its byte forms, and the compute pipelines made from it.

use std::any::Any;
use std::ffi::CString;
use std::sync::Arc;

use ash::vk;
use halcyon::backend::ExecutableBackend;
use halcyon::{
    EntryPoint, Error, ExecutableSource, ExecutableSpec, PackedExecutable, Result, StatusCode,
};

use crate::context::Context;
use crate::instance::vk_fail;

/// The SPIR-V executable format name.
pub const FORMAT_SPIRV: &str = "spirv";
/// The WGSL executable format name (checked bytes holding UTF-8 WGSL text).
pub const FORMAT_WGSL: &str = "wgsl";

const SPIRV_MAGIC: u32 = 0x0723_0203;
/// The descriptor set of the status word a kernel writes to fail its dispatch.
pub const STATUS_SET: u32 = 1;
/// The binding of the status word in [`STATUS_SET`].
pub const STATUS_BINDING: u32 = 0;

/// Push-constant range size declared by every pipeline layout that takes constants (the
/// minimum `maxPushConstantsSize` Vulkan guarantees).
const PUSH_CONSTANT_BYTES: u32 = 128;

/// The highest dispatch binding number (exclusive) a shader may use; devices may allow fewer
/// (`maxPerStageDescriptorStorageBuffers`, checked when loading).
pub const MAX_BINDINGS: u32 = 4096;

/// What naga reflected about one entry point beyond its [`EntryPoint`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct Reflected {
    /// Whether it uses the status word.
    status: bool,
    /// Per dispatch binding, the least length in bytes a bound range needs (0: unused).
    min_binding_sizes: Vec<u64>,
    /// Bytes of `var<workgroup>` memory it uses.
    workgroup_memory: u64,
}

/// A compute module: SPIR-V words and the entry points to expose, in dispatch index order.
///
/// **Safe path.** [`SpirvModule::from_wgsl`] and [`SpirvModule::from_spirv`] parse with naga,
/// validate with every check (`naga::valid::Validator`, capabilities limited to push
/// constants), and hand the driver SPIR-V that naga's `spv-out` writes from the validated
/// module (never the caller's words), with bounds checks on every index (`Restrict`). The
/// entry-point metadata is reflected, not written by hand:
///
/// * every entry point must be `@compute`; its workgroup size is the declared one (pipeline
///   overrides are refused);
/// * `var<storage>` at `@group(0) @binding(i)` is dispatch binding `i`; the binding count is
///   the highest binding the entry point uses plus one (unused numbers below it still take a
///   buffer); a bound range must be at least as long as the variable's fixed-size part;
/// * `var<storage>` at `@group(1) @binding(0)` ([`STATUS_SET`], [`STATUS_BINDING`]) is the
///   status word (the status-word convention, docs/ARCHITECTURE.md), 4 bytes: halcyon binds
///   a zeroed word there for each dispatch of an entry point that uses it;
/// * the `var<push_constant>` block the entry point uses, a multiple of 4 bytes and at most
///   128, is `size / 4` `u32` constants at offsets `0, 4, ...`;
/// * anything else an entry point uses from outside (uniform buffers, textures, samplers,
///   other groups or bindings) is refused with `InvalidArgument`.
///
/// Loading also checks each entry point against the device's limits (workgroup size and
/// invocations, workgroup memory, storage buffers, push constants). Checked byte specs go
/// through the same path: format `"wgsl"` (UTF-8 text) or `"spirv"` (SPIR-V words,
/// little-endian, as [`SpirvModule::to_bytes`] writes them).
///
/// **Unsafe path.** [`SpirvModule::from_words_unchecked`] takes SPIR-V words and hand-written
/// [`EntryPoint`]s and makes only cheap checks; its byte form is a [`PackedExecutable`]
/// ([`SpirvModule::to_packed`]: format `"spirv"`, the entry points, the words), which loads
/// only from an [`ExecutableSpec::bytes_unchecked`] spec.
///
/// ```
/// let module = halcyon_vulkan::SpirvModule::from_wgsl(
///     "@group(0) @binding(0) var<storage, read_write> x: array<u32>;
///      @group(1) @binding(0) var<storage, read_write> status: atomic<u32>;
///      @compute @workgroup_size(64) fn add_one(@builtin(global_invocation_id) id: vec3<u32>) {
///          if (id.x >= arrayLength(&x)) { atomicMax(&status, 1u); return; }
///          x[id.x] = x[id.x] + 1u;
///      }",
/// )?;
/// let entry = &module.entry_points()[0];
/// assert_eq!((entry.binding_count, entry.constant_count), (1, 0));
/// # Ok::<(), halcyon::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpirvModule {
    words: Vec<u32>,
    entry_points: Vec<EntryPoint>,
    /// `None` for a module the caller vouched for.
    reflected: Option<Vec<Reflected>>,
}

fn invalid(message: String) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

/// An error and its sources, one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Runs a naga step, turning a panic inside naga into `InvalidArgument` (naga's front ends are
/// fuzzed, but a panic on hostile input must not take the caller's thread with it).
fn guarded<T>(what: &str, step: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)).unwrap_or_else(|_| {
        Err(invalid(format!(
            "naga panicked while processing the {what}; the input is malformed"
        )))
    })
}

impl SpirvModule {
    /// Compiles WGSL through naga: parsed, validated with every check, its compute entry points
    /// reflected (see [`SpirvModule`] for the binding rules), and SPIR-V written by
    /// naga with bounds checks. `InvalidArgument` with naga's diagnostic for a shader naga
    /// refuses, or naming what halcyon's pipeline layout cannot express.
    pub fn from_wgsl(source: &str) -> Result<SpirvModule> {
        guarded("WGSL shader", || {
            let module = naga::front::wgsl::parse_str(source).map_err(|e| {
                invalid(format!("WGSL does not parse: {}", e.emit_to_string(source)))
            })?;
            Self::from_naga(&module, &|e| e.emit_to_string(source))
        })
    }

    /// Checks SPIR-V words through naga: parsed by its SPIR-V front end, validated with every
    /// check, its compute entry points reflected (see [`SpirvModule`]), and SPIR-V
    /// **re-written** by naga from the validated module, which is what the driver gets (naga's
    /// front end accepts some input its validator does not cover, so the caller's words never
    /// reach the driver). `InvalidArgument` for input naga refuses or the pipeline layout
    /// cannot express.
    pub fn from_spirv(words: &[u32]) -> Result<SpirvModule> {
        check_header(words)?;
        check_id_bound(words)?;
        guarded("SPIR-V module", || {
            let options = naga::front::spv::Options {
                adjust_coordinate_space: false,
                strict_capabilities: true,
                block_ctx_dump_prefix: None,
            };
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let module = naga::front::spv::parse_u8_slice(&bytes, &options).map_err(|e| {
                invalid(format!("naga cannot read the SPIR-V module: {}", chain(&e)))
            })?;
            Self::from_naga(&module, &|e| chain(e))
        })
    }

    /// A module from SPIR-V words and hand-written entry-point metadata, handed to the driver
    /// as they are. Only cheap checks are made: the magic number and header length, that each
    /// entry point is a `GLCompute` entry point of the module whose `LocalSize` (if stated)
    /// matches, and that the constants fit the push-constant range. `InvalidArgument` (or
    /// `NotFound` for a missing entry point) otherwise.
    ///
    /// # Safety
    ///
    /// The words must be SPIR-V that is valid for the Vulkan environment (as `spirv-val
    /// --target-env vulkan1.2` checks it), using only capabilities and features the device
    /// enables; a driver given anything else may crash or read and write out of bounds. Every
    /// entry point must agree with the code: its storage buffers are at most `binding_count`
    /// bindings `0..binding_count` of descriptor set 0, its push constants lie within
    /// `constant_count * 4` bytes at offset 0, its only other resource is the status word
    /// (set [`STATUS_SET`], binding [`STATUS_BINDING`], 4 bytes), and it accesses no buffer
    /// beyond the range a dispatch binds (Vulkan does not bounds-check shaders by default).
    pub unsafe fn from_words_unchecked(
        words: Vec<u32>,
        entry_points: Vec<EntryPoint>,
    ) -> Result<SpirvModule> {
        let module = SpirvModule {
            words,
            entry_points,
            reflected: None,
        };
        module.check_unchecked()?;
        Ok(module)
    }

    /// The SPIR-V words the driver gets (for a checked module, those naga wrote).
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The entry points, in dispatch index order.
    pub fn entry_points(&self) -> &[EntryPoint] {
        &self.entry_points
    }

    /// Whether the module was made by [`SpirvModule::from_words_unchecked`] (or read from its
    /// byte form) rather than checked by naga.
    pub fn is_unchecked(&self) -> bool {
        self.reflected.is_none()
    }

    /// An executable spec (format `"spirv"`, native source; it carries the module's trust).
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_SPIRV, Arc::new(self))
    }

    /// The SPIR-V words as little-endian bytes: for a checked module, a form that
    /// `ExecutableSpec::bytes("spirv", ..)` loads (checked by naga again), except where naga
    /// cannot read back its own bounds check: an index of a runtime-sized array that is a
    /// signed, non-constant expression (docs/FUZZING.md); [`SpirvModule::spec`] passes the
    /// module itself instead.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// The module as a [`PackedExecutable`] (format `"spirv"`, the entry points, the SPIR-V
    /// words as little-endian bytes): the byte form that carries hand-written metadata. It
    /// loads only from an unchecked spec ([`PackedExecutable::spec_unchecked`]), whose caller
    /// vouches for it as [`SpirvModule::from_words_unchecked`] requires.
    pub fn to_packed(&self) -> PackedExecutable {
        PackedExecutable::new(FORMAT_SPIRV, self.entry_points.clone(), self.to_bytes())
    }

    /// The module of a [`PackedExecutable`] written by [`SpirvModule::to_packed`], making the
    /// checks of [`SpirvModule::from_words_unchecked`]. `InvalidArgument` for another format
    /// or an entry point declaring dynamic shared memory (Vulkan sizes workgroup memory in
    /// the shader).
    ///
    /// # Safety
    ///
    /// As for [`SpirvModule::from_words_unchecked`]: the words and the metadata must meet its
    /// contract.
    pub unsafe fn from_packed(packed: &PackedExecutable) -> Result<SpirvModule> {
        if packed.format() != FORMAT_SPIRV {
            return Err(invalid(format!(
                "a packed '{}' executable is not SPIR-V (format '{FORMAT_SPIRV}')",
                packed.format()
            )));
        }
        if let Some(index) =
            (0..packed.entry_points().len()).find(|&i| packed.shared_memory(i) != 0)
        {
            return Err(invalid(format!(
                "entry point '{}' declares {} bytes of dynamic shared memory; Vulkan sizes \
                 workgroup memory in the shader",
                packed.entry_points()[index].name,
                packed.shared_memory(index)
            )));
        }
        let words = words_of(packed.image())?;
        // SAFETY: the caller vouches for the words and metadata (this function's contract).
        unsafe { SpirvModule::from_words_unchecked(words, packed.entry_points().to_vec()) }
    }

    /// Validates `module` with naga, reflects its entry points and writes its SPIR-V.
    fn from_naga(
        module: &naga::Module,
        describe: &dyn Fn(&naga::WithSpan<naga::valid::ValidationError>) -> String,
    ) -> Result<SpirvModule> {
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::PUSH_CONSTANT,
        )
        .validate(module)
        .map_err(|e| invalid(format!("naga validation failed: {}", describe(&e))))?;
        if !module.overrides.is_empty() {
            return Err(invalid(
                "the shader declares pipeline-overridable constants (`override`); halcyon \
                 cannot set them: use `const` values instead"
                    .into(),
            ));
        }
        if module.entry_points.is_empty() {
            return Err(invalid(
                "the shader has no entry points; declare a `@compute` function".into(),
            ));
        }
        let mut entry_points = Vec::new();
        let mut reflected = Vec::new();
        for (index, entry) in module.entry_points.iter().enumerate() {
            let (e, r) = reflect(module, &info, index, entry)?;
            entry_points.push(e);
            reflected.push(r);
        }
        let restrict = naga::proc::BoundsCheckPolicy::Restrict;
        let options = naga::back::spv::Options {
            lang_version: (1, 0),
            flags: naga::back::spv::WriterFlags::empty(),
            bounds_check_policies: naga::proc::BoundsCheckPolicies {
                index: restrict,
                buffer: restrict,
                image_load: restrict,
                binding_array: restrict,
            },
            ..Default::default()
        };
        let words = naga::back::spv::write_vec(module, &info, &options, None).map_err(|e| {
            invalid(format!(
                "naga cannot write SPIR-V for the shader: {}",
                chain(&e)
            ))
        })?;
        Ok(SpirvModule {
            words,
            entry_points,
            reflected: Some(reflected),
        })
    }

    /// The cheap checks of [`SpirvModule::from_words_unchecked`].
    fn check_unchecked(&self) -> Result<()> {
        check_header(&self.words)?;
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
            if count == 0 || count > self.words.len() - i {
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
            let fits = declared
                .constant_count
                .checked_mul(4)
                .is_some_and(|bytes| bytes <= PUSH_CONSTANT_BYTES);
            if !fits {
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

/// The magic number and the 5-word header.
fn check_header(words: &[u32]) -> Result<()> {
    if words.len() < 5 {
        return Err(invalid(format!(
            "SPIR-V module is {} words long; a module has at least a 5-word header",
            words.len()
        )));
    }
    if words[0] != SPIRV_MAGIC {
        return Err(invalid(format!(
            "not SPIR-V: magic number {:#010x}, expected {SPIRV_MAGIC:#010x}",
            words[0]
        )));
    }
    Ok(())
}

/// The most ids a SPIR-V module may have (the "Result <id> bound" universal limit).
const MAX_ID_BOUND: u32 = 0x3F_FFFF;

/// Checks the header's id bound, which naga's front end ignores (and naga's output carries its
/// own): at most [`MAX_ID_BOUND`], and above the ids of the declarations, decorations and
/// definitions that sit at fixed operand positions (types, constants, variables, functions,
/// labels, names, decorations, entry points). Drivers size tables by the bound, so a false one
/// marks a corrupted module; instructions are checked to lie within the words as they go.
fn check_id_bound(words: &[u32]) -> Result<()> {
    let bound = words[3];
    if bound == 0 || bound > MAX_ID_BOUND {
        return Err(invalid(format!(
            "malformed SPIR-V: the header's id bound is {bound}; SPIR-V allows 1 to \
             {MAX_ID_BOUND}"
        )));
    }
    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let opcode = words[i] & 0xffff;
        if count == 0 || count > words.len() - i {
            return Err(invalid(format!(
                "malformed SPIR-V: instruction at word {i} has length {count}, and the module \
                 has {} words",
                words.len()
            )));
        }
        let operands = &words[i + 1..i + count];
        // The operand holding the instruction's result id, or the id it names.
        let at = match opcode {
            // OpString, OpExtInstImport, OpName, OpMemberName, OpExecutionMode, OpType*,
            // OpTypeForwardPointer, OpDecorate, OpMemberDecorate, OpLabel.
            7 | 11 | 5 | 6 | 16 | 19..=39 | 71 | 72 | 248 => Some(0),
            // OpEntryPoint, OpConstant*, OpSpecConstant*, OpFunction, OpFunctionParameter,
            // OpVariable.
            15 | 41..=46 | 48..=52 | 54 | 55 | 59 => Some(1),
            _ => None,
        };
        if let Some(id) = at.and_then(|at| operands.get(at)) {
            if *id >= bound {
                return Err(invalid(format!(
                    "malformed SPIR-V: instruction at word {i} (opcode {opcode}) uses id {id}, \
                     but the header's id bound is {bound}"
                )));
            }
        }
        i += count;
    }
    Ok(())
}

/// Little-endian words of `bytes`, refusing a length that is not a multiple of 4.
fn words_of(bytes: &[u8]) -> Result<Vec<u32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(invalid(format!(
            "the SPIR-V is {} bytes, not a multiple of 4",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The metadata of `module`'s entry point `index`, from the resources it uses.
fn reflect(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    index: usize,
    entry: &naga::EntryPoint,
) -> Result<(EntryPoint, Reflected)> {
    let name = &entry.name;
    if entry.stage != naga::ShaderStage::Compute {
        return Err(invalid(format!(
            "entry point '{name}' is a {:?} shader; halcyon runs compute shaders only: remove \
             it or mark it @compute",
            entry.stage
        )));
    }
    let uses = info.get_entry_point(index);
    let mut reflected = Reflected {
        status: false,
        min_binding_sizes: Vec::new(),
        workgroup_memory: 0,
    };
    let mut constant_count = 0;
    for (handle, var) in module.global_variables.iter() {
        if uses[handle].is_empty() {
            continue;
        }
        let size = module.types[var.ty].inner.size(module.to_ctx());
        let what = match &var.name {
            Some(var_name) => format!("entry point '{name}' uses `{var_name}`"),
            None => format!("entry point '{name}' uses an unnamed resource"),
        };
        match var.space {
            naga::AddressSpace::Storage { .. } => match var.binding {
                Some(naga::ResourceBinding { group: 0, binding }) => {
                    if binding >= MAX_BINDINGS {
                        return Err(invalid(format!(
                            "{what} at @group(0) @binding({binding}); dispatch bindings are \
                             numbered 0 to {}",
                            MAX_BINDINGS - 1
                        )));
                    }
                    let at = binding as usize;
                    if reflected.min_binding_sizes.len() <= at {
                        reflected.min_binding_sizes.resize(at + 1, 0);
                    }
                    reflected.min_binding_sizes[at] = u64::from(size);
                }
                Some(naga::ResourceBinding {
                    group: STATUS_SET,
                    binding: STATUS_BINDING,
                }) => {
                    if size != 4 {
                        return Err(invalid(format!(
                            "{what} as the status word (@group({STATUS_SET}) \
                             @binding({STATUS_BINDING})), which is {size} bytes; the status \
                             word is one 4-byte `u32` or `atomic<u32>`"
                        )));
                    }
                    reflected.status = true;
                }
                Some(naga::ResourceBinding { group, binding }) => {
                    return Err(invalid(format!(
                        "{what} at @group({group}) @binding({binding}); halcyon's Vulkan \
                         pipeline layout has dispatch buffers at @group(0) @binding(0..n) and \
                         the status word at @group({STATUS_SET}) @binding({STATUS_BINDING}) only"
                    )));
                }
                None => return Err(invalid(format!("{what}, a storage buffer with no binding"))),
            },
            naga::AddressSpace::Uniform => {
                return Err(invalid(format!(
                    "{what}, a uniform buffer; halcyon's Vulkan dispatches bind storage buffers \
                     only: declare it `var<storage, read>` at @group(0), or pass small values \
                     as push constants"
                )));
            }
            naga::AddressSpace::Handle => {
                return Err(invalid(format!(
                    "{what}, a texture or sampler; halcyon's Vulkan dispatches bind storage \
                     buffers only"
                )));
            }
            naga::AddressSpace::PushConstant => {
                if !size.is_multiple_of(4) || size > PUSH_CONSTANT_BYTES {
                    return Err(invalid(format!(
                        "{what}, a push-constant block of {size} bytes; halcyon passes `u32` \
                         constants, so the block must be a multiple of 4 bytes and at most \
                         {PUSH_CONSTANT_BYTES}"
                    )));
                }
                constant_count = size / 4;
            }
            naga::AddressSpace::WorkGroup => {
                reflected.workgroup_memory = reflected
                    .workgroup_memory
                    .checked_add(u64::from(size))
                    .ok_or_else(|| invalid(format!("{what}: workgroup memory overflows")))?;
            }
            naga::AddressSpace::Private | naga::AddressSpace::Function => {}
        }
    }
    let entry_point = EntryPoint {
        name: name.clone(),
        workgroup_size: entry.workgroup_size,
        binding_count: reflected.min_binding_sizes.len() as u32,
        constant_count,
    };
    Ok((entry_point, reflected))
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

/// The module of a bytes spec: WGSL text or SPIR-V words through naga, or (from an unchecked
/// spec only) a [`PackedExecutable`] with hand-written metadata.
fn module_from_bytes(spec: &ExecutableSpec, bytes: &[u8]) -> Result<SpirvModule> {
    if spec.format == FORMAT_WGSL {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| invalid(format!("a 'wgsl' executable must be UTF-8 WGSL text: {e}")))?;
        return SpirvModule::from_wgsl(text);
    }
    if PackedExecutable::is_packed(bytes) {
        let packed = PackedExecutable::from_bytes(bytes)?;
        if !spec.is_unchecked() {
            return Err(invalid(
                "this 'spirv' executable is a packed executable, whose hand-written \
                 entry-point metadata halcyon cannot check: load it from \
                 ExecutableSpec::bytes_unchecked (unsafe), or pass plain SPIR-V words (or \
                 format 'wgsl' text) to ExecutableSpec::bytes to have naga check and reflect it"
                    .into(),
            ));
        }
        // SAFETY: the spec was made by the unsafe `ExecutableSpec::bytes_unchecked`, whose
        // caller vouches for the bytes as `from_words_unchecked` requires.
        return unsafe { SpirvModule::from_packed(&packed) };
    }
    SpirvModule::from_spirv(&words_of(bytes)?)
}

/// Refuses an entry point the device cannot run: workgroup size per dimension and in total,
/// workgroup memory, bindings and push constants against the device's limits.
fn check_limits(
    limits: &vk::PhysicalDeviceLimits,
    entry: &EntryPoint,
    workgroup_memory: u64,
) -> Result<()> {
    let name = &entry.name;
    for (axis, (&size, &limit)) in ["x", "y", "z"].iter().zip(
        entry
            .workgroup_size
            .iter()
            .zip(&limits.max_compute_work_group_size),
    ) {
        if size == 0 || size > limit {
            return Err(invalid(format!(
                "entry point '{name}' has workgroup size {size} in {axis}; this device allows 1 \
                 to {limit} (maxComputeWorkGroupSize)"
            )));
        }
    }
    let invocations = entry
        .workgroup_size
        .iter()
        .try_fold(1u32, |total, &n| total.checked_mul(n));
    if invocations.is_none_or(|n| n > limits.max_compute_work_group_invocations) {
        let [x, y, z] = entry.workgroup_size;
        return Err(invalid(format!(
            "entry point '{name}' has workgroups of {x}x{y}x{z} invocations; this device allows \
             at most {} (maxComputeWorkGroupInvocations)",
            limits.max_compute_work_group_invocations
        )));
    }
    if workgroup_memory > u64::from(limits.max_compute_shared_memory_size) {
        return Err(invalid(format!(
            "entry point '{name}' uses {workgroup_memory} bytes of workgroup memory; this device \
             allows {} (maxComputeSharedMemorySize)",
            limits.max_compute_shared_memory_size
        )));
    }
    // The status word, when used, takes one more storage buffer.
    let buffers = limits
        .max_per_stage_descriptor_storage_buffers
        .saturating_sub(1);
    if entry.binding_count > buffers.min(MAX_BINDINGS) {
        return Err(invalid(format!(
            "entry point '{name}' takes {} bindings; this device allows {} storage buffers per \
             shader besides the status word (maxPerStageDescriptorStorageBuffers)",
            entry.binding_count,
            buffers.min(MAX_BINDINGS)
        )));
    }
    let push = PUSH_CONSTANT_BYTES.min(limits.max_push_constants_size);
    if entry
        .constant_count
        .checked_mul(4)
        .is_none_or(|bytes| bytes > push)
    {
        return Err(invalid(format!(
            "entry point '{name}' takes {} constants; this device fits {} (maxPushConstantsSize)",
            entry.constant_count,
            push / 4
        )));
    }
    Ok(())
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
    /// Per entry point, per binding, the least length a bound range needs.
    min_binding_sizes: Vec<Vec<u64>>,
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
                parsed = module_from_bytes(spec, bytes)?;
                &parsed
            }
        };
        let statuses = match &module.reflected {
            Some(reflected) => reflected.iter().map(|r| r.status).collect(),
            None => status_users(module),
        };
        for (index, entry) in module.entry_points.iter().enumerate() {
            let workgroup_memory = module
                .reflected
                .as_ref()
                .map_or(0, |r| r[index].workgroup_memory);
            check_limits(&context.limits, entry, workgroup_memory)?;
        }
        let mut executable = VulkanExecutable {
            context: context.clone(),
            entry_points: module.entry_points.clone(),
            min_binding_sizes: match &module.reflected {
                Some(reflected) => reflected
                    .iter()
                    .map(|r| r.min_binding_sizes.clone())
                    .collect(),
                None => vec![Vec::new(); module.entry_points.len()],
            },
            pipelines: Vec::new(),
            module: vk::ShaderModule::null(),
        };
        let device = &context.device;
        let info = vk::ShaderModuleCreateInfo::default().code(&module.words);
        // SAFETY: the words are SPIR-V naga wrote from a module it validated, or words whose
        // caller vouched for them through an unsafe constructor (`from_words_unchecked`); the
        // info lives across the call.
        executable.module = unsafe { device.create_shader_module(&info, None) }
            .map_err(|r| vk_fail("vkCreateShaderModule", r))?;
        for (entry, status) in module.entry_points.iter().zip(statuses) {
            let pipeline = executable.pipeline(entry, status)?;
            executable.pipelines.push(pipeline);
        }
        Ok(executable)
    }

    /// The least length in bytes binding `binding` of entry point `entry` needs (the fixed-size
    /// part of the buffer the shader declares there; 0 when unknown or unused).
    pub(crate) fn min_binding_size(&self, entry: usize, binding: usize) -> u64 {
        self.min_binding_sizes
            .get(entry)
            .and_then(|sizes| sizes.get(binding))
            .copied()
            .unwrap_or(0)
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
