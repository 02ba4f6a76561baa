//! Labels: names users give buffers, executables, command buffers, queues and semaphores, shown
//! in traces ([`crate::profile`]) and in error messages.
//!
//! An object without a label is shown by its kind and number (`buffer 12`); with one, the label
//! follows in quotes (`buffer 12 'weights'`). Labels can be set and changed at any time; they
//! are read only to write a message or a profile record, never on a queue's hot path.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// An object's label (plain std: labels take no part in any synchronisation loom checks).
/// Reading an unlabelled one is one atomic load: a profiled operation looks up the labels of
/// its semaphores, which are mostly unlabelled.
#[derive(Default)]
pub(crate) struct Label {
    set: AtomicBool,
    label: Mutex<Option<Arc<str>>>,
}

impl Label {
    pub(crate) fn set(&self, label: &str) {
        *self.label.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::from(label));
        self.set.store(true, Ordering::Release);
    }

    pub(crate) fn get(&self) -> Option<Arc<str>> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        self.label.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

/// Writes `kind number`, then ` 'label'` if there is one.
pub(crate) fn write(
    f: &mut fmt::Formatter<'_>,
    kind: &str,
    number: impl fmt::Display,
    label: &Label,
) -> fmt::Result {
    write!(f, "{kind} {number}")?;
    match label.get() {
        Some(label) => write!(f, " '{label}'"),
        None => Ok(()),
    }
}

/// ` 'label'`, or nothing without a label: for messages that name an object by its role
/// ("a failed semaphore 'frame'").
pub(crate) fn suffix(label: Option<Arc<str>>) -> String {
    label.map_or(String::new(), |label| format!(" '{label}'"))
}
