//! Drivers and the driver registry: how users find and create devices.
//!
//! A backend crate provides a [`Driver`] (for example `halcyon_cpu::CpuDriver`) and registers it
//! in a [`DriverRegistry`]. Devices are named by URI: `cpu`, `cpu://0`, `vulkan://1`, `cuda://0`;
//! a bare driver id means that driver's first device.
//!
//! ```
//! use halcyon::driver::DriverRegistry;
//!
//! let registry = DriverRegistry::new();
//! let err = registry.create_device("vulkan://0").unwrap_err();
//! assert_eq!(err.code(), halcyon::StatusCode::NotFound); // nothing registered yet
//! ```

use std::fmt;
use std::sync::{Arc, RwLock};

use crate::device::Device;
use crate::error::{Error, Result, StatusCode};

/// What a driver is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverInfo {
    /// The URI scheme, for example `cpu`.
    pub id: String,
    /// A short name.
    pub name: String,
    /// A full description (versions, library paths).
    pub full_name: String,
}

impl DriverInfo {
    /// A driver's identity; every field given.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        full_name: impl Into<String>,
    ) -> Self {
        DriverInfo {
            id: id.into(),
            name: name.into(),
            full_name: full_name.into(),
        }
    }
}

/// A device a driver can create.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceEntry {
    /// Index within the driver (the `N` of `driver://N`).
    pub index: u32,
    /// Its URI.
    pub uri: String,
    /// A human-readable name.
    pub name: String,
}

impl DeviceEntry {
    /// A device a driver found; every field given.
    pub fn new(index: u32, uri: impl Into<String>, name: impl Into<String>) -> Self {
        DeviceEntry {
            index,
            uri: uri.into(),
            name: name.into(),
        }
    }
}

/// A backend's entry point: enumerates and creates its devices.
pub trait Driver: Send + Sync + 'static {
    /// Identity.
    fn info(&self) -> DriverInfo;

    /// The devices available now. A driver whose vendor library or hardware is missing returns
    /// `Unavailable` with a message saying what is missing.
    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>>;

    /// Creates device `index`.
    fn create_device(&self, index: u32) -> Result<Device>;
}

/// A set of drivers. Cheap to clone; registration is visible to all clones.
#[derive(Clone, Default)]
pub struct DriverRegistry {
    drivers: Arc<RwLock<Vec<Arc<dyn Driver>>>>,
}

impl fmt::Debug for DriverRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.drivers().iter().map(|d| d.info().id))
            .finish()
    }
}

impl DriverRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn drivers(&self) -> Vec<Arc<dyn Driver>> {
        self.drivers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Registers `driver`; `AlreadyExists` if a driver with the same id is registered.
    pub fn register(&self, driver: Arc<dyn Driver>) -> Result<()> {
        let id = driver.info().id;
        let mut drivers = self.drivers.write().unwrap_or_else(|p| p.into_inner());
        if drivers.iter().any(|d| d.info().id == id) {
            return Err(Error::new(
                StatusCode::AlreadyExists,
                format!("a driver with id '{id}' is already registered"),
            ));
        }
        drivers.push(driver);
        Ok(())
    }

    /// Unregisters the driver `id`; `NotFound` if none is registered under it. Devices already
    /// created keep working.
    pub fn unregister(&self, id: &str) -> Result<()> {
        let mut drivers = self.drivers.write().unwrap_or_else(|p| p.into_inner());
        let before = drivers.len();
        drivers.retain(|d| d.info().id != id);
        if drivers.len() == before {
            return Err(self.not_found_locked(id, &drivers));
        }
        Ok(())
    }

    /// The registered drivers, in registration order.
    pub fn enumerate_drivers(&self) -> Vec<DriverInfo> {
        self.drivers().iter().map(|d| d.info()).collect()
    }

    /// The devices of driver `id`.
    pub fn enumerate_devices(&self, id: &str) -> Result<Vec<DeviceEntry>> {
        self.driver(id)?.enumerate_devices()
    }

    fn driver(&self, id: &str) -> Result<Arc<dyn Driver>> {
        let drivers = self.drivers();
        drivers
            .iter()
            .find(|d| d.info().id == id)
            .cloned()
            .ok_or_else(|| self.not_found_locked(id, &drivers))
    }

    fn not_found_locked(&self, id: &str, drivers: &[Arc<dyn Driver>]) -> Error {
        let known: Vec<String> = drivers.iter().map(|d| d.info().id).collect();
        Error::new(
            StatusCode::NotFound,
            format!(
                "no driver '{id}' is registered; registered drivers: [{}]",
                known.join(", ")
            ),
        )
    }

    /// Creates a device by URI: `driver` (its first device) or `driver://N`.
    pub fn create_device(&self, uri: &str) -> Result<Device> {
        let (id, index) = parse_uri(uri)?;
        let driver = self.driver(id)?;
        let devices = driver.enumerate_devices()?;
        if !devices.iter().any(|d| d.index == index) {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "driver '{id}' has no device {index}; it has: [{}]",
                    devices
                        .iter()
                        .map(|d| format!("{} ({})", d.uri, d.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        driver.create_device(index)
    }

    /// Creates the first device of the first registered driver that has one.
    pub fn default_device(&self) -> Result<Device> {
        let mut reasons = Vec::new();
        for driver in self.drivers() {
            match driver.enumerate_devices() {
                Ok(devices) if !devices.is_empty() => {
                    return driver.create_device(devices[0].index)
                }
                Ok(_) => reasons.push(format!("{}: no devices", driver.info().id)),
                Err(e) => reasons.push(format!("{}: {e}", driver.info().id)),
            }
        }
        Err(Error::new(
            StatusCode::NotFound,
            if reasons.is_empty() {
                "no drivers are registered; register one (for example halcyon_cpu::register)"
                    .to_string()
            } else {
                format!("no registered driver has a device: {}", reasons.join("; "))
            },
        ))
    }
}

/// Splits `driver://N` (or `driver`) into the driver id and device index.
pub fn parse_uri(uri: &str) -> Result<(&str, u32)> {
    let invalid = |why: &str| {
        Error::new(
            StatusCode::InvalidArgument,
            format!("invalid device URI '{uri}': {why}; expected 'driver' or 'driver://N'"),
        )
    };
    let (id, index) = match uri.split_once("://") {
        None => (uri, 0),
        Some((id, rest)) => {
            let index = rest
                .parse::<u32>()
                .map_err(|_| invalid("the device index is not a number"))?;
            (id, index)
        }
    };
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(invalid("the driver id must be a non-empty word"));
    }
    Ok((id, index))
}
