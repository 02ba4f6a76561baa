override width: u32 = 64u;
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1) fn k() { x[0] = width; }
