//! Validation of dispatches and command buffers: counts, entry points, usage bits, binding
//! tables and the one-shot rule, each rejected with a code and a message naming what is wrong.

use halcyon::{
    Binding, BindingTable, BufferParams, BufferUsage, CommandBuffer, CommandBufferMode, Device,
    MemoryType, Result, StatusCode, Timepoints,
};

use crate::harness::{assert_error, assert_rejected, block_on, done};
use crate::kernels::{workgroups, Kernels, StandardKernels, ADD_ONE_U32, FAIL, SAXPY_F32};

const N: u32 = 64;

/// A dispatch binding a buffer allocated without `DISPATCH_STORAGE` is rejected with
/// `InvalidArgument` naming the usage bit, the entry point and the buffer.
pub fn dispatch_without_dispatch_storage(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let params = BufferParams {
            memory: MemoryType::DEVICE_LOCAL,
            usage: BufferUsage::TRANSFER,
        };
        let buffer = device.allocator().allocate(N as u64 * 4, params)?;
        let dispatch = |t| kernels.add_one(&queue, t, &buffer.whole(), N);
        let id = buffer.id().to_string();
        let mentions = ["DISPATCH_STORAGE", ADD_ONE_U32, &id];
        assert_rejected(
            device,
            "dispatch",
            dispatch,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;
        Ok(())
    })
}

/// Two constants for an entry point taking one is rejected with `InvalidArgument` naming the
/// entry point and both counts.
pub fn wrong_constant_count(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let buffer = device
            .allocator()
            .allocate(N as u64 * 4, BufferParams::DEVICE)?;
        let entry = &kernels.add_one;
        let bindings = [buffer.whole()];
        let dispatch = |t| {
            queue.dispatch(
                t,
                &entry
                    .launch(workgroups(N))
                    .constant(N)
                    .constant(7u32)
                    .bindings(&bindings),
            )
        };
        let mentions = [ADD_ONE_U32, "1", "2"];
        assert_rejected(
            device,
            "dispatch",
            dispatch,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;
        Ok(())
    })
}

/// One binding for an entry point taking two is rejected with `InvalidArgument` naming the
/// entry point and both counts.
pub fn wrong_binding_count(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let buffer = device
            .allocator()
            .allocate(N as u64 * 4, BufferParams::DEVICE)?;
        let entry = &kernels.saxpy;
        let bindings = [buffer.whole()];
        let dispatch = |t| {
            queue.dispatch(
                t,
                &entry
                    .launch(workgroups(N))
                    .constant(1.0f32)
                    .constant(N)
                    .bindings(&bindings),
            )
        };
        let mentions = [SAXPY_F32, "2", "1"];
        assert_rejected(
            device,
            "dispatch",
            dispatch,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;
        Ok(())
    })
}

/// An entry-point index past the executable's entry points is refused with `OutOfRange`
/// naming the index and the count, and a name it lacks with `NotFound` naming the entry points
/// it has: a dispatch takes a [`halcyon::Kernel`], which is looked up (and checked) before
/// anything is recorded or submitted, so no dispatch can name a missing entry point.
pub fn bad_entry_point_index(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    let kernels = StandardKernels::load(device, kernels)?;
    let count = kernels.executable.entry_points().len() as u32;
    let index = count + 5;
    let mentions = [&index.to_string()[..], &count.to_string()[..]];
    let looked_up = kernels.executable.kernel_at(index);
    assert_error(looked_up, StatusCode::OutOfRange, &mentions);
    let looked_up = kernels.executable.kernel("no_such_kernel");
    let mentions = ["no_such_kernel", ADD_ONE_U32, SAXPY_F32, FAIL];
    assert_error(looked_up, StatusCode::NotFound, &mentions);
    Ok(())
}

/// Executing a reusable command buffer that uses binding-table slots 0 and 1 with only slot 0
/// filled is rejected with `InvalidArgument` naming slot 1; a slot holding a range shorter than
/// the recording accesses is rejected with `OutOfRange` naming both sizes.
pub fn empty_binding_table_slot(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let a = device.allocator().allocate(256, BufferParams::DEVICE)?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.copy(Binding::slot(0, 0, 192), Binding::slot(1, 64, 192))?;
        let command_buffer = builder.finish();

        let mut table = BindingTable::new();
        table.set(0, a.whole())?;
        let execute = |t| queue.execute(t, &command_buffer, Some(&table));
        let mentions = ["slot", "1"];
        assert_rejected(
            device,
            "execute",
            execute,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;

        let b = device.allocator().allocate(128, BufferParams::DEVICE)?;
        table.set(1, b.whole())?;
        let execute = |t| queue.execute(t, &command_buffer, Some(&table));
        let mentions = ["128", "256"];
        assert_rejected(
            device,
            "execute",
            execute,
            StatusCode::OutOfRange,
            &mentions,
        )
        .await?;
        Ok(())
    })
}

/// A one-shot command buffer runs once; submitting it again is rejected with
/// `FailedPrecondition` saying it is one-shot.
pub fn one_shot_submitted_twice(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        builder.fill(9u8, buffer.whole())?;
        let command_buffer = builder.finish();

        let first = queue.execute(Timepoints::default(), &command_buffer, None);
        done("first submission of a one-shot command buffer", first).await?;
        let again = |t| queue.execute(t, &command_buffer, None);
        let mentions = ["one-shot"];
        assert_rejected(
            device,
            "resubmit",
            again,
            StatusCode::FailedPrecondition,
            &mentions,
        )
        .await?;
        Ok(())
    })
}
