struct AddOne { n: u32 }
var<push_constant> add_one: AddOne;
struct Saxpy { a: u32, n: u32 }
var<push_constant> saxpy: Saxpy;
@group(0) @binding(0) var<storage, read_write> b0: array<u32>;
@group(0) @binding(1) var<storage, read_write> b1: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn add_one_u32(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < add_one.n && i < arrayLength(&b0)) {
        b0[i] = b0[i] + 1u;
    }
}

@compute @workgroup_size(64, 1, 1)
fn saxpy_f32(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    let a = bitcast<f32>(saxpy.a);
    if (i < saxpy.n && i < arrayLength(&b0) && i < arrayLength(&b1)) {
        b1[i] = bitcast<u32>(a * bitcast<f32>(b0[i]) + bitcast<f32>(b1[i]));
    }
}

@group(1) @binding(0) var<storage, read_write> status: atomic<u32>;

@compute @workgroup_size(1, 1, 1)
fn fail() {
    atomicMax(&status, 1u);
}
