//! One queue operation's record: what it is, and the times it reached each stage.
//!
//! A record is created when the operation is submitted (only while its device's
//! [`Profiler`](super::Profiler) is enabled) and filled in by whoever sees the next stage: the
//! pending-action executor when it issues the work, the backend when the device starts and ends
//! it, the operation's completion semaphore when it is signalled or failed. Each time is written
//! once (the first writer wins) into an atomic, so no stage takes a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::clock::now_ns;
use super::operation::{Operation, OperationKind};
use crate::fence::Fence;

/// What the core knows of an operation when it is submitted.
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) id: u64,
    pub(crate) queue: u32,
    pub(crate) kind: OperationKind,
    pub(crate) name: Name,
    pub(crate) bytes: u64,
    pub(crate) waits: Pairs,
    pub(crate) signals: Pairs,
    /// The labels of the labelled semaphores among them.
    pub(crate) semaphore_labels: Vec<(u64, Arc<str>)>,
}

/// An operation's name, kept in parts so that recording it allocates nothing: the string is
/// built when the record is exported.
#[derive(Debug)]
pub(crate) enum Name {
    /// Just the kind (`fill`).
    Kind,
    /// A dispatch of this entry point.
    Dispatch(Arc<str>),
    /// A command buffer of this many commands.
    Commands(usize),
    /// The kind and a label: the command buffer's, or the buffer a transfer writes or a read
    /// reads (`fill weights`).
    Labelled(Arc<str>),
}

/// `(semaphore id, value)` pairs, the first two inline (a timeline step has one wait and one
/// signal), so recording them allocates nothing in the common case.
#[derive(Debug, Default)]
pub(crate) struct Pairs {
    inline: [(u64, u64); 2],
    len: usize,
    more: Vec<(u64, u64)>,
}

impl FromIterator<(u64, u64)> for Pairs {
    fn from_iter<I: IntoIterator<Item = (u64, u64)>>(iter: I) -> Self {
        let mut pairs = Pairs::default();
        for pair in iter {
            match pairs.inline.get_mut(pairs.len) {
                Some(slot) => *slot = pair,
                None => pairs.more.push(pair),
            }
            pairs.len += 1;
        }
        pairs
    }
}

impl Pairs {
    fn to_vec(&self) -> Vec<(u64, u64)> {
        let inline = &self.inline[..self.len.min(2)];
        inline.iter().chain(&self.more).copied().collect()
    }
}

/// A submitted operation's record (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Record {
    /// The device's URI, for `tracing` events.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    device: Arc<str>,
    header: Header,
    submitted: u64,
    issued: AtomicU64,
    device_start: AtomicU64,
    device_end: AtomicU64,
    completed: AtomicU64,
    error: OnceLock<String>,
}

/// Stores `ns` into `slot` unless a time is there already. 0 means "not yet": the clock never
/// returns it.
fn set_once(slot: &AtomicU64, ns: u64) {
    let _ = slot.compare_exchange(0, ns.max(1), Ordering::AcqRel, Ordering::Relaxed);
}

fn get(slot: &AtomicU64) -> Option<u64> {
    match slot.load(Ordering::Acquire) {
        0 => None,
        ns => Some(ns),
    }
}

impl Record {
    pub(crate) fn new(device: Arc<str>, header: Header) -> Self {
        let record = Record {
            device,
            header,
            submitted: now_ns(),
            issued: AtomicU64::new(0),
            device_start: AtomicU64::new(0),
            device_end: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            error: OnceLock::new(),
        };
        record.event("submitted", None);
        record
    }

    /// The `halcyon::queue` DEBUG event of reaching `stage` (see `crate::log`), with the
    /// failure for a failed operation; nothing without the `tracing` feature.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    fn event(&self, stage: &str, error: Option<&crate::Error>) {
        crate::log::event!(
            "halcyon::queue",
            DEBUG,
            device = &*self.device,
            queue = self.header.queue,
            id = self.header.id,
            kind = self.header.kind.name(),
            bytes = self.header.bytes,
            error = error.map(tracing::field::display),
            "{stage}"
        );
    }

    /// The operation's completion semaphore was signalled (or failed, with `error`).
    pub(crate) fn settled(&self, error: Option<&crate::Error>) {
        if let Some(error) = error {
            let _ = self.error.set(error.to_string());
        }
        self.event(
            if error.is_some() {
                "failed"
            } else {
                "completed"
            },
            error,
        );
        set_once(&self.completed, now_ns());
    }

    /// The labels of the labelled semaphores it waits on or signals.
    pub(crate) fn semaphore_labels(&self) -> &[(u64, Arc<str>)] {
        &self.header.semaphore_labels
    }

    pub(crate) fn is_settled(&self) -> bool {
        get(&self.completed).is_some()
    }

    pub(crate) fn operation(&self) -> Operation {
        let h = &self.header;
        let device_ns = match (get(&self.device_start), get(&self.device_end)) {
            (Some(start), Some(end)) => Some((start, end.max(start))),
            _ => None,
        };
        let name = match &h.name {
            Name::Kind => h.kind.name().to_owned(),
            Name::Dispatch(entry) => format!("dispatch {entry}"),
            Name::Commands(n) => format!("execute ({n} commands)"),
            Name::Labelled(label) => format!("{} {label}", h.kind.name()),
        };
        Operation {
            id: h.id,
            queue: h.queue,
            kind: h.kind,
            name,
            bytes: h.bytes,
            waits: h.waits.to_vec(),
            signals: h.signals.to_vec(),
            submitted_ns: self.submitted,
            issued_ns: get(&self.issued),
            device_ns,
            completed_ns: get(&self.completed),
            error: self.error.get().cloned(),
        }
    }
}

