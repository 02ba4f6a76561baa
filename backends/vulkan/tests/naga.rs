//! The safe compute path: naga checks, reflects and re-writes shaders; what it refuses, what a
//! device's limits refuse, and what the Khronos validation layer sees.

mod common;

use halcyon::{
    BufferParams, CommandBuffer, CommandBufferMode, Device, EntryPoint, ExecutableSpec, StatusCode,
    Timepoints,
};
use halcyon_conformance::harness::{block_on, bytes_u32, done, u32_bytes};
use halcyon_vulkan::SpirvModule;

use common::{device_or_skip, run_under_validation_layer};

/// Two bindings and three push constants, at offsets 0, 4, 8.
const SCALE_WGSL: &str = r#"
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
"#;

/// The index just past the module's last `OpEntryPoint` instruction.
fn after_entry_points(words: &[u32]) -> usize {
    let (mut i, mut end) = (5, 5);
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        if words[i] & 0xffff == 15 {
            end = i + count;
        }
        i += count.max(1);
    }
    end
}

/// The three corruptions a reviewer found: with the old `SpirvModule::new` and its shallow
/// scan (today `SpirvModule::from_words_unchecked`) each reached `vkCreateComputePipelines`
/// and crashed lavapipe: SIGSEGV with the id bound set to `0xFFFFFFFF`, SIGABRT with it set to
/// 4, SIGSEGV when truncated right after the entry points (reproduced in a subprocess before
/// the fix: exit statuses 139, 134, 139). The safe path refuses each of them.
#[test]
fn corruptions_that_crashed_lavapipe_are_refused() {
    let words = common::spirv(common::STANDARD_WGSL);
    let mut huge_bound = words.clone();
    huge_bound[3] = 0xFFFF_FFFF;
    let mut small_bound = words.clone();
    small_bound[3] = 4;
    let truncated = words[..after_entry_points(&words)].to_vec();
    assert!(truncated.len() < words.len());
    let cases = [
        ("id bound 0xFFFFFFFF", huge_bound),
        ("id bound 4", small_bound),
        ("truncated after OpEntryPoint", truncated),
    ];
    let device = device_or_skip("corruptions_that_crashed_lavapipe_are_refused");
    for (what, corrupt) in cases {
        let error = SpirvModule::from_spirv(&corrupt)
            .err()
            .unwrap_or_else(|| panic!("{what} was accepted"));
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{what}: {error}");
        eprintln!("{what}: {error}");
        if let Some(device) = &device {
            let bytes: Vec<u8> = corrupt.iter().flat_map(|w| w.to_le_bytes()).collect();
            let error = device
                .load_executable(&ExecutableSpec::bytes("spirv", bytes))
                .unwrap_err();
            assert_eq!(error.code(), StatusCode::InvalidArgument, "{what}: {error}");
        }
    }
    // The intact words load, re-written by naga.
    let module = SpirvModule::from_spirv(&words).unwrap();
    assert_eq!(
        module.entry_points(),
        common::standard_module().unwrap().entry_points()
    );
}

