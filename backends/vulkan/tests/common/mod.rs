//! The conformance suite's standard kernels as WGSL, compiled to SPIR-V with naga at test time.

#![allow(dead_code)]

use halcyon::{Device, Error, Executable, Result, StatusCode};
use halcyon_conformance::kernels;
use halcyon_vulkan::SpirvModule;

/// `add_one_u32` and `saxpy_f32` share the two storage bindings (both `u32` arrays; saxpy
/// bit-casts) and one push-constant block; `fail` sets the status word (set 1, binding 0),
/// which fails its dispatch.
pub const STANDARD_WGSL: &str = r#"
struct Constants { c0: u32, c1: u32 }
var<push_constant> constants: Constants;
@group(0) @binding(0) var<storage, read_write> b0: array<u32>;
@group(0) @binding(1) var<storage, read_write> b1: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn add_one_u32(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < constants.c0 && i < arrayLength(&b0)) {
        b0[i] = b0[i] + 1u;
    }
}

@compute @workgroup_size(64, 1, 1)
fn saxpy_f32(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    let a = bitcast<f32>(constants.c0);
    if (i < constants.c1 && i < arrayLength(&b0) && i < arrayLength(&b1)) {
        b1[i] = bitcast<u32>(a * bitcast<f32>(b0[i]) + bitcast<f32>(b1[i]));
    }
}

@group(1) @binding(0) var<storage, read_write> status: atomic<u32>;

@compute @workgroup_size(1, 1, 1)
fn fail() {
    atomicMax(&status, 1u);
}
"#;

/// Compiles WGSL to SPIR-V words with naga.
pub fn spirv(wgsl: &str) -> Result<Vec<u32>> {
    let bad = |what: String| Error::new(StatusCode::InvalidArgument, what);
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| bad(format!("WGSL: {}", e.emit_to_string(wgsl))))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::PUSH_CONSTANT,
    )
    .validate(&module)
    .map_err(|e| bad(format!("naga validation: {e:?}")))?;
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .map_err(|e| bad(format!("naga SPIR-V output: {e}")))
}

/// The standard kernels as a `spirv` module.
pub fn standard_module() -> Result<SpirvModule> {
    Ok(SpirvModule::new(
        spirv(STANDARD_WGSL)?,
        vec![
            kernels::add_one_u32(),
            kernels::saxpy_f32(),
            kernels::fail(),
        ],
    ))
}

/// The conformance [`halcyon_conformance::Kernels`] provider for Vulkan.
pub struct VulkanKernels;

impl halcyon_conformance::Kernels for VulkanKernels {
    fn load(&self, device: &Device) -> Result<Executable> {
        device.load_executable(&standard_module()?.spec())
    }
}

/// Device `vulkan://0`, or `None` (with the reason printed) when Vulkan is unavailable.
pub fn device_or_skip(test: &str) -> Option<Device> {
    match halcyon_vulkan::create_device(0) {
        Ok(device) => Some(device),
        Err(error) if error.code() == StatusCode::Unavailable => {
            eprintln!("skipping {test}: no Vulkan: {error}");
            None
        }
        Err(error) => panic!("{test}: cannot create vulkan://0: {error}"),
    }
}
