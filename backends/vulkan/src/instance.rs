//! Opening the Vulkan loader at run time, creating instances and describing physical devices.

use std::ffi::CStr;

use ash::vk;
use halcyon::{Error, Result, StatusCode};

/// Names a `VkResult` in an error: `"{what} failed: VK_ERROR_..."`.
pub(crate) fn vk_error(code: StatusCode, what: &str, result: vk::Result) -> Error {
    Error::new(
        code,
        format!("{what} failed: {result:?} ({})", result.as_raw()),
    )
}

/// Maps a `VkResult` to the closest status code.
pub(crate) fn vk_status(result: vk::Result) -> StatusCode {
    match result {
        vk::Result::ERROR_OUT_OF_HOST_MEMORY
        | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
        | vk::Result::ERROR_TOO_MANY_OBJECTS
        | vk::Result::ERROR_OUT_OF_POOL_MEMORY
        | vk::Result::ERROR_FRAGMENTED_POOL => StatusCode::ResourceExhausted,
        vk::Result::ERROR_DEVICE_LOST => StatusCode::Aborted,
        vk::Result::ERROR_INITIALIZATION_FAILED
        | vk::Result::ERROR_INCOMPATIBLE_DRIVER
        | vk::Result::ERROR_EXTENSION_NOT_PRESENT
        | vk::Result::ERROR_FEATURE_NOT_PRESENT => StatusCode::Unavailable,
        vk::Result::TIMEOUT => StatusCode::DeadlineExceeded,
        _ => StatusCode::Internal,
    }
}

/// `vk_error` with the code chosen by [`vk_status`].
pub(crate) fn vk_fail(what: &str, result: vk::Result) -> Error {
    vk_error(vk_status(result), what, result)
}

/// A loaded loader plus an instance; destroys the instance when dropped.
pub(crate) struct Instance {
    /// The loader (kept open while the instance lives; loads extension functions).
    pub(crate) entry: ash::Entry,
    pub(crate) instance: ash::Instance,
}

impl Instance {
    /// Opens `libvulkan` and creates a Vulkan 1.2 instance. `Unavailable` (never a panic) when
    /// there is no loader or no driver.
    pub(crate) fn new() -> Result<Instance> {
        // SAFETY: loading the system Vulkan loader runs its initialisers; that is how every
        // Vulkan application starts, and ash keeps the library open as long as `entry` lives.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| {
            Error::new(
                StatusCode::Unavailable,
                format!(
                    "the Vulkan loader could not be opened ({e}); install libvulkan1 and a \
                     Vulkan driver (for a CPU implementation, mesa-vulkan-drivers: lavapipe)"
                ),
            )
        })?;
        // SAFETY: `entry` is a loaded loader; the call has no other preconditions.
        let loader_version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(|r| vk_error(StatusCode::Unavailable, "vkEnumerateInstanceVersion", r))?
            .unwrap_or(vk::API_VERSION_1_0);
        if loader_version < vk::API_VERSION_1_2 {
            return Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "the Vulkan loader supports Vulkan {}; halcyon-vulkan needs Vulkan 1.2 \
                     (timeline semaphores)",
                    version_string(loader_version)
                ),
            ));
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"halcyon")
            .engine_name(c"halcyon")
            .api_version(vk::API_VERSION_1_2);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: `info` and what it points to live across the call.
        let instance = unsafe { entry.create_instance(&info, None) }.map_err(|r| {
            let error = vk_error(StatusCode::Unavailable, "vkCreateInstance", r);
            if r == vk::Result::ERROR_INCOMPATIBLE_DRIVER {
                error.context(
                    "no Vulkan 1.2 driver (ICD) is installed; for a CPU implementation install \
                     mesa-vulkan-drivers (lavapipe)",
                )
            } else {
                error
            }
        })?;
        Ok(Instance { entry, instance })
    }

    /// The physical devices, in driver order.
    pub(crate) fn physical_devices(&self) -> Result<Vec<vk::PhysicalDevice>> {
        // SAFETY: the instance is live.
        unsafe { self.instance.enumerate_physical_devices() }
            .map_err(|r| vk_error(StatusCode::Unavailable, "vkEnumeratePhysicalDevices", r))
    }

    /// The device's name and API version.
    pub(crate) fn describe(&self, physical: vk::PhysicalDevice) -> (String, u32) {
        // SAFETY: `physical` came from this instance.
        let props = unsafe { self.instance.get_physical_device_properties(physical) };
        let name = props
            .device_name_as_c_str()
            .map(CStr::to_string_lossy)
            .map(|n| n.into_owned())
            .unwrap_or_else(|_| "unnamed Vulkan device".into());
        (name, props.api_version)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every object created from the instance (the logical device) is destroyed
        // before this value is dropped: the device state owns the instance and drops it last.
        unsafe { self.instance.destroy_instance(None) }
    }
}

pub(crate) fn version_string(version: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(version),
        vk::api_version_minor(version),
        vk::api_version_patch(version)
    )
}
