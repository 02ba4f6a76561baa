//! Kernels written in Rust and registered in-process (format [`FORMAT_RUST`]).

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use bytemuck::Pod;
use halcyon::{EntryPoint, Error, ExecutableSpec, Result, StatusCode};

use crate::access::Mode;
use crate::kernel::{CpuExecutable, DispatchState, Kernel};

/// The executable format of [`RustKernels`].
pub const FORMAT_RUST: &str = "cpu-rust";

/// What a Rust kernel sees of one workgroup: its ids, the dispatch's constants, and views of
/// the dispatch's bindings.
///
/// The workgroups of a dispatch run concurrently on the worker pool, so the views are chosen to
/// make that sound without `unsafe`:
///
/// | view                                   | gives                        | for                     |
/// |----------------------------------------|------------------------------|-------------------------|
/// | [`binding`](Self::binding)             | `&[T]`, the whole binding    | bindings only read      |
/// | [`chunk_mut`](Self::chunk_mut)         | `&mut [T]`, this workgroup's | one output element range per workgroup |
/// | [`atomics`](Self::atomics)             | `&[AtomicU32]` (and friends) | scattered writes, counters |
/// | [`raw_binding`](Self::raw_binding)     | raw pointers, `unsafe` access | anything else           |
///
/// Every workgroup of a dispatch must use a binding (and every binding overlapping it) through
/// the same kind of view, with the same chunk size or atomic width: the first view asked for
/// fixes it, and asking for another kind returns an error (return it with `?` and the dispatch
/// fails with it). Another dispatch running at the same time (one not ordered after this one by
/// a semaphore) may not write memory this one uses, nor use memory this one writes: its view
/// returns an error too. So the views never alias a `&mut`.
///
/// ```
/// use halcyon::EntryPoint;
/// use halcyon_cpu::RustKernels;
///
/// // y[i] = a * x[i] + y[i], one workgroup per 256 elements.
/// let kernels = RustKernels::new().entry(
///     EntryPoint { name: "saxpy".into(), workgroup_size: [256, 1, 1], binding_count: 2, constant_count: 1 },
///     |ctx| {
///         let a = f32::from_bits(ctx.constants()[0]);
///         let n = ctx.workgroup_size()[0] as usize;
///         let x = ctx.binding::<f32>(0)?;            // read by every workgroup
///         let y = ctx.chunk_mut::<f32>(1, n)?;       // this workgroup's 256 elements of y
///         let start = ctx.workgroup_index() as usize * n;
///         for (yi, xi) in y.iter_mut().zip(&x[start.min(x.len())..]) {
///             *yi += a * xi;
///         }
///         Ok(())
///     },
/// );
/// # let _ = kernels;
/// ```
pub struct WorkgroupContext<'a> {
    dispatch: &'a DispatchState,
    workgroup_id: [u32; 3],
    workgroup_index: u64,
    /// Bindings below 64 this workgroup already holds a chunk of (one bit each).
    chunked: Cell<u64>,
    /// Bindings from 64 on this workgroup already holds a chunk of.
    chunked_high: RefCell<Vec<usize>>,
}

