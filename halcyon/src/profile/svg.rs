//! An SVG timeline, written without a plotting library: one lane per queue, a bar per
//! operation, a time axis. Opens in any browser.

use std::fmt::Write;

use super::operation::{Operation, OperationKind};
use super::{drawn_range, DeviceProfile, Profile};

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 190.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 64.0;
const LANE: f64 = 26.0;
const GAP: f64 = 8.0;

fn colour(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Dispatch => "#4e79a7",
        OperationKind::Update => "#f28e2b",
        OperationKind::Fill => "#59a14f",
        OperationKind::Copy => "#e15759",
        OperationKind::Read => "#76b7b2",
        OperationKind::Execute => "#edc948",
        OperationKind::HostCall => "#b07aa1",
        OperationKind::Barrier => "#bab0ac",
        OperationKind::Collective => "#ff9da7",
    }
}

/// Escapes text for SVG content and attributes.
fn text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A span of nanoseconds for people: `850 ns`, `12.5 µs`, `3.20 ms`, `1.50 s`.
fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// A tick step of 1, 2 or 5 times a power of ten giving about eight ticks over `span`.
fn tick_step(span: u64) -> u64 {
    let rough = (span / 8).max(1);
    let mut power = 1u64;
    while power.saturating_mul(10) <= rough {
        power *= 10;
    }
    [1, 2, 5, 10]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= rough)
        .unwrap_or(10 * power)
}

/// One queue's lane: its bars, each with its range and the row it is drawn in.
struct Lane<'a> {
    device: &'a str,
    queue: u32,
    /// `q1`, or `q1 'upload'` (shortened to fit the margin).
    name: String,
    bars: Vec<(&'a Operation, (u64, u64, bool), usize)>,
    rows: usize,
}

impl<'a> Lane<'a> {
    fn new(device: &'a DeviceProfile, queue: u32) -> Self {
        let mut ranged: Vec<_> = device
            .operations
            .iter()
            .filter(|op| op.queue == queue)
            .filter_map(|op| drawn_range(op).map(|range| (op, range)))
            .collect();
        ranged.sort_by_key(|(_, (start, _, _))| *start);
        // Greedy interval partitioning: the first row whose last bar ended by this start.
        let mut row_ends: Vec<u64> = Vec::new();
        let bars = ranged
            .into_iter()
            .map(|(op, range)| {
                let row = match row_ends.iter().position(|&end| end <= range.0) {
                    Some(row) => row,
                    None => {
                        row_ends.push(0);
                        row_ends.len() - 1
                    }
                };
                row_ends[row] = range.1;
                (op, range, row)
            })
            .collect();
        let name = match device
            .queue_labels
            .get(queue as usize)
            .and_then(Option::as_ref)
        {
            Some(label) if label.chars().count() > 14 => {
                format!("q{queue} '{}…'", label.chars().take(13).collect::<String>())
            }
            Some(label) => format!("q{queue} '{label}'"),
            None => format!("q{queue}"),
        };
        Lane {
            device: &device.device,
            queue,
            name,
            bars,
            rows: row_ends.len().max(1),
        }
    }

    fn height(&self) -> f64 {
        self.rows as f64 * (LANE - 6.0) + 6.0
    }
}

