@group(0) @binding(0) var<storage, read_write> flag: array<u32>;
@group(1) @binding(0) var<storage, read_write> status: atomic<u32>;

@compute @workgroup_size(1, 1, 1)
fn check() {
    if (flag[0] != 0u) {
        atomicMax(&status, flag[0]);
    }
}
