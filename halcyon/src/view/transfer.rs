//! Moving a view's elements: from host memory, to host memory, to another device.

use bytemuck::Pod;

use crate::buffer::BufferParams;
use crate::element::{Element, ElementType};
use crate::error::{Error, Result, StatusCode};
use crate::fence::Fence;
use crate::queue::across::Gather;
use crate::queue::{Queue, Submission, Timepoints};
use crate::semaphore::Semaphore;

use super::BufferView;

impl BufferView {
    /// Uploads `data` as a new contiguous view of `shape` on `queue`'s device (device-local
    /// memory, [`BufferParams::DEVICE`], from the allocator's pool, so that views made and
    /// dropped in a loop reuse it), once `timepoints.wait` is reached; the submission
    /// completes once the elements are there. `InvalidArgument` if `data` does not hold
    /// exactly `shape`'s elements; an allocation's failure as it comes.
    ///
    /// ```
    /// use halcyon::{BufferView, Timepoints};
    ///
    /// # async fn demo(queue: &halcyon::Queue) -> halcyon::Result<()> {
    /// let (x, uploaded) = BufferView::from_host(queue, Timepoints::default(), &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// uploaded.await?;
    /// let column: Vec<f32> = x.slice(1, 1..2)?.to_host(queue, Timepoints::default()).await?;
    /// assert_eq!(column, [2.0, 4.0]);
    /// # Ok(()) }
    /// ```
    pub fn from_host<T: Element>(
        queue: &Queue,
        timepoints: impl Into<Timepoints>,
        data: &[T],
        shape: &[u64],
    ) -> Result<(BufferView, Submission)> {
        BufferView::from_host_as(queue, timepoints, T::TYPE, data, shape)
    }

    /// [`BufferView::from_host`] of elements of `element` held as `T`s of the same size: the
    /// 16-bit floats as `u16`, `bool` as `u8` (`InvalidArgument` if the sizes differ).
    pub fn from_host_as<T: Pod>(
        queue: &Queue,
        timepoints: impl Into<Timepoints>,
        element: ElementType,
        data: &[T],
        shape: &[u64],
    ) -> Result<(BufferView, Submission)> {
        same_size::<T>(element)?;
        let bytes = std::mem::size_of_val(data) as u64;
        let buffer = view_buffer(queue.device(), bytes)?;
        let view = BufferView::new(buffer.slice(0..bytes)?, element, shape)?;
        let written = queue.write(timepoints, data, view.range());
        Ok((view, written))
    }

    /// Reads the view's elements back, in row-major order of its shape whatever its strides,
    /// once `timepoints.wait` is reached. The device reads the bytes its elements lie in
    /// ([`BufferView::byte_range`]) and a strided view's elements are then picked out on the
    /// host; but where those bytes are at least twice the elements' and the queue packs views
    /// on its device ([`Queue::copy_view`]), the device packs them first into memory of its
    /// own and only they are read. `InvalidArgument` (through the submission) if `T` is not
    /// the view's element type.
    pub fn to_host<T: Element>(
        &self,
        queue: &Queue,
        timepoints: impl Into<Timepoints>,
    ) -> Submission<Vec<T>> {
        if T::TYPE != self.element {
            let error = Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "a view of {} read as {}; read it as its own type, or with to_host_as",
                    self.element,
                    T::TYPE
                ),
            );
            return queue.reject(timepoints.into(), error);
        }
        self.to_host_as(queue, timepoints)
    }

    /// [`BufferView::to_host`] as `T`s of the element's size (the 16-bit floats as `u16`,
    /// `bool` as `u8`).
    pub fn to_host_as<T: Pod + Send>(
        &self,
        queue: &Queue,
        timepoints: impl Into<Timepoints>,
    ) -> Submission<Vec<T>> {
        let timepoints = timepoints.into();
        if let Err(error) = same_size::<T>(self.element) {
            return queue.reject(timepoints, error);
        }
        if self.is_contiguous() {
            return queue.read::<T>(timepoints, &self.byte_range());
        }
        let (packed, span) = (self.byte_len(), self.byte_range().len());
        if span >= 2 * packed && queue.gathers(self) {
            // Packed on the device first, so that only the elements cross to the host.
            if let Ok(packed) = self.new_packed(queue.device()) {
                let next = self.pack_into(queue, &packed, timepoints);
                return queue.read::<T>(next, packed.range());
            }
        }
        let read = queue.read::<T>(timepoints, &self.byte_range());
        let layout = self.layout.clone();
        read.map(move |span: Vec<T>| {
            let start = layout.span()?.start;
            Ok(layout
                .offsets()
                .map(|at| span[(at - start) as usize])
                .collect())
        })
    }

    /// Moves the view to `to`'s device as a new contiguous view of the same shape and type:
    /// the view is read in `from`'s order (a queue of its own device) and written in `to`'s,
    /// once `timepoints.wait` is reached; the submission completes once the elements are on
    /// the target. A contiguous view moves with [`Queue::copy_from`] (peer DMA where the
    /// driver has it, else staged through host memory; on one device, a device copy). A
    /// strided view is first packed by its own device where that device gathers
    /// ([`Queue::copy_view`]), then moved so; elsewhere its elements are picked out on the
    /// host between the two devices' staging copies, which even on one device is a round
    /// trip. The new view's buffer is
    /// device-local ([`BufferParams::DEVICE`]), from the target allocator's pool.
    pub fn to(
        &self,
        from: &Queue,
        to: &Queue,
        timepoints: impl Into<Timepoints>,
    ) -> Result<(BufferView, Submission)> {
        let target = self.new_packed(to.device())?;
        let timepoints = timepoints.into();
        let moved = if self.is_contiguous() || self.is_empty() {
            to.copy_from(timepoints, from, &self.byte_range(), target.range())
        } else if from.gathers(self) {
            // Packed by the source device first, then moved as one contiguous range.
            let packed = self.new_packed(from.device())?;
            let next = self.pack_into(from, &packed, timepoints);
            to.copy_from(next, from, packed.range(), target.range())
        } else {
            let gather = Gather {
                layout: self.layout.clone(),
                element: self.element.size() as usize,
            };
            to.copy_staged(
                timepoints,
                from,
                &self.byte_range(),
                target.range(),
                Some(gather),
            )
        };
        Ok((target, moved))
    }
}

