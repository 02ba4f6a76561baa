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
        let overlap = from.buffer().ptr_eq(to.buffer())
            && from.offset() < to.offset() + to.len()
            && to.offset() < from.offset() + from.len();
        if overlap && !from.is_empty() && !to.is_empty() {
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
        let gather = Gather {
            layout,
            element: source.element().size() as usize,
        };
        self.copy_staged(timepoints, self, &from, &to, Some(gather))
    }
}
