var<workgroup> scratch: array<u32, 64>;
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(64) fn k(@builtin(local_invocation_index) i: u32) {
    scratch[i] = x[i];
    workgroupBarrier();
    x[i] = scratch[63u - i];
}
