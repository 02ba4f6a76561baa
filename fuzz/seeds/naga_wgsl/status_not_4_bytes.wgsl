@group(1) @binding(0) var<storage, read_write> status: array<u32, 2>;
@compute @workgroup_size(1) fn k() { status[1] = 1u; }
