//! The Chrome trace event format ([the spec](https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)),
//! as Perfetto and `chrome://tracing` read it.
//!
//! Each device is a process (`pid` = its position in the profile + 1); track 0 is the host
//! (submissions and completions as instants), track `q + 1` queue `q`, where each operation's
//! range is a complete (`X`) event. A flow per operation links its submission, its range and
//! its completion. Timestamps are microseconds on the profile clock.

use super::json::{micros, pairs, string};
use super::{drawn_range, queue_name, Profile};

pub(super) fn write(profile: &Profile) -> String {
    let mut events: Vec<String> = Vec::new();
    for (index, device) in profile.devices.iter().enumerate() {
        let pid = index + 1;
        events.push(format!(
            r#"{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":{}}}}}"#,
            string(&format!("{} ({})", device.device, device.name))
        ));
        events.push(format!(
            r#"{{"name":"thread_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":"host"}}}}"#
        ));
        for queue in 0..device.queues {
            events.push(format!(
                r#"{{"name":"thread_name","ph":"M","pid":{pid},"tid":{},"args":{{"name":{}}}}}"#,
                queue + 1,
                string(&queue_name(device, queue))
            ));
        }
        for op in &device.operations {
            let tid = op.queue + 1;
            let name = string(&op.name);
            let cat = string(op.kind.name());
            // Flow ids are global: the device's index in the high bits.
            let flow = ((index as u64) << 40) | op.id;
            let mut args = format!(
                r#""id":{},"queue":{},"bytes":{},"waits":{},"signals":{},"submitted_ns":{}"#,
                op.id,
                op.queue,
                op.bytes,
                pairs(&op.waits),
                pairs(&op.signals),
                op.submitted_ns
            );
            if let Some(ns) = op.issued_ns {
                args.push_str(&format!(r#","issued_ns":{ns}"#));
            }
            if let Some(ns) = op.completed_ns {
                args.push_str(&format!(r#","completed_ns":{ns}"#));
            }
            if let Some(error) = &op.error {
                args.push_str(&format!(r#","error":{}"#, string(error)));
            }
            events.push(format!(
                r#"{{"name":{},"cat":{cat},"ph":"i","s":"t","pid":{pid},"tid":0,"ts":{},"args":{{{args}}}}}"#,
                string(&format!("submit {}", op.name)),
                micros(op.submitted_ns)
            ));
            events.push(format!(
                r#"{{"name":{name},"cat":"flow","ph":"s","id":{flow},"pid":{pid},"tid":0,"ts":{}}}"#,
                micros(op.submitted_ns)
            ));
            if let Some((start, end, on_device)) = drawn_range(op) {
                events.push(format!(
                    r#"{{"name":{name},"cat":{cat},"ph":"X","pid":{pid},"tid":{tid},"ts":{},"dur":{},"args":{{{args},"device_times":{on_device}}}}}"#,
                    micros(start),
                    micros(end - start)
                ));
                events.push(format!(
                    r#"{{"name":{name},"cat":"flow","ph":"t","id":{flow},"pid":{pid},"tid":{tid},"ts":{}}}"#,
                    micros(start)
                ));
            }
            if let Some(done) = op.completed_ns {
                let what = if op.error.is_some() { "failed" } else { "done" };
                events.push(format!(
                    r#"{{"name":{},"cat":{cat},"ph":"i","s":"t","pid":{pid},"tid":0,"ts":{}}}"#,
                    string(&format!("{what} {}", op.name)),
                    micros(done)
                ));
                events.push(format!(
                    r#"{{"name":{name},"cat":"flow","ph":"f","bp":"e","id":{flow},"pid":{pid},"tid":0,"ts":{}}}"#,
                    micros(done)
                ));
            }
        }
    }
    let devices: Vec<String> = profile
        .devices
        .iter()
        .map(|device| {
            let queues: Vec<String> = device
                .counters
                .iter()
                .map(|c| {
                    let kinds: Vec<String> = c
                        .by_kind
                        .iter()
                        .map(|(k, n)| format!("{}:{n}", string(k.name())))
                        .collect();
                    format!(
                        r#"{{"submissions":{},"bytes":{},"by_kind":{{{}}}}}"#,
                        c.submissions,
                        c.bytes,
                        kinds.join(",")
                    )
                })
                .collect();
            let semaphores: Vec<String> = device
                .semaphores
                .iter()
                .map(|(id, label)| format!(r#""{id}":{}"#, string(label)))
                .collect();
            let counters: Vec<String> = device
                .device_counters
                .iter()
                .map(|(name, value)| format!("{}:{value}", string(name)))
                .collect();
            format!(
                r#"{}:{{"queues":[{}],"counters":{{{}}},"semaphores":{{{}}},"dropped_records":{}}}"#,
                string(&device.device),
                queues.join(","),
                counters.join(","),
                semaphores.join(","),
                device.dropped
            )
        })
        .collect();
    format!(
        "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{{}}},\"traceEvents\":[\n{}\n]}}\n",
        devices.join(","),
        events.join(",\n")
    )
}
