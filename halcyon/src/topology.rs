//! Which devices reach each other's memory directly: [`Reach`] for one pair
//! ([`Device::peer_reach`]), [`Topology`] for a set of devices.
//!
//! A copy between two devices ([`crate::Queue::copy_from`]) runs on the target device's queue
//! and reads the source device's memory. Where the target's driver can read it directly (two
//! GPUs of one driver with peer access: CUDA's `cuMemcpyPeerAsync`, HIP's
//! `hipMemcpyPeerAsync`), the copy is one peer DMA; otherwise it is staged through host memory.
//! The answer is per direction (peer access is granted one way), and per pair of devices
//! *instances*: two devices created over one GPU reach each other directly.

use std::fmt;

use crate::device::Device;

/// How a device's queues reach another device's memory ([`Device::peer_reach`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reach {
    /// The same device: a plain [`crate::Queue::copy`].
    Same,
    /// Directly, by the driver's peer DMA: a copy between them is one device operation.
    Direct,
    /// Through host memory: the source device copies into host-visible staging, the host moves
    /// the bytes, the target device copies them in (the CPU device, Vulkan, drivers without
    /// peer access, devices of two drivers).
    Staged,
}

impl Reach {
    /// A short name: `same`, `direct` or `staged`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Same => "same",
            Reach::Direct => "direct",
            Reach::Staged => "staged",
        }
    }
}

impl fmt::Display for Reach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Device {
    /// How this device's queues reach `source`'s memory: what a
    /// [`copy_from`](crate::Queue::copy_from) into this device from `source` does.
    /// [`Reach::Same`] for the same device ([`Device::ptr_eq`]); otherwise the backend's
    /// answer ([`crate::device::DeviceBackend::peer_reach`]), [`Reach::Staged`] where it has no
    /// direct path. The question asks the driver (`cuDeviceCanAccessPeer`), answered once per
    /// pair and remembered by the backend; it changes nothing.
    ///
    /// ```
    /// use halcyon::topology::Reach;
    ///
    /// fn describe(target: &halcyon::Device, source: &halcyon::Device) -> String {
    ///     match target.peer_reach(source) {
    ///         Reach::Direct => "peer DMA".into(),
    ///         other => format!("{other}"),
    ///     }
    /// }
    /// ```
    pub fn peer_reach(&self, source: &Device) -> Reach {
        if self.ptr_eq(source) {
            return Reach::Same;
        }
        self.backend().peer_reach(source.backend().as_ref())
    }
}

/// How every device of a set reaches every other's memory ([`Topology::of`]): a square table,
/// one row per target, one column per source, in the order the devices were given. Its
/// `Display` is that table, each device named by its id, `nvidia-smi topo -m` style.
///
/// ```
/// use halcyon::topology::{Reach, Topology};
///
/// fn peers(devices: &[halcyon::Device]) -> Vec<(String, String)> {
///     let topology = Topology::of(devices);
///     topology
///         .direct_pairs()
///         .map(|(target, source)| {
///             let ids = topology.device_ids();
///             (ids[target].clone(), ids[source].clone())
///         })
///         .collect()
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    ids: Vec<String>,
    /// Row-major: `reach[target * n + source]`.
    reach: Vec<Reach>,
}

impl Topology {
    /// Asks every ordered pair of `devices` ([`Device::peer_reach`]).
    pub fn of(devices: &[Device]) -> Topology {
        let reach = devices
            .iter()
            .flat_map(|target| devices.iter().map(|source| target.peer_reach(source)))
            .collect();
        Topology {
            ids: devices.iter().map(|d| d.info().id.clone()).collect(),
            reach,
        }
    }

    /// The devices' ids, in the order given.
    pub fn device_ids(&self) -> &[String] {
        &self.ids
    }

    /// How device `target` reaches device `source`'s memory (indices into the devices given);
    /// `None` for an index out of range.
    pub fn reach(&self, target: usize, source: usize) -> Option<Reach> {
        let n = self.ids.len();
        (target < n && source < n).then(|| self.reach[target * n + source])
    }

    /// Every `(target, source)` pair of distinct devices whose copies are peer DMA
    /// ([`Reach::Direct`]).
    pub fn direct_pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let n = self.ids.len();
        (0..n * n)
            .filter(|&i| self.reach[i] == Reach::Direct)
            .map(move |i| (i / n, i % n))
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.ids.iter().map(String::len).max().unwrap_or(0).max(6);
        write!(f, "{:width$}", "to \\ from")?;
        for id in &self.ids {
            write!(f, "  {id:>width$}")?;
        }
        for (target, id) in self.ids.iter().enumerate() {
            write!(f, "\n{id:width$}")?;
            for source in 0..self.ids.len() {
                let reach = self.reach(target, source).map_or("?", Reach::as_str);
                write!(f, "  {reach:>width$}")?;
            }
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_empty_topology_has_no_pairs() {
        let topology = Topology::of(&[]);
        assert_eq!(topology.direct_pairs().count(), 0);
        assert_eq!(topology.reach(0, 0), None);
        assert_eq!(topology.to_string(), "to \\ from");
    }
}
