//! A view's layout: its shape, its strides and its first element, in elements.

use std::ops::Range;

use smallvec::SmallVec;

use crate::error::{Error, Result, StatusCode};

/// Dimensions or strides: four inline, which most tensors fit.
pub(crate) type Dims = SmallVec<[u64; 4]>;
/// Axes as `(length, stride)` pairs.
type Axes = SmallVec<[(u64, u64); 4]>;

/// Where a view's elements are: element `[i0, i1, ..]` is at `offset + Σ ik * strides[k]`
/// elements from the start of the view's range. What a backend reads to run a
/// [`crate::Command::Gather`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub(crate) shape: Dims,
    pub(crate) strides: Dims,
    pub(crate) offset: u64,
}

/// `InvalidArgument` with `message`.
fn invalid(message: String) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

impl Layout {
    /// The shape, one length per axis.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The strides, in elements, one per axis.
    pub fn strides(&self) -> &[u64] {
        &self.strides
    }

    /// The first element's offset, in elements.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Row-major (C order) `shape`, from element 0.
    pub(crate) fn contiguous(shape: &[u64]) -> Layout {
        Layout {
            shape: shape.into(),
            strides: row_major(shape),
            offset: 0,
        }
    }

    /// How many elements (the product of the shape; 1 for a scalar).
    pub(crate) fn len(&self) -> Result<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                invalid(format!(
                    "shape {:?} has more elements than a u64 counts",
                    self.shape
                ))
            })
    }

    /// The elements it reaches, from the first to one past the last (empty for no elements).
    pub fn span(&self) -> Result<Range<u64>> {
        if self.len()? == 0 {
            return Ok(self.offset..self.offset);
        }
        let last = (self.shape.iter().zip(&self.strides))
            .try_fold(self.offset, |end, (&d, &s)| {
                end.checked_add((d - 1).checked_mul(s)?)
            })
            .ok_or_else(|| invalid(format!("layout {self:?} reaches past a u64")))?;
        Ok(self.offset..last + 1)
    }

    /// Whether its elements are the row-major run starting at `offset`, with no gaps
    /// (dimensions of size 1 may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1u64;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected = expected.saturating_mul(d);
        }
        true
    }

    /// The view of `range` along `axis` (elements `range.start..range.end` of it).
    pub(crate) fn slice(&self, axis: usize, range: Range<u64>) -> Result<Layout> {
        let d = self.dim(axis)?;
        if range.start > range.end || range.end > d {
            return Err(Error::new(
                StatusCode::OutOfRange,
                format!("elements {range:?} of axis {axis}, which has {d}"),
            ));
        }
        let mut layout = self.clone();
        layout.offset += range.start * self.strides[axis];
        layout.shape[axis] = range.end - range.start;
        Ok(layout)
    }

    /// The axes in the order `axes` names them (a permutation of `0..rank`).
    pub(crate) fn permute(&self, axes: &[usize]) -> Result<Layout> {
        let rank = self.shape.len();
        let mut seen = vec![false; rank];
        let valid = axes.len() == rank
            && axes
                .iter()
                .all(|&a| a < rank && !std::mem::replace(&mut seen[a], true));
        if !valid {
            return Err(invalid(format!(
                "axes {axes:?} are not a permutation of the {rank} axes"
            )));
        }
        Ok(Layout {
            shape: axes.iter().map(|&a| self.shape[a]).collect(),
            strides: axes.iter().map(|&a| self.strides[a]).collect(),
            offset: self.offset,
        })
    }

    /// The same elements in row-major order as `shape`, over the same memory: wherever
    /// strides can say it, which is where each run of axes that steps through memory as one
    /// (`strides[k] == shape[k + 1] * strides[k + 1]`) is split or merged into new axes on
    /// its own, never across two runs (`FailedPrecondition` otherwise: a copy makes them
    /// contiguous). A contiguous layout always can be.
    pub(crate) fn reshape(&self, shape: &[u64]) -> Result<Layout> {
        let to = Layout::contiguous(shape);
        if to.len()? != self.len()? {
            return Err(invalid(format!(
                "shape {shape:?} holds {} elements and the view {} ({:?})",
                to.len()?,
                self.len()?,
                self.shape
            )));
        }
        if self.len()? == 0 || self.is_contiguous() {
            return Ok(Layout {
                offset: self.offset,
                ..to
            });
        }
        let strides = self.strides_as(shape).ok_or_else(|| {
            Error::new(
                StatusCode::FailedPrecondition,
                format!(
                    "a view of shape {:?} with strides {:?} cannot be seen as shape {shape:?} \
                     without a copy: a new axis would span elements that are not evenly \
                     spaced in memory; copy it into a contiguous view first \
                     (BufferView::reshaped does)",
                    self.shape, self.strides
                ),
            )
        })?;
        Ok(Layout {
            shape: shape.into(),
            strides,
            offset: self.offset,
        })
    }

    /// The strides that give `shape` (as many elements, none of them 0) this layout's
    /// elements in the same order, if strides can: see [`Layout::reshape`].
    fn strides_as(&self, shape: &[u64]) -> Option<Dims> {
        // Axes of length 1 place nothing; the rest, from the innermost, form runs.
        let old: Axes = (self.shape.iter().zip(&self.strides))
            .filter(|(&d, _)| d != 1)
            .map(|(&d, &s)| (d, s))
            .collect();
        let mut strides: Dims = smallvec::smallvec![1; shape.len()];
        let mut new = shape.len();
        let mut end = old.len();
        while end > 0 {
            // The run old[start..end]: its length in elements and its innermost stride.
            let mut start = end - 1;
            let mut run = old[start].0;
            while start > 0 && old[start - 1].1 == old[start].0.checked_mul(old[start].1)? {
                start -= 1;
                run = run.checked_mul(old[start].0)?;
            }
            let mut stride = old[end - 1].1;
            let mut covered = 1u64;
            while covered < run {
                new = new.checked_sub(1)?;
                strides[new] = stride;
                stride = stride.checked_mul(shape[new])?;
                covered = covered.checked_mul(shape[new])?;
            }
            if covered != run {
                return None;
            }
            end = start;
        }
        // What is left of the new shape is axes of length 1 (the products matched).
        shape[..new].iter().all(|&d| d == 1).then_some(strides)
    }

    /// The offset (in elements, from the range's start) of every element, in row-major order
    /// of the shape: what a gather visits.
    pub fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.offsets_from(0)
    }

    /// [`Layout::offsets`] from the element `first` in row-major order on (none past the
    /// last): where one of several workers gathering the elements starts.
    pub fn offsets_from(&self, first: u64) -> impl Iterator<Item = u64> + '_ {
        let rank = self.shape.len();
        let total = self.len().unwrap_or(0);
        // The index of element `first`, digit by digit, and its offset.
        let mut index: Dims = smallvec::smallvec![0; rank];
        let mut at = self.offset;
        let mut rest = first.min(total);
        for k in (0..rank).rev() {
            let d = self.shape[k].max(1);
            index[k] = rest % d;
            at += index[k] * self.strides[k];
            rest /= d;
        }
        (first.min(total)..total).map(move |n| {
            if n > first {
                // Advance the index like an odometer, moving `at` with it.
                for k in (0..rank).rev() {
                    index[k] += 1;
                    at += self.strides[k];
                    if index[k] < self.shape[k] {
                        break;
                    }
                    at -= self.strides[k] * index[k];
                    index[k] = 0;
                }
            }
            at
        })
    }

    /// The same elements in the same order with the fewest axes: axes of length 1 dropped,
    /// and each axis merged into the one before it where stepping over it whole is one step
    /// of that one (`strides[k] == shape[k + 1] * strides[k + 1]`). What a gather unravels.
    pub(crate) fn coalesced(&self) -> Layout {
        let mut shape = Dims::new();
        let mut strides = Dims::new();
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            if d == 0 {
                // No elements: one empty axis says so.
                return Layout {
                    shape: smallvec::smallvec![0],
                    strides: smallvec::smallvec![1],
                    offset: self.offset,
                };
            }
            if d == 1 {
                continue;
            }
            match (shape.last_mut(), strides.last_mut()) {
                (Some(outer), Some(step)) if *step == d.saturating_mul(s) => {
                    *outer *= d;
                    *step = s;
                }
                _ => {
                    shape.push(d);
                    strides.push(s);
                }
            }
        }
        Layout {
            shape,
            strides,
            offset: self.offset,
        }
    }

    fn dim(&self, axis: usize) -> Result<u64> {
        self.shape.get(axis).copied().ok_or_else(|| {
            invalid(format!(
                "axis {axis} of a view of rank {}",
                self.shape.len()
            ))
        })
    }
}

