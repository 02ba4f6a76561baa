//! The conformance suite's standard kernels as WGSL, checked, reflected and compiled by naga
//! through `SpirvModule::from_wgsl`.

#![allow(dead_code)]

use halcyon::{Device, Executable, Result, StatusCode};
use halcyon_vulkan::SpirvModule;

/// `add_one_u32` and `saxpy_f32` use the two storage bindings (both `u32` arrays; saxpy
/// bit-casts), each with its own push-constant block (an entry point's constants are the
/// block it uses: one and two `u32`s); `fail` sets the status word (set 1, binding 0), which
/// fails its dispatch.
pub const STANDARD_WGSL: &str = r#"
struct AddOne { n: u32 }
var<push_constant> add_one: AddOne;
struct Saxpy { a: u32, n: u32 }
var<push_constant> saxpy: Saxpy;
@group(0) @binding(0) var<storage, read_write> b0: array<u32>;
@group(0) @binding(1) var<storage, read_write> b1: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn add_one_u32(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < add_one.n && i < arrayLength(&b0)) {
        b0[i] = b0[i] + 1u;
    }
}

@compute @workgroup_size(64, 1, 1)
fn saxpy_f32(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    let a = bitcast<f32>(saxpy.a);
    if (i < saxpy.n && i < arrayLength(&b0) && i < arrayLength(&b1)) {
        b1[i] = bitcast<u32>(a * bitcast<f32>(b0[i]) + bitcast<f32>(b1[i]));
    }
}

@group(1) @binding(0) var<storage, read_write> status: atomic<u32>;

@compute @workgroup_size(1, 1, 1)
fn fail() {
    atomicMax(&status, 1u);
}
"#;

/// Compiles WGSL to SPIR-V words with naga (no halcyon involved; for tests that need raw
/// words, such as the unchecked path and corrupted modules).
pub fn spirv(wgsl: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(wgsl).expect("WGSL parses");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::PUSH_CONSTANT,
    )
    .validate(&module)
    .expect("WGSL validates");
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .expect("naga writes SPIR-V")
}

/// The standard kernels as a `spirv` module, reflected by naga.
pub fn standard_module() -> Result<SpirvModule> {
    SpirvModule::from_wgsl(STANDARD_WGSL)
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

/// Runs test `test` of this test binary again in a child process under the Khronos validation
/// layer, with `var` set to `mode` (the child reads it to know what to do), and returns its
/// output; panics if the child failed.
pub fn run_under_validation_layer(test: &str, var: &str, mode: &str) -> String {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(var, mode)
        .env("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "child '{mode}' failed:\n{text}");
    text
}
