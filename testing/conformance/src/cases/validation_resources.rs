//! Validation of resources: mappings, slices, allocations, queues and drivers, each rejected
//! with a code and a message naming what is wrong.

use halcyon::{
    BufferParams, BufferUsage, Device, DeviceEntry, Driver, DriverInfo, DriverRegistry, MemoryType,
    Result, StatusCode,
};

use crate::harness::{assert_error, assert_failed, block_on, signals};
use crate::kernels::Kernels;

/// Mapping a host-visible buffer allocated without `MAPPING` usage is refused with
/// `InvalidArgument` naming the usage bit and the buffer, for every way of mapping.
pub fn map_without_mapping_usage(device: &Device, _: &dyn Kernels) -> Result<()> {
    block_on(async {
        let params = BufferParams {
            memory: MemoryType::HOST_VISIBLE | MemoryType::HOST_COHERENT,
            usage: BufferUsage::TRANSFER,
        };
        let buffer = device.allocator().allocate(64, params)?;
        let id = buffer.id().to_string();
        let mentions = ["MAPPING", &id];
        let code = StatusCode::InvalidArgument;
        assert_error(buffer.map_read(..).map(|g| g.len()), code, &mentions);
        assert_error(buffer.map_write(..).map(|g| g.len()), code, &mentions);
        let read = buffer.map_read_async(..).await.map(|g| g.len());
        assert_error(read, code, &mentions);
        let write = buffer.map_write_async(..).await.map(|g| g.len());
        assert_error(write, code, &mentions);
        Ok(())
    })
}

/// A slice past the end of a buffer (128..512 of 256 bytes), or of a subspan, is refused with
/// `OutOfRange` naming the end and the size; so is mapping such a range.
pub fn slice_out_of_range(device: &Device, _: &dyn Kernels) -> Result<()> {
    let buffer = device.allocator().allocate(256, BufferParams::HOST)?;
    let code = StatusCode::OutOfRange;
    assert_error(buffer.slice(128..512), code, &["512", "256"]);
    let sub = buffer.slice(64..128)?;
    assert_error(sub.slice(16..80), code, &["80", "64"]);
    assert_error(
        buffer.map_read(200..300).map(|g| g.len()),
        code,
        &["300", "256"],
    );
    assert_error(
        buffer.map_write(300..).map(|g| g.len()),
        code,
        &["300", "256"],
    );
    Ok(())
}

/// A 0-byte allocation is refused with `InvalidArgument` naming the size, both from the
/// allocator and from a queue `alloca` (which also fails its signal fence).
pub fn zero_size_allocation(device: &Device, _: &dyn Kernels) -> Result<()> {
    let code = StatusCode::InvalidArgument;
    assert_error(
        device.allocator().allocate(0, BufferParams::DEVICE),
        code,
        &["0"],
    );
    let queue = device.queue(0)?;
    let signal = device.create_semaphore(0)?;
    let alloca = queue.alloca(signals(&signal, 1), 0, BufferParams::DEVICE);
    let error = assert_error(alloca.map(|(buffer, _)| buffer), code, &["0"]);
    assert_failed(&signal, code, error.message());
    Ok(())
}

/// Queue `count + 3` of a device with `count` queues is refused with `OutOfRange` naming both
/// numbers; an affinity mask selecting no queue with `InvalidArgument`.
pub fn queue_index_out_of_range(device: &Device, _: &dyn Kernels) -> Result<()> {
    let count = device.queue_count();
    let index = count + 3;
    let mentions = [&count.to_string()[..], &index.to_string()[..]];
    assert_error(device.queue(index), StatusCode::OutOfRange, &mentions);
    let beyond = if count >= 64 { 0 } else { 1u64 << count };
    assert_error(device.queues(beyond), StatusCode::InvalidArgument, &[]);
    Ok(())
}

/// The device under test, presented as its driver's only device.
struct OneDevice(Device);

impl Driver for OneDevice {
    fn info(&self) -> DriverInfo {
        let id = self.0.info().driver.clone();
        let full_name = format!("{id} (the conformance suite's device under test)");
        DriverInfo::new(id.clone(), id, full_name)
    }

    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>> {
        Ok(vec![DeviceEntry::new(
            0,
            self.0.info().id.clone(),
            self.0.info().name.clone(),
        )])
    }

    fn create_device(&self, _index: u32) -> Result<Device> {
        Ok(self.0.clone())
    }
}

/// Creating a device of an unregistered driver is refused with `NotFound` naming the unknown
/// driver and listing the registered ones; the registered driver's device is found.
pub fn unknown_driver(device: &Device, _: &dyn Kernels) -> Result<()> {
    let registry = DriverRegistry::new();
    registry.register(std::sync::Arc::new(OneDevice(device.clone())))?;
    let driver = &device.info().driver;
    let unknown = registry.create_device("no-such-driver://0");
    assert_error(unknown, StatusCode::NotFound, &["no-such-driver", driver]);
    let found = registry.create_device(&format!("{driver}://0"))?;
    assert_eq!(found.info(), device.info());
    Ok(())
}
