// The conformance suite's standard kernels (conformance/src/kernels.rs) and the benchmarks'
// empty kernel, in CUDA C. halcyon's dispatch model: one device pointer per binding, then one
// `unsigned int` per constant; block size = the entry point's workgroup size. `extern "C"`
// keeps the names unmangled. A kernel that takes one more pointer after its constants takes a
// status word (`fail` below). standard.ptx beside this file is NVRTC 12.8's output for it with
// `--gpu-architecture=compute_52` (`.target sm_52`), its `.version 8.7` line then lowered to
// `.version 8.0` (CUDA 12.0's PTX ISA, the oldest driver halcyon-cuda accepts; a CUDA 12.2 or
// 12.4 driver refuses 8.7), so the tests need no libnvrtc on a GPU machine. The kernels use
// nothing newer: ptxas 12.8 (pip's nvidia-cuda-nvcc-cu12 12.8.93), which rejects instructions
// the declared ISA lacks, assembles it for sm_52, sm_70 and sm_90 (it would accept ISA 5.0).
// Regenerate it with NVRTC 12.8 on LD_LIBRARY_PATH (the test does both steps; pip's
// nvidia-cuda-nvrtc-cu12 12.8.93 was used for the `fail(unsigned int*)` version):
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

// Fails its dispatch through its status word (halcyon's stream-layer convention: the one
// parameter after the bindings and constants, here none of either, is a zeroed device `u32`
// that a kernel sets nonzero to fail its dispatch; the stream device checks it on completion).
// A trap or an illegal address would be a sticky fault that kills the context instead.
extern "C" __global__ void fail(unsigned int* status) {
    *status = 1u;
}

// Nothing at all: the benchmarks' round trip.
extern "C" __global__ void empty() {}
