//! Initialisation, versions and devices: `hipInit`, the driver and runtime versions, the
//! device count, the thread's current device, device properties and the device's flags.

use std::ffi::{c_int, c_uint};

use halcyon::Result;

use super::Hip;
use crate::sys;

impl Hip {
    /// `hipInit(0)`.
    pub fn init(self) -> Result<()> {
        // SAFETY: hipInit takes only a flags value (which must be 0).
        let e = unsafe { (self.api.hipInit)(0) };
        self.check(e, || "hipInit(0)".into())
    }

    /// `hipDriverGetVersion`: `major * 10_000_000 + minor * 100_000 + patch`.
    pub fn driver_version(self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipDriverGetVersion)(&mut v) };
        self.check(e, || "hipDriverGetVersion".into()).map(|()| v)
    }

    /// `hipRuntimeGetVersion`: `major * 10_000_000 + minor * 100_000 + patch`.
    pub fn runtime_version(self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipRuntimeGetVersion)(&mut v) };
        self.check(e, || "hipRuntimeGetVersion".into()).map(|()| v)
    }

    /// `hipGetDeviceCount`.
    pub fn device_count(self) -> Result<i32> {
        let mut n: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipGetDeviceCount)(&mut n) };
        self.check(e, || "hipGetDeviceCount".into()).map(|()| n)
    }

    /// `hipSetDevice`: makes `device` current for the calling thread.
    pub fn set_device(self, device: i32) -> Result<()> {
        // SAFETY: any ordinal is accepted; invalid ones return an error.
        let e = unsafe { (self.api.hipSetDevice)(device) };
        self.check(e, || format!("hipSetDevice({device})"))
    }

    /// `hipGetDevice`: the device current for the calling thread.
    pub fn get_device(self) -> Result<i32> {
        let mut device: c_int = 0;
        // SAFETY: the out-pointer is valid for one int.
        let e = unsafe { (self.api.hipGetDevice)(&mut device) };
        self.check(e, || "hipGetDevice".into()).map(|()| device)
    }

    /// `hipDeviceGet`.
    pub fn device_get(self, ordinal: i32) -> Result<sys::hipDevice_t> {
        let mut d: sys::hipDevice_t = 0;
        // SAFETY: the out-pointer is valid for one int; any ordinal is accepted.
        let e = unsafe { (self.api.hipDeviceGet)(&mut d, ordinal) };
        self.check(e, || format!("hipDeviceGet({ordinal})"))
            .map(|()| d)
    }

    /// `hipDeviceGetName`.
    pub fn device_name(self, device: sys::hipDevice_t) -> Result<String> {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for `len` bytes; HIP writes a NUL-terminated string
        // of at most `len` bytes.
        let e = unsafe {
            (self.api.hipDeviceGetName)(buf.as_mut_ptr().cast(), buf.len() as c_int, device)
        };
        self.check(e, || format!("hipDeviceGetName(device {device})"))?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// `hipDeviceGetAttribute` (`sys::hipDeviceAttribute*`).
    pub fn device_attribute(
        self,
        attribute: sys::hipDeviceAttribute_t,
        device: sys::hipDevice_t,
    ) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: the out-pointer is valid for one int; invalid arguments return an error.
        let e = unsafe { (self.api.hipDeviceGetAttribute)(&mut v, attribute, device) };
        self.check(e, || {
            format!("hipDeviceGetAttribute(attribute {attribute}, device {device})")
        })
        .map(|()| v)
    }

    /// `hipDeviceTotalMem`, in bytes.
    pub fn device_total_mem(self, device: sys::hipDevice_t) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: the out-pointer is valid for one size_t.
        let e = unsafe { (self.api.hipDeviceTotalMem)(&mut bytes, device) };
        self.check(e, || format!("hipDeviceTotalMem(device {device})"))
            .map(|()| bytes)
    }

    /// `hipSetDeviceFlags`: sets the flags of the thread's current device; `Unimplemented`
    /// where the runtime lacks the call.
    pub fn set_device_flags(self, flags: c_uint) -> Result<()> {
        let f = self.optional(self.api.hipSetDeviceFlags, "hipSetDeviceFlags")?;
        // SAFETY: any flags are accepted; unsupported ones return an error.
        let e = unsafe { f(flags) };
        self.check(e, || format!("hipSetDeviceFlags({flags:#x})"))
    }

    /// `hipGetDeviceFlags`: the flags of the thread's current device; `Unimplemented` where
    /// the runtime lacks the call.
    pub fn device_flags(self) -> Result<c_uint> {
        let f = self.optional(self.api.hipGetDeviceFlags, "hipGetDeviceFlags")?;
        let mut flags: c_uint = 0;
        // SAFETY: the out-pointer is valid for one unsigned int.
        let e = unsafe { f(&mut flags) };
        self.check(e, || "hipGetDeviceFlags".into()).map(|()| flags)
    }
}
