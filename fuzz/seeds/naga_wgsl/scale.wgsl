struct Params { a: u32, b: u32, n: u32 }
var<push_constant> params: Params;
@group(0) @binding(0) var<storage, read> input: array<u32>;
@group(0) @binding(1) var<storage, read_write> output: array<u32>;

@compute @workgroup_size(8, 4, 1)
fn scale(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.y * 8u + id.x;
    if (i < params.n) {
        output[i] = input[i] * params.a + params.b;
    }
}
