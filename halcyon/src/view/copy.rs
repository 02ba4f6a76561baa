//! [`Queue::copy_view`]: a view's elements, in whatever layout, packed into a contiguous view.

use std::sync::Arc;

use crate::buffer::BufferUsage;
use crate::command_buffer::{Command, CommandBuffer, CommandBufferMode};
use crate::device::QueueCapabilities;
use crate::error::{Error, StatusCode};
use crate::queue::across::Gather;
use crate::queue::{Queue, Submission, Timepoints};

use super::BufferView;

impl Queue {
    /// Copies the elements of `source` (any layout) into `target`, a contiguous view of the
    /// same element type and shape on this queue's device, in row-major order of the shape,
    /// once `timepoints.wait` is reached; signals `timepoints.signal` once they are there.
    /// A contiguous source is one device copy. A strided one is gathered by the device:
    /// by a command of the backend's own where it has one (the CPU device: a loop over the
    /// elements on its workers), else by the backend's gather kernel (Vulkan, CUDA, and HIP
    /// where hiprtc compiles it): one launch, or one per index of the leading axes of a
    /// layout still over rank 4 once its mergeable axes are merged. Only a copy the kernel
    /// cannot take is gathered on the host between two staging copies (a host round trip):
    /// on a device without one ([`crate::Device::gathers_on_device`]) or a queue that cannot
    /// dispatch, for a buffer without [`crate::BufferUsage::DISPATCH_STORAGE`] or a range past
    /// the device's binding range ([`crate::Device::max_binding_range`]), over 1024 launches,
    /// past 32-bit indices (16 GiB of whole-word elements, 4 GiB of smaller ones), or a
    /// range of 1- or 2-byte elements whose last word runs past its buffer's end (views this
    /// crate allocates never do). `InvalidArgument` (through the submission) for
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
        if let Some(kernel) = self.gather_kernel() {
            if let Some(launches) = gather_launches(self, kernel, &layout, element, &from, &to) {
                // Launches write apart, so no barrier between them.
                let built = (|| {
                    let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
                    for launch in &launches {
                        builder.dispatch(launch)?;
                    }
                    builder.finish().resolve(None)
                })();
                return match built {
                    Ok(commands) => self.commands(timepoints, commands),
                    Err(error) => self.reject(timepoints, error),
                };
            }
        }
        let gather = Gather {
            layout,
            element: element as usize,
        };
        self.copy_staged(timepoints, self, &from, &to, Some(gather))
    }
}

impl Queue {
    /// Whether this queue packs `view` on its device ([`Queue::copy_view`]): the backend
    /// gathers natively, or offers a gather kernel that loads, this queue can dispatch, and
    /// the view's bytes may be bound (its buffer has [`BufferUsage::DISPATCH_STORAGE`], and
    /// they fit the device's binding range). The kernel may still not take a copy its
    /// contract does not cover (see [`gather_launches`]), which then goes through the host.
    pub(crate) fn gathers(&self, view: &BufferView) -> bool {
        self.device().backend().gathers()
            || (bindable(self, &view.byte_range()) && self.gather_kernel().is_some())
    }

    /// The device's gather kernel, if it has one that loads and this queue can dispatch.
    fn gather_kernel(&self) -> Option<&crate::Kernel> {
        let dispatches = self.capabilities().contains(QueueCapabilities::DISPATCH);
        self.device().gather_kernel().filter(|_| dispatches)
    }
}

/// Whether `range` (with its first word and last word whole) may be a dispatch binding on
/// `queue`'s device: its buffer has [`BufferUsage::DISPATCH_STORAGE`] and the range fits the
/// device's binding range, from the binding alignment on.
fn bindable(queue: &Queue, range: &crate::BufferRef) -> bool {
    let align = binding_alignment(queue);
    let bound = range.offset() + range.len() - range.offset() / align * align;
    range
        .buffer()
        .usage()
        .contains(BufferUsage::DISPATCH_STORAGE)
        && bound.next_multiple_of(4) <= queue.device().max_binding_range()
}

/// The device's binding alignment: a multiple of 4 (256 where it does not say).
fn binding_alignment(queue: &Queue) -> u64 {
    queue
        .device()
        .query(crate::device::keys::BINDING_ALIGNMENT)
        .unwrap_or(256)
        .max(4)
}

