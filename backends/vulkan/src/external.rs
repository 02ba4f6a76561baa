//! Timeline semaphores shared as file descriptors (`VK_KHR_external_semaphore_fd`).
//!
//! Where the device can export and import timeline semaphores as opaque file descriptors, the
//! extension is enabled at device creation and every semaphore made by
//! [`Device::create_semaphore`](halcyon::Device::create_semaphore) is created exportable.
//! [`export_semaphore_fd`] then hands out a descriptor another Vulkan device, process or API
//! (CUDA's `cuImportExternalSemaphore`, HIP's `hipImportExternalSemaphore`) can import, and
//! [`import_semaphore_fd`] makes a halcyon semaphore of this device share an exported one's
//! payload: signalled on either side, waited on by both. Where the device cannot (lavapipe,
//! Mesa 22.3, exports no timeline semaphores), both fail with `Unimplemented`, saying so.
//!
//! For a semaphore the OS waits on (epoll, io_uring, tokio), any backend's semaphores export an
//! eventfd instead: [`halcyon::Semaphore::export_fd`].

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use ash::vk;
use halcyon::backend::SemaphoreExt;
use halcyon::{Device, Error, Result, Semaphore, StatusCode};

use crate::context::Context;
use crate::instance::vk_fail;
use crate::semaphore::VulkanSemaphore;

/// The extension's name.
pub(crate) const EXTENSION: &std::ffi::CStr = ash::khr::external_semaphore_fd::NAME;

/// Whether `physical` lists the extension and can export and import timeline semaphores as
/// opaque file descriptors.
pub(crate) fn supported(instance: &ash::Instance, physical: vk::PhysicalDevice) -> bool {
    // SAFETY: `physical` belongs to the instance.
    let Ok(extensions) = (unsafe { instance.enumerate_device_extension_properties(physical) })
    else {
        return false;
    };
    let listed = extensions
        .iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == EXTENSION));
    if !listed {
        return false;
    }
    let mut timeline =
        vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
    let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
        .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
        .push_next(&mut timeline);
    let mut properties = vk::ExternalSemaphoreProperties::default();
    // SAFETY: `physical` belongs to the instance (Vulkan 1.1 core); the chain outlives the call.
    unsafe {
        instance.get_physical_device_external_semaphore_properties(physical, &info, &mut properties)
    };
    properties.external_semaphore_features.contains(
        vk::ExternalSemaphoreFeatureFlags::EXPORTABLE
            | vk::ExternalSemaphoreFeatureFlags::IMPORTABLE,
    )
}

/// The Vulkan semaphore behind `semaphore`, with its device's context.
fn vulkan<'a>(semaphore: &'a Semaphore, what: &str) -> Result<&'a VulkanSemaphore> {
    semaphore
        .native()
        .and_then(|n| n.as_any().downcast_ref::<VulkanSemaphore>())
        .ok_or_else(|| {
            Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{what}: {semaphore} is not a Vulkan device's semaphore; make it with \
                     Device::create_semaphore on a vulkan:// device"
                ),
            )
        })
}

fn functions<'a>(
    context: &'a Context,
    what: &str,
) -> Result<&'a ash::khr::external_semaphore_fd::Device> {
    context.external_fd.as_ref().ok_or_else(|| {
        Error::new(
            StatusCode::Unimplemented,
            format!(
                "{what}: {} ({}) cannot share timeline semaphores as file descriptors \
                 (VK_KHR_external_semaphore_fd with exportable and importable opaque-fd \
                 timelines); use Semaphore::export_fd for an eventfd the OS can wait on",
                context.id, context.name
            ),
        )
    })
}

/// Exports `semaphore`, a semaphore of a Vulkan device ([`Device::create_semaphore`]), as an
/// opaque file descriptor (`vkGetSemaphoreFdKHR`) that another Vulkan device, process or API
/// can import; both then share one payload. Each call returns a new descriptor, owned by the
/// caller. `Unimplemented` where the device cannot share timeline semaphores as opaque file
/// descriptors (lavapipe of Mesa 22.3 cannot), `InvalidArgument` for a semaphore of another
/// backend. Where the extension is present, every semaphore `create_semaphore` makes on the
/// device is created exportable.
pub fn export_semaphore_fd(semaphore: &Semaphore) -> Result<OwnedFd> {
    const WHAT: &str = "exporting a semaphore as a file descriptor";
    let native = vulkan(semaphore, WHAT)?;
    let context = &native.inner.context;
    let fd = functions(context, WHAT)?;
    let info = vk::SemaphoreGetFdInfoKHR::default()
        .semaphore(native.inner.handle)
        .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
    // SAFETY: a live semaphore of this device, created exportable as an opaque fd (every
    // semaphore `create_semaphore` makes on a device with the extension).
    let raw =
        unsafe { fd.get_semaphore_fd(&info) }.map_err(|r| vk_fail("vkGetSemaphoreFdKHR", r))?;
    // SAFETY: a new descriptor the driver just handed over, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A new semaphore of `device` (a Vulkan device) sharing the payload of the timeline semaphore
/// exported as `fd` (`vkImportSemaphoreFdKHR`, a permanent import): signals on either side
/// reach both, and both can be waited on. Its value starts at the shared payload. On success
/// the driver owns `fd`; on failure it is closed. `Unimplemented` where the device cannot
/// share timeline semaphores as opaque file descriptors, `InvalidArgument` for a device of
/// another backend.
///
/// # Safety
/// `fd` must be an opaque file descriptor exported from a *timeline* semaphore by a Vulkan
/// driver (or API) whose device this one can import from: the same driver and device UUIDs
/// (`VkPhysicalDeviceIDProperties`), as Vulkan's valid usage requires. The driver reads it
/// unchecked.
pub unsafe fn import_semaphore_fd(device: &Device, fd: OwnedFd) -> Result<Semaphore> {
    const WHAT: &str = "importing a semaphore from a file descriptor";
    // A fresh semaphore of the device: the import replaces its payload.
    let semaphore = device.create_semaphore(0)?;
    let native = vulkan(&semaphore, WHAT)?;
    let context = &native.inner.context;
    let functions = functions(context, WHAT)?;
    let raw = fd.into_raw_fd();
    let info = vk::ImportSemaphoreFdInfoKHR::default()
        .semaphore(native.inner.handle)
        .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
        .fd(raw);
    // SAFETY: a live semaphore of this device nothing uses yet; `raw` is what the caller
    // guarantees, and the driver owns it on success.
    if let Err(r) = unsafe { functions.import_semaphore_fd(&info) } {
        // SAFETY: not taken by the driver on failure: still ours to close.
        drop(unsafe { OwnedFd::from_raw_fd(raw) });
        return Err(vk_fail("vkImportSemaphoreFdKHR", r));
    }
    let value = context.counter(native.inner.handle)?;
    semaphore.advance(value);
    Ok(semaphore)
}
