//! Writes the binary seed corpora under `fuzz/seeds/` from the committed text seeds, so that
//! the seeds follow the project's fixtures:
//!
//! * `naga_spirv/*.spv`: the SPIR-V naga writes (through `SpirvModule::from_wgsl`) for each
//!   `naga_wgsl/*.wgsl` shader halcyon accepts;
//! * `packed_executable/*.hlcnexe`: those modules' packed form (`SpirvModule::to_packed`), the
//!   `PackedExecutable` rustdoc example (a CUDA image with dynamic shared memory), and an
//!   executable with no entry points and an empty image;
//! * `device_uri/*`: URIs of every backend's scheme, and a few that `parse_uri` refuses;
//! * `command_buffer/*.bin`: inputs that decode (as `arbitrary` decodes them for the target)
//!   into command sequences of the kinds the target exists for, found by a seeded search:
//!   a reusable buffer through binding-table slots that resolves, one whose table leaves a
//!   slot empty or short, a one-shot buffer, and calls that are refused between accepted ones.
//!
//! Run from the repository root: `cargo run --manifest-path fuzz/Cargo.toml --example seeds`.
//! The output is deterministic; the committed seeds are its output.

use std::fs;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use halcyon::{EntryPoint, PackedExecutable};
use halcyon_fuzz::command_buffer::{run, Input, Summary};
use halcyon_vulkan::SpirvModule;

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::write(dir.join(name), bytes).unwrap_or_else(|e| panic!("cannot write {name}: {e}"));
    println!("{}/{name}: {} bytes", dir.display(), bytes.len());
}

fn main() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let dir = |name: &str| {
        let dir = seeds.join(name);
        fs::create_dir_all(&dir).unwrap();
        dir
    };

    // SPIR-V and packed executables from the WGSL fixtures.
    let (spirv, packed) = (dir("naga_spirv"), dir("packed_executable"));
    let mut shaders: Vec<_> = fs::read_dir(dir("naga_wgsl"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "wgsl"))
        .collect();
    shaders.sort();
    for path in shaders {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let source = fs::read_to_string(&path).unwrap();
        match SpirvModule::from_wgsl(&source) {
            Ok(module) => {
                write(&spirv, &format!("{stem}.spv"), &module.to_bytes());
                write(
                    &packed,
                    &format!("{stem}.hlcnexe"),
                    &module.to_packed().to_bytes(),
                );
            }
            Err(error) => println!("{stem}.wgsl is refused (a seed of refusals): {error}"),
        }
    }
    let entry = EntryPoint {
        name: "scale".into(),
        workgroup_size: [64, 1, 1],
        binding_count: 1,
        constant_count: 1,
    };
    let cuda = PackedExecutable::new("cuda", vec![entry], b".version 8.0\n...".to_vec())
        .with_shared_memory("scale", 1024)
        .unwrap();
    write(&packed, "cuda_shared_memory.hlcnexe", &cuda.to_bytes());
    let empty = PackedExecutable::new("hip", Vec::new(), Vec::new());
    write(&packed, "no_entry_points.hlcnexe", &empty.to_bytes());

    // Device URIs.
    let uris = dir("device_uri");
    for (name, uri) in [
        ("cpu", "cpu"),
        ("cpu_0", "cpu://0"),
        ("vulkan_1", "vulkan://1"),
        ("cuda_0", "cuda://0"),
        ("hip_2", "hip://2"),
        ("fake_gpu", "fake-gpu://0"),
        ("no_index", "vulkan://"),
        ("no_driver", "://0"),
        ("not_a_number", "cpu://x"),
        ("index_too_large", "cpu://4294967296"),
    ] {
        write(&uris, name, uri.as_bytes());
    }

    // Command sequences: the first input of a deterministic search that fits each kind.
    let commands = dir("command_buffer");
    type Fits = fn(&Summary) -> bool;
    let kinds: [(&str, Fits); 4] = [
        ("reusable_resolves.bin", |s| {
            s.reusable && s.resolved && s.slots >= 1 && s.recorded >= 2
        }),
        ("reusable_table_refused.bin", |s| {
            s.reusable && !s.resolved && s.slots >= 1 && s.recorded >= 2
        }),
        ("one_shot.bin", |s| {
            !s.reusable && s.resolved && s.recorded >= 3
        }),
        ("refusals_between.bin", |s| {
            s.recorded >= 2 && s.refused >= 2 && s.resolved
        }),
    ];
    let mut state = 0x5EED_u64;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for (name, fits) in kinds {
        let found = (0..1_000_000).find_map(|_| {
            let len = 64 + (next() % 448) as usize;
            // Small bytes, so that lengths and indices come out small.
            let bytes: Vec<u8> = (0..len)
                .map(|_| match next() % 4 {
                    0 => next() as u8,
                    _ => (next() % 16) as u8,
                })
                .collect();
            let input = Input::arbitrary_take_rest(Unstructured::new(&bytes)).ok()?;
            let summary = run(input);
            fits(&summary).then_some((bytes, summary))
        });
        let (bytes, summary) = found.unwrap_or_else(|| panic!("no input fits {name}"));
        println!("{name}: {summary:?}");
        write(&commands, name, &bytes);
    }
}
