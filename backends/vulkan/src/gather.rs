//! The gather kernel: a compute shader that packs a strided view's elements, which the core
//! dispatches for `Queue::copy_view` (see `halcyon::backend::DeviceBackend::gather_kernel` for
//! its bindings and constants). WGSL, loaded through the checked path like any executable.

/// The shader. One invocation per element: it unravels its index over the shape (rank 4,
/// leading axes of 1) and sums index × stride for the element's place in the source. An
/// element of whole words is copied word by word. One of 1 or 2 bytes is shifted out of its
/// source word and into its target word with an atomic and (clearing its bytes) and or
/// (setting them), since WGSL has no byte stores and the word's other bytes belong to
/// neighbouring invocations or lie outside the target.
pub(crate) const GATHER_WGSL: &str = r#"
struct Gather {
    shape: vec4<u32>,
    strides: vec4<u32>,
    source_first: u32,
    target_first: u32,
    count: u32,
    size: u32,
    row: u32,
    source_byte: u32,
    target_byte: u32,
}
var<push_constant> gather: Gather;
@group(0) @binding(0) var<storage, read> source: array<u32>;
@group(0) @binding(1) var<storage, read_write> packed: array<atomic<u32>>;

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
    if (gather.size >= 4u) {
        let words = gather.size / 4u;
        let src = gather.source_first + at * words;
        let dst = gather.target_first + i * words;
        for (var w = 0u; w < words; w = w + 1u) {
            atomicStore(&packed[dst + w], source[src + w]);
        }
        return;
    }
    let mask = (1u << (8u * gather.size)) - 1u;
    let src_byte = gather.source_byte + at * gather.size;
    let value = (source[gather.source_first + src_byte / 4u] >> (8u * (src_byte % 4u))) & mask;
    let dst_byte = gather.target_byte + i * gather.size;
    let word = gather.target_first + dst_byte / 4u;
    let shift = 8u * (dst_byte % 4u);
    atomicAnd(&packed[word], ~(mask << shift));
    atomicOr(&packed[word], value << shift);
}
"#;
