//! Binding tables: one reusable recording replayed with different buffers.

use halcyon::{Binding, BindingTable, CommandBuffer, CommandBufferMode, Device, Fence, Result};

use crate::harness::{block_on, done, download_u32, pattern_u32, upload_u32};
use crate::kernels::{workgroups, Kernels, StandardKernels};

/// One reusable command buffer whose increment binds slot 0 is recorded once and replayed with
/// three different buffers, buffer `k` bound `k + 1` times, then each twice more in turn
/// (`0, 1, 2, 0, 1, 2`), all submitted before any completes: each buffer ends exactly `k + 3`
/// above its initial data, so every replay hit the buffer its table named, and only it, also
/// where a backend points a graph captured from the recording at each new table in place
/// while earlier launches of it are still in flight.
pub fn binding_table_replay(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    const N: u32 = 500;
    block_on(async {
        let kernels = StandardKernels::load(device, kernels)?;
        let queue = device.queue(0)?;
        let bytes = N as u64 * 4;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.dispatch(
            &kernels
                .add_one
                .launch(workgroups(N))
                .constant(N)
                .binding(Binding::slot(0, 0, bytes)),
        )?;
        let command_buffer = builder.finish();
        assert_eq!(command_buffer.slot_count(), 1);

        let mut initial = Vec::new();
        let mut buffers = Vec::new();
        for k in 0..3 {
            let data: Vec<u32> = pattern_u32(N as usize, 20 + k)
                .iter()
                .map(|v| v >> 4)
                .collect();
            buffers.push(upload_u32(&queue, &data).await?);
            initial.push(data);
        }

        let timeline = queue.timeline()?;
        let mut submissions = Vec::new();
        for (k, buffer) in buffers.iter().enumerate() {
            let table = BindingTable::from_ranges([buffer.whole()]);
            for _ in 0..=k {
                submissions.push(queue.execute(timeline.next(), &command_buffer, Some(&table)));
            }
        }
        for _ in 0..2 {
            for buffer in &buffers {
                let table = BindingTable::from_ranges([buffer.whole()]);
                submissions.push(queue.execute(timeline.next(), &command_buffer, Some(&table)));
            }
        }
        for (i, submission) in submissions.into_iter().enumerate() {
            done(&format!("replay {i}"), submission).await?;
        }

        let end = Fence::at(timeline.semaphore(), timeline.last());
        for (k, buffer) in buffers.iter().enumerate() {
            let values = download_u32(&queue, end.clone(), &buffer.whole()).await?;
            let expected: Vec<u32> = initial[k].iter().map(|v| v + k as u32 + 3).collect();
            assert_eq!(
                values,
                expected,
                "buffer {k} should have been incremented {} times",
                k + 3
            );
        }
        Ok(())
    })
}