impl WorkgroupContext<'_> {
    /// This workgroup's id in x, y, z.
    pub fn workgroup_id(&self) -> [u32; 3] {
        self.workgroup_id
    }

    /// This workgroup's linear index in the dispatch: `x + count_x * (y + count_y * z)`. Every
    /// workgroup of a dispatch has its own, and runs exactly once; it numbers the chunks of
    /// [`WorkgroupContext::chunk_mut`].
    pub fn workgroup_index(&self) -> u64 {
        self.workgroup_index
    }

    /// The dispatch's workgroup count in x, y, z.
    pub fn workgroup_count(&self) -> [u32; 3] {
        self.dispatch.workgroup_count
    }

    /// Invocations per workgroup (the entry point's workgroup size).
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.dispatch.workgroup_size
    }

    /// The dispatch's push constants.
    pub fn constants(&self) -> &[u32] {
        &self.dispatch.constants
    }

    /// Length of binding `index` in bytes (0 if there is no such binding).
    pub fn binding_len(&self, index: usize) -> usize {
        self.dispatch
            .binding_lengths
            .get(index)
            .map_or(0, |&l| l as usize)
    }

    /// Binding `index`'s first byte as `*mut T` and its length in whole `T`s, or an error if
    /// there is no such binding or it is not aligned for `T`.
    fn raw<T>(&self, index: usize) -> Result<(*mut T, usize), String> {
        let (Some(&ptr), Some(&len)) = (
            self.dispatch.binding_ptrs.get(index),
            self.dispatch.binding_lengths.get(index),
        ) else {
            return Err(format!(
                "the dispatch has no binding {index} (it has {})",
                self.dispatch.binding_ptrs.len()
            ));
        };
        let size = std::mem::size_of::<T>();
        let align = std::mem::align_of::<T>();
        if !(ptr as usize).is_multiple_of(align) {
            return Err(format!(
                "binding {index} is not aligned for {} ({align}-byte alignment): bind it at an \
                 offset that is a multiple of {align}",
                std::any::type_name::<T>()
            ));
        }
        let len = (len as usize).checked_div(size).unwrap_or(0);
        Ok((ptr.cast(), len))
    }

    /// Binding `index` as a shared slice of `T` (whole elements), for a binding this dispatch
    /// only reads.
    ///
    /// # Errors
    /// When there is no binding `index`, when it is not aligned for `T`, or when this dispatch
    /// (another workgroup, or another binding overlapping this one), or another dispatch or
    /// queue transfer running at the same time, writes it.
    ///
    /// ```
    /// # use halcyon_cpu::WorkgroupContext;
    /// fn sum(ctx: &WorkgroupContext<'_>) -> Result<u64, String> {
    ///     Ok(ctx.binding::<u32>(0)?.iter().map(|&v| u64::from(v)).sum())
    /// }
    /// ```
    pub fn binding<T: Pod>(&self, index: usize) -> Result<&[T], String> {
        let (ptr, len) = self.raw::<T>(index)?;
        self.dispatch.access.claim(index, Mode::Read)?;
        // SAFETY: `ptr..ptr + len` lies within the binding's live buffer memory (the dispatch
        // keeps it alive while workgroups run) and is aligned for `T` (checked in `raw`); any
        // bytes are a valid `T` (`Pod`). The claim makes every access to this memory by this
        // dispatch, and by every other dispatch running now, a read: nothing writes it while
        // the slice lives (it borrows `self`, which lives only while the workgroup runs).
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// This workgroup's chunk of binding `index`: elements
    /// `workgroup_index() * per_workgroup .. + per_workgroup` of the binding as `T`, cut short
    /// at the binding's end (so the last chunk may be shorter, and chunks past the end empty).
    ///
    /// Every workgroup runs once and gets its own index, so chunks never overlap: the slice is
    /// this workgroup's alone. A workgroup can hold one chunk of a binding at a time (asking
    /// again is an error), and every workgroup must ask with the same chunk size in bytes.
    ///
    /// # Errors
    /// When there is no binding `index`, when it is not aligned for `T`, when it overlaps
    /// another binding of the dispatch (chunks of both would overlap: bind disjoint ranges, or
    /// use [`atomics`](Self::atomics)), when this workgroup already took a chunk of it, when
    /// another workgroup uses it differently (another chunk size, or another view), or when
    /// another dispatch or queue transfer running at the same time uses the same memory.
    ///
    /// ```
    /// # use halcyon_cpu::WorkgroupContext;
    /// // Each workgroup fills its 64 elements with its index.
    /// fn fill(ctx: &WorkgroupContext<'_>) -> Result<(), String> {
    ///     let index = ctx.workgroup_index() as u32;
    ///     ctx.chunk_mut::<u32>(0, 64)?.fill(index);
    ///     Ok(())
    /// }
    /// ```
    #[allow(clippy::mut_from_ref)]
    pub fn chunk_mut<T: Pod>(
        &self,
        index: usize,
        per_workgroup: usize,
    ) -> Result<&mut [T], String> {
        let (ptr, len) = self.raw::<T>(index)?;
        let aliases = self.dispatch.access.aliases(index);
        if !aliases.is_empty() {
            return Err(format!(
                "binding {index} overlaps bindings {aliases:?} of the same dispatch, so chunks of \
                 them would overlap; bind disjoint buffer ranges to write through chunk_mut, or \
                 write through atomics"
            ));
        }
        let bytes = per_workgroup
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| format!("chunks of {per_workgroup} elements overflow"))?;
        if self.holds_chunk(index) {
            return Err(format!(
                "this workgroup already holds a chunk of binding {index}; ask for it once and \
                 reuse the slice"
            ));
        }
        self.dispatch
            .access
            .claim(index, Mode::Chunk(bytes as u64))?;
        self.mark_chunk(index);
        let start = usize::try_from(self.workgroup_index)
            .ok()
            .and_then(|i| i.checked_mul(per_workgroup))
            .map_or(len, |start| start.min(len));
        let end = start.saturating_add(per_workgroup).min(len);
        // SAFETY: `start..end` lies within the binding's `len` elements (clamped above), which
        // are live buffer memory aligned for `T` (checked in `raw`), and any bytes are a valid
        // `T`. The slice is exclusive: the claim makes every access to this memory by this
        // dispatch a chunk of `bytes` bytes, the binding overlaps no other binding of the
        // dispatch and no memory another running dispatch uses, each workgroup index runs once
        // per dispatch (the pool claims every tile once) so the chunks of two workgroups are
        // disjoint, and this workgroup hands out its chunk once (`holds_chunk`). It borrows
        // `self`, which lives only while the workgroup runs.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.add(start), end - start) })
    }

    fn holds_chunk(&self, index: usize) -> bool {
        match u32::try_from(index).ok().and_then(|i| 1u64.checked_shl(i)) {
            Some(bit) => self.chunked.get() & bit != 0,
            None => self.chunked_high.borrow().contains(&index),
        }
    }

    fn mark_chunk(&self, index: usize) {
        match u32::try_from(index).ok().and_then(|i| 1u64.checked_shl(i)) {
            Some(bit) => self.chunked.set(self.chunked.get() | bit),
            None => self.chunked_high.borrow_mut().push(index),
        }
    }

    /// Binding `index` as atomic elements (`AtomicU32`, `AtomicI32`, `AtomicU64`, `AtomicI64`),
    /// for scattered writes, counters and histograms: any workgroup may touch any element.
    ///
    /// # Errors
    /// When there is no binding `index`, when it is not aligned for the atomic type, or when
    /// this dispatch or another one running at the same time uses the memory other than
    /// through atomics of the same width.
    ///
    /// ```
    /// # use halcyon_cpu::WorkgroupContext;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// // Counts, in binding 1, how often each value below 16 appears in binding 0.
    /// fn histogram(ctx: &WorkgroupContext<'_>) -> Result<(), String> {
    ///     let n = ctx.workgroup_size()[0] as usize;
    ///     let start = ctx.workgroup_index() as usize * n;
    ///     let values = ctx.binding::<u32>(0)?;
    ///     let bins = ctx.atomics::<AtomicU32>(1)?;
    ///     for &v in values.iter().skip(start).take(n) {
    ///         if let Some(bin) = bins.get(v as usize) {
    ///             bin.fetch_add(1, Ordering::Relaxed);
    ///         }
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn atomics<A: AtomicElement>(&self, index: usize) -> Result<&[A], String> {
        let (ptr, len) = self.raw::<A>(index)?;
        self.dispatch
            .access
            .claim(index, Mode::Atomic(std::mem::size_of::<A>() as u64))?;
        // SAFETY: `ptr..ptr + len` lies within live buffer memory aligned for `A` (checked in
        // `raw`); `A` is an atomic integer, which has the layout of its integer and accepts any
        // bytes. The claim makes every access to this memory by this dispatch and by every
        // other running dispatch an atomic access of the same width, so the shared slice's
        // interior mutability never races with a plain access.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// Binding `index` through raw pointers, for access patterns the safe views cannot express
    /// (several disjoint ranges per workgroup, strided writes): the view itself is safe to get,
    /// and each access through it is `unsafe`, under the contract of [`RawBinding`].
    ///
    /// # Errors
    /// When there is no binding `index`, when it is not aligned for `T`, or when this dispatch
    /// or another running one uses the memory through a safe view.
    pub fn raw_binding<T: Pod>(&self, index: usize) -> Result<RawBinding<'_, T>, String> {
        let (ptr, len) = self.raw::<T>(index)?;
        self.dispatch.access.claim(index, Mode::Raw)?;
        Ok(RawBinding {
            ptr,
            len,
            _context: PhantomData,
        })
    }
}

