//! Command buffers: recording and validation in the core, translation in backends.
//!
//! A [`CommandBufferBuilder`] records fills, updates, copies, dispatches and execution barriers,
//! validating each command as it is recorded (ranges, alignment, usage bits, binding and
//! constant counts against the entry point), and [`finish`](CommandBufferBuilder::finish)es
//! into an immutable [`CommandBuffer`].
//!
//! * **Modes.** A [`CommandBufferMode::OneShot`] buffer may be submitted once; a
//!   [`CommandBufferMode::Reusable`] one any number of times.
//! * **Binding tables.** Reusable buffers may refer to buffers through binding-table slots
//!   ([`Binding::Slot`]); each submission passes a [`BindingTable`] that resolves them, so one
//!   recording replays with new buffers without re-recording. Slot ranges are checked at submit.
//! * **Ordering.** Commands between two execution barriers may run concurrently and in any
//!   order; a [`CommandBufferBuilder::barrier`] makes everything before it complete (and its
//!   writes visible) before anything after it starts.
//! * **Lifetime.** A submission keeps the command buffer, every buffer and every executable it
//!   references alive until its signal fence is reached.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use bytemuck::Pod;

use crate::buffer::{Access, BufferRef, BufferUsage};
use crate::error::{Error, Result, StatusCode};
use crate::executable::{Executable, Launch};

/// The largest inline [`CommandBufferBuilder::update`], in bytes (Vulkan's `vkCmdUpdateBuffer`
/// limit); larger uploads go through a queue `write` or a staging buffer copy.
pub const MAX_UPDATE_SIZE: u64 = 65536;

/// The most workgroups one dispatch may have in total (`x * y * z`); devices may allow fewer
/// per dimension.
pub const MAX_WORKGROUPS: u64 = u32::MAX as u64;

/// The number of binding-table slots a command buffer may use (slots `0..MAX_BINDING_SLOTS`).
pub const MAX_BINDING_SLOTS: u32 = 4096;

fn check_slot(slot: u32, what: &str) -> Result<()> {
    if slot < MAX_BINDING_SLOTS {
        Ok(())
    } else {
        Err(Error::new(
            StatusCode::OutOfRange,
            format!(
                "{what} uses binding-table slot {slot}; slots must be below {MAX_BINDING_SLOTS}"
            ),
        ))
    }
}

/// Whether a command buffer may be submitted once or many times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandBufferMode {
    /// Submitted exactly once; binding-table slots are not allowed.
    OneShot,
    /// Submitted any number of times, each with its own binding table.
    Reusable,
}

/// A buffer range a command refers to: direct, or through a binding-table slot.
#[derive(Clone, Debug)]
pub enum Binding {
    /// A buffer range known at record time.
    Buffer(BufferRef),
    /// `length` bytes at `offset` of whatever buffer the submission's binding table puts in
    /// `slot`.
    Slot {
        /// Binding-table index.
        slot: u32,
        /// Offset into the bound buffer range.
        offset: u64,
        /// Length in bytes.
        length: u64,
    },
}

impl From<BufferRef> for Binding {
    fn from(range: BufferRef) -> Self {
        Binding::Buffer(range)
    }
}

impl From<&BufferRef> for Binding {
    fn from(range: &BufferRef) -> Self {
        Binding::Buffer(range.clone())
    }
}

impl Binding {
    /// A slot binding.
    pub fn slot(slot: u32, offset: u64, length: u64) -> Self {
        Binding::Slot {
            slot,
            offset,
            length,
        }
    }

    fn length(&self) -> u64 {
        match self {
            Binding::Buffer(r) => r.len(),
            Binding::Slot { length, .. } => *length,
        }
    }

    fn offset(&self) -> u64 {
        match self {
            Binding::Buffer(r) => r.offset(),
            Binding::Slot { offset, .. } => *offset,
        }
    }

    fn is_slot(&self) -> bool {
        matches!(self, Binding::Slot { .. })
    }
}