#[test]
fn reflection_gives_bindings_constants_and_workgroup_size() {
    let module = SpirvModule::from_wgsl(SCALE_WGSL).unwrap();
    let expected = EntryPoint {
        name: "scale".into(),
        workgroup_size: [8, 4, 1],
        binding_count: 2,
        constant_count: 3,
    };
    assert_eq!(module.entry_points(), std::slice::from_ref(&expected));
    // The SPIR-V path reflects the same from naga's words (what a shader compiler would hand
    // over), and the words the driver gets are naga's, not the caller's.
    let words = common::spirv(SCALE_WGSL);
    let from_words = SpirvModule::from_spirv(&words).unwrap();
    assert_eq!(from_words.entry_points(), [expected]);
    assert!(!from_words.is_unchecked());

    // A gap below the highest binding still takes a buffer there.
    let gap = SpirvModule::from_wgsl(
        "@group(0) @binding(2) var<storage, read_write> x: array<u32>;\n\
         @compute @workgroup_size(1) fn only_two() { x[0] = 1u; }",
    )
    .unwrap();
    assert_eq!(gap.entry_points()[0].binding_count, 3);
    assert_eq!(gap.entry_points()[0].constant_count, 0);

    let Some(device) = device_or_skip("reflection_gives_bindings_constants_and_workgroup_size")
    else {
        return;
    };
    block_on(async {
        let executable = device.load_executable(&module.spec())?;
        let queue = device.queue(0)?;
        let input = device.allocator().allocate(64 * 4, BufferParams::DEVICE)?;
        let output = device.allocator().allocate(64 * 4, BufferParams::DEVICE)?;
        let values: Vec<u32> = (0..64).collect();
        done(
            "write input",
            queue.write(Timepoints::default(), &u32_bytes(&values), &input.whole()),
        )
        .await?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        let error = builder
            .dispatch(
                &executable
                    .kernel_at(0)?
                    .launch([1, 2, 1])
                    .constant(3u32)
                    .constant(5u32)
                    .constant(64u32)
                    .binding(input.whole()),
            )
            .expect_err("one binding for two is refused");
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(error.message().contains("takes 2 bindings"), "{error}");
        let error = builder
            .dispatch(
                &executable
                    .kernel_at(0)?
                    .launch([1, 2, 1])
                    .constant(3u32)
                    .constant(5u32)
                    .binding(input.whole())
                    .binding(output.whole()),
            )
            .expect_err("two constants for three are refused");
        assert!(error.message().contains("takes 3 constants"), "{error}");
        builder.dispatch(
            &executable
                .kernel_at(0)?
                .launch([1, 2, 1])
                .constant(3u32)
                .constant(5u32)
                .constant(64u32)
                .binding(input.whole())
                .binding(output.whole()),
        )?;
        let commands = builder.finish();
        done(
            "scale",
            queue.execute(Timepoints::default(), &commands, None),
        )
        .await?;
        let bytes = done("read", queue.read(Timepoints::default(), &output.whole())).await?;
        let expected: Vec<u32> = values.iter().map(|v| v * 3 + 5).collect();
        assert_eq!(bytes_u32(&bytes)?, expected);
        Ok(())
    })
    .unwrap();
}

/// Each shader naga accepts but halcyon's pipeline layout cannot express is refused with
/// `InvalidArgument` naming the problem.
#[test]
fn shaders_the_pipeline_layout_cannot_express_are_refused() {
    let cases = [
        (
            "uniform buffer",
            "@group(0) @binding(0) var<uniform> u: vec4<u32>;\n\
             @group(0) @binding(1) var<storage, read_write> x: array<u32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = u.x; }",
            "uniform buffer",
        ),
        (
            "another group",
            "@group(2) @binding(0) var<storage, read_write> x: array<u32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = 1u; }",
            "@group(2) @binding(0)",
        ),
        (
            "another status binding",
            "@group(1) @binding(3) var<storage, read_write> x: array<u32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = 1u; }",
            "@group(1) @binding(3)",
        ),
        (
            "a binding number past the limit",
            "@group(0) @binding(5000) var<storage, read_write> x: array<u32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = 1u; }",
            "@binding(5000)",
        ),
        (
            "a status word that is not 4 bytes",
            "@group(1) @binding(0) var<storage, read_write> status: array<u32, 2>;\n\
             @compute @workgroup_size(1) fn k() { status[1] = 1u; }",
            "status word",
        ),
        (
            "a vertex shader",
            "@vertex fn v() -> @builtin(position) vec4<f32> { return vec4<f32>(0.0); }",
            "compute shaders only",
        ),
        (
            "an override",
            "override width: u32 = 64u;\n\
             @group(0) @binding(0) var<storage, read_write> x: array<u32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = width; }",
            "override",
        ),
        ("no entry points", "const a: u32 = 1u;", "no entry points"),
        (
            "a WGSL error",
            "@compute @workgroup_size(1) fn k() { let x: u32 = 1.5; }",
            "WGSL does not parse",
        ),
    ];
    for (what, source, expected) in cases {
        let error = SpirvModule::from_wgsl(source).unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{what}: {error}");
        assert!(error.message().contains(expected), "{what}: {error}");
    }
}

