//! # halcyon-cuda
//!
//! halcyon's CUDA backend, built on [cudarc] with libcuda opened at run time: nothing from
//! CUDA is needed to build it. With no NVIDIA driver, a driver older than the bindings, or no
//! device, enumeration and creation return [`StatusCode::Unavailable`] saying which, and never
//! panic.
//!
//! cudarc itself panics in those cases, so no cudarc function is called before
//! [`probe::probe`] has succeeded: it opens libcuda with libloading, checks
//! `cuDriverGetVersion` against the bindings ([`probe::BINDINGS_VERSION`], CUDA 12.8) and
//! runs `cuInit(0)`. Every function here that calls cudarc takes the resulting
//! [`probe::Probe`] as proof. Nothing relies on `catch_unwind`, so this holds under
//! `panic = "abort"` too.
//!
//! Device creation is not wired to halcyon's stream layer yet: with a GPU present,
//! [`Driver::create_device`] returns `Unavailable` saying so.
//!
//! ```no_run
//! let registry = halcyon::DriverRegistry::new();
//! halcyon_cuda::register(&registry)?;
//! match registry.enumerate_devices("cuda") {
//!     Ok(devices) => devices.iter().for_each(|d| println!("{}: {}", d.uri, d.name)),
//!     Err(e) => println!("no CUDA devices: {e}"),
//! }
//! # Ok::<(), halcyon::Error>(())
//! ```

#![warn(missing_docs)]

pub mod probe;

use std::ffi::c_int;
use std::sync::Arc;

use cudarc::driver::{result as cu, sys, DriverError};
use halcyon::{DeviceEntry, Driver, DriverInfo, DriverRegistry, Error, Result, StatusCode};

use probe::Probe;

/// The driver id and URI scheme: `cuda`, `cuda://0`.
pub const DRIVER_ID: &str = "cuda";

/// The [`StatusCode`] for a CUDA driver error.
fn status_code(e: &DriverError) -> StatusCode {
    use sys::CUresult as R;
    match e.0 {
        R::CUDA_ERROR_INVALID_VALUE | R::CUDA_ERROR_INVALID_HANDLE => StatusCode::InvalidArgument,
        R::CUDA_ERROR_OUT_OF_MEMORY => StatusCode::ResourceExhausted,
        R::CUDA_ERROR_NO_DEVICE | R::CUDA_ERROR_INVALID_DEVICE | R::CUDA_ERROR_DEINITIALIZED => {
            StatusCode::Unavailable
        }
        R::CUDA_ERROR_NOT_FOUND => StatusCode::NotFound,
        R::CUDA_ERROR_NOT_SUPPORTED => StatusCode::Unimplemented,
        _ => StatusCode::Internal,
    }
}

/// `"{call} failed: CUDA_ERROR_X (n)"`.
fn cuda_error(_: &Probe, call: &str, e: DriverError) -> Error {
    let number = e.0 as c_int;
    let name = e
        .error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "CUresult".to_string());
    Error::new(status_code(&e), format!("{call} failed: {name} ({number})"))
}

/// The number of devices (`cuDeviceGetCount`); `Unavailable` when it is 0.
fn device_count(probe: &Probe) -> Result<i32> {
    let count = cu::device::get_count().map_err(|e| cuda_error(probe, "cuDeviceGetCount", e))?;
    if count <= 0 {
        return Err(Error::new(
            StatusCode::Unavailable,
            format!(
                "NVIDIA driver {} initialised, but cuDeviceGetCount reports {count} devices",
                probe.soname()
            ),
        ));
    }
    Ok(count)
}

/// Device `ordinal`'s name with its compute capability, multiprocessors and memory.
fn describe_device(probe: &Probe, ordinal: i32) -> Result<String> {
    let device = cu::device::get(ordinal)
        .map_err(|e| cuda_error(probe, &format!("cuDeviceGet({ordinal})"), e))?;
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; `device` came from cuDeviceGet; the probe
    // guarantees libcuda is loaded and initialised.
    let e = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr().cast(), buf.len() as c_int, device) };
    e.result()
        .map_err(|e| cuda_error(probe, &format!("cuDeviceGetName({ordinal})"), e))?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let mut name = String::from_utf8_lossy(&buf[..end]).into_owned();

    use sys::CUdevice_attribute as A;
    // SAFETY: `device` came from cuDeviceGet (after a successful probe).
    let attr = |a| unsafe { cu::device::get_attribute(device, a) }.ok();
    let mut details = Vec::new();
    if let (Some(major), Some(minor)) = (
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    ) {
        details.push(format!("sm_{major}{minor}"));
    }
    if let Some(sms) = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) {
        details.push(format!("{sms} SMs"));
    }
    // SAFETY: as above.
    if let Ok(bytes) = unsafe { cu::device::total_mem(device) } {
        details.push(format!("{} MiB", bytes >> 20));
    }
    if !details.is_empty() {
        name = format!("{name} ({})", details.join(", "));
    }
    Ok(name)
}

/// The CUDA driver, for a [`DriverRegistry`].
#[derive(Clone, Debug, Default)]
pub struct CudaDriver;

impl Driver for CudaDriver {
    fn info(&self) -> DriverInfo {
        let driver = match probe::probe() {
            Ok(p) => format!(
                "NVIDIA driver CUDA {} via {}",
                probe::version_string(p.driver_version()),
                p.soname()
            ),
            Err(e) => e.message().to_string(),
        };
        DriverInfo {
            id: DRIVER_ID.into(),
            name: "CUDA".into(),
            full_name: format!(
                "halcyon-cuda {} (cudarc 0.19, CUDA {} bindings; {driver})",
                env!("CARGO_PKG_VERSION"),
                probe::version_string(probe::BINDINGS_VERSION)
            ),
        }
    }

    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>> {
        let probe = probe::probe()?;
        let count = device_count(probe)?;
        (0..count)
            .map(|i| {
                Ok(DeviceEntry {
                    index: i as u32,
                    uri: format!("{DRIVER_ID}://{i}"),
                    name: describe_device(probe, i)?,
                })
            })
            .collect()
    }

    fn create_device(&self, index: u32) -> Result<halcyon::Device> {
        let probe = probe::probe()?;
        let count = device_count(probe)?;
        if i64::from(index) >= i64::from(count) {
            return Err(Error::new(
                StatusCode::NotFound,
                format!("{DRIVER_ID}://{index} does not exist: cuDeviceGetCount reports {count} devices"),
            ));
        }
        let name = describe_device(probe, index as i32)?;
        // The one line to replace once the stream layer lands (StreamDevice over a CUDA StreamApi).
        Err(not_wired(index, &name))
    }
}

/// `Unavailable`: device `index` exists but there is no device implementation to create yet.
fn not_wired(index: u32, name: &str) -> Error {
    Error::new(
        StatusCode::Unavailable,
        format!(
            "{DRIVER_ID}://{index} ({name}) is present, but halcyon-cuda's stream device is not wired yet"
        ),
    )
}

/// Registers the CUDA driver in `registry`.
pub fn register(registry: &DriverRegistry) -> Result<()> {
    registry.register(Arc::new(CudaDriver))
}