/// A binding of the running workgroup's dispatch as raw `T` elements
/// ([`WorkgroupContext::raw_binding`]): the escape hatch for access patterns the safe views do
/// not cover. Getting one is safe; every access is `unsafe`.
///
/// Safe views of the same memory are refused while a dispatch uses a raw view of it, so the
/// contract below is about raw accesses only: those of the other workgroups of this dispatch,
/// through this binding or any binding overlapping it, and those of other dispatches running
/// at the same time.
///
/// ```
/// # use halcyon_cpu::WorkgroupContext;
/// // Workgroup k writes elements k, k + count, k + 2 * count, ...: disjoint between
/// // workgroups, but no chunk.
/// fn strided(ctx: &WorkgroupContext<'_>) -> Result<(), String> {
///     let count = ctx.workgroup_count()[0] as usize;
///     let out = ctx.raw_binding::<u32>(0)?;
///     for i in (ctx.workgroup_index() as usize..out.len()).step_by(count) {
///         // SAFETY: only this workgroup (index i % count) touches element i in this dispatch,
///         // the binding overlaps no other, and every dispatch using it is ordered after
///         // this one.
///         unsafe { out.write(i, i as u32) };
///     }
///     Ok(())
/// }
/// ```
pub struct RawBinding<'a, T> {
    ptr: *mut T,
    len: usize,
    _context: PhantomData<&'a WorkgroupContext<'a>>,
}

