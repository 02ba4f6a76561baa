struct Constants { n: u32 }
var<push_constant> constants: Constants;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn add_one(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < constants.n) {
        data[i] = data[i] + 1u;
    }
}
