//! [`Queue::copy_view`]: a view's elements, in whatever layout, packed into a contiguous view.

use std::sync::Arc;

use crate::command_buffer::Command;
use crate::error::{Error, StatusCode};
use crate::queue::across::Gather;
use crate::queue::{Queue, Submission, Timepoints};

use super::BufferView;

impl Queue {
    /// Copies the elements of `source` (any layout) into `target`, a contiguous view of the
    /// same element type and shape on this queue's device, in row-major order of the shape,
    /// once `timepoints.wait` is reached; signals `timepoints.signal` once they are there.
    /// A contiguous source is one device copy. A strided one is gathered by the device
    /// where the backend runs gathers (the CPU device: a loop over the elements on its
    /// workers); elsewhere, for now, its elements are picked out on the host between two
    /// staging copies (a host round trip). `InvalidArgument` (through the submission) for
    /// different element types or shapes, a strided target, or views whose bytes overlap;
    /// both views' buffers are held and tracked like any copy's.
    ///
    /// ```
    /// use halcyon::{BufferView, Queue, Timepoints};
    ///
    /// /// `x` transposed, as a new contiguous view.
    /// async fn transposed(queue: &Queue, x: &BufferView, into: &BufferView) -> halcyon::Result<()> {
    ///     queue.copy_view(Timepoints::default(), &x.transpose(0, 1)?, into).await
    /// }
    /// ```
    pub fn copy_view(
        &self,
        timepoints: impl Into<Timepoints>,
        source: &BufferView,
        target: &BufferView,
    ) -> Submission {
        let timepoints = timepoints.into();
        let mismatch = if source.element() != target.element() {
            Some(format!(
                "a view of {} copied into a view of {}",
                source.element(),
                target.element()
            ))
        } else if source.shape() != target.shape() {
            Some(format!(
                "a view of shape {:?} copied into a view of shape {:?}",
                source.shape(),
                target.shape()
            ))
        } else if !target.is_contiguous() {
            Some(format!(
                "the target view (shape {:?}, strides {:?}) is strided; copy into a contiguous \
                 view",
                target.shape(),
                target.strides()
            ))
        } else {
            None
        };
        if let Some(message) = mismatch {
            return self.reject(timepoints, Error::new(StatusCode::InvalidArgument, message));
        }
        let (from, to) = (source.byte_range(), target.byte_range());
        if from.overlaps(&to) && !from.is_empty() && !to.is_empty() {
            let error = Error::new(
                StatusCode::InvalidArgument,
                "the views' bytes overlap; copy into a view of other memory",
            );
            return self.reject(timepoints, error);
        }
        if source.is_contiguous() || source.is_empty() {
            return self.copy(timepoints, &from, &to);
        }
        // The layout relative to the bytes the elements lie in.
        let mut layout = source.layout.clone();
        layout.offset -= layout.span().map_or(0, |s| s.start);
        if self.device().backend().gathers() {
            let gather = Command::Gather {
                source: from,
                target: to,
                element_size: source.element().size(),
                layout: Arc::new(layout),
            };
            return self.commands(timepoints, Arc::new([gather]));
        }
        let element = source.element().size();
        if let Some(kernel) = self.device().gather_kernel() {
            if let Some(launch) = gather_launch(self, kernel, &layout, element, &from, &to) {
                return self.dispatch(timepoints, &launch);
            }
        }
        let gather = Gather {
            layout,
            element: element as usize,
        };
        self.copy_staged(timepoints, self, &from, &to, Some(gather))
    }
}

/// The launch of the device's gather kernel ([`crate::backend::DeviceBackend::gather_kernel`])
/// packing `layout`'s elements (of `element` bytes, relative to `from`) into `to`, or `None`
/// where the kernel's contract does not cover the copy (elements of part words, a rank over
/// 4, counts past 32 bits).
fn gather_launch(
    queue: &Queue,
    kernel: &crate::Kernel,
    layout: &super::Layout,
    element: u64,
    from: &crate::BufferRef,
    to: &crate::BufferRef,
) -> Option<crate::Launch> {
    const RANK: usize = 4;
    const WORKGROUP: u64 = 64;
    let rank = layout.shape().len();
    if !element.is_multiple_of(4) || rank > RANK {
        return None;
    }
    let words = element / 4;
    let count = to.len() / element;
    // Bindings start where the device allows (its binding alignment, a multiple of 4); the
    // kernel is told where in them the elements start.
    let align = queue
        .device()
        .query(crate::device::keys::BINDING_ALIGNMENT)
        .unwrap_or(256)
        .max(4);
    let bind = |range: &crate::BufferRef| {
        let start = range.offset() / align * align;
        let bound = range
            .buffer()
            .slice(start..range.offset() + range.len())
            .ok()?;
        Some((bound, (range.offset() - start) / 4))
    };
    let ((source, source_word), (target, target_word)) = (bind(from)?, bind(to)?);
    let u32_of = |v: u64| u32::try_from(v).ok();
    let mut constants = [0u32; 16];
    for k in 0..RANK {
        let axis = (k + rank).checked_sub(RANK);
        let (d, s) = axis.map_or((1, 0), |a| (layout.shape()[a], layout.strides()[a]));
        constants[k] = u32_of(d)?;
        constants[RANK + k] = u32_of(s)?;
    }
    // Every word the kernel reaches must be addressable in 32 bits.
    u32_of(source.len() / 4)?;
    u32_of(target.len() / 4)?;
    let groups = count.div_ceil(WORKGROUP);
    let max_x = u64::from(queue.device().max_workgroup_count()[0]).max(1);
    let (x, y) = (groups.min(max_x), groups.div_ceil(max_x).max(1));
    constants[8] = u32_of(source_word + layout.offset() * words)?;
    constants[9] = u32_of(target_word)?;
    constants[10] = u32_of(count)?;
    constants[11] = u32_of(words)?;
    constants[12] = u32_of(x * WORKGROUP)?;
    let launch = kernel
        .launch([u32_of(x)?, u32_of(y)?, 1])
        .constants(&constants)
        .binding(source)
        .binding(target);
    Some(launch)
}
