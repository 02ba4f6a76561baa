//! One queue operation's record: what it is, and the times it reached each stage.
//!
//! A record is created when the operation is submitted (only while its device's
//! [`Profiler`](super::Profiler) is enabled) and filled in by whoever sees the next stage: the
//! pending-action executor when it issues the work, the backend when the device starts and ends
//! it, the operation's completion semaphore when it is signalled or failed. Each time is written
//! once (the first writer wins) into an atomic, so no stage takes a lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::clock::now_ns;
use super::operation::{Operation, OperationKind};
use crate::fence::Fence;

/// What the core knows of an operation when it is submitted. Kept small: a profiler left on
/// holds tens of thousands of these, and each operation fills one.
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) id: u64,
    pub(crate) bytes: u64,
    pub(crate) queue: u32,
    pub(crate) kind: OperationKind,
    pub(crate) name: Name,
    pub(crate) timepoints: Pairs,
    /// The labels of the labelled semaphores among them (`None` when none is labelled).
    pub(crate) semaphore_labels: Option<Box<[SemaphoreLabel]>>,
}

/// A labelled semaphore's id and label.
pub(crate) type SemaphoreLabel = (u64, Arc<str>);

/// An operation's name, kept in parts so that recording it allocates nothing: the string is
/// built when the record is exported ([`Name::render`]).
#[derive(Debug, Default)]
pub(crate) struct Name {
    /// A dispatch's entry point, or the label of the command buffer executed or of the buffer
    /// a transfer writes or a read reads.
    pub(crate) text: Option<Arc<str>>,
    /// The commands of an executed command buffer.
    pub(crate) commands: u32,
}

impl Name {
    /// `fill`, `fill weights`, `dispatch saxpy`, `execute (3 commands)`.
    fn render(&self, kind: OperationKind) -> String {
        match (&self.text, kind) {
            (Some(text), _) => format!("{} {text}", kind.name()),
            (None, OperationKind::Execute) => format!("execute ({} commands)", self.commands),
            (None, _) => kind.name().to_owned(),
        }
    }
}

/// The `(semaphore id, value)` pairs an operation waits for, then those it signals: the first
/// two inline (a timeline step has one wait and one signal), so recording them allocates
/// nothing in the common case.
#[derive(Debug, Default)]
pub(crate) struct Pairs {
    inline: [(u64, u64); 2],
    waits: u32,
    signals: u32,
    /// Every pair, when there are more than two.
    spilled: Option<Box<[(u64, u64)]>>,
}

impl Pairs {
    /// The pairs of `waits`, then of `signals`.
    pub(crate) fn new(
        waits: impl ExactSizeIterator<Item = (u64, u64)>,
        signals: impl ExactSizeIterator<Item = (u64, u64)>,
    ) -> Self {
        let mut pairs = Pairs {
            waits: waits.len() as u32,
            signals: signals.len() as u32,
            ..Pairs::default()
        };
        let all = waits.chain(signals);
        if pairs.waits + pairs.signals <= 2 {
            for (slot, pair) in pairs.inline.iter_mut().zip(all) {
                *slot = pair;
            }
        } else {
            pairs.spilled = Some(all.collect());
        }
        pairs
    }

    fn all(&self) -> &[(u64, u64)] {
        match &self.spilled {
            Some(all) => all,
            None => &self.inline[..(self.waits + self.signals) as usize],
        }
    }

    fn waits(&self) -> &[(u64, u64)] {
        &self.all()[..self.waits as usize]
    }

    fn signals(&self) -> &[(u64, u64)] {
        &self.all()[self.waits as usize..]
    }
}

/// A submitted operation's record (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Record {
    /// The device's URI, for `tracing` events.
    #[cfg(feature = "tracing")]
    device: Arc<str>,
    header: Header,
    submitted: u64,
    issued: AtomicU64,
    device_start: AtomicU64,
    device_end: AtomicU64,
    completed: AtomicU64,
    /// The completion semaphore was signalled or failed (`completed` may be written just
    /// before, by a backend that signals on the thread that ran the work).
    settled: AtomicBool,
    error: OnceLock<Box<str>>,
}

/// Stores `ns` into `slot` unless a time is there already. 0 means "not yet": the clock never
/// returns it. A load and a store, no read-modify-write: a stage has one writer, save the
/// tiles of one dispatch starting on several pool workers at once, where the later of their
/// times (nanoseconds apart) may stand.
fn set_once(slot: &AtomicU64, ns: u64) {
    if slot.load(Ordering::Relaxed) == 0 {
        slot.store(ns.max(1), Ordering::Release);
    }
}

fn get(slot: &AtomicU64) -> Option<u64> {
    match slot.load(Ordering::Acquire) {
        0 => None,
        ns => Some(ns),
    }
}

