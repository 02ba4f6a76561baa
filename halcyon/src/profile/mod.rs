//! Profiles: when each queue operation was submitted, issued, run and seen complete, on one
//! host clock, exported as a Chrome trace, JSON lines or an SVG timeline.
//!
//! A runtime whose point is overlapping work on several queues has to show that overlap. Each
//! device has a [`Profiler`] ([`Device::profiler`](crate::Device::profiler)), off by default
//! and turned on at run time. While it is on, every operation submitted to any of the device's
//! queues gets a record of four times:
//!
//! * **submitted**: the queue call returned its [`Submission`](crate::Submission);
//! * **issued**: its waits were reached and it was handed to the device (by the pending-action
//!   executor, or by a backend that waits on the device itself);
//! * **device start and end**: the device's own times where the backend can tell (the CPU
//!   device: its workers' clock around the work), converted to the host clock;
//! * **completed**: the host saw its signal reached (or failed): when waiters wake.
//!
//! [`Profiler::take`] hands over the finished records as a [`DeviceProfile`]; a [`Profile`]
//! holds those of one or more devices and exports them ([`Profile::to_chrome_trace`],
//! [`Profile::to_jsonl`], [`Profile::to_svg`]).
//!
//! # The clock
//! Every time is nanoseconds on the process's profile clock ([`now_ns`]), so ranges of
//! different devices and queues share one axis.
//!
//! # Labels
//! Queues, buffers, semaphores, command buffers and executables take labels (`set_label`),
//! which name them in error messages and in profiles: a queue's track and lane carry its
//! label, a transfer or read is named after the buffer it writes or reads (`fill weights`), a
//! command buffer's execution after it (`execute frame`), and each device profile maps the
//! ids of labelled semaphores to their labels ([`DeviceProfile::semaphores`]).
//!
//! # Cost
//! Off, an operation costs one atomic load on top of two relaxed counter increments that are
//! always kept ([`Profiler::counters`]). On, it costs one record of about 200 bytes (filled in
//! the allocation of the record a full profiler drops, under a lock to queue it) and a clock
//! read per stage it reaches, where a backend that sees two stages at once (the CPU device
//! running work on the thread that issued it, or signalling it on the thread that ran it)
//! reads the clock once for both. Nothing waits for the device to record it. The figures are
//! in `docs/PERFORMANCE.md`.
//!
//! # Example
//! ```
//! # async fn demo(
//! #     device: &halcyon::Device,
//! #     buffer: &halcyon::Buffer,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use halcyon::profile::Profile;
//!
//! device.profiler().enable();
//! let queue = device.queue(0)?;
//! queue.fill(halcyon::Timepoints::default(), 1.0f32, &buffer.whole()).await?;
//! let profile = Profile::from(device.profiler().take());
//! std::fs::write("trace.json", profile.to_chrome_trace())?; // open in ui.perfetto.dev
//! std::fs::write("timeline.svg", profile.to_svg())?; // open in a browser
//! # Ok(()) }
//! ```

mod chrome;
mod clock;
mod json;
mod jsonl;
mod operation;
mod profiler;
mod record;
mod svg;

pub use clock::{epoch, instant_ns, now_ns};
pub use operation::{Operation, OperationKind};
pub use profiler::{Profiler, DEFAULT_RECORD_LIMIT};
pub use record::OperationTrace;

pub(crate) use record::{classify, name, Header, Pairs};

/// One queue's counters ([`Profiler::counters`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueCounters {
    /// Operations submitted.
    pub submissions: u64,
    /// Operations submitted of each kind (kinds never submitted are left out).
    pub by_kind: Vec<(OperationKind, u64)>,
    /// Bytes the operations moved or bound ([`Operation::bytes`]).
    pub bytes: u64,
}

/// The records one device's profiler handed over ([`Profiler::take`]).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct DeviceProfile {
    /// The device's URI (`cpu://0`).
    pub device: String,
    /// Its name.
    pub name: String,
    /// How many queues it has.
    pub queues: u32,
    /// Each queue's label ([`Queue::set_label`](crate::Queue::set_label)), by index.
    pub queue_labels: Vec<Option<String>>,
    /// The labels of the labelled semaphores its operations wait on or signal, by
    /// [`Semaphore::id`](crate::Semaphore::id).
    pub semaphores: Vec<(u64, String)>,
    /// The operations, in submission order.
    pub operations: Vec<Operation>,
    /// Its queues' counters when the records were taken.
    pub counters: Vec<QueueCounters>,
    /// Its device-wide counters then ([`Profiler::device_counters`]).
    pub device_counters: Vec<(String, u64)>,
    /// Records dropped because the profiler held its limit ([`Profiler::set_limit`]).
    pub dropped: u64,
}

/// The profiles of one or more devices, to export on one time axis.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Profile {
    /// One entry per device.
    pub devices: Vec<DeviceProfile>,
}

impl From<DeviceProfile> for Profile {
    fn from(device: DeviceProfile) -> Self {
        Profile {
            devices: vec![device],
        }
    }
}

impl FromIterator<DeviceProfile> for Profile {
    fn from_iter<I: IntoIterator<Item = DeviceProfile>>(iter: I) -> Self {
        Profile {
            devices: iter.into_iter().collect(),
        }
    }
}

impl Profile {
    /// An empty profile.
    pub fn new() -> Self {
        Profile::default()
    }

    /// Adds a device's records.
    pub fn push(&mut self, device: DeviceProfile) {
        self.devices.push(device);
    }

    /// The Chrome trace event format (JSON), which [Perfetto](https://ui.perfetto.dev) and
    /// `chrome://tracing` open: one process per device, one track per queue plus one for the
    /// host, each operation's range as a complete (`X`) event, its submission and completion
    /// as instants on the host track, and flow arrows from submission to range to completion.
    /// Queue and device counters, semaphore labels and dropped records are in `otherData`.
    pub fn to_chrome_trace(&self) -> String {
        chrome::write(self)
    }

    /// One JSON object per line: one per operation (`"type":"operation"`, every field of
    /// [`Operation`], times in nanoseconds), then one per queue with its label and counters
    /// (`"type":"counters"`), one with the device's counters (`"type":"device_counters"`),
    /// then one per labelled semaphore (`"type":"semaphore"`, its id and label). For scripts.
    pub fn to_jsonl(&self) -> String {
        jsonl::write(self)
    }

    /// An SVG timeline: one lane per queue of each device, each operation a bar coloured by
    /// kind from its device start to its end (or, where the device reported no times, a paler
    /// bar from issue to completion), failures outlined in red, with a time axis. Hovering a
    /// bar shows its name and times.
    pub fn to_svg(&self) -> String {
        svg::write(self)
    }
}

/// `queue 1`, or `queue 1 'upload'` once labelled.
pub(crate) fn queue_name(device: &DeviceProfile, queue: u32) -> String {
    match device
        .queue_labels
        .get(queue as usize)
        .and_then(Option::as_ref)
    {
        Some(label) => format!("queue {queue} '{label}'"),
        None => format!("queue {queue}"),
    }
}

/// The range a trace draws for an operation: the device's own start and end where it reported
/// them, else issue (or submission) to completion, as the host saw it; `None` until it
/// completed. The flag says whether the range is the device's.
pub(crate) fn drawn_range(op: &Operation) -> Option<(u64, u64, bool)> {
    if let Some((start, end)) = op.device_ns {
        return Some((start, end, true));
    }
    let end = op.completed_ns?;
    let start = op.issued_ns.unwrap_or(op.submitted_ns).min(end);
    Some((start, end, false))
}
