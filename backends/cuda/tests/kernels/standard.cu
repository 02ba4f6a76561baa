// The conformance suite's standard kernels (conformance/src/kernels.rs) and the benchmarks'
// empty kernel, in CUDA C. halcyon's dispatch model: one device pointer per binding, then one
// `unsigned int` per constant; block size = the entry point's workgroup size. `extern "C"`
// keeps the names unmangled. standard.ptx beside this file is NVRTC 12.8's output for it with
// `--gpu-architecture=compute_52` (`.target sm_52`), its `.version 8.7` line then lowered to
// `.version 8.0` (CUDA 12.0's PTX ISA, the oldest driver halcyon-cuda accepts; a CUDA 12.2 or
// 12.4 driver refuses 8.7), so the tests need no libnvrtc on a GPU machine. The kernels use
// nothing newer: ptxas 12.8 (pip's nvidia-cuda-nvcc-cu12 12.8.93), which rejects instructions
// the declared ISA lacks, assembles it for sm_52, sm_70 and sm_90 (it would accept ISA 5.0).
// Regenerate it with NVRTC 12.8 on LD_LIBRARY_PATH (the test does both steps):
//   cargo test -p halcyon-cuda --test cuda -- --ignored write_standard_ptx
// and check it with `PTXAS=/path/to/ptxas cargo test -p halcyon-cuda --test cuda ptxas`.

// x[i] += 1 for every i < n.
extern "C" __global__ void add_one_u32(unsigned int* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] += 1u;
    }
}

// y[i] = a * x[i] + y[i] for every i < n; `a` arrives as its bits. Rounded multiply then add
// (no fused multiply-add), so the result is the one the host computes.
extern "C" __global__ void saxpy_f32(const float* x, float* y, unsigned int a_bits, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __fadd_rn(__fmul_rn(__uint_as_float(a_bits), x[i]), y[i]);
    }
}

// Should fail its dispatch, but a CUDA kernel cannot fail a launch without a sticky,
// context-killing fault (__trap(), an illegal address): that would break the device for the
// rest of the process. So it does nothing, and the CUDA Kernels provider's can_fail() is false.
extern "C" __global__ void fail() {}

// Nothing at all: the benchmarks' round trip.
extern "C" __global__ void empty() {}
