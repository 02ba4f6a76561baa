//! Lists the registered drivers and their devices.
//!
//! Run with `cargo run --example devices`.

use halcyon::{device::keys, DriverRegistry};

fn main() -> halcyon::Result<()> {
    let registry = DriverRegistry::new();
    halcyon_cpu::register(&registry)?;

    for driver in registry.enumerate_drivers() {
        println!(
            "driver {}: {} ({})",
            driver.id, driver.name, driver.full_name
        );
        match registry.enumerate_devices(&driver.id) {
            Ok(devices) => {
                for entry in devices {
                    let device = registry.create_device(&entry.uri)?;
                    println!(
                        "  {} {}: {} queue(s), concurrency {}, formats [{}], features {:?}",
                        entry.uri,
                        entry.name,
                        device.queue_count(),
                        device.query(keys::CONCURRENCY)?,
                        device.supported_formats().join(", "),
                        device.info().features,
                    );
                }
            }
            Err(error) => println!("  unavailable: {error}"),
        }
    }
    Ok(())
}
