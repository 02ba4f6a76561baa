//! `halcyon-info`: registers every driver compiled in (CPU, Vulkan, CUDA, HIP) and prints each
//! device it finds with its URI, name, memory, queues, executable formats and dispatch limits,
//! as `wgpu-info` and `iree-run-module --list_devices` do. A driver whose library is absent
//! (no Vulkan loader, no libcuda, no libamdhip64) prints why instead of its devices. Last, the
//! topology of every device opened: which pairs reach each other's memory directly (peer DMA)
//! and which copy through host memory ([`halcyon::topology::Topology`]).
//!
//! Run with `cargo run -p halcyon-info`.

use halcyon::device::keys;
use halcyon::topology::Topology;
use halcyon::{Device, DriverRegistry};

fn main() -> halcyon::Result<()> {
    let registry = DriverRegistry::new();
    halcyon_cpu::register(&registry)?;
    halcyon_vulkan::register(&registry)?;
    halcyon_cuda::register(&registry)?;
    halcyon_hip::register(&registry)?;

    let mut opened = Vec::new();
    for driver in registry.enumerate_drivers() {
        println!("{} ({}): {}", driver.id, driver.name, driver.full_name);
        let devices = match registry.enumerate_devices(&driver.id) {
            Ok(devices) if devices.is_empty() => {
                println!("  no devices");
                continue;
            }
            Ok(devices) => devices,
            Err(error) => {
                println!("  unavailable: {error}");
                continue;
            }
        };
        for entry in devices {
            println!("  {}  {}", entry.uri, entry.name);
            match registry.create_device(&entry.uri) {
                Ok(device) => {
                    describe(&device);
                    opened.push(device);
                }
                Err(error) => println!("    cannot open: {error}"),
            }
        }
    }
    if opened.len() > 1 {
        topology(&opened);
    }
    Ok(())
}

/// Prints how each opened device reaches every other's memory: the table (rows copy into,
/// columns copy from), then the direct pairs.
fn topology(devices: &[Device]) {
    let topology = Topology::of(devices);
    println!("topology (copy_from: `direct` is peer DMA, `staged` goes through host memory):");
    for line in topology.to_string().lines() {
        println!("  {line}");
    }
    let ids = topology.device_ids();
    let direct: Vec<String> = topology
        .direct_pairs()
        .map(|(target, source)| format!("{} <- {}", ids[target], ids[source]))
        .collect();
    match direct.is_empty() {
        true => println!("  direct pairs: none"),
        false => println!("  direct pairs: {}", direct.join(", ")),
    }
}

/// Prints one device's properties, indented under its URI.
fn describe(device: &Device) {
    let memory = match device.query(keys::MEMORY_BYTES).ok() {
        Some(bytes) => format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64),
        None => "not reported".into(),
    };
    println!("    memory:      {memory}");
    println!("    queues:      {}", device.queue_count());
    if let Ok(concurrency) = device.query(keys::CONCURRENCY) {
        println!("    concurrency: {concurrency}");
    }
    println!("    formats:     {}", device.supported_formats().join(", "));
    let [x, y, z] = device.max_workgroup_count();
    println!("    workgroups:  at most {x} x {y} x {z} per dispatch");
    if let Ok(alignment) = device.query(keys::BINDING_ALIGNMENT) {
        println!("    bindings:    offsets aligned to {alignment} bytes");
    }
    let features = device.info().features;
    if !features.is_empty() {
        println!("    features:    {features:?}");
    }
}
