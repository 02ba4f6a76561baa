//! [`Kernel`]: an entry point of an executable, looked up once; [`Launch`]: one dispatch of it,
//! built up from its workgroups, push constants and bindings.

use std::fmt;
use std::sync::{Arc, OnceLock};

use bytemuck::Pod;

use super::{EntryPoint, Executable};
use crate::command_buffer::{Binding, Command};
use crate::element::ElementType;
use crate::error::{Error, Result, StatusCode};
use crate::view::BufferView;

/// An entry point of an [`Executable`], looked up once by name ([`Executable::kernel`]) and
/// dispatched any number of times ([`Kernel::launch`]). Cheap to clone; it keeps the executable
/// alive.
///
/// ```
/// use halcyon::{Buffer, Executable, Queue, Timepoints};
///
/// /// y = a * x + y over `n` floats, 256 per workgroup.
/// async fn saxpy(queue: &Queue, module: &Executable, a: f32, x: &Buffer, y: &Buffer) -> halcyon::Result<()> {
///     let saxpy = module.kernel("saxpy")?; // `NotFound`, listing the names, if it has none
///     let n = (x.size() / 4) as u32;
///     let launch = saxpy
///         .launch([n.div_ceil(256), 1, 1])
///         .constant(a)
///         .constant(n)
///         .binding(x.whole())
///         .binding(y.whole());
///     queue.dispatch(Timepoints::default(), &launch).await
/// }
/// ```
#[derive(Clone)]
pub struct Kernel {
    executable: Executable,
    index: u32,
    /// What each binding expects of a view bound to it ([`Kernel::expecting`]), by binding.
    expects: Arc<[Option<Expected>]>,
}

/// What a binding of a [`Kernel`] expects of a view bound to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expected {
    element: ElementType,
    rank: usize,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name())
            .field("index", &self.index)
            .field("executable", &self.executable.id())
            .finish()
    }
}

impl Kernel {
    /// The kernel at `index` of `executable`; the caller checked that there is one.
    pub(super) fn new(executable: Executable, index: u32) -> Self {
        debug_assert!((index as usize) < executable.entry_points().len());
        Kernel {
            executable,
            index,
            expects: Arc::new([]),
        }
    }

    /// The kernel, declaring that its binding `binding` takes a contiguous array of rank
    /// `rank` of `element`s: a [`BufferView`] bound there ([`Launch::view`]) must be one, or
    /// the dispatch (or its recording into a command buffer) fails with `InvalidArgument`
    /// naming the binding, what it expects and what it was given. Bindings given as plain
    /// ranges ([`Launch::binding`]) are not checked.
    ///
    /// ```
    /// use halcyon::{BufferView, ElementType, Kernel};
    ///
    /// # fn demo(matmul: Kernel, a: &BufferView, b: &BufferView, c: &BufferView) -> halcyon::Result<()> {
    /// let matmul = matmul
    ///     .expecting(0, ElementType::F32, 2)
    ///     .expecting(1, ElementType::F32, 2)
    ///     .expecting(2, ElementType::F32, 2);
    /// let launch = matmul.launch([1, 1, 1]).view(a).view(b).view(c);
    /// # Ok(()) }
    /// ```
    pub fn expecting(mut self, binding: u32, element: ElementType, rank: usize) -> Kernel {
        let mut expects = self.expects.to_vec();
        if expects.len() <= binding as usize {
            expects.resize(binding as usize + 1, None);
        }
        expects[binding as usize] = Some(Expected { element, rank });
        self.expects = expects.into();
        self
    }

    /// What binding `binding` expects of a view: its element type and rank, if declared.
    pub fn expected(&self, binding: u32) -> Option<(ElementType, usize)> {
        let expected = self.expects.get(binding as usize).copied().flatten()?;
        Some((expected.element, expected.rank))
    }

    /// The entry point's name.
    pub fn name(&self) -> &str {
        &self.entry_point().name
    }

    /// The entry point: workgroup size, binding and constant counts.
    pub fn entry_point(&self) -> &EntryPoint {
        &self.executable.entry_points()[self.index as usize]
    }

    /// The executable it belongs to.
    pub fn executable(&self) -> &Executable {
        &self.executable
    }

    /// Its index among the executable's entry points (what backends dispatch by).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// A launch of `workgroups` workgroups (x, y, z; a zero anywhere makes it a no-op) with no
    /// constants or bindings yet: add them in the entry point's order with
    /// [`Launch::constant`] and [`Launch::binding`], then dispatch it on a queue
    /// ([`crate::Queue::dispatch`]) or record it ([`crate::CommandBufferBuilder::dispatch`]).
    pub fn launch(&self, workgroups: [u32; 3]) -> Launch {
        Launch {
            kernel: self.clone(),
            workgroups,
            constants: Vec::new(),
            bindings: Vec::new(),
            error: None,
            one_shot: OnceLock::new(),
        }
    }
}