/// The row-major strides of `shape`.
pub(crate) fn row_major(shape: &[u64]) -> Dims {
    let mut strides: Dims = smallvec::smallvec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1].saturating_mul(shape[k + 1]);
    }
    strides
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn contiguous_layouts_are_row_major() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(&l.strides[..], &[12, 4, 1]);
        assert_eq!(l.len().unwrap(), 24);
        assert_eq!(l.span().unwrap(), 0..24);
        assert!(l.is_contiguous());
        assert_eq!(l.offsets().collect::<Vec<_>>(), (0..24).collect::<Vec<_>>());
        let scalar = Layout::contiguous(&[]);
        assert_eq!((scalar.len().unwrap(), scalar.span().unwrap()), (1, 0..1));
    }

    #[test]
    fn slices_and_transposes_are_views() {
        let l = Layout::contiguous(&[3, 4]);
        let rows = l.slice(0, 1..3).unwrap();
        assert_eq!((rows.offset, &rows.shape[..]), (4, &[2, 4][..]));
        assert!(rows.is_contiguous());
        let cols = l.slice(1, 1..3).unwrap();
        assert!(!cols.is_contiguous());
        assert_eq!(cols.offsets().collect::<Vec<_>>(), [1, 2, 5, 6, 9, 10]);
        assert_eq!(cols.span().unwrap(), 1..11);
        let t = l.permute(&[1, 0]).unwrap();
        assert_eq!(&t.shape[..], &[4, 3]);
        assert_eq!(t.offsets().take(4).collect::<Vec<_>>(), [0, 4, 8, 1]);
        assert!(!t.is_contiguous());
        assert!(l.slice(1, 2..5).is_err());
        assert!(l.permute(&[0, 0]).is_err());
        assert!(l.permute(&[0]).is_err());
    }

    #[test]
    fn reshapes_need_contiguous_elements() {
        let l = Layout::contiguous(&[2, 6]);
        let r = l.slice(0, 1..2).unwrap().reshape(&[3, 2]).unwrap();
        assert_eq!((r.offset, &r.strides[..]), (6, &[2, 1][..]));
        assert_eq!(
            l.permute(&[1, 0])
                .unwrap()
                .reshape(&[12])
                .unwrap_err()
                .code(),
            StatusCode::FailedPrecondition
        );
        assert_eq!(
            l.reshape(&[5]).unwrap_err().code(),
            StatusCode::InvalidArgument
        );
        // Size-1 axes may have any stride.
        let one = Layout {
            shape: smallvec::smallvec![1, 4],
            strides: smallvec::smallvec![99, 1],
            offset: 0,
        };
        assert!(one.is_contiguous());
    }

    #[test]
    fn strided_reshapes_split_and_merge_within_runs() {
        // [2, 3, 4] with its first two axes swapped: [3, 2, 4], strides [4, 12, 1].
        let t = Layout::contiguous(&[2, 3, 4]).permute(&[1, 0, 2]).unwrap();
        // Splitting the last axis, or adding axes of 1, needs no copy.
        let split = t.reshape(&[3, 2, 2, 2]).unwrap();
        assert_eq!(&split.strides[..], &[4, 12, 2, 1]);
        let ones = t.reshape(&[1, 3, 1, 2, 4, 1]).unwrap();
        for r in [&split, &ones] {
            assert_eq!(
                r.offsets().collect::<Vec<_>>(),
                t.offsets().collect::<Vec<_>>()
            );
        }
        // Merging the last two axes would span two runs.
        let e = t.reshape(&[3, 8]).unwrap_err();
        assert_eq!(e.code(), StatusCode::FailedPrecondition, "{e}");
        assert!(e.message().contains("BufferView::reshaped"), "{e}");
        // A column slice of a matrix merges its rows only if they are adjacent: not here.
        let cols = Layout::contiguous(&[4, 6]).slice(1, 0..3).unwrap();
        assert!(cols.reshape(&[12]).is_err());
        assert_eq!(&cols.reshape(&[2, 2, 3]).unwrap().strides[..], &[12, 6, 1]);
    }

    /// Every reshape of permuted and sliced layouts that succeeds visits the same elements in
    /// the same order; every reshape of a contiguous layout succeeds.
    #[test]
    fn reshapes_keep_the_order_or_refuse() {
        let mut state = 0x2545_f491u32;
        let mut next = |n: u32| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state % n
        };
        let shapes: [&[u64]; 12] = [
            &[24],
            &[2, 12],
            &[4, 6],
            &[2, 3, 4],
            &[2, 2, 3, 2],
            &[24, 1],
            &[12],
            &[3, 4],
            &[2, 2, 3],
            &[1, 6, 2],
            &[4, 3],
            &[2, 6],
        ];
        let (mut done, mut refused) = (0, 0);
        for _ in 0..if cfg!(miri) { 40 } else { 400 } {
            let mut l = Layout::contiguous(&[2, 3, 4]);
            if next(2) == 0 {
                // Half the time, half of the last axis (12 elements).
                l = l.slice(2, 0..2).unwrap();
            }
            let mut axes: Vec<usize> = (0..3).collect();
            for k in (1..3).rev() {
                axes.swap(k, next(k as u32 + 1) as usize);
            }
            l = l.permute(&axes).unwrap();
            let contiguous = l.is_contiguous();
            let count = l.len().unwrap();
            let fits: Vec<&[u64]> = (shapes.iter().copied())
                .filter(|s| s.iter().product::<u64>() == count)
                .collect();
            let target = fits[next(fits.len() as u32) as usize];
            match l.reshape(target) {
                Ok(r) => {
                    assert_eq!(
                        r.offsets().collect::<Vec<_>>(),
                        l.offsets().collect::<Vec<_>>()
                    );
                    done += 1;
                }
                Err(e) => {
                    assert!(!contiguous, "{l:?} as {target:?}: {e}");
                    refused += 1;
                }
            }
        }
        assert!(
            done > 0 && refused > 0,
            "{done} reshaped, {refused} refused"
        );
    }

    #[test]
    fn offsets_start_anywhere() {
        let t = Layout::contiguous(&[3, 4]).permute(&[1, 0]).unwrap();
        let all: Vec<u64> = t.offsets().collect();
        for first in 0..=12 {
            let from: Vec<u64> = t.offsets_from(first).collect();
            assert_eq!(from, all[first as usize..], "from {first}");
        }
    }

    #[test]
    fn coalescing_keeps_the_order_with_fewer_axes() {
        let l = Layout::contiguous(&[2, 3, 4, 5]);
        let c = l.coalesced();
        assert_eq!((&c.shape[..], &c.strides[..]), (&[120][..], &[1][..]));
        // A transpose of the last two axes of [2, 3, 4, 5] merges the first two.
        let t = l.permute(&[0, 1, 3, 2]).unwrap();
        let c = t.coalesced();
        assert_eq!(
            (&c.shape[..], &c.strides[..]),
            (&[6, 5, 4][..], &[20, 1, 5][..])
        );
        assert_eq!(
            c.offsets().collect::<Vec<_>>(),
            t.offsets().collect::<Vec<_>>()
        );
        // Size-1 axes go; a column slice keeps its row stride.
        let s = Layout::contiguous(&[1, 4, 1, 6]).slice(3, 1..3).unwrap();
        let c = s.coalesced();
        assert_eq!(
            (&c.shape[..], &c.strides[..], c.offset),
            (&[4, 2][..], &[6, 1][..], 1)
        );
        assert_eq!(
            c.offsets().collect::<Vec<_>>(),
            s.offsets().collect::<Vec<_>>()
        );
        // A scalar has no axes; an empty view keeps one empty axis.
        assert!(Layout::contiguous(&[1, 1]).coalesced().shape.is_empty());
        assert_eq!(Layout::contiguous(&[3, 0, 2]).coalesced().len().unwrap(), 0);
    }

    #[test]
    fn empty_views_reach_nothing() {
        let l = Layout::contiguous(&[3, 0]);
        assert_eq!(l.len().unwrap(), 0);
        assert!(l.span().unwrap().is_empty());
        assert_eq!(l.offsets().count(), 0);
    }
}
