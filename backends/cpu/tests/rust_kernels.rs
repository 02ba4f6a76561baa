//! Rust kernels: a binding read as a type it is not aligned for fails the dispatch with an
//! error naming the binding and the type, instead of the kernel silently seeing nothing.

use halcyon::{BufferParams, EntryPoint, StatusCode, Timepoints};
use halcyon_cpu::{CpuDeviceOptions, RustKernels};

#[test]
fn a_misaligned_binding_fails_the_dispatch() {
    let device = halcyon_cpu::create_device(CpuDeviceOptions::default()).unwrap();
    let entry = EntryPoint {
        name: "sum_u64".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 1,
        constant_count: 0,
    };
    let spec = RustKernels::new()
        .entry(entry, |ctx| {
            // SAFETY: one workgroup, read only.
            let values = unsafe { ctx.binding::<u64>(0) };
            let _sum: u64 = values.iter().sum();
            Ok(())
        })
        .spec();
    let executable = device.load_executable(&spec).unwrap();
    let buffer = device
        .allocator()
        .allocate(64, BufferParams::DEVICE)
        .unwrap();
    let queue = device.queue(0).unwrap();
    futures::executor::block_on(async {
        let aligned = buffer.slice(8..64).unwrap();
        queue
            .dispatch(
                Timepoints::default(),
                &executable,
                0,
                [1, 1, 1],
                &[],
                &[aligned],
            )
            .await
            .unwrap();
        let misaligned = buffer.slice(4..60).unwrap();
        let error = queue
            .dispatch(
                Timepoints::default(),
                &executable,
                0,
                [1, 1, 1],
                &[],
                &[misaligned],
            )
            .await
            .unwrap_err();
        assert_eq!(error.code(), StatusCode::Internal, "{error}");
        let message = error.to_string();
        assert!(
            message.contains("binding 0") && message.contains("u64") && message.contains('8'),
            "{message}"
        );
    });
}
