// A kernel using dynamic shared memory (`extern __shared__`), for the tests of
// CudaModule::with_shared_memory. shared.ptx beside this file is NVRTC 13.0's output for it
// with `--gpu-architecture=compute_75` (`.target sm_75`: NVRTC 13 targets nothing older), its
// `.version` line lowered to `.version 8.0` as for standard.ptx (see standard.cu), checked
// with ptxas 13.0 for sm_75 and sm_90 (`checked_in_ptx_assembles_with_ptxas`).

// out[b] = the sum of block b's elements of x (those below n). Each thread stores its element
// in the top blockDim.x of `words` u32s of dynamic shared memory, so a launch giving the
// block fewer than 4 * words bytes addresses shared memory it does not have (a 64 KiB
// declaration also needs the opt-in above 48 KiB); thread 0 then adds them up.
extern "C" __global__ void block_sum_u32(const unsigned int* x, unsigned int* out,
                                         unsigned int n, unsigned int words) {
    extern __shared__ unsigned int shared[];
    unsigned int* partial = shared + (words - blockDim.x);
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < n ? x[i] : 0u;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int sum = 0u;
        for (unsigned int t = 0; t < blockDim.x; ++t) {
            sum += partial[t];
        }
        out[blockIdx.x] = sum;
    }
}
