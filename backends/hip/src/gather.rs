//! The gather kernel: HIP C++ that packs a strided view's elements, compiled for the machine's
//! GPU with hiprtc the first time a device needs it, which the core dispatches for
//! `Queue::copy_view` (see `halcyon::backend::DeviceBackend::gather_kernel` for its bindings
//! and constants), for the architecture `HipDeviceOptions::offload_arch` names or else the one
//! the kernel driver reports. Without hiprtc, or if it cannot compile for the GPU, the device
//! offers no kernel and gathers on the host (`Device::gathers_on_device` says so).

use halcyon::{EntryPoint, ExecutableSpec};

use crate::rtc::HipRtc;

/// The kernel: one thread per element, which unravels its index over the shape (rank 4,
/// leading axes of 1), sums index × stride, and copies the element: word by word, or as one
/// byte or halfword (neighbours sharing a word never touch each other's bytes). A block
/// takes an 8 × 8 tile of the last two axes where both are multiples of 8.
const GATHER_HIP: &str = r#"
extern "C" __global__ void halcyon_gather(
    const unsigned int* source, unsigned int* target,
    unsigned int s0, unsigned int s1, unsigned int s2, unsigned int s3,
    unsigned int t0, unsigned int t1, unsigned int t2, unsigned int t3,
    unsigned int source_first, unsigned int target_first, unsigned int count,
    unsigned int size, unsigned int row, unsigned int source_byte, unsigned int target_byte,
    unsigned int pad) {
    unsigned int i = blockIdx.y * row + blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const unsigned int shape[4] = {s0, s1, s2, s3};
    const unsigned int strides[4] = {t0, t1, t2, t3};
    // 8 x 8 tiles of the last two axes where both are multiples of 8, so that a transpose
    // reads and writes runs of 8 elements; e is the element's index.
    unsigned int e = i;
    if ((s2 & 7u) == 0 && (s3 & 7u) == 0) {
        unsigned int tile = i >> 6, across = s3 >> 3, rows = s2 >> 3;
        unsigned int plane_row = tile / across, plane = plane_row / rows;
        unsigned int row = (plane_row - plane * rows) * 8 + ((i >> 3) & 7);
        unsigned int column = (tile - plane_row * across) * 8 + (i & 7);
        e = (plane * s2 + row) * s3 + column;
    }
    unsigned int rest = e, at = 0;
    for (int k = 3; k >= 0 && rest != 0; --k) {
        unsigned int q = rest / shape[k];
        at += (rest - q * shape[k]) * strides[k];
        rest = q;
    }
    const unsigned char* from = (const unsigned char*)(source + source_first) + source_byte
        + (unsigned long long)at * size;
    unsigned char* to = (unsigned char*)(target + target_first) + target_byte
        + (unsigned long long)e * size;
    if (size == 1) {
        *to = *from;
    } else if (size == 2) {
        *(unsigned short*)to = *(const unsigned short*)from;
    } else {
        for (unsigned int w = 0; w < size / 4; ++w) {
            ((unsigned int*)to)[w] = ((const unsigned int*)from)[w];
        }
    }
}
"#;

/// The kernel compiled for architecture `arch` (else the GPU hiprtc finds current), or `None`
/// without hiprtc or a compilation.
pub(crate) fn spec(arch: Option<&str>) -> Option<ExecutableSpec> {
    let rtc = HipRtc::load_default().ok()?;
    let arch = arch.map(|arch| format!("--offload-arch={arch}"));
    let options: Vec<&str> = std::iter::once("-O3").chain(arch.as_deref()).collect();
    let entry = EntryPoint {
        name: halcyon::device::GATHER_ENTRY_POINT.into(),
        workgroup_size: [64, 1, 1],
        binding_count: 2,
        constant_count: 16,
    };
    let module = rtc
        .compile_module(GATHER_HIP, "halcyon_gather.hip", &options, vec![entry])
        .ok()?;
    Some(module.spec())
}
