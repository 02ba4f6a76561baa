@group(0) @binding(2) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1) fn only_two() { x[0] = 1u; }
