//! The fake GPU runtime (`halcyon-fake-gpu`) as the HIP runtime, and the conformance
//! suite's kernels for its device, shared by `tests/fake_runtime.rs` and
//! `tests/fake_runtime_leaks.rs`.

use std::sync::OnceLock;

use halcyon::{Device, Executable, Result};
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

/// The suite's standard kernels from the gfx900 code object.
pub struct FakeKernels;

impl halcyon_conformance::Kernels for FakeKernels {
    fn load(&self, device: &Device) -> Result<Executable> {
        let module = HipModule::new(
            CODE_OBJECT.to_vec(),
            vec![
                kernels::add_one_u32(),
                kernels::saxpy_f32(),
                kernels::fail(),
            ],
        );
        device.load_executable(&module.spec())
    }

    /// `fail` sets its status word.
    fn can_fail(&self) -> bool {
        true
    }
}
