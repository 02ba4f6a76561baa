//! JSON lines: one object per operation, then one per queue's counters.

use super::json::{pairs, string};
use super::Profile;

fn optional(ns: Option<u64>) -> String {
    ns.map_or("null".into(), |ns| ns.to_string())
}

pub(super) fn write(profile: &Profile) -> String {
    let mut out = String::new();
    for device in &profile.devices {
        let uri = string(&device.device);
        for op in &device.operations {
            let (start, end) = match op.device_ns {
                Some((start, end)) => (Some(start), Some(end)),
                None => (None, None),
            };
            out.push_str(&format!(
                r#"{{"type":"operation","device":{uri},"queue":{},"id":{},"kind":{},"name":{},"bytes":{},"waits":{},"signals":{},"submitted_ns":{},"issued_ns":{},"device_start_ns":{},"device_end_ns":{},"completed_ns":{},"error":{}}}"#,
                op.queue,
                op.id,
                string(op.kind.name()),
                string(&op.name),
                op.bytes,
                pairs(&op.waits),
                pairs(&op.signals),
                op.submitted_ns,
                optional(op.issued_ns),
                optional(start),
                optional(end),
                optional(op.completed_ns),
                op.error.as_deref().map_or("null".into(), string),
            ));
            out.push('\n');
        }
        for (queue, c) in device.counters.iter().enumerate() {
            let kinds: Vec<String> = c
                .by_kind
                .iter()
                .map(|(k, n)| format!("{}:{n}", string(k.name())))
                .collect();
            let label = device
                .queue_labels
                .get(queue)
                .and_then(Option::as_deref)
                .map_or("null".into(), string);
            out.push_str(&format!(
                r#"{{"type":"counters","device":{uri},"queue":{queue},"label":{label},"submissions":{},"bytes":{},"by_kind":{{{}}},"dropped_records":{}}}"#,
                c.submissions,
                c.bytes,
                kinds.join(","),
                device.dropped
            ));
            out.push('\n');
        }
        let counters: Vec<String> = device
            .device_counters
            .iter()
            .map(|(name, value)| format!("{}:{value}", string(name)))
            .collect();
        out.push_str(&format!(
            r#"{{"type":"device_counters","device":{uri},{}}}"#,
            counters.join(",")
        ));
        out.push('\n');
        for (id, label) in &device.semaphores {
            out.push_str(&format!(
                r#"{{"type":"semaphore","device":{uri},"id":{id},"label":{}}}"#,
                string(label)
            ));
            out.push('\n');
        }
    }
    out
}
