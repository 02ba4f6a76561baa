@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1) fn k(@builtin(local_invocation_index) j: u32) { x[i32(j) - 1] = 1u; }
