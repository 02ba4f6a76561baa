//! Validation of transfer commands: each invalid fill, update or copy is rejected before it is
//! submitted, with `InvalidArgument` naming the offending numbers, and fails its signal fence.

use halcyon::{
    Binding, BindingTable, BufferParams, BufferUsage, CommandBuffer, CommandBufferMode, Device,
    MemoryType, Result, StatusCode, Timepoints,
};

use crate::harness::{assert_rejected, block_on, done};
use crate::kernels::Kernels;

/// A 3-byte fill pattern is rejected, naming the length.
pub fn fill_pattern_length_3(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(96, BufferParams::DEVICE)?;
        let fill = |t| queue.fill(t, [1u8, 2, 3], &buffer.whole());
        assert_rejected(
            device,
            "3-byte fill",
            fill,
            StatusCode::InvalidArgument,
            &["3"],
        )
        .await?;
        Ok(())
    })
}

/// A 4-byte fill at offset 6, length 20 is rejected, naming offset, length and alignment.
pub fn fill_misaligned(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let target = buffer.slice(6..26)?;
        let fill = |t| queue.fill(t, [1u8, 2, 3, 4], &target);
        let mentions = ["6", "20", "4"];
        assert_rejected(
            device,
            "misaligned fill",
            fill,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;
        Ok(())
    })
}

/// An update of 65540 bytes (above the 65536-byte inline limit) is rejected, naming both.
pub fn update_too_large(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(65540, BufferParams::DEVICE)?;
        let data = vec![0u8; 65540];
        let update = |t| queue.update(t, &data, &buffer.whole());
        let mentions = ["65540", "65536"];
        assert_rejected(
            device,
            "large update",
            update,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;
        Ok(())
    })
}

/// An update of 12 bytes into a 24-byte target is rejected, naming both lengths (and so is a
/// queue write of the same).
pub fn update_length_mismatch(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let target = buffer.slice(0..24)?;
        let data = [0u8; 12];
        let mentions = ["24", "12"];
        let update = |t| queue.update(t, &data, &target);
        assert_rejected(
            device,
            "update",
            update,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;
        let write = |t| queue.write(t, &data, &target);
        assert_rejected(
            device,
            "write",
            write,
            StatusCode::InvalidArgument,
            &mentions,
        )
        .await?;
        Ok(())
    })
}

/// A copy of 40 bytes into 28 is rejected, naming both lengths.
pub fn copy_length_mismatch(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let a = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let b = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let (source, target) = (a.slice(0..40)?, b.slice(0..28)?);
        let copy = |t| queue.copy(t, &source, &target);
        let mentions = ["40", "28"];
        assert_rejected(device, "copy", copy, StatusCode::InvalidArgument, &mentions).await?;
        Ok(())
    })
}

/// A copy from bytes 0..64 to 32..96 of one buffer is rejected, naming the ranges and buffer.
pub fn copy_overlapping(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(128, BufferParams::DEVICE)?;
        let (source, target) = (buffer.slice(0..64)?, buffer.slice(32..96)?);
        let copy = |t| queue.copy(t, &source, &target);
        let id = buffer.id().to_string();
        let mentions = ["32", "96", &id];
        assert_rejected(device, "copy", copy, StatusCode::InvalidArgument, &mentions).await?;
        Ok(())
    })
}

/// A reusable copy between two binding-table slots is rejected when the table puts overlapping
/// ranges of one buffer in them (checked when the table resolves, naming the ranges and buffer),
/// and runs when the ranges are apart.
pub fn copy_overlapping_through_slots(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(128, BufferParams::DEVICE)?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.copy(Binding::slot(0, 0, 64), Binding::slot(1, 0, 64))?;
        let copy = builder.finish();
        let mut overlapping = BindingTable::new();
        overlapping.set(0, buffer.slice(0..64)?)?;
        overlapping.set(1, buffer.slice(32..96)?)?;
        let run = |t| queue.execute(t, &copy, Some(&overlapping));
        let id = buffer.id().to_string();
        let mentions = ["32", "96", &id];
        assert_rejected(device, "copy", run, StatusCode::InvalidArgument, &mentions).await?;
        let mut apart = BindingTable::new();
        apart.set(0, buffer.slice(0..64)?)?;
        apart.set(1, buffer.slice(64..128)?)?;
        let run = queue.execute(Timepoints::default(), &copy, Some(&apart));
        done("a copy between ranges apart", run).await?;
        Ok(())
    })
}

/// A fill into a buffer allocated without `TRANSFER_TARGET` is rejected, naming the usage bit
/// and the buffer.
pub fn fill_without_transfer_target(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let queue = device.queue(0)?;
        let params = BufferParams {
            memory: MemoryType::DEVICE_LOCAL,
            usage: BufferUsage::TRANSFER_SOURCE | BufferUsage::DISPATCH_STORAGE,
        };
        let buffer = device.allocator().allocate(64, params)?;
        let fill = |t| queue.fill(t, 0u8, &buffer.whole());
        let id = buffer.id().to_string();
        let mentions = ["TRANSFER_TARGET", &id];
        assert_rejected(device, "fill", fill, StatusCode::InvalidArgument, &mentions).await?;
        Ok(())
    })
}