/// The most launches of the gather kernel one copy takes: a layout of rank over 4 (after
/// coalescing) is one launch per index of its leading axes, and past this many it is
/// gathered on the host.
const MAX_LAUNCHES: u64 = 1024;

/// The launches of the device's gather kernel ([`crate::backend::DeviceBackend::gather_kernel`])
/// packing `layout`'s elements (of `element` bytes, relative to `from`) into `to`, or `None`
/// where its contract does not cover the copy: a range that may not be bound ([`bindable`]),
/// over [`MAX_LAUNCHES`] launches, bytes past
/// 32-bit word (or, for elements under a word, byte) indices, or elements under a word in a
/// range whose last word runs past its buffer's end.
fn gather_launches(
    queue: &Queue,
    kernel: &crate::Kernel,
    layout: &super::Layout,
    element: u64,
    from: &crate::BufferRef,
    to: &crate::BufferRef,
) -> Option<Vec<crate::Launch>> {
    const RANK: usize = 4;
    const WORKGROUP: u64 = 64;
    let layout = layout.coalesced();
    let rank = layout.shape().len();
    let (outer, inner) = layout.shape().split_at(rank.saturating_sub(RANK));
    let outer_strides = &layout.strides()[..outer.len()];
    let inner_strides = &layout.strides()[outer.len()..];
    let launches: u64 = outer.iter().product();
    let count: u64 = inner.iter().product();
    if launches > MAX_LAUNCHES || !(element.is_multiple_of(4) || element < 4) {
        return None;
    }
    if !bindable(queue, from) || !bindable(queue, to) {
        return None;
    }
    // Bindings start where the device allows (its binding alignment, a multiple of 4) and end
    // on a whole word; the kernel is told where in them the elements start.
    let align = binding_alignment(queue);
    let bind = |range: &crate::BufferRef| {
        let start = range.offset() / align * align;
        let end = (range.offset() + range.len()).next_multiple_of(4);
        let bound = range.buffer().slice(start..end).ok()?;
        Some((bound, range.offset() - start))
    };
    let ((source, source_byte), (target, target_byte)) = (bind(from)?, bind(to)?);
    let u32_of = |v: u64| u32::try_from(v).ok();
    // Every word, and for elements under a word every byte, the kernel reaches is indexed
    // in 32 bits.
    let reach = if element < 4 { 1 } else { 4 };
    u32_of(source.len() / reach)?;
    u32_of(target.len() / reach)?;
    let mut constants = [0u32; 16];
    for k in 0..RANK {
        let axis = (k + inner.len()).checked_sub(RANK);
        let (d, s) = axis.map_or((1, 0), |a| (inner[a], inner_strides[a]));
        constants[k] = u32_of(d)?;
        constants[RANK + k] = u32_of(s)?;
    }
    let groups = count.div_ceil(WORKGROUP);
    let max_x = u64::from(queue.device().max_workgroup_count()[0]).max(1);
    let (x, y) = (groups.min(max_x), groups.div_ceil(max_x).max(1));
    constants[10] = u32_of(count)?;
    constants[11] = u32_of(element)?;
    constants[12] = u32_of(x * WORKGROUP)?;
    let mut index = vec![0u64; outer.len()];
    let mut launched = Vec::with_capacity(launches as usize);
    for n in 0..launches {
        // The leading axes' index of launch `n`, and where its elements start.
        let mut rest = n;
        for k in (0..outer.len()).rev() {
            index[k] = rest % outer[k];
            rest /= outer[k];
        }
        let at: u64 = (index.iter().zip(outer_strides)).map(|(i, s)| i * s).sum();
        let first = source_byte + (layout.offset() + at) * element;
        let packed = target_byte + n * count * element;
        constants[8] = u32_of(first / 4)?;
        constants[9] = u32_of(packed / 4)?;
        constants[13] = u32_of(first % 4)?;
        constants[14] = u32_of(packed % 4)?;
        let launch = kernel
            .launch([u32_of(x)?, u32_of(y)?, 1])
            .constants(&constants)
            .binding(source.clone())
            .binding(target.clone());
        launched.push(launch);
    }
    Some(launched)
}
