// A kernel using dynamic shared memory (LDS), for the tests of HipModule::with_shared_memory.
// tests/data/shared-gfx900.hsaco is this file compiled by hiprtc (HIP 5.2.3) with
// --offload-arch=gfx900 -O3, as conformance-gfx900.hsaco is.

// out[b] = the sum of block b's elements of x (those below n). Each thread stores its element
// in the top blockDim.x of `words` u32s of dynamic shared memory, so a launch giving the
// block fewer than 4 * words bytes addresses shared memory it does not have; thread 0 then
// adds them up.
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
