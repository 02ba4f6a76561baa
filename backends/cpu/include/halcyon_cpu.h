/*
 * halcyon_cpu.h - the C ABI of halcyon's CPU device ("cpu-c-abi-v1" executables).
 *
 * A CPU executable in the "cpu-c-abi-v1" format is a shared library (an ELF .so on Linux) whose
 * bytes are handed to the CPU device (see the unsafe `halcyon_cpu::c_library_spec`, whose caller
 * vouches that the library is built against this header, unmodified and sound to run). The
 * library exports exactly one symbol, `halcyon_cpu_library_query`, which returns a table of
 * entry points: for each one its name, a kernel function, its workgroup size and the number of
 * buffer bindings and 32-bit constants a dispatch of it takes.
 *
 * A dispatch of an entry point with workgroup count [X, Y, Z] calls the kernel once for every
 * workgroup id in [0, X) x [0, Y) x [0, Z). The kernel itself loops over the invocations of its
 * workgroup (workgroup_size[0] * workgroup_size[1] * workgroup_size[2] of them).
 *
 * Writing a library (C99):
 *
 *     #include "halcyon_cpu.h"
 *
 *     static int add_one(const halcyon_cpu_dispatch_state_v1* state) {
 *         float* data = (float*)state->bindings[0];
 *         uint64_t n = state->binding_lengths[0] / sizeof(float);
 *         uint64_t i = (uint64_t)state->workgroup_id[0] * state->workgroup_size[0];
 *         uint64_t end = i + state->workgroup_size[0];
 *         for (; i < end && i < n; ++i) data[i] += 1.0f;
 *         return 0;
 *     }
 *
 *     static const halcyon_cpu_entry_point_v1 entry_points[] = {
 *         { "add_one", add_one, { 64, 1, 1 }, 1, 0 },
 *     };
 *     static const halcyon_cpu_library_v1 library = {
 *         HALCYON_CPU_ABI_VERSION, 1, entry_points,
 *     };
 *
 *     HALCYON_CPU_EXPORT const halcyon_cpu_library_v1*
 *     halcyon_cpu_library_query(uint32_t max_abi_version) {
 *         return max_abi_version >= 1 ? &library : NULL;
 *     }
 *
 * and build it with `cc -shared -fPIC -O2 -I <this directory> -o add_one.so add_one.c`.
 *
 * Versioning: HALCYON_CPU_ABI_VERSION is the version this header describes. Every struct and
 * typedef carries the version it belongs to in its name (`_v1`); a later version adds new names
 * and leaves these unchanged. A loader passes the highest version it understands to
 * halcyon_cpu_library_query; the library answers with a table of that version or a lower one
 * (the version it chose is in `abi_version`), or NULL if it can serve none.
 */

#ifndef HALCYON_CPU_H_
#define HALCYON_CPU_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. */
#define HALCYON_CPU_ABI_VERSION 1

/* The name of the one symbol a library exports. */
#define HALCYON_CPU_LIBRARY_QUERY_SYMBOL "halcyon_cpu_library_query"

/* The most entry points one library may declare; a loader rejects larger tables. */
#define HALCYON_CPU_MAX_ENTRY_POINTS 4096

/* Marks the query function as exported from the shared library, also when the library is
 * built with -fvisibility=hidden. */
#if defined(_WIN32) || defined(__CYGWIN__)
#define HALCYON_CPU_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define HALCYON_CPU_EXPORT __attribute__((visibility("default")))
#else
#define HALCYON_CPU_EXPORT
#endif

/*
 * What a kernel gets for one workgroup of a dispatch. Valid only during the call; the kernel
 * must not keep any pointer from it (or into the buffers) after it returns.
 */
typedef struct halcyon_cpu_dispatch_state_v1 {
    /* This workgroup's id; each component is below the matching workgroup_count component. */
    uint32_t workgroup_id[3];
    /* The dispatch's workgroup count in x, y, z. */
    uint32_t workgroup_count[3];
    /* Invocations per workgroup in x, y, z: the entry point's workgroup_size. */
    uint32_t workgroup_size[3];
    /* The number of 32-bit constants; at least the entry point's constant_count. */
    uint32_t constant_count;
    /* constant_count constants (a float is passed as its bit pattern); NULL when there are
     * none. */
    const uint32_t* constants;
    /* The number of buffer bindings; at least the entry point's binding_count. */
    uint32_t binding_count;
    /* binding_count pointers: bindings[i] is the first byte of binding i, which is
     * binding_lengths[i] bytes long. NULL when there are none. Two bindings may overlap when a
     * dispatch binds the same buffer twice. Other workgroups of the same dispatch run at the same
     * time on other threads, so a kernel writes only the bytes its workgroup owns. */
    void* const* bindings;
    /* binding_count lengths in bytes; NULL when there are no bindings. */
    const uint64_t* binding_lengths;
} halcyon_cpu_dispatch_state_v1;

/*
 * A kernel: called once per workgroup, possibly concurrently from several threads (for different
 * workgroups of one dispatch and for different dispatches), so it must be thread-safe.
 * Returns 0 on success; any other value fails the dispatch, and the code appears in the error
 * message. A kernel must return normally: it must not unwind (no C++ exception may escape it),
 * longjmp out, or end the process.
 */
typedef int (*halcyon_cpu_kernel_v1)(const halcyon_cpu_dispatch_state_v1* state);

/* One entry point of a library. */
typedef struct halcyon_cpu_entry_point_v1 {
    /* The name dispatches look the entry point up by: a non-empty NUL-terminated UTF-8 string,
     * unique within the library. */
    const char* name;
    /* The kernel; must not be NULL. */
    halcyon_cpu_kernel_v1 kernel;
    /* Invocations per workgroup in x, y, z; every component must be at least 1. */
    uint32_t workgroup_size[3];
    /* Buffer bindings a dispatch must supply. */
    uint32_t binding_count;
    /* 32-bit constants a dispatch must supply. */
    uint32_t constant_count;
} halcyon_cpu_entry_point_v1;

/*
 * The table a library serves. It and everything it points to (entry points, names) must stay
 * valid and unchanged while the library is loaded; static const storage is the usual choice.
 * The loader copies the names and metadata once, at load time.
 */
typedef struct halcyon_cpu_library_v1 {
    /* The ABI version of this table: HALCYON_CPU_ABI_VERSION (1) for this struct. */
    uint32_t abi_version;
    /* The number of entries in entry_points; at most HALCYON_CPU_MAX_ENTRY_POINTS. */
    uint32_t entry_point_count;
    /* entry_point_count entry points; may be NULL only when entry_point_count is 0. */
    const halcyon_cpu_entry_point_v1* entry_points;
} halcyon_cpu_library_v1;

/*
 * The one symbol a library exports. The loader calls it once per load with the highest ABI
 * version it understands; it returns a table whose abi_version is at most max_abi_version, or
 * NULL if it cannot serve any version <= max_abi_version. It may be called from any thread.
 */
HALCYON_CPU_EXPORT const halcyon_cpu_library_v1* halcyon_cpu_library_query(
    uint32_t max_abi_version);

/* The type of halcyon_cpu_library_query, for loaders. */
typedef const halcyon_cpu_library_v1* (*halcyon_cpu_library_query_fn)(uint32_t max_abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HALCYON_CPU_H_ */
