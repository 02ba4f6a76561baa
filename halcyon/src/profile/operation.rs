//! What a profile holds about one operation.

use std::fmt;

/// The kind of a queue operation, as traces colour and count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum OperationKind {
    /// [`Queue::fill`](crate::Queue::fill).
    Fill,
    /// [`Queue::update`](crate::Queue::update) (and small writes).
    Update,
    /// [`Queue::copy`](crate::Queue::copy).
    Copy,
    /// One kernel dispatch ([`Queue::dispatch`](crate::Queue::dispatch)).
    Dispatch,
    /// A command buffer of several commands ([`Queue::execute`](crate::Queue::execute)).
    Execute,
    /// A read back to the host ([`Queue::read`](crate::Queue::read)).
    Read,
    /// A host call in queue order ([`Queue::host_call`](crate::Queue::host_call)), or an
    /// operation refused at submission (failed in order as a host call).
    HostCall,
    /// A barrier: a no-op that passes its waits on to its signals.
    Barrier,
    /// A collective on a channel ([`Queue::all_reduce`](crate::Queue::all_reduce) and the
    /// others).
    Collective,
}

impl OperationKind {
    /// Every kind, in the order counters list them.
    pub const ALL: [OperationKind; 9] = [
        OperationKind::Fill,
        OperationKind::Update,
        OperationKind::Copy,
        OperationKind::Dispatch,
        OperationKind::Execute,
        OperationKind::Read,
        OperationKind::HostCall,
        OperationKind::Barrier,
        OperationKind::Collective,
    ];

    /// The kind's name in traces (`"dispatch"`).
    pub fn name(self) -> &'static str {
        match self {
            OperationKind::Fill => "fill",
            OperationKind::Update => "update",
            OperationKind::Copy => "copy",
            OperationKind::Dispatch => "dispatch",
            OperationKind::Execute => "execute",
            OperationKind::Read => "read",
            OperationKind::HostCall => "host_call",
            OperationKind::Barrier => "barrier",
            OperationKind::Collective => "collective",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize // `ALL` lists the kinds in declaration order
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One queue operation as a profile recorded it. Times are on the
/// [profile clock](super::now_ns), in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Operation {
    /// Unique within its device's profile, in submission order.
    pub id: u64,
    /// The queue's index on its device.
    pub queue: u32,
    /// What it is.
    pub kind: OperationKind,
    /// What a trace shows on its bar: the kind, and for a dispatch the entry point
    /// (`dispatch saxpy`).
    pub name: String,
    /// Bytes it moves (transfers and reads) or binds (dispatches).
    pub bytes: u64,
    /// The `(semaphore id, value)` pairs it waited for ([`crate::Semaphore::id`]).
    pub waits: Vec<(u64, u64)>,
    /// The `(semaphore id, value)` pairs it signalled.
    pub signals: Vec<(u64, u64)>,
    /// When it was submitted.
    pub submitted_ns: u64,
    /// When it was handed to the device, if it was.
    pub issued_ns: Option<u64>,
    /// When the device started and ended it, where the backend can tell.
    pub device_ns: Option<(u64, u64)>,
    /// When the host saw it complete (its signal reached or failed), if it has.
    pub completed_ns: Option<u64>,
    /// Its failure, if it failed.
    pub error: Option<String>,
}