/// Hand-written constant counts are multiplied with checked arithmetic: 2^30 + 1 constants
/// (2^32 + 4 bytes, 4 after wrapping) are refused, not taken for one constant's worth.
#[test]
fn unchecked_counts_use_checked_arithmetic() {
    let words = common::spirv(common::STANDARD_WGSL);
    let mut entries = common::standard_module().unwrap().entry_points().to_vec();
    entries[0].constant_count = (1 << 30) + 1;
    // SAFETY: the words are naga's; the metadata is refused by the cheap checks (tested).
    let error = unsafe { SpirvModule::from_words_unchecked(words.clone(), entries) }.unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    assert!(error.message().contains("1073741825 constants"), "{error}");

    let Some(device) = device_or_skip("unchecked_counts_use_checked_arithmetic") else {
        return;
    };
    // A binding count no device has is refused when loading, before a layout is built for it.
    let mut entries = common::standard_module().unwrap().entry_points().to_vec();
    entries[0].binding_count = u32::MAX;
    // SAFETY: as above: the device limits refuse the metadata before the driver sees it.
    let module = unsafe { SpirvModule::from_words_unchecked(words, entries) }.unwrap();
    let error = device.load_executable(&module.spec()).unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    assert!(error.message().contains("4294967295 bindings"), "{error}");
}

/// Entry points a device cannot run are refused when loading, naming the limit.
#[test]
fn workgroups_beyond_the_device_limits_are_refused_at_load() {
    let Some(device) = device_or_skip("workgroups_beyond_the_device_limits_are_refused_at_load")
    else {
        return;
    };
    let load = |source: &str| {
        let module = SpirvModule::from_wgsl(source).unwrap();
        device.load_executable(&module.spec()).map(drop)
    };
    let error = load("@compute @workgroup_size(1024, 1024, 1) fn big() {}").unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    assert!(error.message().contains("maxComputeWorkGroup"), "{error}");
    let shared = device
        .query_raw("vulkan.max_compute_shared_memory_size")
        .unwrap();
    let words = shared / 4 + 1;
    let error = load(&format!(
        "var<workgroup> scratch: array<u32, {words}>;\n\
         @compute @workgroup_size(1) fn k() {{ scratch[0] = 1u; }}"
    ))
    .unwrap_err();
    assert!(
        error.message().contains("maxComputeSharedMemorySize"),
        "{error}"
    );
}

/// A dispatch's workgroup count in each dimension is checked against
/// `maxComputeWorkGroupCount` before the driver sees it (70,000 x 1 x 1 used to be recorded,
/// and the validation layer reported VUID-vkCmdDispatch-groupCountX-00386).
#[test]
fn workgroup_counts_beyond_the_device_limit_are_refused() {
    let Some(device) = device_or_skip("workgroup_counts_beyond_the_device_limit_are_refused")
    else {
        return;
    };
    over_limit_dispatches_fail(&device);
}

