//! The fake GPU runtime (`halcyon-fake-gpu`) as the HIP runtime, and the conformance
//! suite's kernels for its device, shared by `tests/fake_runtime.rs` and
//! `tests/fake_runtime_leaks.rs`.

use std::sync::OnceLock;

use halcyon::{Device, EntryPoint, Executable, Result};
use halcyon_conformance::kernels;
use halcyon_fake_gpu::client::Fake;
use halcyon_hip::result::Hip;
use halcyon_hip::HipModule;

/// `tests/data/conformance.hip` compiled for gfx900, the fake device's target.
pub const CODE_OBJECT: &[u8] = include_bytes!("../data/conformance-gfx900.hsaco");

pub fn fake() -> &'static Fake {
    Fake::open().expect("the fake GPU runtime is built with these tests")
}

pub fn path() -> &'static str {
    fake().path().to_str().expect("a UTF-8 path")
}

/// The fake runtime.
pub fn hip() -> Hip {
    static HIP: OnceLock<Hip> = OnceLock::new();
    // SAFETY: the fake runtime exports HIP's names with HIP's signatures.
    *HIP.get_or_init(|| unsafe { Hip::load(&[path()]) }.expect("the fake runtime loads"))
}

/// The fake runtime as HIP 5.2 is: without `hipLaunchHostFunc`, so host functions are stream
/// callbacks.
pub fn hip_5_2() -> Hip {
    static HIP: OnceLock<Hip> = OnceLock::new();
    *HIP.get_or_init(|| {
        // SAFETY: as for `hip`.
        unsafe { Hip::load_without(&[path()], &["hipLaunchHostFunc"]) }
            .expect("the fake runtime loads")
    })
}

/// The suite's standard entry points.
pub fn standard() -> Vec<EntryPoint> {
    vec![
        kernels::add_one_u32(),
        kernels::saxpy_f32(),
        kernels::fail(),
    ]
}

/// A module of a fixture, `tests/data/*` (or a bundle `offload_bundle` made of them).
pub fn module(code_object: &[u8], entry_points: Vec<EntryPoint>) -> Result<HipModule> {
    // SAFETY: the fixtures are unmodified hiprtc/hipcc output for gfx900 (and gfx90a) whose
    // metadata agrees with their code, and the callers' entry points are checked against it.
    // Where a test alters a fixture's header (to name another GPU) or passes bytes that are no
    // code object (a `CCOB` header), the fake runtime refuses it when it reads that header,
    // before anything else of it is read or run.
    unsafe { HipModule::from_code_object_unchecked(code_object.to_vec(), entry_points) }
}

/// The suite's standard kernels from the gfx900 code object.
pub struct FakeKernels;

impl halcyon_conformance::Kernels for FakeKernels {
    fn load(&self, device: &Device) -> Result<Executable> {
        device.load_executable(&module(CODE_OBJECT, standard())?.spec())
    }

    /// `fail` sets its status word.
    fn can_fail(&self) -> bool {
        true
    }
}
