/*
 * An example "cpu-c-abi-v1" library for halcyon's CPU device. Build it with
 *
 *     cc -shared -fPIC -O2 -std=c99 -I backends/cpu/include -o saxpy.so backends/cpu/tests/kernels/saxpy.c
 *
 * and load the .so with `halcyon_cpu::c_library_spec("saxpy.so")`.
 *
 * Entry points:
 *
 *   "saxpy"  y[i] = a * x[i] + y[i] for i in [0, n).
 *            bindings:  0: x (n floats, read), 1: y (n floats, read and written)
 *            constants: 0: a (the bit pattern of an f32), 1: n
 *            workgroup size [64, 1, 1]: dispatch ceil(n / 64) workgroups in x.
 *            Returns 1 if the dispatch has too few bindings or constants, 2 if a binding is
 *            shorter than n floats.
 *
 *   "fail"   always returns 7. No bindings, no constants, workgroup size [1, 1, 1].
 */

#include <stdint.h>
#include <string.h>

#include "halcyon_cpu.h"

static int saxpy(const halcyon_cpu_dispatch_state_v1* state) {
    if (state->binding_count < 2 || state->constant_count < 2) {
        return 1;
    }
    float a;
    uint32_t a_bits = state->constants[0];
    memcpy(&a, &a_bits, sizeof a);
    uint64_t n = state->constants[1];
    if (state->binding_lengths[0] / sizeof(float) < n ||
        state->binding_lengths[1] / sizeof(float) < n) {
        return 2;
    }
    const float* x = (const float*)state->bindings[0];
    float* y = (float*)state->bindings[1];

    uint64_t begin = (uint64_t)state->workgroup_id[0] * state->workgroup_size[0];
    uint64_t end = begin + state->workgroup_size[0];
    if (end > n) {
        end = n;
    }
    for (uint64_t i = begin; i < end; ++i) {
        y[i] = a * x[i] + y[i];
    }
    return 0;
}

static int fail(const halcyon_cpu_dispatch_state_v1* state) {
    (void)state;
    return 7;
}

static const halcyon_cpu_entry_point_v1 entry_points[] = {
    {"saxpy", saxpy, {64, 1, 1}, 2, 2},
    {"fail", fail, {1, 1, 1}, 0, 0},
};

static const halcyon_cpu_library_v1 library = {
    HALCYON_CPU_ABI_VERSION,
    (uint32_t)(sizeof entry_points / sizeof entry_points[0]),
    entry_points,
};

HALCYON_CPU_EXPORT const halcyon_cpu_library_v1* halcyon_cpu_library_query(
    uint32_t max_abi_version) {
    return max_abi_version >= 1 ? &library : NULL;
}
