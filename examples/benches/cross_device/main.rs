//! Copies between devices (`Queue::copy_from`) against the least any such copy needs, in the
//! same run, 16 MiB each: between the CPU device and `vulkan://0` (lavapipe on the VM), staged
//! through host memory (`vulkan.rs`), and between two CUDA devices, one peer DMA
//! (`cuda_peer.rs`).
//!
//! * `cpu_to_vulkan/copy_from`: `vulkan_queue.copy_from(cpu_queue, ..)`, awaited: the CPU
//!   device copies into host-visible staging, a host call hands the bytes to a Vulkan queue
//!   write.
//! * `cpu_to_vulkan/write_shared`: the floor, the same bytes already in host memory written to
//!   the Vulkan buffer with one `write_shared`.
//! * `vulkan_to_cpu/copy_from` and `vulkan_to_cpu/read_into`: the other way, against one
//!   `read_into` of the Vulkan buffer into a reused vector.
//!
//! * `cuda_peer/copy_from`: `cuda1_queue.copy_from(cuda0_queue, ..)`, awaited: one
//!   `cuMemcpyPeerAsync` on `cuda://1`'s stream, settled by its completion path.
//! * `cuda_peer/raw_memcpy_peer_async` and `cuda_peer/raw_memcpy_async`: the floor, the driver
//!   API alone on a stream of its own (`cuMemcpyPeerAsync`, and `cuMemcpyAsync` with unified
//!   addresses), each followed by `cuStreamSynchronize`, between buffers of its own on the
//!   same two devices.
//!
//! Each group is skipped (and says why) without its devices: the Vulkan ones without a Vulkan
//! device, the CUDA one without two CUDA devices.

mod cuda_peer;
mod vulkan;

use std::time::Duration;

use criterion::{Criterion, Throughput};

/// The bytes each copy moves.
const BYTES: u64 = 16 << 20;

/// A group of 20 samples over about four seconds, in bytes per second.
pub(crate) fn configured<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes(BYTES));
    group
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    vulkan::run(&mut c);
    cuda_peer::run(&mut c);
    c.final_summary();
}