impl Record {
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn new(device: &Arc<str>, header: Header) -> Self {
        let record = Record {
            #[cfg(feature = "tracing")]
            device: device.clone(),
            header,
            submitted: now_ns(),
            issued: AtomicU64::new(0),
            device_start: AtomicU64::new(0),
            device_end: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            settled: AtomicBool::new(false),
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
            let _ = self.error.set(error.to_string().into_boxed_str());
        }
        self.event(
            if error.is_some() {
                "failed"
            } else {
                "completed"
            },
            error,
        );
        if get(&self.completed).is_none() {
            set_once(&self.completed, now_ns());
        }
        self.settled.store(true, Ordering::Release);
    }

    /// The labels of the labelled semaphores it waits on or signals.
    pub(crate) fn semaphore_labels(&self) -> &[SemaphoreLabel] {
        self.header.semaphore_labels.as_deref().unwrap_or_default()
    }

    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    pub(crate) fn operation(&self) -> Operation {
        let h = &self.header;
        let device_ns = match (get(&self.device_start), get(&self.device_end)) {
            (Some(start), Some(end)) => Some((start, end.max(start))),
            _ => None,
        };
        // Until it settles, a completion time a backend wrote ahead of the signal is not shown.
        let completed_ns = self.is_settled().then(|| get(&self.completed)).flatten();
        Operation {
            id: h.id,
            queue: h.queue,
            kind: h.kind,
            name: h.name.render(h.kind),
            bytes: h.bytes,
            waits: h.timepoints.waits().to_vec(),
            signals: h.timepoints.signals().to_vec(),
            submitted_ns: self.submitted,
            issued_ns: get(&self.issued),
            device_ns,
            completed_ns,
            error: self.error.get().map(|e| e.to_string()),
        }
    }
}

/// A backend's handle on the record of the operation it runs, found from the operation's
/// signal fence ([`OperationTrace::of`]). Present only while the device's profiler is enabled;
/// every method is a clock read at most and an atomic store. [`OperationTrace::of`] lends it
/// (no reference count touched); a backend that records times later keeps a clone.
///
/// Times are on the [profile clock](crate::profile::now_ns): a backend whose device keeps its
/// own clock converts to it first.
#[derive(Clone, Debug)]
pub struct OperationTrace(pub(crate) Arc<Record>);