/// A dispatch: run `workgroups` workgroups of an executable's entry point.
#[derive(Clone, Debug)]
pub struct Dispatch<B> {
    /// The executable.
    pub executable: Executable,
    /// Entry point index.
    pub entry_point: u32,
    /// Workgroup count in x, y, z (a zero anywhere makes the dispatch a no-op).
    pub workgroups: [u32; 3],
    /// Push constants, exactly the entry point's constant count.
    pub constants: Arc<[u32]>,
    /// Buffer bindings, exactly the entry point's binding count.
    pub bindings: Vec<B>,
}

/// A recorded command, generic over how it names buffers: [`Binding`] as recorded,
/// [`BufferRef`] once resolved for a submission (what backends execute).
#[derive(Clone, Debug)]
pub enum Command<B = BufferRef> {
    /// Fill `target` with a repeated 1-, 2- or 4-byte pattern (little-endian in `pattern`).
    Fill {
        /// Target range.
        target: B,
        /// The pattern value.
        pattern: u32,
        /// Pattern length in bytes: 1, 2 or 4.
        pattern_len: u8,
    },
    /// Write bytes captured at record time into `target`.
    Update {
        /// Target range (as long as `data`).
        target: B,
        /// The bytes.
        data: Arc<[u8]>,
    },
    /// Copy `source` into `target` (same length, not overlapping).
    Copy {
        /// Source range.
        source: B,
        /// Target range.
        target: B,
    },
    /// A dispatch.
    Dispatch(Dispatch<B>),
    /// Everything before completes before anything after starts.
    Barrier,
    /// Copy the elements of a strided view out of `source` into `target`, packed in row-major
    /// order ([`crate::Queue::copy_view`]): `layout` places element `[i0, ..]` of the view
    /// `layout.offset() + Σ ik·stride_k` elements of `element_size` bytes into `source`.
    /// Only a backend that says it runs gathers ([`crate::backend::DeviceBackend::gathers`])
    /// receives one.
    Gather {
        /// The bytes the view's elements lie in.
        source: B,
        /// The packed elements (`len × element_size` bytes).
        target: B,
        /// Bytes per element.
        element_size: u64,
        /// Where the elements are in `source`.
        layout: Arc<crate::view::Layout>,
    },
}

impl<B> Command<B> {
    /// Calls `f` with each buffer the command touches and how.
    pub fn for_each_binding(&self, mut f: impl FnMut(&B, Access)) {
        match self {
            Command::Fill { target, .. } | Command::Update { target, .. } => {
                f(target, Access::Write)
            }
            Command::Copy { source, target } | Command::Gather { source, target, .. } => {
                f(source, Access::Read);
                f(target, Access::Write);
            }
            Command::Dispatch(d) => d.bindings.iter().for_each(|b| f(b, Access::Write)),
            Command::Barrier => {}
        }
    }

    fn try_map<C>(&self, mut f: impl FnMut(&B) -> Result<C>) -> Result<Command<C>> {
        Ok(match self {
            Command::Fill {
                target,
                pattern,
                pattern_len,
            } => Command::Fill {
                target: f(target)?,
                pattern: *pattern,
                pattern_len: *pattern_len,
            },
            Command::Update { target, data } => Command::Update {
                target: f(target)?,
                data: data.clone(),
            },
            Command::Copy { source, target } => Command::Copy {
                source: f(source)?,
                target: f(target)?,
            },
            Command::Dispatch(d) => Command::Dispatch(Dispatch {
                executable: d.executable.clone(),
                entry_point: d.entry_point,
                workgroups: d.workgroups,
                constants: d.constants.clone(),
                bindings: d.bindings.iter().map(&mut f).collect::<Result<_>>()?,
            }),
            Command::Barrier => Command::Barrier,
            Command::Gather {
                source,
                target,
                element_size,
                layout,
            } => Command::Gather {
                source: f(source)?,
                target: f(target)?,
                element_size: *element_size,
                layout: layout.clone(),
            },
        })
    }
}