/// One dispatch of a [`Kernel`]: its workgroups, push constants and buffer bindings, in the
/// entry point's order. A builder: each method takes and returns the launch.
///
/// Nothing is checked while building except the size of each constant; the dispatch that
/// takes the launch checks the rest (constant and binding counts against the entry point,
/// workgroup limits, buffer usage, binding-table slot rules) and fails with the first problem,
/// a constant of the wrong size included (`InvalidArgument` naming its size). A launch may be
/// dispatched any number of times; it holds its buffers and its executable alive.
///
/// ```
/// use halcyon::{Binding, CommandBuffer, CommandBufferMode, Kernel};
///
/// fn record_scale(scale: &Kernel, factor: f32, n: u32) -> halcyon::Result<CommandBuffer> {
///     let launch = scale
///         .launch([n.div_ceil(64), 1, 1])
///         .constant(factor) // an f32, bit for bit
///         .constant(n)
///         .binding(Binding::slot(0, 0, u64::from(n) * 4)); // a buffer given at submission
///     let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
///     builder.dispatch(&launch)?;
///     Ok(builder.finish())
/// }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a launch does nothing until a queue or command buffer dispatches it"]
pub struct Launch {
    kernel: Kernel,
    workgroups: [u32; 3],
    constants: Vec<u32>,
    bindings: Vec<Binding>,
    /// The first constant of the wrong size, reported by the dispatch.
    error: Option<Error>,
    /// The command [`crate::Queue::dispatch`] built from it, once it was dispatched: later
    /// dispatches of the same launch reuse it (no allocation). Appending a constant or a
    /// binding clears it.
    one_shot: OnceLock<Arc<[Command]>>,
}

impl Launch {
    /// Appends a push constant: a 4-byte value (`u32`, `i32`, `f32`, or a 4-byte `Pod` type of
    /// your own), passed bit for bit. A value of another size makes the dispatch fail with
    /// `InvalidArgument` naming the size.
    pub fn constant<T: Pod>(mut self, value: T) -> Self {
        self.one_shot = OnceLock::new();
        self.push_constant(bytemuck::bytes_of(&value));
        self
    }

    /// Appends push constants: each element as [`Launch::constant`] would
    /// (`.constants(&[n, stride])`).
    pub fn constants<T: Pod>(mut self, values: &[T]) -> Self {
        self.one_shot = OnceLock::new();
        for value in values {
            self.push_constant(bytemuck::bytes_of(value));
        }
        self
    }

    fn push_constant(&mut self, bytes: &[u8]) {
        match <[u8; 4]>::try_from(bytes) {
            Ok(word) => self.constants.push(u32::from_ne_bytes(word)),
            Err(_) if self.error.is_none() => {
                self.error = Some(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "constant {} of dispatch '{}' is {} bytes; push constants are 4 bytes \
                         (u32, i32 or f32)",
                        self.constants.len(),
                        self.kernel.name(),
                        bytes.len()
                    ),
                ))
            }
            Err(_) => {}
        }
    }

    /// Appends a buffer binding: a range known now (`BufferRef` or `&BufferRef`) or a
    /// binding-table slot ([`Binding::slot`], reusable command buffers only).
    pub fn binding(mut self, binding: impl Into<Binding>) -> Self {
        self.one_shot = OnceLock::new();
        self.bindings.push(binding.into());
        self
    }

    /// Appends a binding of `view`'s bytes ([`BufferView::byte_range`]), checked against what
    /// the kernel declared for this binding ([`Kernel::expecting`]): the element type, the
    /// rank, and that the view is contiguous. A mismatch makes the dispatch fail with
    /// `InvalidArgument` naming the binding, what it expects and what it was given.
    pub fn view(mut self, view: &BufferView) -> Self {
        let index = self.bindings.len() as u32;
        if let Some((element, rank)) = self.kernel.expected(index) {
            let fits = view.element() == element && view.rank() == rank && view.is_contiguous();
            if !fits && self.error.is_none() {
                self.error = Some(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "binding {index} of dispatch '{}' expects a contiguous rank-{rank} view \
                         of {element}, and was given a {}rank-{} view of {} (shape {:?})",
                        self.kernel.name(),
                        if view.is_contiguous() { "" } else { "strided " },
                        view.rank(),
                        view.element(),
                        view.shape()
                    ),
                ));
            }
        }
        self.binding(view.byte_range())
    }

    /// Appends buffer bindings, in order.
    pub fn bindings<B: Into<Binding>>(mut self, bindings: impl IntoIterator<Item = B>) -> Self {
        self.one_shot = OnceLock::new();
        self.bindings.extend(bindings.into_iter().map(Into::into));
        self
    }

    /// The kernel it launches.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Workgroups in x, y, z.
    pub fn workgroups(&self) -> [u32; 3] {
        self.workgroups
    }

    /// The push constants so far, as 32-bit words.
    pub fn constant_words(&self) -> &[u32] {
        &self.constants
    }

    /// The bindings so far.
    pub fn binding_list(&self) -> &[Binding] {
        &self.bindings
    }

    /// The command a queue dispatches for it: built by `build` the first time, then shared.
    pub(crate) fn one_shot(
        &self,
        build: impl FnOnce() -> Result<Arc<[Command]>>,
    ) -> Result<Arc<[Command]>> {
        if let Some(commands) = self.one_shot.get() {
            return Ok(commands.clone());
        }
        let commands = build()?;
        Ok(self.one_shot.get_or_init(|| commands).clone())
    }

    /// The first constant of the wrong size, if any.
    pub(crate) fn check(&self) -> Result<()> {
        match &self.error {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }
}