/// A dispatch binding longer than `maxStorageBufferRange` is refused at submission, naming the
/// binding and the limit (the driver would get a descriptor range past the limit,
/// VUID-VkDescriptorBufferInfo-range-00342). Skipped, saying so, where the limit is over
/// 256 MiB (lavapipe's is 128 MiB), not to allocate gigabytes.
#[test]
fn bindings_beyond_the_device_range_are_refused() {
    let Some(device) = device_or_skip("bindings_beyond_the_device_range_are_refused") else {
        return;
    };
    let limit = device.max_binding_range();
    assert_eq!(
        i64::try_from(limit).unwrap(),
        device.query_raw("vulkan.max_storage_buffer_range").unwrap()
    );
    if limit > 256 << 20 {
        return eprintln!("skipped: maxStorageBufferRange is {limit} bytes");
    }
    block_on(async {
        let kernels = common::standard_module()?;
        let add_one = device
            .load_executable(&kernels.spec())?
            .kernel("add_one_u32")?;
        let queue = device.queue(0)?;
        let x = device
            .allocator()
            .allocate(limit + 256, BufferParams::DEVICE)?;
        let launch = add_one.launch([1, 1, 1]).constant(0u32);
        let error = queue
            .dispatch(Timepoints::default(), &launch.clone().binding(x.whole()))
            .await
            .unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(
            error
                .message()
                .contains(&format!("binds at most {limit} bytes")),
            "{error}"
        );
        // At the limit is fine.
        let at_limit = launch.binding(x.slice(0..limit)?);
        queue.dispatch(Timepoints::default(), &at_limit).await
    })
    .expect("the dispatch at the limit runs");
}

fn over_limit_dispatches_fail(device: &Device) {
    block_on(async {
        let kernels = common::standard_module()?;
        let executable = device.load_executable(&kernels.spec())?;
        let add_one = executable.kernel("add_one_u32")?;
        let queue = device.queue(0)?;
        let x = device.allocator().allocate(256, BufferParams::DEVICE)?;
        for (axis, workgroups) in [("x", [0, 1, 1]), ("y", [1, 0, 1]), ("z", [1, 1, 0])] {
            let index = ["x", "y", "z"].iter().position(|a| *a == axis).unwrap();
            let limit = device.query_raw(&format!("vulkan.max_compute_workgroup_count.{axis}"))?;
            let Ok(count) = u32::try_from(limit + 1) else {
                continue; // No count is over a limit of u32::MAX.
            };
            let count = count.max(70_000);
            let mut workgroups = workgroups;
            workgroups[index] = count;
            let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
            builder.dispatch(&add_one.launch(workgroups).constant(0u32).binding(x.whole()))?;
            let commands = builder.finish();
            let error = queue
                .execute(Timepoints::default(), &commands, None)
                .await
                .unwrap_err();
            assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
            let message = error.message();
            assert!(
                message.contains(&format!("{count} workgroups in {axis}"))
                    && message.contains(&format!("at most {limit}")),
                "{message}"
            );
        }
        // At the limit is fine (every invocation exits at once: n = 0).
        let limit = device.query_raw("vulkan.max_compute_workgroup_count.x")?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        builder.dispatch(
            &add_one
                .launch([u32::try_from(limit).unwrap_or(u32::MAX).min(65_535), 1, 1])
                .constant(0u32)
                .binding(x.whole()),
        )?;
        let commands = builder.finish();
        done(
            "dispatch at the limit",
            queue.execute(Timepoints::default(), &commands, None),
        )
        .await
    })
    .unwrap();
}

/// A buffer whose size the shader fixes needs a binding at least that long: Vulkan does not
/// bounds-check against the bound range, so a shorter one is refused when recording.
#[test]
fn fixed_size_buffers_need_long_enough_bindings() {
    let Some(device) = device_or_skip("fixed_size_buffers_need_long_enough_bindings") else {
        return;
    };
    block_on(async {
        let module = SpirvModule::from_wgsl(
            "@group(0) @binding(0) var<storage, read_write> table: array<u32, 16>;\n\
             @compute @workgroup_size(16) fn fill(@builtin(local_invocation_index) i: u32) {\n\
                 table[i] = i;\n\
             }",
        )?;
        let executable = device.load_executable(&module.spec())?;
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
        let run = |range: halcyon::BufferRef| {
            let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
            builder.dispatch(&executable.kernel_at(0)?.launch([1, 1, 1]).binding(range))?;
            Ok::<_, halcyon::Error>(queue.execute(Timepoints::default(), &builder.finish(), None))
        };
        let error = run(buffer.slice(0..16)?)?.await.unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(
            error.message().contains("is 16 bytes") && error.message().contains("at least 64"),
            "{error}"
        );
        done("a whole-table binding", run(buffer.whole())?).await?;
        let bytes = done("read", queue.read(Timepoints::default(), &buffer.whole())).await?;
        assert_eq!(bytes_u32(&bytes)?, (0..16).collect::<Vec<u32>>());
        Ok(())
    })
    .unwrap();
}

