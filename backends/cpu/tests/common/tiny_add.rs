//! The tiny dispatch the CPU benches and allocation tests share: `c = a + b` over 256 `f32`,
//! one workgroup, on three buffers of the device. Included with `#[path]` by the targets that
//! use it.

use halcyon::{Buffer, BufferParams, Device, EntryPoint, Launch};
use halcyon_cpu::RustKernels;

/// Elements of the tiny add.
pub const TINY: usize = 256;

/// The tiny add's launch on `device` (its kernel loaded, its three buffers allocated and
/// bound), and the buffers.
pub fn tiny_add(device: &Device) -> (Launch, Vec<Buffer>) {
    let kernels = RustKernels::new().entry(
        EntryPoint {
            name: "add".into(),
            workgroup_size: [TINY as u32, 1, 1],
            binding_count: 3,
            constant_count: 0,
        },
        |ctx| {
            let (a, b) = (ctx.binding::<f32>(0)?, ctx.binding::<f32>(1)?);
            for ((c, a), b) in ctx.chunk_mut::<f32>(2, TINY)?.iter_mut().zip(a).zip(b) {
                *c = a + b;
            }
            Ok(())
        },
    );
    let add = (device.load_executable(&kernels.spec()))
        .and_then(|executable| executable.kernel("add"))
        .expect("the tiny add loads");
    let buffers: Vec<Buffer> = (0..3)
        .map(|_| {
            (device.allocator())
                .allocate((TINY * 4) as u64, BufferParams::DEVICE)
                .expect("allocate")
        })
        .collect();
    let launch = add
        .launch([1, 1, 1])
        .bindings(buffers.iter().map(|b| b.whole()));
    (launch, buffers)
}