/// Buffers for a submission's binding-table slots.
#[derive(Clone, Debug, Default)]
pub struct BindingTable {
    slots: Vec<Option<BufferRef>>,
}

impl BindingTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `range` in `slot`; `OutOfRange` for a slot at or above [`MAX_BINDING_SLOTS`].
    pub fn set(&mut self, slot: u32, range: BufferRef) -> Result<&mut Self> {
        check_slot(slot, "BindingTable::set")?;
        let slot = slot as usize;
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, None);
        }
        self.slots[slot] = Some(range);
        Ok(self)
    }

    /// A table with `ranges` in slots 0, 1, 2...
    pub fn from_ranges(ranges: impl IntoIterator<Item = BufferRef>) -> Self {
        BindingTable {
            slots: ranges.into_iter().map(Some).collect(),
        }
    }
}

struct Recorded {
    mode: CommandBufferMode,
    commands: Vec<Command<Binding>>,
    /// Slots used, with the minimum length each must have (`offset + length`) and usage.
    slots: Vec<Option<(u64, BufferUsage)>>,
    /// Precomputed resolution when no slot is used.
    resolved: Option<Arc<[Command]>>,
    submitted: AtomicBool,
    label: crate::label::Label,
}

/// An immutable, validated list of commands. Cheap to clone.
///
/// Recorded once with a [`CommandBufferBuilder`], then executed on a queue. A reusable buffer
/// names binding-table slots instead of buffers, so each execution can supply its own.
///
/// ```
/// use halcyon::{Binding, BindingTable, Buffer, CommandBuffer, CommandBufferMode, Queue, Timepoints};
///
/// async fn clear_twice(queue: &Queue, a: &Buffer, b: &Buffer) -> halcyon::Result<()> {
///     let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
///     builder.fill(0u8, Binding::slot(0, 0, 64))?; // the first 64 bytes of slot 0
///     let clear = builder.finish();
///     for buffer in [a, b] {
///         let mut table = BindingTable::new();
///         table.set(0, buffer.whole())?;
///         queue.execute(Timepoints::default(), &clear, Some(&table)).await?;
///     }
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct CommandBuffer {
    inner: Arc<Recorded>,
}

impl std::fmt::Debug for CommandBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandBuffer")
            .field("mode", &self.inner.mode)
            .field("commands", &self.inner.commands.len())
            .field("slots", &self.inner.slots.len())
            .finish()
    }
}

impl CommandBuffer {
    /// Names the command buffer in profiles: its executions are recorded as `execute LABEL`
    /// instead of `execute (N commands)`. Every handle sees the new label.
    pub fn set_label(&self, label: &str) {
        self.inner.label.set(label);
    }

    /// The command buffer's label, if it has one.
    pub fn label(&self) -> Option<Arc<str>> {
        self.inner.label.get()
    }

