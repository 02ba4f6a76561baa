//! Buffer views: a range of a buffer seen as an array of elements of one type, with a shape and
//! strides (IREE's `iree_hal_buffer_view_t`, a tensor without the framework).
//!
//! # Layout
//!
//! A [`BufferView`] is a [`BufferRef`] (the range it lives in), an [`ElementType`], and a
//! layout: element `[i0, i1, ..]` is `offset + Σ ik·stride_k` elements into the range. A view
//! made with [`BufferView::new`] is contiguous (row-major). [`BufferView::slice`],
//! [`BufferView::permute`] and [`BufferView::transpose`] make views of the same memory with
//! other strides; [`BufferView::reshape`] does too wherever strides can express the new shape,
//! and says a copy is needed where they cannot; [`BufferView::reshaped`] then makes the copy
//! on a queue. Creating or deriving a view checks that every
//! element it reaches lies within its range, and that the range is aligned to the element
//! size.
//!
//! # Moving data
//!
//! [`BufferView::from_host`] uploads a slice as a new view, [`BufferView::to_host`] reads a
//! view's elements back in row-major order whatever its strides, and [`BufferView::to`] moves
//! a view to another device's queue as a new contiguous view, over the copy between devices
//! ([`crate::Queue::copy_from`]: peer DMA where the driver has it, else staged through host
//! memory). Each is a queue operation ordered by the timepoints given.

mod copy;
mod layout;
mod transfer;

use std::fmt;

use crate::buffer::{Buffer, BufferRef};
use crate::element::ElementType;
use crate::error::{Error, Result, StatusCode};

pub use layout::Layout;

/// A range of a buffer seen as an array of `element`s with a shape and strides (see the
/// [module docs](self)). Cheap to clone: it holds its buffer.
///
/// ```
/// use halcyon::{BufferView, ElementType};
///
/// # fn demo(buffer: &halcyon::Buffer) -> halcyon::Result<()> {
/// // 2 × 3 f32s at the start of `buffer`, then its transpose (3 × 2, no copy).
/// let matrix = BufferView::new(buffer.slice(0..24)?, ElementType::F32, &[2, 3])?;
/// let transposed = matrix.transpose(0, 1)?;
/// assert_eq!(transposed.shape(), &[3, 2]);
/// assert!(!transposed.is_contiguous());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BufferView {
    range: BufferRef,
    element: ElementType,
    layout: Layout,
}

