// The conformance suite's standard kernels (halcyon_conformance::kernels) in HIP C++, compiled
// at test time with hiprtc (src/rtc.rs). Every kernel is extern "C" so that its symbol is its
// name, and takes halcyon's dispatch parameters: one pointer per binding, then the u32
// constants. tests/data/conformance-gfx900.hsaco is this file compiled by hiprtc (HIP 5.2.3)
// with --offload-arch=gfx900 -O3: the real code object the module validation tests read.

extern "C" __global__ void add_one_u32(unsigned int* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] += 1u;
    }
}

extern "C" __global__ void saxpy_f32(const float* x, float* y, unsigned int a_bits,
                                     unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __builtin_bit_cast(float, a_bits) * x[i] + y[i];
    }
}

// A trap would kill the whole context (every later call fails and, on ROCm, the process
// usually aborts); a kernel fails its dispatch through a status word instead: an
// `unsigned int*` after its constants (here there are none) that it sets nonzero. The stream
// device zeroes the word before the launch and fails the submission when it finds it set.
extern "C" __global__ void fail(unsigned int* status) {
    *status = 1u;
}