    /// Starts recording.
    pub fn builder(mode: CommandBufferMode) -> CommandBufferBuilder {
        CommandBufferBuilder {
            mode,
            commands: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// The mode it was recorded in.
    pub fn mode(&self) -> CommandBufferMode {
        self.inner.mode
    }

    /// The recorded commands.
    pub fn commands(&self) -> &[Command<Binding>] {
        &self.inner.commands
    }

    /// How many binding-table slots a submission must fill.
    pub fn slot_count(&self) -> u32 {
        self.inner.slots.len() as u32
    }

    /// Names this command buffer's recording (shared by its clones) without keeping it alive:
    /// see [`Recording`].
    pub fn recording(&self) -> Recording {
        Recording(Arc::downgrade(&self.inner))
    }

    /// Resolves the commands for one submission: checks the one-shot rule and the binding
    /// table (every used slot filled, large enough, with the usage the commands need).
    pub fn resolve(&self, table: Option<&BindingTable>) -> Result<Arc<[Command]>> {
        if self.inner.mode == CommandBufferMode::OneShot
            && self.inner.submitted.swap(true, Ordering::AcqRel)
        {
            return Err(Error::new(
                StatusCode::FailedPrecondition,
                "one-shot command buffer was already submitted; record it as \
                 CommandBufferMode::Reusable to submit it again",
            ));
        }
        if let Some(resolved) = &self.inner.resolved {
            return Ok(resolved.clone());
        }
        let empty = BindingTable::new();
        let table = table.unwrap_or(&empty);
        for (slot, need) in self.inner.slots.iter().enumerate() {
            let Some((min_len, usage)) = need else {
                continue;
            };
            let Some(Some(range)) = table.slots.get(slot) else {
                return Err(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "binding table slot {slot} is empty but the command buffer uses it; \
                         set it with BindingTable::set({slot}, ..)"
                    ),
                ));
            };
            if range.len() < *min_len {
                return Err(Error::new(
                    StatusCode::OutOfRange,
                    format!(
                        "binding table slot {slot} holds {} bytes but the command buffer \
                         accesses up to byte {min_len} of it",
                        range.len()
                    ),
                ));
            }
            check_usage(range, *usage, &format!("binding table slot {slot}"))?;
        }
        let commands: Vec<Command> = self
            .inner
            .commands
            .iter()
            .map(|c| {
                c.try_map(|b| match b {
                    Binding::Buffer(r) => Ok(r.clone()),
                    Binding::Slot {
                        slot,
                        offset,
                        length,
                    } => {
                        let range = table.slots[*slot as usize].as_ref().expect("checked above");
                        range.slice(*offset..offset + length)
                    }
                })
            })
            .collect::<Result<_>>()?;
        // Commands through binding-table slots get the rules direct ones got when recorded,
        // once the table says which bytes they address: copies must not overlap, fills and
        // updates must be aligned in the buffer (not only within the slot's range).
        for (recorded, resolved) in self.inner.commands.iter().zip(&commands) {
            match (recorded, resolved) {
                (
                    Command::Copy { source, target },
                    Command::Copy {
                        source: s,
                        target: t,
                    },
                ) if source.is_slot() || target.is_slot() => check_no_overlap(s, t)?,
                (
                    Command::Fill { target, .. },
                    Command::Fill {
                        target: t,
                        pattern_len,
                        ..
                    },
                ) if target.is_slot() => {
                    check_aligned(t.offset(), t.len(), u64::from(*pattern_len), "fill")
                        .map_err(|e| e.context(slot_context(target)))?
                }
                (Command::Update { target, .. }, Command::Update { target: t, .. })
                    if target.is_slot() =>
                {
                    check_aligned(t.offset(), t.len(), 4, "update")
                        .map_err(|e| e.context(slot_context(target)))?
                }
                _ => {}
            }
        }
        Ok(commands.into())
    }
}

/// What a resolution error of a slot binding is prefixed with.
fn slot_context(binding: &Binding) -> String {
    match binding {
        Binding::Slot { slot, .. } => format!("through binding table slot {slot}"),
        Binding::Buffer(_) => "directly".into(),
    }
}

/// `InvalidArgument` if copy ranges `s` and `t` overlap within one buffer.
fn check_no_overlap(s: &BufferRef, t: &BufferRef) -> Result<()> {
    if s.overlaps(t) {
        return Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "copy ranges {}..{} and {}..{} of {} overlap",
                s.offset(),
                s.end(),
                t.offset(),
                t.end(),
                s.buffer()
            ),
        ));
    }
    Ok(())
}

/// Names the recording of a [`CommandBuffer`] without keeping it alive.
///
/// Each submission of a reusable command buffer with a binding table resolves into a new
/// command list, but they all come from one recording and differ only in the buffers their
/// slots name. A backend that prepares something per recording (a CUDA graph captured from it,
/// whose kernel parameters it then points at each submission's buffers) keys it by this
/// ([`Work::Commands`](crate::device::Work::Commands) carries it). Two are equal when they name
/// the same recording; [`Recording::is_live`] says whether any handle to it is left. Holding one
/// keeps the recording's identity from being reused by another, never its commands or buffers.
#[derive(Clone)]
pub struct Recording(Weak<Recorded>);