impl<'a, T: Pod> RawBinding<'a, T> {
    /// The number of whole `T` elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's address, aligned for `T`; valid for `len()` elements while the
    /// workgroup runs.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Reads element `i`. Panics if `i >= len()`.
    ///
    /// # Safety
    /// No other workgroup of this dispatch and no other running dispatch may write element `i`
    /// (through any binding) at the same time.
    pub unsafe fn read(&self, i: usize) -> T {
        assert!(
            i < self.len,
            "element {i} is out of range: the binding has {}",
            self.len
        );
        // SAFETY: in bounds (asserted) of live memory aligned for `T`; the caller rules out
        // concurrent writes.
        unsafe { self.ptr.add(i).read() }
    }

    /// Writes element `i`. Panics if `i >= len()`.
    ///
    /// # Safety
    /// No other workgroup of this dispatch and no other running dispatch may read or write
    /// element `i` (through any binding) at the same time, and no slice from
    /// [`RawBinding::slice`] or [`RawBinding::slice_mut`] covering it may be alive.
    pub unsafe fn write(&self, i: usize, value: T) {
        assert!(
            i < self.len,
            "element {i} is out of range: the binding has {}",
            self.len
        );
        // SAFETY: in bounds (asserted) of live memory aligned for `T`; the caller rules out
        // concurrent accesses.
        unsafe { self.ptr.add(i).write(value) }
    }

    /// Elements `range` as a shared slice. Panics if the range is out of bounds.
    ///
    /// # Safety
    /// While the slice lives, nothing may write its elements: no other workgroup of this
    /// dispatch, no other running dispatch, and no write or `slice_mut` of this workgroup.
    pub unsafe fn slice(&self, range: Range<usize>) -> &'a [T] {
        let (start, len) = self.bounds(range);
        // SAFETY: in bounds of live memory aligned for `T` (checked in `bounds`) that lives
        // while the workgroup runs ('a); the caller rules out writes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), len) }
    }

    /// Elements `range` as a mutable slice. Panics if the range is out of bounds.
    ///
    /// # Safety
    /// While the slice lives, nothing else may access its elements: no other workgroup of this
    /// dispatch, no other running dispatch, and no other access (read, write, slice) of this
    /// workgroup.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, range: Range<usize>) -> &'a mut [T] {
        let (start, len) = self.bounds(range);
        // SAFETY: in bounds of live memory aligned for `T` (checked in `bounds`) that lives
        // while the workgroup runs ('a); the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }

    fn bounds(&self, range: Range<usize>) -> (usize, usize) {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "elements {range:?} are out of range: the binding has {}",
            self.len
        );
        (range.start, range.end - range.start)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::sync::atomic::AtomicU32 {}
    impl Sealed for std::sync::atomic::AtomicI32 {}
    impl Sealed for std::sync::atomic::AtomicU64 {}
    impl Sealed for std::sync::atomic::AtomicI64 {}
}

