@group(0) @binding(5000) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1) fn k() { x[0] = 1u; }
