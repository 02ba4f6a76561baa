@group(0) @binding(0) var<storage, read_write> table: array<u32, 16>;
@compute @workgroup_size(16) fn fill(@builtin(local_invocation_index) i: u32) {
    table[i] = i;
}