pub(super) fn write(profile: &Profile) -> String {
    let ranges: Vec<(u64, u64)> = profile
        .devices
        .iter()
        .flat_map(|d| d.operations.iter())
        .filter_map(|op| drawn_range(op).map(|(s, e, _)| (op.submitted_ns.min(s), e)))
        .collect();
    let t0 = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let t1 = ranges.iter().map(|r| r.1).max().unwrap_or(t0);
    let span = (t1 - t0).max(1);
    let plot = WIDTH - LEFT - RIGHT;
    let x = |t: u64| LEFT + (t.saturating_sub(t0)) as f64 / span as f64 * plot;

    // Each lane holds its queue's bars in as many rows as overlapping ranges need (a queue may
    // run operations with no semaphore path between them at once).
    let lanes: Vec<Lane> = profile
        .devices
        .iter()
        .flat_map(|device| (0..device.queues).map(move |queue| Lane::new(device, queue)))
        .collect();
    let lanes_height: f64 = lanes.iter().map(|l| l.height() + GAP).sum();
    let axis_y = TOP + lanes_height + 4.0;
    let height = axis_y + 44.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    let operations: usize = profile.devices.iter().map(|d| d.operations.len()).sum();
    let _ = writeln!(
        svg,
        r#"<text x="12" y="22" font-size="15" font-weight="bold">halcyon timeline: {operations} operations over {}</text>"#,
        text(&duration(span))
    );
    // Legend: the kinds present.
    let mut kinds: Vec<OperationKind> = profile
        .devices
        .iter()
        .flat_map(|d| d.operations.iter().map(|op| op.kind))
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut lx = 12.0;
    for kind in kinds {
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="34" width="12" height="12" fill="{}"/><text x="{}" y="45">{}</text>"#,
            colour(kind),
            lx + 16.0,
            kind.name()
        );
        lx += 26.0 + 7.0 * kind.name().len() as f64;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="45" fill="#555">solid: device times; pale, dashed: issue to completion as the host saw it; red outline: failed</text>"##,
        lx + 8.0
    );

    let mut y = TOP;
    for lane in &lanes {
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{y}" width="{plot}" height="{}" fill="#f4f4f4"/><text x="12" y="{}">{} {}</text>"##,
            lane.height(),
            y + LANE / 2.0 + 4.0,
            text(lane.device),
            text(&lane.name)
        );
        for (op, (start, end, on_device), row) in &lane.bars {
            let (bx, bw) = (x(*start), (x(*end) - x(*start)).max(1.0));
            let style = match (on_device, op.error.is_some()) {
                (_, true) => r##" stroke="#d62728" stroke-width="2""##,
                (true, false) => "",
                (false, false) => r##" fill-opacity="0.45" stroke="#333" stroke-dasharray="3,2""##,
            };
            let _ = writeln!(
                svg,
                r#"<rect x="{bx:.2}" y="{}" width="{bw:.2}" height="{}" fill="{}"{style}><title>{} (queue {}): {} from +{}{}</title></rect>"#,
                y + 3.0 + *row as f64 * (LANE - 6.0),
                LANE - 6.0,
                colour(op.kind),
                text(&op.name),
                lane.queue,
                duration(end - start),
                duration(start - t0),
                op.error
                    .as_deref()
                    .map_or(String::new(), |e| format!("; failed: {}", text(e)))
            );
        }
        y += lane.height() + GAP;
    }

    // The time axis.
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="#333"/>"##,
        WIDTH - RIGHT
    );
    let step = tick_step(span);
    let mut t = 0;
    while t <= span {
        let tx = LEFT + t as f64 / span as f64 * plot;
        let _ = writeln!(
            svg,
            r##"<line x1="{tx:.2}" y1="{axis_y}" x2="{tx:.2}" y2="{}" stroke="#333"/><line x1="{tx:.2}" y1="{TOP}" x2="{tx:.2}" y2="{axis_y}" stroke="#ddd" stroke-width="0.5"/><text x="{tx:.2}" y="{}" text-anchor="middle">{}</text>"##,
            axis_y + 5.0,
            axis_y + 18.0,
            text(&duration(t))
        );
        t += step;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">time since the first submission</text>"##,
        LEFT + plot / 2.0,
        axis_y + 36.0
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(tick_step(8_000), 1_000);
        assert_eq!(tick_step(12_000), 2_000);
        assert_eq!(tick_step(30_000), 5_000);
        assert_eq!(tick_step(1), 1);
        assert_eq!(duration(1_500), "1.5 µs");
        assert_eq!(duration(2_500_000), "2.50 ms");
    }
}