impl Recording {
    /// Whether some [`CommandBuffer`] handle to the recording still exists (it may be
    /// submitted again).
    pub fn is_live(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl PartialEq for Recording {
    fn eq(&self, other: &Self) -> bool {
        Weak::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Recording {}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recording({:p})", self.0.as_ptr())
    }
}

/// Records commands, validating each one. See the [module docs](self).
pub struct CommandBufferBuilder {
    mode: CommandBufferMode,
    commands: Vec<Command<Binding>>,
    slots: Vec<Option<(u64, BufferUsage)>>,
}

impl std::fmt::Debug for CommandBufferBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandBufferBuilder")
            .field("mode", &self.mode)
            .field("commands", &self.commands.len())
            .field("slots", &self.slots.len())
            .finish()
    }
}

pub(crate) fn check_usage(range: &BufferRef, usage: BufferUsage, what: &str) -> Result<()> {
    if range.buffer().usage().contains(usage) {
        Ok(())
    } else {
        Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "{what} ({}) needs usage {usage:?} but was allocated with {:?}",
                range.buffer(),
                range.buffer().usage()
            ),
        ))
    }
}

/// `InvalidArgument` unless `offset` and `length` are multiples of `alignment`. Checked when a
/// command is recorded (for a slot binding, relative to its slot) and again, for slot bindings,
/// on the resolved range: where the binding table's range starts decides the bytes' alignment.
fn check_aligned(offset: u64, length: u64, alignment: u64, what: &str) -> Result<()> {
    if offset.is_multiple_of(alignment) && length.is_multiple_of(alignment) {
        Ok(())
    } else {
        Err(Error::new(
            StatusCode::InvalidArgument,
            format!("{what}: offset {offset} and length {length} must be multiples of {alignment}"),
        ))
    }
}

/// What a slot binding needs of the range a binding table puts in its slot: that many bytes,
/// that usage, and offsets aligned to `alignment` once resolved.
#[derive(Clone, Copy)]
struct SlotNeed {
    slot: u32,
    end: u64,
    usage: BufferUsage,
}

impl CommandBufferBuilder {
    /// Checks one binding of a command being recorded; a slot binding's needs are returned,
    /// to be recorded with [`CommandBufferBuilder::push`] once the whole command is accepted
    /// (so a refused command leaves nothing behind, not even a raised slot count).
    fn binding(
        &self,
        binding: &Binding,
        usage: BufferUsage,
        what: &str,
    ) -> Result<Option<SlotNeed>> {
        match binding {
            Binding::Buffer(range) => check_usage(range, usage, what).map(|()| None),
            Binding::Slot {
                slot,
                offset,
                length,
            } => {
                check_slot(*slot, what)?;
                if self.mode == CommandBufferMode::OneShot {
                    return Err(Error::new(
                        StatusCode::InvalidArgument,
                        format!(
                            "{what} uses binding-table slot {slot}, but slots are only allowed \
                             in CommandBufferMode::Reusable command buffers"
                        ),
                    ));
                }
                let end = offset.checked_add(*length).ok_or_else(|| {
                    Error::new(
                        StatusCode::OutOfRange,
                        format!("{what}: offset + length overflows"),
                    )
                })?;
                Ok(Some(SlotNeed {
                    slot: *slot,
                    end,
                    usage,
                }))
            }
        }
    }

    /// Records an accepted command and the slot needs of its bindings.
    fn push(
        &mut self,
        command: Command<Binding>,
        needs: impl IntoIterator<Item = Option<SlotNeed>>,
    ) {
        for need in needs.into_iter().flatten() {
            let slot = need.slot as usize;
            if self.slots.len() <= slot {
                self.slots.resize(slot + 1, None);
            }
            let have = self.slots[slot].get_or_insert((0, BufferUsage::empty()));
            have.0 = have.0.max(need.end);
            have.1 |= need.usage;
        }
        self.commands.push(command);
    }

