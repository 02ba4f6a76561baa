//! Views as dispatch bindings on the CPU device: a kernel that declares its bindings' types
//! (`Kernel::expecting`) takes matching views and refuses the rest, at dispatch and at
//! recording, naming the binding.

use halcyon::{
    BufferView, CommandBuffer, CommandBufferMode, ElementType, EntryPoint, StatusCode, Timepoints,
};
use halcyon_cpu::RustKernels;

/// `y = 2 · x`, one workgroup per 4 elements.
fn double() -> RustKernels {
    let entry = EntryPoint {
        name: "double".into(),
        workgroup_size: [4, 1, 1],
        binding_count: 2,
        constant_count: 0,
    };
    RustKernels::new().entry(entry, |ctx| {
        let i = ctx.workgroup_index() as usize * 4;
        let x = ctx.binding::<f32>(0)?;
        let y = ctx.chunk_mut::<f32>(1, 4)?;
        for (k, out) in y.iter_mut().enumerate() {
            *out = 2.0 * x[i + k];
        }
        Ok(())
    })
}

#[tokio::test]
async fn declared_bindings_take_matching_views_and_refuse_the_rest() {
    let device = halcyon_cpu::default_device().unwrap();
    let queue = device.queue(0).unwrap();
    let kernel = device
        .load_executable(&double().spec())
        .unwrap()
        .kernel("double")
        .unwrap()
        .expecting(0, ElementType::F32, 2)
        .expecting(1, ElementType::F32, 2);
    assert_eq!(kernel.expected(1), Some((ElementType::F32, 2)));
    assert_eq!(kernel.expected(2), None);
    let data: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let (x, up) = BufferView::from_host(&queue, Timepoints::default(), &data, &[2, 4]).unwrap();
    up.await.unwrap();
    let (y, up) =
        BufferView::from_host(&queue, Timepoints::default(), &[0f32; 8], &[2, 4]).unwrap();
    up.await.unwrap();

    let launch = kernel.launch([2, 1, 1]).view(&x).view(&y);
    queue
        .dispatch(Timepoints::default(), &launch)
        .await
        .unwrap();
    let doubled: Vec<f32> = y.to_host(&queue, Timepoints::default()).await.unwrap();
    assert_eq!(doubled, data.iter().map(|v| 2.0 * v).collect::<Vec<_>>());

    // The wrong rank, the wrong type, a strided view: each names binding, expected and given.
    let flat = x.reshape(&[8]).unwrap();
    let (ints, up) =
        BufferView::from_host(&queue, Timepoints::default(), &[0i32; 8], &[2, 4]).unwrap();
    up.await.unwrap();
    let column = x.slice(1, 0..1).unwrap();
    for (given, text) in [
        (&flat, "given a rank-1 view of f32"),
        (&ints, "rank-2 view of i32"),
        (&column, "given a strided rank-2 view"),
    ] {
        let launch = kernel.launch([2, 1, 1]).view(given).view(&y);
        let error = queue
            .dispatch(Timepoints::default(), &launch)
            .await
            .unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        let message = error.to_string();
        assert!(
            message.contains("binding 0 of dispatch 'double'"),
            "{message}"
        );
        assert!(message.contains(text), "{message}");
        // Recording refuses it too.
        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        let recorded = builder.dispatch(&launch);
        assert_eq!(recorded.unwrap_err().code(), StatusCode::InvalidArgument);
    }
    // A plain range is not checked.
    let launch = kernel.launch([2, 1, 1]).binding(x.range()).view(&y);
    queue
        .dispatch(Timepoints::default(), &launch)
        .await
        .unwrap();
}

/// The CPU device packs strided views on its workers (`Command::Gather`): one- and two-word
/// elements, rank 4, ranges off any alignment.
#[test]
fn strided_views_are_gathered_by_the_workers() {
    let device = halcyon_cpu::default_device().unwrap();
    halcyon_conformance::cases::strided_views_gathered_on_device(&device);
}
