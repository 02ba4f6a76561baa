//! halcyon's `tracing` events (`--features tracing`): device creation, and each operation's
//! submission, issue and completion or failure, with its device, queue, id and kind; a span
//! per reactor turn. Collected by a minimal subscriber of our own.

use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use halcyon::{BufferParams, StatusCode};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One event: target, level, message and its other fields as `name=value`.
#[derive(Clone, Debug)]
struct Seen {
    target: String,
    level: Level,
    message: String,
    fields: Vec<String>,
}

#[derive(Clone, Default)]
struct Collector {
    events: Arc<Mutex<Vec<Seen>>>,
    spans: Arc<Mutex<Vec<String>>>,
}

struct Fields(String, Vec<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.0 = format!("{value:?}"),
            name => self.1.push(format!("{name}={value:?}")),
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.0 = value.to_owned(),
            name => self.1.push(format!("{name}={value}")),
        }
    }
}

impl Subscriber for Collector {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("halcyon")
    }
    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let mut spans = self.spans.lock().unwrap();
        spans.push(format!(
            "{} {}",
            attributes.metadata().target(),
            attributes.metadata().name()
        ));
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new(), Vec::new());
        event.record(&mut fields);
        self.events.lock().unwrap().push(Seen {
            target: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            message: fields.0,
            fields: fields.1,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn operations_and_devices_emit_events() -> halcyon::Result<()> {
    let collector = Collector::default();
    tracing::subscriber::set_global_default(collector.clone()).expect("one subscriber");

    let device = halcyon_cpu::default_device()?;
    assert!(
        !device.profiler().is_enabled(),
        "the events need no profiler"
    );
    let queue = device.queue(0)?;
    let buffer = device.allocator().allocate(64, BufferParams::DEVICE)?;
    let timeline = queue.timeline()?;
    block_on(queue.fill(timeline.next(), 7u8, &buffer.whole()))?;
    let failed = block_on(queue.host_call(timeline.next(), || {
        Err(halcyon::Error::new(StatusCode::Aborted, "no"))
    }));
    assert!(failed.is_err());
    // An operation whose wait is reached later parks on the reactor, which releases it in a
    // turn: the span is certain to exist by the time it completes.
    let gate = halcyon::Semaphore::new(0);
    let parked = queue.fill(
        halcyon::Timepoints::new(halcyon::Fence::at(&gate, 1), halcyon::Fence::new()),
        1u8,
        &buffer.whole(),
    );
    gate.signal(1)?;
    block_on(parked)?;
    // The profiler kept nothing: the records were for the events only.
    assert!(device.profiler().take().operations.is_empty());

    let events = collector.events.lock().unwrap().clone();
    let created = events
        .iter()
        .find(|e| e.message == "device created")
        .expect("a device-created event");
    assert_eq!(
        (created.target.as_str(), created.level),
        ("halcyon::device", Level::INFO)
    );
    assert!(
        created.fields.contains(&"device=cpu://0".to_owned()),
        "{created:?}"
    );
    let stages = |kind: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.target == "halcyon::queue")
            .filter(|e| e.fields.contains(&format!("kind={kind}")))
            .map(|e| e.message.clone())
            .collect()
    };
    assert_eq!(
        stages("fill"),
        [
            "submitted",
            "issued",
            "completed",
            "submitted",
            "issued",
            "completed"
        ]
    );
    assert_eq!(stages("host_call"), ["submitted", "issued", "failed"]);
    let failure = events.iter().find(|e| e.message == "failed").unwrap();
    assert!(failure
        .fields
        .iter()
        .any(|f| f.starts_with("error=") && f.contains("no")));
    assert!(events
        .iter()
        .filter(|e| e.target == "halcyon::queue")
        .all(|e| e.level == Level::DEBUG && e.fields.contains(&"queue=0".to_owned())));
    let spans = collector.spans.lock().unwrap().clone();
    assert!(
        spans.iter().any(|s| s == "halcyon::reactor reactor turn"),
        "{spans:?}"
    );
    Ok(())
}
