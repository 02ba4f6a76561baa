@group(0) @binding(0) var<uniform> u: vec4<u32>;
@group(0) @binding(1) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1) fn k() { x[0] = u.x; }