impl OperationTrace {
    /// The trace of the operation whose signal fence is `signal` (the fence
    /// [`DeviceBackend::submit`](crate::backend::DeviceBackend::submit) was given), if its
    /// device was profiling when it was submitted.
    pub fn of(signal: &Fence) -> Option<&OperationTrace> {
        let (first, _) = signal.iter().next()?;
        first.trace()
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

    /// The device starts the work now, unless a start is recorded already: no clock read for
    /// the second and later tiles of a worker pool.
    pub fn device_starting(&self) {
        if get(&self.0.device_start).is_none() {
            set_once(&self.0.device_start, now_ns());
        }
    }

    /// The device started the work when it was issued: for an executor that runs work on the
    /// thread that issues it, where the two are a clock read apart. Reads the clock only if no
    /// issue was recorded.
    pub fn device_started_at_issue(&self) {
        let ns = get(&self.0.issued).unwrap_or_else(now_ns);
        set_once(&self.0.device_start, ns);
    }

    /// The device finished the work at `ns` (the first end recorded wins).
    pub fn device_ended(&self, ns: u64) {
        set_once(&self.0.device_end, ns);
    }

    /// The device ends the work now and its backend signals the operation's completion right
    /// away, on this thread: the host's completion time is this end, one clock read for both.
    /// The record counts as complete only once the signal (or failure) arrives.
    pub fn device_ended_completing(&self) {
        let ns = now_ns();
        set_once(&self.0.device_end, ns);
        set_once(&self.0.completed, ns);
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
            Command::Copy { target, .. } | Command::Gather { target, .. } => target.len(),
            Command::Dispatch(d) => d.bindings.iter().map(|b| b.len()).sum(),
            Command::Barrier => 0,
        }
    }
    match work {
        Work::Read { source, .. } => (OperationKind::Read, source.len()),
        Work::HostCall(_) => (OperationKind::HostCall, 0),
        Work::PeerCopy { target, .. } => (OperationKind::Copy, target.len()),
        Work::Collective(c) => {
            let bytes = c.send().map_or(0, |r| r.len()) + c.recv().map_or(0, |r| r.len());
            (OperationKind::Collective, bytes)
        }
        Work::Commands { commands, .. } => {
            let mut real = commands.iter().filter(|c| !matches!(c, Command::Barrier));
            let kind = match (real.next(), real.next()) {
                (None, _) => OperationKind::Barrier,
                (Some(_), Some(_)) => OperationKind::Execute,
                (Some(Command::Fill { .. }), None) => OperationKind::Fill,
                (Some(Command::Update { .. }), None) => OperationKind::Update,
                (Some(Command::Copy { .. } | Command::Gather { .. }), None) => OperationKind::Copy,
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

    let text = |text: Option<Arc<str>>| Name { text, commands: 0 };
    let commands = match work {
        Work::Commands { commands, .. } => commands,
        Work::Read { source, .. } => return text(source.buffer().label()),
        Work::HostCall(_) => return Name::default(),
        Work::PeerCopy { target, .. } => return text(target.buffer().label()),
        Work::Collective(c) => {
            return text(Some(std::sync::Arc::from(c.kind().to_string())));
        }
    };
    let target = |c: &Command| match c {
        Command::Fill { target, .. } | Command::Update { target, .. } => target.buffer().label(),
        Command::Copy { target, .. } | Command::Gather { target, .. } => target.buffer().label(),
        _ => None,
    };
    match kind {
        OperationKind::Dispatch => text(commands.iter().find_map(|c| match c {
            Command::Dispatch(d) => d.executable.entry_name(d.entry_point),
            _ => None,
        })),
        OperationKind::Execute => Name {
            text: label,
            commands: u32::try_from(commands.len()).unwrap_or(u32::MAX),
        },
        OperationKind::Fill | OperationKind::Update | OperationKind::Copy => {
            text(commands.iter().find_map(target))
        }
        _ => Name::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record's size, which the profiler's default limit is sized by (about 200 bytes,
    /// about 13 MiB for 65,536 records): a guard against it growing unnoticed.
    #[test]
    fn a_record_stays_small() {
        let size = std::mem::size_of::<Record>();
        eprintln!("record: {size} bytes");
        assert!(size <= 208, "a record grew to {size} bytes");
    }

    #[test]
    fn pairs_keep_waits_then_signals_inline_or_spilled() {
        let none = Pairs::new([].into_iter(), [].into_iter());
        assert!(none.waits().is_empty() && none.signals().is_empty());
        let step = Pairs::new([(7, 1)].into_iter(), [(7, 2)].into_iter());
        assert!(step.spilled.is_none(), "a timeline step allocates nothing");
        assert_eq!(
            (step.waits(), step.signals()),
            (&[(7, 1)][..], &[(7, 2)][..])
        );
        let many = Pairs::new(
            [(1, 1), (2, 2), (3, 3)].into_iter(),
            [(4, 4), (5, 5)].into_iter(),
        );
        assert_eq!(many.waits(), &[(1, 1), (2, 2), (3, 3)]);
        assert_eq!(many.signals(), &[(4, 4), (5, 5)]);
        let signals_only = Pairs::new([].into_iter(), [(1, 1), (2, 2), (3, 3)].into_iter());
        assert!(signals_only.waits().is_empty());
        assert_eq!(signals_only.signals(), &[(1, 1), (2, 2), (3, 3)]);
    }

    #[test]
    fn names_render_with_their_kind() {
        let text = |t: &str| Name {
            text: Some(Arc::from(t)),
            commands: 0,
        };
        assert_eq!(Name::default().render(OperationKind::Fill), "fill");
        assert_eq!(text("weights").render(OperationKind::Fill), "fill weights");
        assert_eq!(
            text("saxpy").render(OperationKind::Dispatch),
            "dispatch saxpy"
        );
        let commands = Name {
            text: None,
            commands: 3,
        };
        assert_eq!(
            commands.render(OperationKind::Execute),
            "execute (3 commands)"
        );
    }

    fn record() -> OperationTrace {
        let header = Header {
            id: 1,
            bytes: 0,
            queue: 0,
            kind: OperationKind::HostCall,
            name: Name::default(),
            timepoints: Pairs::default(),
            semaphore_labels: None,
        };
        OperationTrace(Arc::new(Record::new(&Arc::from("test://0"), header)))
    }

    /// A backend that ends the work and signals it on one thread writes the completion time
    /// ahead of the signal; the record shows it complete only once the signal arrives, and
    /// the first time written for a stage stays.
    #[test]
    fn a_completion_written_ahead_shows_once_settled() {
        let trace = record();
        trace.issued();
        trace.device_started_at_issue();
        trace.device_starting(); // a later tile: the start stays
        trace.device_ended_completing();
        let op = trace.0.operation();
        assert_eq!(op.device_ns.map(|(start, _)| start), op.issued_ns);
        assert!(!trace.0.is_settled() && op.completed_ns.is_none());
        let ended = op.device_ns.expect("device range").1;
        trace.0.settled(None);
        let op = trace.0.operation();
        assert_eq!(op.completed_ns, Some(ended), "no second clock read");
        assert!(op.submitted_ns <= op.issued_ns.expect("issued"));
    }

    #[test]
    fn a_failure_is_kept_with_its_completion() {
        let trace = record();
        let error = crate::Error::new(crate::StatusCode::Internal, "boom");
        trace.0.settled(Some(&error));
        trace.0.settled(None); // a later settle changes nothing
        let op = trace.0.operation();
        assert!(op.completed_ns.is_some());
        assert!(
            op.error.as_deref().is_some_and(|e| e.contains("boom")),
            "{op:?}"
        );
    }
}