    /// Records a fill of `target` with `pattern` repeated: a value of 1, 2 or 4 bytes (`0u8`,
    /// `1.0f32`...), written as it lies in memory. Offset and length must be multiples of its
    /// size (checked again at submission for a slot binding, on the range the table gives);
    /// the target needs [`BufferUsage::TRANSFER_TARGET`]. Any other size, or a failed check,
    /// is `InvalidArgument` (`OutOfRange` for a slot past [`MAX_BINDING_SLOTS`]) and records
    /// nothing.
    pub fn fill<T: Pod>(&mut self, pattern: T, target: impl Into<Binding>) -> Result<&mut Self> {
        let pattern = bytemuck::bytes_of(&pattern);
        let target = target.into();
        let pattern_len = pattern.len();
        if !matches!(pattern_len, 1 | 2 | 4) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!("fill pattern must be 1, 2 or 4 bytes long, not {pattern_len}"),
            ));
        }
        check_aligned(target.offset(), target.length(), pattern_len as u64, "fill")?;
        let need = self.binding(&target, BufferUsage::TRANSFER_TARGET, "fill target")?;
        let mut bytes = [0u8; 4];
        bytes[..pattern_len].copy_from_slice(pattern);
        let command = Command::Fill {
            target,
            pattern: u32::from_le_bytes(bytes),
            pattern_len: pattern_len as u8,
        };
        self.push(command, [need]);
        Ok(self)
    }

    /// Records a write of the elements of `data` into `target`: they are copied into the
    /// recording now (the caller may reuse `data` at once) and written each time the command
    /// buffer runs. The target must be exactly as many bytes long, at most [`MAX_UPDATE_SIZE`]
    /// of them, with offset and length multiples of 4 and [`BufferUsage::TRANSFER_TARGET`];
    /// otherwise `InvalidArgument`, and nothing is recorded.
    pub fn update<T: Pod>(&mut self, data: &[T], target: impl Into<Binding>) -> Result<&mut Self> {
        let data: &[u8] = bytemuck::cast_slice(data);
        let target = target.into();
        if data.len() as u64 > MAX_UPDATE_SIZE {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "update of {} bytes exceeds the inline limit of {MAX_UPDATE_SIZE}; use a \
                     queue write or a copy from a staging buffer",
                    data.len()
                ),
            ));
        }
        if target.length() != data.len() as u64 {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "update target is {} bytes but {} bytes of data were given",
                    target.length(),
                    data.len()
                ),
            ));
        }
        check_aligned(target.offset(), target.length(), 4, "update")?;
        let need = self.binding(&target, BufferUsage::TRANSFER_TARGET, "update target")?;
        let command = Command::Update {
            target,
            data: data.into(),
        };
        self.push(command, [need]);
        Ok(self)
    }

    /// Copies `source` into `target`: equal lengths, no overlap within one buffer, usage
    /// [`BufferUsage::TRANSFER_SOURCE`] / [`BufferUsage::TRANSFER_TARGET`].
    pub fn copy(
        &mut self,
        source: impl Into<Binding>,
        target: impl Into<Binding>,
    ) -> Result<&mut Self> {
        let (source, target) = (source.into(), target.into());
        if source.length() != target.length() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "copy source is {} bytes but target is {} bytes; they must be equal",
                    source.length(),
                    target.length()
                ),
            ));
        }
        if let (Binding::Buffer(s), Binding::Buffer(t)) = (&source, &target) {
            check_no_overlap(s, t)?;
        }
        let needs = [
            self.binding(&source, BufferUsage::TRANSFER_SOURCE, "copy source")?,
            self.binding(&target, BufferUsage::TRANSFER_TARGET, "copy target")?,
        ];
        self.push(Command::Copy { source, target }, needs);
        Ok(self)
    }

    /// Records a dispatch of `launch` ([`crate::Kernel::launch`]): its constant and binding
    /// counts must match the entry point, every constant must be 4 bytes, the workgroups at
    /// most [`MAX_WORKGROUPS`] in all, and bindings need [`BufferUsage::DISPATCH_STORAGE`]
    /// (slot bindings only in a [`CommandBufferMode::Reusable`] buffer). The launch's buffers
    /// and executable are held by the recording; nothing is recorded if a check fails.
    pub fn dispatch(&mut self, launch: &Launch) -> Result<&mut Self> {
        launch.check()?;
        let kernel = launch.kernel();
        let (executable, entry_point) = (kernel.executable(), kernel.index());
        let entry = executable.entry_point(entry_point)?;
        let (workgroups, constants) = (launch.workgroups(), launch.constant_words());
        let bindings = launch.binding_list().to_vec();
        if constants.len() != entry.constant_count as usize {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "entry point '{}' takes {} constants but {} were given",
                    entry.name,
                    entry.constant_count,
                    constants.len()
                ),
            ));
        }
        if bindings.len() != entry.binding_count as usize {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "entry point '{}' takes {} bindings but {} were given",
                    entry.name,
                    entry.binding_count,
                    bindings.len()
                ),
            ));
        }
        let total: u128 = workgroups.iter().map(|&n| u128::from(n)).product();
        if total > u128::from(MAX_WORKGROUPS) {
            return Err(Error::new(
                StatusCode::OutOfRange,
                format!(
                    "dispatch of '{}' asks for {workgroups:?} = {total} workgroups; at most \
                     {MAX_WORKGROUPS} are allowed in one dispatch",
                    entry.name
                ),
            ));
        }
        let needs = bindings
            .iter()
            .enumerate()
            .map(|(i, binding)| {
                self.binding(
                    binding,
                    BufferUsage::DISPATCH_STORAGE,
                    &format!("binding {i} of dispatch '{}'", entry.name),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let command = Command::Dispatch(Dispatch {
            executable: executable.clone(),
            entry_point,
            workgroups,
            constants: constants.into(),
            bindings,
        });
        self.push(command, needs);
        Ok(self)
    }

    /// An execution barrier: commands before it complete before commands after it start.
    pub fn barrier(&mut self) -> &mut Self {
        if !matches!(self.commands.last(), None | Some(Command::Barrier)) {
            self.commands.push(Command::Barrier);
        }
        self
    }

    /// Finishes recording.
    pub fn finish(self) -> CommandBuffer {
        let resolved = self.slots.is_empty().then(|| {
            self.commands
                .iter()
                .map(|c| {
                    c.try_map(|b| match b {
                        Binding::Buffer(r) => Ok(r.clone()),
                        Binding::Slot { .. } => unreachable!("no slots recorded"),
                    })
                })
                .collect::<Result<Vec<_>>>()
                .expect("direct bindings always resolve")
                .into()
        });
        CommandBuffer {
            inner: Arc::new(Recorded {
                mode: self.mode,
                commands: self.commands,
                slots: self.slots,
                resolved,
                submitted: AtomicBool::new(false),
                label: crate::label::Label::default(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{BufferMemory, BufferParams};
    use crate::Buffer;

    /// Memory of a given size with no host mapping: enough to build a `BufferRef`.
    struct NoMemory(u64);

    // SAFETY: no host pointer; a fixed length.
    unsafe impl BufferMemory for NoMemory {
        fn len(&self) -> u64 {
            self.0
        }
        fn host_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
            None
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn slots_above_the_limit_are_refused_without_allocating() {
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        let error = builder
            .fill(0u8, Binding::slot(u32::MAX, 0, 4))
            .expect_err("slot u32::MAX must be refused");
        assert_eq!(error.code(), StatusCode::OutOfRange);
        assert!(error.message().contains(&u32::MAX.to_string()), "{error}");
        assert_eq!(builder.finish().slot_count(), 0);

        let error = BindingTable::new()
            .set(
                MAX_BINDING_SLOTS,
                Buffer::from_memory(NoMemory(16), 16, BufferParams::DEVICE)
                    .unwrap()
                    .whole(),
            )
            .unwrap_err();
        assert_eq!(error.code(), StatusCode::OutOfRange);
    }

    struct OneEntry(Vec<crate::EntryPoint>);

    impl crate::executable::ExecutableBackend for OneEntry {
        fn entry_points(&self) -> &[crate::EntryPoint] {
            &self.0
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn too_many_workgroups_are_refused() {
        let entry = crate::EntryPoint {
            name: "k".into(),
            workgroup_size: [1, 1, 1],
            binding_count: 0,
            constant_count: 0,
        };
        let executable =
            Executable::from_backend("test", "test://0", Box::new(OneEntry(vec![entry])));
        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        let error = builder
            .dispatch(&executable.kernel("k").unwrap().launch([u32::MAX; 3]))
            .err()
            .map(|e| (e.code(), e.to_string()));
        let (code, message) = error.expect("2^96 workgroups must be refused");
        assert_eq!(code, StatusCode::OutOfRange);
        assert!(message.contains("4294967295"), "{message}");
        assert!(builder
            .dispatch(&executable.kernel("k").unwrap().launch([65536, 65535, 1]))
            .is_ok());
    }

    fn buffer(size: u64) -> Buffer {
        Buffer::from_memory(NoMemory(size), size, BufferParams::DEVICE).unwrap()
    }

    #[test]
    fn a_refused_command_leaves_the_slot_count_alone() {
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        // Unequal lengths: refused before either slot is looked at.
        assert!(builder
            .copy(Binding::slot(0, 0, 4), Binding::slot(1, 0, 8))
            .is_err());
        // The source is fine, the target's offset overflows: slot 0 must not be recorded.
        assert!(builder
            .copy(Binding::slot(0, 0, 4), Binding::slot(1, u64::MAX, 4))
            .is_err());
        let entry = crate::EntryPoint {
            name: "k".into(),
            workgroup_size: [1, 1, 1],
            binding_count: 2,
            constant_count: 0,
        };
        let executable =
            Executable::from_backend("test", "test://0", Box::new(OneEntry(vec![entry])));
        // A dispatch naming slot 7 whose other binding lacks the usage.
        let source_only = Buffer::from_memory(
            NoMemory(16),
            16,
            BufferParams {
                memory: crate::MemoryType::DEVICE_LOCAL,
                usage: BufferUsage::TRANSFER_SOURCE,
            },
        )
        .unwrap();
        assert!(builder
            .dispatch(
                &executable
                    .kernel("k")
                    .unwrap()
                    .launch([1, 1, 1])
                    .binding(Binding::slot(7, 0, 4))
                    .binding(source_only.whole())
            )
            .is_err());
        let commands = builder.finish();
        assert_eq!(commands.slot_count(), 0);
        assert!(commands.commands().is_empty());
        assert!(commands.resolve(None).is_ok());
    }

    #[test]
    fn slot_bindings_are_aligned_in_the_buffer_they_resolve_to() {
        let target = buffer(64);
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder
            .fill([1u8, 2, 3, 4], Binding::slot(0, 0, 4))
            .unwrap();
        builder.update(&[5u8; 4], Binding::slot(1, 4, 4)).unwrap();
        let commands = builder.finish();
        let table = |fill_at: u64, update_at: u64| {
            let mut table = BindingTable::new();
            table
                .set(0, target.slice(fill_at..fill_at + 8).unwrap())
                .unwrap();
            table
                .set(1, target.slice(update_at..update_at + 8).unwrap())
                .unwrap();
            table
        };
        assert!(commands.resolve(Some(&table(8, 16))).is_ok());
        for (fill_at, update_at, what) in [(2, 16, "fill"), (8, 1, "update")] {
            let error = commands
                .resolve(Some(&table(fill_at, update_at)))
                .unwrap_err();
            assert_eq!(error.code(), StatusCode::InvalidArgument);
            assert!(error.message().contains(what), "{error}");
            assert!(error.message().contains("binding table slot"), "{error}");
        }
    }
}