/// Set in the child processes of [`the_validation_layer_reports_nothing_on_the_reflected_path`]
/// to what they run.
const CHILD: &str = "HALCYON_VULKAN_LAYER_CHILD";

/// Runs the reflected path (and the over-limit dispatches) under the Khronos validation layer
/// in a child process and finds no validation error; a child that loads under-declared
/// metadata through the unsafe path shows the layer is there and reports
/// VUID-VkComputePipelineCreateInfo-layout-00703. Skips where the layer is not installed.
#[test]
fn the_validation_layer_reports_nothing_on_the_reflected_path() {
    let name = "the_validation_layer_reports_nothing_on_the_reflected_path";
    if let Ok(mode) = std::env::var(CHILD) {
        return layer_child(&mode);
    }
    if device_or_skip(name).is_none() {
        return;
    }
    let run = |mode: &str| run_under_validation_layer(name, CHILD, mode);
    let unchecked = run("under-declared");
    if !unchecked.contains("Validation Error") {
        eprintln!("skipping {name}: the Khronos validation layer did not load:\n{unchecked}");
        return;
    }
    assert!(
        unchecked.contains("VUID-VkComputePipelineCreateInfo-layout-00703"),
        "{unchecked}"
    );
    let reflected = run("reflected");
    assert!(!reflected.contains("Validation Error"), "{reflected}");
    assert!(
        reflected.contains("test result: ok. 1 passed"),
        "{reflected}"
    );
}

fn layer_child(mode: &str) {
    let device = halcyon_vulkan::create_device(0).unwrap();
    let module = match mode {
        "reflected" => common::standard_module().unwrap(),
        _ => {
            let mut entries = common::standard_module().unwrap().entry_points().to_vec();
            let saxpy = entries.iter_mut().find(|e| e.name == "saxpy_f32").unwrap();
            saxpy.binding_count = 1;
            saxpy.constant_count = 0;
            // SAFETY: deliberately breaks the contract (saxpy uses two bindings and push
            // constants), in a child process, to show the validation layer catches it; the
            // layout mismatch is what lavapipe tolerates for this shader.
            unsafe {
                SpirvModule::from_words_unchecked(common::spirv(common::STANDARD_WGSL), entries)
            }
            .unwrap()
        }
    };
    let executable = device.load_executable(&module.spec()).unwrap();
    if mode == "reflected" {
        block_on(async {
            let kernels = halcyon_conformance::StandardKernels::load(&device, &|d: &Device| {
                d.load_executable(&common::standard_module()?.spec())
            })?;
            let queue = device.queue(0)?;
            let x = device.allocator().allocate(256, BufferParams::DEVICE)?;
            let y = device.allocator().allocate(256, BufferParams::DEVICE)?;
            done(
                "add_one",
                kernels.add_one(&queue, Timepoints::default(), &x.whole(), 64),
            )
            .await?;
            done(
                "saxpy",
                kernels.saxpy(
                    &queue,
                    Timepoints::default(),
                    2.0,
                    &x.whole(),
                    &y.whole(),
                    64,
                ),
            )
            .await?;
            Ok(())
        })
        .unwrap();
        over_limit_dispatches_fail(&device);
    }
    drop(executable);
}
