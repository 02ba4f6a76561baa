//! The gather kernel: a compute shader that packs a strided view's elements, which the core
//! dispatches for `Queue::copy_view` (see `halcyon::backend::DeviceBackend::gather_kernel` for
//! its bindings and constants). WGSL, loaded through the checked path like any executable.

/// The shader. One invocation per element: it unravels its index over the shape (rank 4,
/// leading axes of 1), sums index × stride for the element's place in the source, and copies
/// the element's words.
pub(crate) const GATHER_WGSL: &str = r#"
struct Gather {
    shape: vec4<u32>,
    strides: vec4<u32>,
    source_first: u32,
    target_first: u32,
    count: u32,
    words: u32,
    row: u32,
}
var<push_constant> gather: Gather;
@group(0) @binding(0) var<storage, read> source: array<u32>;
@group(0) @binding(1) var<storage, read_write> packed: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn halcyon_gather(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.y * gather.row + id.x;
    if (i >= gather.count) {
        return;
    }
    var rest = i;
    var at = 0u;
    for (var k = 3i; k >= 0; k = k - 1) {
        let d = gather.shape[k];
        at = at + (rest % d) * gather.strides[k];
        rest = rest / d;
    }
    let src = gather.source_first + at * gather.words;
    let dst = gather.target_first + i * gather.words;
    for (var w = 0u; w < gather.words; w = w + 1u) {
        packed[dst + w] = source[src + w];
    }
}
"#;