/// The atomic integer types [`WorkgroupContext::atomics`] hands out: `AtomicU32`, `AtomicI32`,
/// `AtomicU64` and `AtomicI64` (sealed: they have the layout of their integer and accept any
/// bytes).
pub trait AtomicElement: sealed::Sealed + Sync {}
impl AtomicElement for std::sync::atomic::AtomicU32 {}
impl AtomicElement for std::sync::atomic::AtomicI32 {}
impl AtomicElement for std::sync::atomic::AtomicU64 {}
impl AtomicElement for std::sync::atomic::AtomicI64 {}

type KernelFn = dyn Fn(&WorkgroupContext<'_>) -> std::result::Result<(), String> + Send + Sync;

struct RustKernel(Arc<KernelFn>);

impl Kernel for RustKernel {
    fn run(
        &self,
        dispatch: &DispatchState,
        workgroup_id: [u32; 3],
    ) -> std::result::Result<(), String> {
        let [x, y, z] = workgroup_id.map(u64::from);
        let [count_x, count_y, _] = dispatch.workgroup_count.map(u64::from);
        let context = WorkgroupContext {
            dispatch,
            workgroup_id,
            workgroup_index: x + count_x * (y + count_y * z),
            chunked: Cell::new(0),
            chunked_high: RefCell::new(Vec::new()),
        };
        (self.0)(&context)
    }
}

/// A set of Rust kernels forming one executable.
///
/// ```
/// use halcyon::EntryPoint;
/// use halcyon_cpu::RustKernels;
///
/// let spec = RustKernels::new()
///     .entry(
///         EntryPoint { name: "noop".into(), workgroup_size: [1, 1, 1], binding_count: 0, constant_count: 0 },
///         |_ctx| Ok(()),
///     )
///     .spec();
/// assert_eq!(spec.format, halcyon_cpu::FORMAT_RUST);
/// ```
#[derive(Clone, Default)]
pub struct RustKernels {
    entries: Vec<(EntryPoint, Arc<KernelFn>)>,
}

impl RustKernels {
    /// No kernels yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry point and its kernel, called once per workgroup (concurrently from the
    /// worker pool). An `Err` fails the dispatch with that message.
    pub fn entry(
        mut self,
        entry_point: EntryPoint,
        kernel: impl Fn(&WorkgroupContext<'_>) -> std::result::Result<(), String>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.entries.push((entry_point, Arc::new(kernel)));
        self
    }

    /// The executable spec to load on a CPU device. Loading the same spec (a clone of it)
    /// again returns the cached executable.
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_RUST, Arc::new(self))
    }
}

pub(crate) fn load(object: &(dyn Any + Send + Sync)) -> Result<CpuExecutable> {
    let kernels = object.downcast_ref::<RustKernels>().ok_or_else(|| {
        Error::new(
            StatusCode::InvalidArgument,
            "a 'cpu-rust' executable must be made with halcyon_cpu::RustKernels::spec()",
        )
    })?;
    for (i, (entry, _)) in kernels.entries.iter().enumerate() {
        if entry.workgroup_size.contains(&0) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "entry point '{}' has workgroup size {:?}; every dimension must be at least 1",
                    entry.name, entry.workgroup_size
                ),
            ));
        }
        if kernels.entries[..i]
            .iter()
            .any(|(e, _)| e.name == entry.name)
        {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!("entry point name '{}' is used twice", entry.name),
            ));
        }
    }
    Ok(CpuExecutable {
        entry_points: kernels.entries.iter().map(|(e, _)| e.clone()).collect(),
        kernels: kernels
            .entries
            .iter()
            .map(|(_, f)| Arc::new(RustKernel(f.clone())) as Arc<dyn Kernel>)
            .collect(),
        _keep_alive: None,
    })
}

impl std::fmt::Debug for WorkgroupContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkgroupContext")
            .field("workgroup_id", &self.workgroup_id)
            .field("workgroup_index", &self.workgroup_index)
            .field("dispatch", self.dispatch)
            .finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for RawBinding<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawBinding")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RustKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(entry, _)| entry))
            .finish()
    }
}
