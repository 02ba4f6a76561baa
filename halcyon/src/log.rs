//! The one switch for [`tracing`](https://docs.rs/tracing) events and spans.
//!
//! With the `tracing` feature, these macros forward to the `tracing` crate under halcyon's
//! targets; without it they expand to nothing, so neither their arguments nor a callsite exist
//! and halcyon pays nothing. Targets and levels:
//!
//! | target | level | what |
//! |---|---|---|
//! | `halcyon::device` | INFO | a device is created |
//! | `halcyon::device` | ERROR | a backend reports its device lost ([`crate::backend::device_lost`]) |
//! | `halcyon::queue` | DEBUG | an operation is submitted, issued, completed (or failed) |
//! | `halcyon::reactor` | TRACE | a span around each turn of a completion reactor |
//!
//! The queue events carry the device, the queue, the operation's profile id, kind and name:
//! while a `halcyon::queue` DEBUG subscriber listens, each operation gets a profile record
//! (as when the device's [profiler](crate::profile::Profiler) is on, but not kept by it), whose
//! stages emit the events.

/// A `tracing` event at `$level` under `$target`, or nothing without the feature.
#[cfg(feature = "tracing")]
macro_rules! event {
    ($target:literal, $level:ident, $($rest:tt)*) => {
        ::tracing::event!(target: $target, ::tracing::Level::$level, $($rest)*)
    };
}

/// A `tracing` event at `$level` under `$target`, or nothing without the feature.
#[cfg(not(feature = "tracing"))]
macro_rules! event {
    ($($anything:tt)*) => {};
}

/// Whether a subscriber listens to `$target` at `$level` (always `false` without the feature).
#[cfg(feature = "tracing")]
macro_rules! enabled {
    ($target:literal, $level:ident) => {
        ::tracing::enabled!(target: $target, ::tracing::Level::$level)
    };
}

/// Whether a subscriber listens to `$target` at `$level` (always `false` without the feature).
#[cfg(not(feature = "tracing"))]
macro_rules! enabled {
    ($($anything:tt)*) => {
        false
    };
}

/// A `tracing` span at TRACE under `$target`, entered until the returned guard drops; `()`
/// without the feature.
#[cfg(feature = "tracing")]
macro_rules! trace_span {
    ($target:literal, $name:literal) => {
        ::tracing::trace_span!(target: $target, $name).entered()
    };
}

/// A `tracing` span at TRACE under `$target`, entered until the returned guard drops; a
/// [`NoSpan`] without the feature.
#[cfg(not(feature = "tracing"))]
macro_rules! trace_span {
    ($($anything:tt)*) => {
        $crate::log::NoSpan
    };
}

/// What [`trace_span!`] gives without the `tracing` feature: nothing to enter or leave.
#[cfg(not(feature = "tracing"))]
pub(crate) struct NoSpan;

pub(crate) use {enabled, event, trace_span};
