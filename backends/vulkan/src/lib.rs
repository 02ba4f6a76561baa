//! # halcyon-vulkan
//!
//! halcyon's Vulkan device, built on [ash] with the loader opened at run time: nothing Vulkan
//! is needed to build it, and with no loader or no device, enumeration and creation return
//! [`StatusCode::Unavailable`] saying what is missing.
//!
//! * Semaphores are Vulkan 1.2 timeline semaphores behind the core's semaphores; waits on this
//!   device's timelines that submitted work will signal go straight into `vkQueueSubmit`.
//! * Completion never spins: each queue has a thread blocked in a single-semaphore
//!   `vkWaitSemaphores` on its internal timeline's next submitted value, and the reactor
//!   blocks on a control semaphore the host signals to interrupt it.
//! * Driver failures fail what they affect, with the `VkResult` named: a failed
//!   `vkQueueSubmit` fails that submission; a lost device fails everything in flight and every
//!   later submission ([`FaultInjector`] simulates both, for testing).
//! * Kernels are compute shaders ([`SpirvModule`], formats `"spirv"` and `"wgsl"`): WGSL or
//!   SPIR-V validated and reflected by naga, which writes the SPIR-V the driver gets (raw
//!   SPIR-V with hand-written metadata only through `unsafe`); storage buffers in set 0
//!   (binding `i` = dispatch binding `i`) and `u32` push constants.
//!
//! ```no_run
//! let registry = halcyon::DriverRegistry::new();
//! halcyon_vulkan::register(&registry)?;
//! let device = registry.create_device("vulkan://0")?;
//! println!("{}", device.info().name);
//! # Ok::<(), halcyon::Error>(())
//! ```
//!
//! # Profiling
//!
//! With the device's [profiler](halcyon::Device::profiler) on, each submission gets GPU
//! timestamps (`vkCmdWriteTimestamp`, top and bottom of pipe) from per-queue query pools that are
//! reused, never created per submission; unprofiled submissions write none. The completion thread
//! reads them without waiting and reports the device start and end, on the
//! [profile clock](halcyon::profile::now_ns), before the operation's signal is made, each
//! clamped into the window the device must have run the work in (from just before
//! `vkQueueSubmit` to that read). Ticks reach the host clock through `VK_EXT_calibrated_timestamps` (or the KHR one) where the device has
//! it, otherwise through an offset measured by a round trip at device creation
//! ([`VulkanDeviceOptions::force_measured_calibration`] forces that path). The calibration's
//! error is the device query `vulkan.timestamp_calibration_error_ns`. Devices that can do this
//! (a compute family with `timestampValidBits`, and `hostQueryReset`) report
//! [`DeviceFeatures::PROFILING`](halcyon::DeviceFeatures::PROFILING); on others, Vulkan
//! operations keep host times only.

mod context;
mod device;
mod executable;
mod external;
mod gather;
mod instance;
mod memory;
mod options;
mod record;
mod semaphore;
mod suballoc;
mod timestamps;

use std::sync::Arc;

use halcyon::{DeviceEntry, Driver, DriverInfo, DriverRegistry, Error, Result, StatusCode};

pub use executable::{
    SpirvModule, FORMAT_SPIRV, FORMAT_WGSL, MAX_BINDINGS, STATUS_BINDING, STATUS_SET,
};
pub use external::{export_semaphore_fd, import_semaphore_fd};
pub use memory::atom_range;
pub use options::{FaultInjector, VulkanDeviceOptions};

/// The driver id and URI scheme: `vulkan`, `vulkan://0`.
pub const DRIVER_ID: &str = "vulkan";

/// Creates Vulkan device `index` (`vulkan://index`) with the default options.
pub fn create_device(index: u32) -> Result<halcyon::Device> {
    create_device_with(index, VulkanDeviceOptions::default())
}

/// Creates Vulkan device `index` (`vulkan://index`) with `options`.
pub fn create_device_with(index: u32, options: VulkanDeviceOptions) -> Result<halcyon::Device> {
    Ok(halcyon::Device::from_backend(Arc::new(
        device::VulkanDevice::new(index, options)?,
    )))
}

/// The Vulkan driver, for a [`DriverRegistry`].
#[derive(Clone, Debug, Default)]
pub struct VulkanDriver;

impl Driver for VulkanDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo::new(
            DRIVER_ID,
            "Vulkan",
            format!(
                "halcyon-vulkan {} (ash {}, Vulkan 1.2+ with timeline semaphores, SPIR-V)",
                env!("CARGO_PKG_VERSION"),
                "0.38"
            ),
        )
    }

    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>> {
        let instance = instance::Instance::new()?;
        let devices = instance.physical_devices()?;
        if devices.is_empty() {
            return Err(Error::new(
                StatusCode::Unavailable,
                "the Vulkan loader found no physical devices (no driver installed?)",
            ));
        }
        Ok(devices
            .into_iter()
            .enumerate()
            .map(|(i, physical)| {
                let (name, version) = instance.describe(physical);
                DeviceEntry::new(
                    i as u32,
                    format!("{DRIVER_ID}://{i}"),
                    format!("{name} (Vulkan {})", instance::version_string(version)),
                )
            })
            .collect())
    }

    fn create_device(&self, index: u32) -> Result<halcyon::Device> {
        create_device(index)
    }
}

/// Registers the Vulkan driver in `registry`.
pub fn register(registry: &DriverRegistry) -> Result<()> {
    registry.register(Arc::new(VulkanDriver))
}