/// A backend's handle on the record of the operation it runs, found from the operation's
/// signal fence ([`OperationTrace::of`]). Present only while the device's profiler is enabled;
/// every method is a single atomic store.
///
/// Times are on the [profile clock](crate::profile::now_ns): a backend whose device keeps its
/// own clock converts to it first.
#[derive(Clone, Debug)]
pub struct OperationTrace(pub(crate) Arc<Record>);

impl OperationTrace {
    /// The trace of the operation whose signal fence is `signal` (the fence
    /// [`DeviceBackend::submit`](crate::backend::DeviceBackend::submit) was given), if its
    /// device was profiling when it was submitted.
    pub fn of(signal: &Fence) -> Option<OperationTrace> {
        let (first, _) = signal.iter().next()?;
        first.trace().map(|record| OperationTrace(record.clone()))
    }

    /// The work was handed to the device now. The pending-action executor records this for
    /// every action it issues; a backend that issues work with device-side waits records it
    /// itself.
    pub fn issued(&self) {
        let record = &self.0;
        record.event("issued", None);
        set_once(&record.issued, now_ns());
    }

    /// The device started the work at `ns` (the first start recorded wins).
    pub fn device_started(&self, ns: u64) {
        set_once(&self.0.device_start, ns);
    }

    /// The device finished the work at `ns` (the first end recorded wins).
    pub fn device_ended(&self, ns: u64) {
        set_once(&self.0.device_end, ns);
    }
}

/// What kind of operation `work` is, and the bytes it moves or binds: cheap, counted for every
/// operation.
pub(crate) fn classify(work: &crate::device::Work) -> (OperationKind, u64) {
    use crate::command_buffer::Command;
    use crate::device::Work;

    fn bytes(command: &Command) -> u64 {
        match command {
            Command::Fill { target, .. } | Command::Update { target, .. } => target.len(),
            Command::Copy { target, .. } => target.len(),
            Command::Dispatch(d) => d.bindings.iter().map(|b| b.len()).sum(),
            Command::Barrier => 0,
        }
    }
    match work {
        Work::Read { source, .. } => (OperationKind::Read, source.len()),
        Work::HostCall(_) => (OperationKind::HostCall, 0),
        Work::Commands(commands) => {
            let mut real = commands.iter().filter(|c| !matches!(c, Command::Barrier));
            let kind = match (real.next(), real.next()) {
                (None, _) => OperationKind::Barrier,
                (Some(_), Some(_)) => OperationKind::Execute,
                (Some(Command::Fill { .. }), None) => OperationKind::Fill,
                (Some(Command::Update { .. }), None) => OperationKind::Update,
                (Some(Command::Copy { .. }), None) => OperationKind::Copy,
                (Some(_), None) => OperationKind::Dispatch,
            };
            (kind, commands.iter().map(bytes).sum())
        }
    }
}

/// What a trace calls `work` of `kind` ([`classify`]): the kind, with the entry point of a
/// dispatch, the label of a command buffer (else its command count), or the label of the
/// buffer a transfer writes or a read reads. Only for profiled operations.
pub(crate) fn name(
    work: &crate::device::Work,
    kind: OperationKind,
    label: Option<Arc<str>>,
) -> Name {
    use crate::command_buffer::Command;
    use crate::device::Work;

    let commands = match work {
        Work::Commands(commands) => commands,
        Work::Read { source, .. } => {
            return source.buffer().label().map_or(Name::Kind, Name::Labelled)
        }
        Work::HostCall(_) => return Name::Kind,
    };
    let target = |c: &Command| match c {
        Command::Fill { target, .. } | Command::Update { target, .. } => target.buffer().label(),
        Command::Copy { target, .. } => target.buffer().label(),
        _ => None,
    };
    match kind {
        OperationKind::Dispatch => commands
            .iter()
            .find_map(|c| match c {
                Command::Dispatch(d) => d.executable.trace_name(d.entry_point).map(Name::Dispatch),
                _ => None,
            })
            .unwrap_or(Name::Kind),
        OperationKind::Execute => label.map_or(Name::Commands(commands.len()), Name::Labelled),
        OperationKind::Fill | OperationKind::Update | OperationKind::Copy => commands
            .iter()
            .find_map(target)
            .map_or(Name::Kind, Name::Labelled),
        _ => Name::Kind,
    }
}

#[cfg(test)]
mod tests {
    /// The record's size, which the profiler's default limit is sized by (about 300 bytes,
    /// about 20 MiB for 65,536 records): a guard against it growing unnoticed.
    #[test]
    fn a_record_stays_small() {
        let size = std::mem::size_of::<super::Record>();
        eprintln!("record: {size} bytes");
        assert!(size <= 320, "a record grew to {size} bytes");
    }
}