impl BufferView {
    /// A contiguous (row-major) view of `shape` over `range`, which must hold exactly that
    /// many elements of `element` and start at a multiple of its size (`InvalidArgument`
    /// otherwise).
    pub fn new(range: BufferRef, element: ElementType, shape: &[u64]) -> Result<BufferView> {
        let layout = Layout::contiguous(shape);
        let bytes = layout.len()?.checked_mul(element.size());
        if bytes != Some(range.len()) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "a view of shape {shape:?} of {element} needs {} bytes, and the range holds \
                     {}",
                    bytes.map_or("more than 2^64".into(), |b| b.to_string()),
                    range.len()
                ),
            ));
        }
        BufferView::with_layout(range, element, layout)
    }

    /// A view with explicit `strides` (in elements, one per axis) from element `offset` of
    /// `range`: every element it reaches must lie within the range (`OutOfRange` otherwise),
    /// and the range must start at a multiple of the element size (`InvalidArgument`).
    pub fn with_strides(
        range: BufferRef,
        element: ElementType,
        shape: &[u64],
        strides: &[u64],
        offset: u64,
    ) -> Result<BufferView> {
        if strides.len() != shape.len() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{} strides for a shape of rank {} ({shape:?})",
                    strides.len(),
                    shape.len()
                ),
            ));
        }
        let layout = Layout {
            shape: shape.into(),
            strides: strides.into(),
            offset,
        };
        BufferView::with_layout(range, element, layout)
    }

    fn with_layout(range: BufferRef, element: ElementType, layout: Layout) -> Result<BufferView> {
        if !range.offset().is_multiple_of(element.size()) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "a view of {element} must start at a multiple of {} bytes, and its range \
                     starts at byte {}",
                    element.size(),
                    range.offset()
                ),
            ));
        }
        let span = layout.span()?;
        let elements = range.len() / element.size();
        if span.end > elements {
            return Err(Error::new(
                StatusCode::OutOfRange,
                format!(
                    "a view of shape {:?}, strides {:?} from element {} reaches element {}, and \
                     its range holds {elements} {element} elements",
                    layout.shape,
                    layout.strides,
                    layout.offset,
                    span.end.saturating_sub(1)
                ),
            ));
        }
        Ok(BufferView {
            range,
            element,
            layout,
        })
    }

    /// The layout: shape, strides, and the first element's offset in the range.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The element type.
    pub fn element(&self) -> ElementType {
        self.element
    }

    /// The shape, one length per axis (empty for a scalar).
    pub fn shape(&self) -> &[u64] {
        &self.layout.shape
    }

    /// The strides in elements, one per axis.
    pub fn strides(&self) -> &[u64] {
        &self.layout.strides
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.layout.shape.len()
    }

    /// How many elements it has (the product of its shape).
    pub fn len(&self) -> u64 {
        // Checked when the view was made.
        self.layout.len().unwrap_or(0)
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many bytes its elements take, packed.
    pub fn byte_len(&self) -> u64 {
        self.len() * self.element.size()
    }

    /// Whether its elements are one row-major run with no gaps.
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// The buffer it views.
    pub fn buffer(&self) -> &Buffer {
        self.range.buffer()
    }

    /// The range it was made over.
    pub fn range(&self) -> &BufferRef {
        &self.range
    }

    /// The bytes its elements lie in, from the first to the last: what a dispatch binding
    /// the view reads or writes (for a contiguous view, exactly its elements).
    pub fn byte_range(&self) -> BufferRef {
        let size = self.element.size();
        // Checked when the view was made: the span lies within the range.
        let span = self.layout.span().unwrap_or(0..0);
        (self.range.slice(span.start * size..span.end * size))
            .unwrap_or_else(|_| self.range.clone())
    }

    /// The view of elements `range` of `axis`, over the same memory.
    pub fn slice(&self, axis: usize, range: std::ops::Range<u64>) -> Result<BufferView> {
        self.derive(self.layout.slice(axis, range)?)
    }

    /// The view with its axes in the order `axes` names (a permutation), over the same memory.
    pub fn permute(&self, axes: &[usize]) -> Result<BufferView> {
        self.derive(self.layout.permute(axes)?)
    }

    /// The view with axes `a` and `b` swapped, over the same memory.
    pub fn transpose(&self, a: usize, b: usize) -> Result<BufferView> {
        let mut axes: Vec<usize> = (0..self.rank()).collect();
        if a >= axes.len() || b >= axes.len() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!("axes {a} and {b} of a view of rank {}", self.rank()),
            ));
        }
        axes.swap(a, b);
        self.permute(&axes)
    }

    /// The same elements as `shape` (row-major), over the same memory, where strides can say
    /// it: a contiguous view always; a strided one where each new axis lies within one run of
    /// axes that steps through memory evenly (splitting a transposed matrix's axes, adding
    /// axes of length 1; not merging a transpose's two axes). `FailedPrecondition` otherwise,
    /// saying a copy is needed ([`BufferView::reshaped`] makes it); `InvalidArgument` if
    /// `shape` holds another number of elements.
    pub fn reshape(&self, shape: &[u64]) -> Result<BufferView> {
        self.derive(self.layout.reshape(shape)?)
    }

    fn derive(&self, layout: Layout) -> Result<BufferView> {
        BufferView::with_layout(self.range.clone(), self.element, layout)
    }
}

impl fmt::Debug for BufferView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferView")
            .field("element", &self.element)
            .field("shape", &self.layout.shape)
            .field("strides", &self.layout.strides)
            .field("offset", &self.layout.offset)
            .field("range", &self.range)
            .finish()
    }
}
