//! The typed user API on the CPU device: kernels looked up by name, launches with typed
//! constants, typed transfers and reads.

use futures::executor::block_on;
use halcyon::{BufferParams, EntryPoint, StatusCode, Timepoints};
use halcyon_cpu::RustKernels;

fn entry(name: &str, binding_count: u32, constant_count: u32) -> EntryPoint {
    EntryPoint {
        name: name.into(),
        workgroup_size: [4, 1, 1],
        binding_count,
        constant_count,
    }
}

/// `y = a * y + b` with a float and an integer constant, each passed as itself.
#[test]
fn launches_pass_typed_constants_bit_for_bit() -> halcyon::Result<()> {
    let device = halcyon_cpu::default_device()?;
    let queue = device.queue(0)?;
    let kernels = RustKernels::new().entry(entry("axpb", 1, 2), |ctx| {
        let a = f32::from_bits(ctx.constants()[0]);
        let b = ctx.constants()[1] as i32 as f32;
        for y in ctx.chunk_mut::<f32>(0, 4)? {
            *y = a * *y + b;
        }
        Ok(())
    });
    let executable = device.load_executable(&kernels.spec())?;
    let axpb = executable.kernel("axpb")?;
    assert_eq!(axpb.name(), "axpb");
    assert_eq!(axpb.entry_point().constant_count, 2);
    assert!(axpb.executable().ptr_eq(&executable));

    let y = device.allocator().allocate(32, BufferParams::DEVICE)?;
    let timeline = queue.timeline()?;
    block_on(async {
        queue.fill(timeline.next(), 2.0f32, &y.whole()).await?;
        let launch = axpb
            .launch([2, 1, 1])
            .constant(1.5f32)
            .constant(-1i32)
            .binding(y.whole());
        queue.dispatch(timeline.next(), &launch).await?;
        let ys: Vec<f32> = queue.read(timeline.next(), &y.whole()).await?;
        assert_eq!(ys, [2.0; 8]);

        // A constant of another size fails the dispatch, naming its size.
        let wide = axpb
            .launch([1, 1, 1])
            .constant(1.0f64)
            .constant(0u32)
            .binding(y.whole());
        let error = queue.dispatch(timeline.next(), &wide).await.unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(error.message().contains("8 bytes"), "{error}");
        Ok::<(), halcyon::Error>(())
    })?;

    let error = executable.kernel("nope").unwrap_err();
    assert_eq!(error.code(), StatusCode::NotFound);
    assert!(error.message().contains("axpb"), "{error}");
    Ok(())
}

/// Typed writes, updates, fills and reads; lengths that are not whole elements are refused.
#[test]
fn transfers_take_and_give_typed_elements() -> halcyon::Result<()> {
    let device = halcyon_cpu::default_device()?;
    let queue = device.queue(0)?;
    let buffer = device.allocator().allocate(16, BufferParams::DEVICE)?;
    let t = Timepoints::default;
    block_on(async {
        queue.write(t(), &[1u32, 2, 3, 4], &buffer.whole()).await?;
        queue.update(t(), &[-5i16, 6], &buffer.slice(4..8)?).await?;
        queue.fill(t(), 0xABCDu16, &buffer.slice(12..16)?).await?;
        let words: Vec<u32> = queue.read(t(), &buffer.slice(0..12)?).await?;
        let expected_1 = u32::from_ne_bytes(bytemuck::cast([-5i16, 6]));
        assert_eq!(words, [1, expected_1, 3]);
        let halves: Vec<u16> = queue.read(t(), &buffer.slice(12..16)?).await?;
        assert_eq!(halves, [0xABCD, 0xABCD]);

        // read_into reuses the vector, replacing its contents.
        let spare: Vec<u32> = Vec::with_capacity(64);
        let capacity = spare.capacity();
        let read = queue.read_into(t(), &buffer.slice(0..8)?, spare).await?;
        assert_eq!(read, [1, expected_1]);
        assert_eq!(read.capacity(), capacity);
        let bytes = queue
            .read_into(t(), &buffer.slice(0..4)?, vec![9u8; 100])
            .await?;
        assert_eq!(bytes, 1u32.to_ne_bytes());

        let error = queue
            .read::<u32>(t(), &buffer.slice(0..6)?)
            .await
            .unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(error.message().contains("6 bytes"), "{error}");
        let error = queue.fill(t(), 0u64, &buffer.whole()).await.unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(error.message().contains("not 8"), "{error}");
        Ok(())
    })
}

/// Queries are typed by their key: the standard keys answer in their own types, a backend's
/// key by name through `query_raw`, and an unknown key is `NotFound` naming it.
#[test]
fn queries_answer_in_their_keys_types() {
    use halcyon::device::{keys, Key};
    let device = halcyon_cpu::default_device().unwrap();
    let queues: u32 = device.query(keys::QUEUE_COUNT).unwrap();
    assert_eq!(queues, device.queue_count());
    let concurrency: u32 = device.query(keys::CONCURRENCY).unwrap();
    assert!(concurrency >= 1);
    assert_eq!(device.query(keys::BINDING_ALIGNMENT).unwrap(), 1u64);
    assert_eq!(device.query_raw("cpu.inline").unwrap(), 0);
    let inline: Key<bool> = Key::new("cpu.inline");
    assert!(!device.query(inline).unwrap());
    let error = device.query_raw("cpu.no_such_key").unwrap_err();
    assert_eq!(error.code(), halcyon::StatusCode::NotFound);
    assert!(error.message().contains("cpu.no_such_key"), "{error}");
    // An answer that does not fit the key's type is the backend's bug, said as such.
    let as_bool: Key<bool> = Key::new(keys::names::CONCURRENCY);
    if concurrency > 1 {
        let error = device.query(as_bool).unwrap_err();
        assert_eq!(error.code(), halcyon::StatusCode::Internal, "{error}");
    }
}
