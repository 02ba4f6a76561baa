//! Resource lifetime follows the timeline: in-flight work keeps what it uses alive.

use halcyon::{BufferParams, CommandBuffer, CommandBufferMode, Device, Fence, Result};

use crate::harness::{
    block_on, done, download_u32, eventually, join, link, pattern_u32, signal_from_thread,
    upload_u32,
};
use crate::kernels::{workgroups, Kernels, StandardKernels};

/// Work recorded and submitted behind an unsignalled semaphore, then every handle it uses is
/// dropped (the command buffer, the executable, a scratch buffer, the data buffer's original
/// handle): nothing is freed while the work is pending; once released, the work completes with
/// correct data (read through a clone kept for the purpose) and the scratch memory is freed.
pub fn dropped_handles_outlive_in_flight_work(
    device: &Device,
    kernels: &dyn Kernels,
) -> Result<()> {
    const N: u32 = 1000;
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let allocator = device.allocator();
        let data: Vec<u32> = pattern_u32(N as usize, 8).iter().map(|v| v >> 1).collect();
        let buffer = upload_u32(&queue, &data).await?;
        let reader = buffer.clone();
        let without_scratch = allocator.stats().bytes_in_use;
        let scratch = allocator.allocate(N as u64 * 4, BufferParams::DEVICE)?;
        let with_scratch = allocator.stats().bytes_in_use;

        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        for target in [&buffer, &scratch] {
            builder.dispatch(
                &kernels
                    .add_one
                    .launch(workgroups(N))
                    .constant(N)
                    .binding(target.whole()),
            )?;
        }
        let command_buffer = builder.finish();
        let (gate, signal) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
        let submission = queue.execute(link(&gate, &signal), &command_buffer, None);
        drop((command_buffer, kernels, buffer, scratch));
        assert_eq!(
            allocator.stats().bytes_in_use,
            with_scratch,
            "memory used by pending work was freed when its handles were dropped"
        );

        let thread = signal_from_thread(&gate, 1);
        done("work whose handles were dropped", submission).await?;
        join(thread)?;
        let expected: Vec<u32> = data.iter().map(|v| v + 1).collect();
        let read = download_u32(&queue, Fence::at(&signal, 1), &reader.whole()).await?;
        assert_eq!(
            read, expected,
            "the dispatch whose handles were dropped computed wrong data"
        );
        eventually("the dropped scratch buffer's memory being freed", || {
            allocator.stats().bytes_in_use <= without_scratch
        })
        .await
    })
}
