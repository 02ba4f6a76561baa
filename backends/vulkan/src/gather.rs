//! The gather kernel: a compute shader that packs a strided view's elements, which the core
//! dispatches for `Queue::copy_view` (see `halcyon::backend::DeviceBackend::gather_kernel` for
//! its bindings and constants). WGSL, loaded through the checked path like any executable.

/// The shader. One invocation per element: it unravels its index over the shape (rank 4,
/// leading axes of 1) and sums index × stride for the element's place in the source; a
/// workgroup takes an 8 × 8 tile of the last two axes where both are multiples of 8. An
/// element of whole words is copied word by word. One of 1 or 2 bytes is shifted out of its
/// source word and into its target word with an atomic and (clearing its bytes) and or
/// (setting them), since WGSL has no byte stores and the word's other bytes belong to
/// neighbouring invocations or lie outside the target; in a tile of a target starting on a
/// word, the invocation of a word's first element packs the word and stores it whole.
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
    // Invocations take 8 × 8 tiles of the last two axes where both are multiples of 8, so
    // that a workgroup reads and writes runs of 8 elements of 8 rows: a transpose then reads
    // each cache line (or memory sector) for 8 elements, not 1. `e` is the element's index.
    var e = i;
    let d2 = gather.shape[2];
    let d3 = gather.shape[3];
    let tiled = (d2 & 7u) == 0u && (d3 & 7u) == 0u;
    if (tiled) {
        let tile = i >> 6u;
        let across = d3 >> 3u;
        let plane_row = tile / across;
        let rows = d2 >> 3u;
        let plane = plane_row / rows;
        let row = (plane_row - plane * rows) * 8u + ((i >> 3u) & 7u);
        let column = (tile - plane_row * across) * 8u + (i & 7u);
        e = (plane * d2 + row) * d3 + column;
    }
    // One division per axis, and none once the index is used up (the leading axes).
    var rest = e;
    var at = 0u;
    for (var k = 3i; k >= 0 && rest != 0u; k = k - 1) {
        let d = gather.shape[k];
        let q = rest / d;
        at = at + (rest - q * d) * gather.strides[k];
        rest = q;
    }
    if (gather.size >= 4u) {
        let words = gather.size / 4u;
        let src = gather.source_first + at * words;
        let dst = gather.target_first + e * words;
        for (var w = 0u; w < words; w = w + 1u) {
            atomicStore(&packed[dst + w], source[src + w]);
        }
        return;
    }
    let mask = (1u << (8u * gather.size)) - 1u;
    let per_word = 4u / gather.size;
    if (tiled && gather.target_byte == 0u) {
        // Every target word lies wholly in the target, and its elements are this one and
        // the next in its tile's row (the next columns, a source stride apart): the
        // invocation of its first element packs the word and stores it whole.
        if ((e % per_word) != 0u) {
            return;
        }
        var word = 0u;
        for (var k = 0u; k < per_word; k = k + 1u) {
            let b = gather.source_byte + (at + k * gather.strides[3]) * gather.size;
            let v = (source[gather.source_first + b / 4u] >> (8u * (b % 4u))) & mask;
            word = word | (v << (8u * gather.size * k));
        }
        atomicStore(&packed[gather.target_first + e / per_word], word);
        return;
    }
    let src_byte = gather.source_byte + at * gather.size;
    let value = (source[gather.source_first + src_byte / 4u] >> (8u * (src_byte % 4u))) & mask;
    let dst_byte = gather.target_byte + e * gather.size;
    let word = gather.target_first + dst_byte / 4u;
    let shift = 8u * (dst_byte % 4u);
    atomicAnd(&packed[word], ~(mask << shift));
    atomicOr(&packed[word], value << shift);
}
"#;