impl BufferView {
    /// The view as `shape`, copying only where it must: the same memory where strides can
    /// express it ([`BufferView::reshape`]), with a barrier as the submission (signalling
    /// `timepoints.signal` once `timepoints.wait` is reached); otherwise its elements packed
    /// by `queue` ([`Queue::copy_view`], into device-local memory from its device's pool)
    /// and that contiguous view reshaped, the submission completing once they are there.
    /// `InvalidArgument` now if `shape` holds another number of elements.
    ///
    /// ```
    /// use halcyon::{BufferView, Queue, Timepoints};
    ///
    /// /// `[batch, heads, seq, dim]` attention output as `[batch, seq, heads * dim]`.
    /// async fn merge_heads(queue: &Queue, x: &BufferView) -> halcyon::Result<BufferView> {
    ///     let [b, h, s, d] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    ///     let swapped = x.transpose(1, 2)?; // a view: strides only
    ///     let (merged, done) = swapped.reshaped(queue, Timepoints::default(), &[b, s, h * d])?;
    ///     done.await?; // the transpose needed a copy
    ///     Ok(merged)
    /// }
    /// ```
    pub fn reshaped(
        &self,
        queue: &Queue,
        timepoints: impl Into<Timepoints>,
        shape: &[u64],
    ) -> Result<(BufferView, Submission)> {
        match self.reshape(shape) {
            Ok(view) => Ok((view, queue.barrier(timepoints))),
            Err(e) if e.code() == StatusCode::FailedPrecondition => {
                let packed = self.new_packed(queue.device())?;
                let copied = queue.copy_view(timepoints, self, &packed);
                Ok((packed.reshape(shape)?, copied))
            }
            Err(e) => Err(e),
        }
    }
}

impl BufferView {
    /// A new contiguous view of this one's shape and type on `device`, in memory from
    /// [`view_buffer`].
    fn new_packed(&self, device: &crate::Device) -> Result<BufferView> {
        let bytes = self.byte_len();
        let buffer = view_buffer(device, bytes)?;
        BufferView::new(buffer.slice(0..bytes)?, self.element, self.shape())
    }

    /// Submits `queue`'s [`Queue::copy_view`] of this view into `packed` once
    /// `timepoints.wait` is reached, and returns the timepoints of the step after it: waiting
    /// for the copy (whose failure fails that step with its error) and signalling
    /// `timepoints.signal`.
    fn pack_into(&self, queue: &Queue, packed: &BufferView, timepoints: Timepoints) -> Timepoints {
        let Timepoints { wait, signal } = timepoints;
        let gathered = Semaphore::new(0);
        let step = Timepoints::new(wait, Fence::at(&gathered, 1));
        drop(queue.copy_view(step, self, packed));
        Timepoints::new(Fence::at(&gathered, 1), signal)
    }
}

/// A device-local buffer from `device`'s pool for a new view of `bytes`, rounded up to a whole
/// word (at least one), so that a gather kernel may bind the view's last word
/// ([`Queue::copy_view`]).
fn view_buffer(device: &crate::Device, bytes: u64) -> Result<crate::Buffer> {
    let size = bytes.checked_next_multiple_of(4).unwrap_or(bytes).max(4);
    device
        .allocator()
        .allocate_pooled(size, BufferParams::DEVICE)
}

/// `InvalidArgument` unless `T` is as large as an element of `element`.
fn same_size<T>(element: ElementType) -> Result<()> {
    let size = std::mem::size_of::<T>() as u64;
    if size == element.size() {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::InvalidArgument,
        format!(
            "{} is {size} bytes and {element} elements are {}",
            std::any::type_name::<T>(),
            element.size()
        ),
    ))
}
