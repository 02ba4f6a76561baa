//! The `command_buffer` target: command-buffer recording, validation and binding-table resolution, against a model of the
//! documented rules.
//!
//! The input decodes (with `arbitrary`) into four buffers, a mode, a list of builder calls
//! (`fill`, `update`, `copy`, `dispatch`, `barrier`, over direct ranges and
//! `Binding::slot(slot, offset, length)`s) and a binding table. Each call is also judged by a
//! model written from `src/command_buffer.rs`'s documentation; the target asserts:
//!
//! * nothing panics;
//! * each call is accepted exactly when the model accepts it, and a refusal is
//!   `InvalidArgument` or `OutOfRange`;
//! * a refused call leaves nothing behind: after `finish`, `commands().len()` and
//!   `slot_count()` are what the accepted calls alone give;
//! * `resolve(Some(&table))` succeeds exactly when the model's resolution does, with the same
//!   code (a used slot left empty is `InvalidArgument`, a slot range too short `OutOfRange`);
//!   `resolve(None)` fails exactly when a slot is used;
//! * resolved commands obey the rules recording enforces, now in the buffers they address:
//!   ranges inside their buffers, fills aligned to the pattern length and updates to 4 bytes
//!   (offset and length), copies of equal, non-overlapping ranges, dispatch counts matching the
//!   entry point, every buffer with the usage its access needs; slot bindings resolve to the
//!   table's range sliced at the recorded offset;
//! * a one-shot buffer resolves once; a reusable one resolves again to the same outcome.
//!
//! Buffers are `Buffer::from_memory` over memory without a host mapping (no device needed).

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use halcyon::backend::{BufferMemory, ExecutableBackend};
use halcyon::command_buffer::{MAX_BINDING_SLOTS, MAX_UPDATE_SIZE, MAX_WORKGROUPS};
use halcyon::{
    Binding, BindingTable, Buffer, BufferParams, BufferRef, BufferUsage, Command, CommandBuffer,
    CommandBufferMode, EntryPoint, Executable, MemoryType, StatusCode,
};

/// Buffers an input works with.
const BUFFERS: usize = 4;

/// The test executable's entry points: (bindings, constants).
const ENTRY_POINTS: [(u32, u32); 3] = [(0, 0), (1, 1), (3, 2)];

/// Memory of a fixed length and no host mapping: enough for a `Buffer`.
struct NoMemory(u64);

// SAFETY: there is no host pointer to keep valid, and the length never changes.
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

/// Entry points with nothing behind them: dispatches are only recorded, never run.
struct Entries(Vec<EntryPoint>);

impl ExecutableBackend for Entries {
    fn entry_points(&self) -> &[EntryPoint] {
        &self.0
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A number, mostly small so that ranges land inside buffers and slots.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Num {
    Small(u8),
    Medium(u16),
    Any(u64),
}

impl Num {
    fn get(self) -> u64 {
        match self {
            Num::Small(n) => u64::from(n),
            Num::Medium(n) => u64::from(n),
            Num::Any(n) => n,
        }
    }
}

/// A binding-table slot: mostly one of the first eight.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum SlotIndex {
    Low(u8),
    Any(u32),
}

impl SlotIndex {
    fn get(self) -> u32 {
        match self {
            SlotIndex::Low(n) => u32::from(n % 8),
            SlotIndex::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct BufferSpec {
    size: u16,
    usage: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Range {
    /// `offset..offset + length` of buffer `buffer`; folded into the buffer when it does not
    /// fit (after checking that slicing refuses it).
    Direct {
        buffer: u8,
        offset: Num,
        length: Num,
    },
    Slot {
        slot: SlotIndex,
        offset: Num,
        length: Num,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Workgroups {
    Small([u8; 3]),
    Any([u32; 3]),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Fill {
        target: Range,
        pattern: u32,
        pattern_len: u8,
    },
    Update {
        target: Range,
        /// The data is the target's length plus this where it is in -4..=4, else as long.
        length_error: i8,
    },
    Copy {
        source: Range,
        target: Range,
    },
    Dispatch {
        entry_point: u8,
        workgroups: Workgroups,
        constants: u8,
        bindings: Vec<Range>,
    },
    Barrier,
}

#[derive(Arbitrary, Debug)]
struct TableEntry {
    slot: SlotIndex,
    buffer: u8,
    offset: Num,
    length: Num,
}

/// One fuzz input: four buffers, a mode, builder calls and a binding table.
#[derive(Arbitrary, Debug)]
pub struct Input {
    reusable: bool,
    buffers: [BufferSpec; BUFFERS],
    ops: Vec<Op>,
    table: Vec<TableEntry>,
}

/// The model's view of a binding: a direct range (buffer index, offset, length) or a slot.
#[derive(Clone, Copy, Debug)]
enum MBinding {
    Direct {
        buffer: usize,
        offset: u64,
        len: u64,
    },
    Slot {
        slot: u32,
        offset: u64,
        len: u64,
    },
}

impl MBinding {
    fn offset(self) -> u64 {
        match self {
            MBinding::Direct { offset, .. } | MBinding::Slot { offset, .. } => offset,
        }
    }
    fn len(self) -> u64 {
        match self {
            MBinding::Direct { len, .. } | MBinding::Slot { len, .. } => len,
        }
    }
}

/// The model's view of a recorded command.
#[derive(Clone, Debug)]
enum MCommand {
    Fill { target: MBinding, pattern_len: u64 },
    Update { target: MBinding },
    Copy { source: MBinding, target: MBinding },
    Dispatch { bindings: Vec<MBinding> },
    Barrier,
}

/// What the model expects the builder to record.
struct Model {
    mode: CommandBufferMode,
    usages: Vec<BufferUsage>,
    commands: Vec<MCommand>,
    /// Slot -> (bytes needed, usage needed).
    slots: BTreeMap<u32, (u64, BufferUsage)>,
}

type Need = Option<(u32, u64, BufferUsage)>;

impl Model {
    /// The documented checks of one binding: the usage of a direct range; for a slot, that it
    /// is below the limit, that the buffer is reusable and that `offset + length` fits a u64.
    fn binding(&self, binding: MBinding, usage: BufferUsage) -> Result<Need, ()> {
        match binding {
            MBinding::Direct { buffer, .. } => {
                if self.usages[buffer].contains(usage) {
                    Ok(None)
                } else {
                    Err(())
                }
            }
            MBinding::Slot { slot, offset, len } => {
                if slot >= MAX_BINDING_SLOTS || self.mode == CommandBufferMode::OneShot {
                    return Err(());
                }
                let end = offset.checked_add(len).ok_or(())?;
                Ok(Some((slot, end, usage)))
            }
        }
    }

    /// Whether a call recording `command` is accepted; if so, records it.
    fn record(&mut self, command: MCommand, extra: Extra) -> bool {
        let needs = match self.judge(&command, extra) {
            Ok(needs) => needs,
            Err(()) => return false,
        };
        for (slot, end, usage) in needs.into_iter().flatten() {
            let have = self.slots.entry(slot).or_insert((0, BufferUsage::empty()));
            have.0 = have.0.max(end);
            have.1 |= usage;
        }
        self.commands.push(command);
        true
    }

    fn judge(&self, command: &MCommand, extra: Extra) -> Result<Vec<Need>, ()> {
        let aligned =
            |b: MBinding, a: u64| b.offset().is_multiple_of(a) && b.len().is_multiple_of(a);
        match *command {
            MCommand::Fill {
                target,
                pattern_len,
            } => {
                if !matches!(pattern_len, 1 | 2 | 4) || !aligned(target, pattern_len) {
                    return Err(());
                }
                Ok(vec![self.binding(target, BufferUsage::TRANSFER_TARGET)?])
            }
            MCommand::Update { target } => {
                let Extra::Data(data_len) = extra else {
                    unreachable!()
                };
                if data_len > MAX_UPDATE_SIZE || data_len != target.len() || !aligned(target, 4) {
                    return Err(());
                }
                Ok(vec![self.binding(target, BufferUsage::TRANSFER_TARGET)?])
            }
            MCommand::Copy { source, target } => {
                if source.len() != target.len() {
                    return Err(());
                }
                if let (
                    MBinding::Direct {
                        buffer: a,
                        offset: s,
                        len,
                    },
                    MBinding::Direct {
                        buffer: b,
                        offset: t,
                        ..
                    },
                ) = (source, target)
                {
                    if a == b && s < t + len && t < s + len {
                        return Err(());
                    }
                }
                Ok(vec![
                    self.binding(source, BufferUsage::TRANSFER_SOURCE)?,
                    self.binding(target, BufferUsage::TRANSFER_TARGET)?,
                ])
            }
            MCommand::Dispatch { ref bindings } => {
                let Extra::Dispatch {
                    entry_point,
                    constants,
                    workgroups,
                } = extra
                else {
                    unreachable!()
                };
                let Some(&(binding_count, constant_count)) = ENTRY_POINTS.get(entry_point) else {
                    return Err(());
                };
                let total: u128 = workgroups.iter().map(|&n| u128::from(n)).product();
                if constants != constant_count as usize
                    || bindings.len() != binding_count as usize
                    || total > u128::from(MAX_WORKGROUPS)
                {
                    return Err(());
                }
                bindings
                    .iter()
                    .map(|&b| self.binding(b, BufferUsage::DISPATCH_STORAGE))
                    .collect()
            }
            MCommand::Barrier => Ok(vec![]),
        }
    }

    /// A barrier is recorded only after a command that is not a barrier.
    fn barrier(&mut self) {
        if !matches!(self.commands.last(), None | Some(MCommand::Barrier)) {
            self.commands.push(MCommand::Barrier);
        }
    }

    fn slot_count(&self) -> u32 {
        self.slots.keys().next_back().map_or(0, |&s| s + 1)
    }

    /// The outcome of resolving with `table` (slot -> buffer index and range): `Ok` or the
    /// code of the first failure, in the documented order (slots in order: empty, too short,
    /// usage; then commands in order: overlapping copies, misaligned fills and updates through
    /// slots).
    fn resolve(&self, table: &BTreeMap<u32, (usize, u64, u64)>) -> Result<(), StatusCode> {
        for (slot, &(min_len, usage)) in &self.slots {
            let Some(&(buffer, _, len)) = table.get(slot) else {
                return Err(StatusCode::InvalidArgument);
            };
            if len < min_len {
                return Err(StatusCode::OutOfRange);
            }
            if !self.usages[buffer].contains(usage) {
                return Err(StatusCode::InvalidArgument);
            }
        }
        // Where a binding lands: (buffer, absolute offset, length).
        let place = |b: MBinding| match b {
            MBinding::Direct {
                buffer,
                offset,
                len,
            } => (buffer, offset, len),
            MBinding::Slot { slot, offset, len } => {
                let (buffer, start, _) = table[&slot];
                (buffer, start + offset, len)
            }
        };
        let is_slot = |b: MBinding| matches!(b, MBinding::Slot { .. });
        for command in &self.commands {
            match *command {
                MCommand::Copy { source, target } if is_slot(source) || is_slot(target) => {
                    let (a, s, len) = place(source);
                    let (b, t, _) = place(target);
                    if a == b && s < t + len && t < s + len {
                        return Err(StatusCode::InvalidArgument);
                    }
                }
                MCommand::Fill {
                    target,
                    pattern_len,
                } if is_slot(target) => {
                    let (_, at, len) = place(target);
                    if !at.is_multiple_of(pattern_len) || !len.is_multiple_of(pattern_len) {
                        return Err(StatusCode::InvalidArgument);
                    }
                }
                MCommand::Update { target } if is_slot(target) => {
                    let (_, at, len) = place(target);
                    if !at.is_multiple_of(4) || !len.is_multiple_of(4) {
                        return Err(StatusCode::InvalidArgument);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// What a command's judgement needs beyond its bindings.
#[derive(Clone, Copy)]
enum Extra {
    None,
    Data(u64),
    Dispatch {
        entry_point: usize,
        constants: usize,
        workgroups: [u32; 3],
    },
}

/// A buffer range for `offset..offset + length` of `buffer`: the slice itself where it fits
/// (checking that `slice` refuses it with `OutOfRange` where it does not), else folded into the
/// buffer. Also the model's (offset, length).
fn direct(buffer: &Buffer, offset: u64, length: u64) -> BufferRef {
    let end = offset.checked_add(length);
    match buffer.slice(offset..end.unwrap_or(u64::MAX)) {
        Ok(range) => {
            assert!(end.is_some_and(|end| end <= buffer.size()));
            assert_eq!((range.offset(), range.len()), (offset, length));
            range
        }
        Err(error) => {
            assert!(end.is_none_or(|end| end > buffer.size()), "{error}");
            assert_eq!(error.code(), StatusCode::OutOfRange, "{error}");
            let offset = offset % (buffer.size() + 1);
            let length = length % (buffer.size() - offset + 1);
            buffer.slice(offset..offset + length).unwrap()
        }
    }
}

/// The builder's binding for `range` and the model's view of it.
fn binding(buffers: &[Buffer], range: Range) -> (Binding, MBinding) {
    match range {
        Range::Direct {
            buffer,
            offset,
            length,
        } => {
            let index = buffer as usize % BUFFERS;
            let r = direct(&buffers[index], offset.get(), length.get());
            let m = MBinding::Direct {
                buffer: index,
                offset: r.offset(),
                len: r.len(),
            };
            (Binding::from(r), m)
        }
        Range::Slot {
            slot,
            offset,
            length,
        } => {
            let (slot, offset, len) = (slot.get(), offset.get(), length.get());
            (
                Binding::slot(slot, offset, len),
                MBinding::Slot { slot, offset, len },
            )
        }
    }
}

fn index_of(buffers: &[Buffer], range: &BufferRef) -> usize {
    buffers
        .iter()
        .position(|b| b.ptr_eq(range.buffer()))
        .expect("resolved commands address the input's buffers")
}

/// Checks the resolved commands against the recorded model and the table.
fn check_resolved(
    resolved: &[Command],
    model: &Model,
    buffers: &[Buffer],
    table: &BTreeMap<u32, (usize, u64, u64)>,
) {
    assert_eq!(resolved.len(), model.commands.len());
    let expect = |range: &BufferRef, m: MBinding, usage: BufferUsage| {
        let buffer = index_of(buffers, range);
        assert!(range.end() <= buffers[buffer].size(), "{range:?}");
        assert!(buffers[buffer].usage().contains(usage), "{range:?}");
        let want = match m {
            MBinding::Direct {
                buffer,
                offset,
                len,
            } => (buffer, offset, len),
            MBinding::Slot { slot, offset, len } => {
                let (buffer, start, _) = table[&slot];
                (buffer, start + offset, len)
            }
        };
        assert_eq!((buffer, range.offset(), range.len()), want);
    };
    for (command, m) in resolved.iter().zip(&model.commands) {
        match (command, m) {
            (
                Command::Fill {
                    target,
                    pattern_len,
                    ..
                },
                MCommand::Fill {
                    target: t,
                    pattern_len: l,
                },
            ) => {
                let len = u64::from(*pattern_len);
                assert_eq!(len, *l);
                assert!(target.offset().is_multiple_of(len) && target.len().is_multiple_of(len));
                expect(target, *t, BufferUsage::TRANSFER_TARGET);
            }
            (Command::Update { target, data }, MCommand::Update { target: t }) => {
                assert!(target.offset().is_multiple_of(4) && target.len().is_multiple_of(4));
                assert_eq!(target.len(), data.len() as u64);
                assert!(target.len() <= MAX_UPDATE_SIZE);
                expect(target, *t, BufferUsage::TRANSFER_TARGET);
            }
            (
                Command::Copy { source, target },
                MCommand::Copy {
                    source: s,
                    target: t,
                },
            ) => {
                assert_eq!(source.len(), target.len());
                let overlap = source.buffer().ptr_eq(target.buffer())
                    && source.offset() < target.end()
                    && target.offset() < source.end();
                assert!(!overlap, "{source:?} and {target:?} overlap");
                expect(source, *s, BufferUsage::TRANSFER_SOURCE);
                expect(target, *t, BufferUsage::TRANSFER_TARGET);
            }
            (Command::Dispatch(dispatch), MCommand::Dispatch { bindings }) => {
                let entry = dispatch
                    .executable
                    .entry_point(dispatch.entry_point)
                    .unwrap();
                assert_eq!(dispatch.bindings.len(), entry.binding_count as usize);
                assert_eq!(dispatch.constants.len(), entry.constant_count as usize);
                for (range, m) in dispatch.bindings.iter().zip(bindings) {
                    expect(range, *m, BufferUsage::DISPATCH_STORAGE);
                }
            }
            (Command::Barrier, MCommand::Barrier) => {}
            (command, m) => panic!("resolved {command:?} where the model recorded {m:?}"),
        }
    }
}

/// What one input did, for choosing seeds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Whether the buffer was recorded `Reusable`.
    pub reusable: bool,
    /// Calls the builder accepted (barriers not counted).
    pub recorded: usize,
    /// Calls it refused.
    pub refused: usize,
    /// The finished buffer's slot count.
    pub slots: u32,
    /// Whether `resolve` with the input's table succeeded.
    pub resolved: bool,
}

/// Runs one input, asserting what the module docs list; what it did.
pub fn run(input: Input) -> Summary {
    let mut summary = Summary {
        reusable: input.reusable,
        ..Summary::default()
    };
    let buffers: Vec<Buffer> = input
        .buffers
        .iter()
        .map(|spec| {
            let size = u64::from(spec.size % 1025);
            // Any non-empty combination of the three device usages (MAPPING needs host memory).
            let usage = BufferUsage::from_bits_truncate(u32::from(spec.usage))
                & (BufferUsage::TRANSFER | BufferUsage::DISPATCH_STORAGE);
            let usage = if usage.is_empty() {
                BufferUsage::TRANSFER
            } else {
                usage
            };
            let params = BufferParams {
                memory: MemoryType::DEVICE_LOCAL,
                usage,
            };
            Buffer::from_memory(NoMemory(size), size, params).unwrap()
        })
        .collect();
    let entries = ENTRY_POINTS
        .iter()
        .enumerate()
        .map(|(i, &(binding_count, constant_count))| EntryPoint {
            name: format!("k{i}"),
            workgroup_size: [1, 1, 1],
            binding_count,
            constant_count,
        })
        .collect();
    let executable = Executable::from_backend("fuzz", "fuzz://0", Box::new(Entries(entries)));
    let mode = if input.reusable {
        CommandBufferMode::Reusable
    } else {
        CommandBufferMode::OneShot
    };
    let mut model = Model {
        mode,
        usages: buffers.iter().map(|b| b.usage()).collect(),
        commands: Vec::new(),
        slots: BTreeMap::new(),
    };
    let mut builder = CommandBuffer::builder(mode);
    for op in &input.ops {
        let (outcome, command, extra) = match *op {
            Op::Fill {
                target,
                pattern,
                pattern_len,
            } => {
                let (b, m) = binding(&buffers, target);
                // 0 to 5 bytes: the four of `pattern`, then one more.
                let bytes = [pattern.to_le_bytes().as_slice(), &[0x5A]].concat();
                let pattern = &bytes[..usize::from(pattern_len % 6)];
                let pattern_len = pattern.len() as u64;
                let command = MCommand::Fill {
                    target: m,
                    pattern_len,
                };
                let outcome = match *pattern {
                    [] => builder.fill([0u8; 0], b),
                    [x] => builder.fill(x, b),
                    [x, y] => builder.fill([x, y], b),
                    [x, y, z] => builder.fill([x, y, z], b),
                    [x, y, z, w] => builder.fill([x, y, z, w], b),
                    [x, y, z, w, v] => builder.fill([x, y, z, w, v], b),
                    _ => unreachable!("at most 5 bytes"),
                };
                (outcome.map(drop), command, Extra::None)
            }
            Op::Update {
                target,
                length_error,
            } => {
                let (b, m) = binding(&buffers, target);
                let delta = if (-4..=4).contains(&length_error) {
                    length_error
                } else {
                    0
                };
                let wanted = i128::from(m.len()) + i128::from(delta);
                // Never more than one byte past the inline limit: that is refused already.
                let data_len = wanted.clamp(0, i128::from(MAX_UPDATE_SIZE) + 1) as u64;
                let data = vec![0xA5u8; data_len as usize];
                let command = MCommand::Update { target: m };
                let outcome = builder.update(&data, b).map(drop);
                (outcome, command, Extra::Data(data_len))
            }
            Op::Copy { source, target } => {
                let (s, ms) = binding(&buffers, source);
                let (t, mt) = binding(&buffers, target);
                let command = MCommand::Copy {
                    source: ms,
                    target: mt,
                };
                (builder.copy(s, t).map(drop), command, Extra::None)
            }
            Op::Dispatch {
                entry_point,
                workgroups,
                constants,
                ref bindings,
            } => {
                let workgroups = match workgroups {
                    Workgroups::Small(w) => w.map(u32::from),
                    Workgroups::Any(w) => w,
                };
                let constants = vec![7u32; usize::from(constants % 4)];
                let (bs, ms): (Vec<Binding>, Vec<MBinding>) = bindings
                    .iter()
                    .take(5)
                    .map(|&r| binding(&buffers, r))
                    .unzip();
                let entry_point = entry_point % 4;
                // Entry point 3 does not exist: looking it up is refused, as a dispatch is.
                let outcome = executable
                    .kernel_at(u32::from(entry_point))
                    .and_then(|kernel| {
                        let launch = kernel.launch(workgroups).constants(&constants);
                        builder.dispatch(&launch.bindings(bs)).map(drop)
                    });
                let extra = Extra::Dispatch {
                    entry_point: usize::from(entry_point),
                    constants: constants.len(),
                    workgroups,
                };
                (outcome, MCommand::Dispatch { bindings: ms }, extra)
            }
            Op::Barrier => {
                builder.barrier();
                model.barrier();
                continue;
            }
        };
        let accepted = model.record(command.clone(), extra);
        match outcome {
            Ok(()) => {
                assert!(accepted, "recorded {command:?}, which the model refuses");
                summary.recorded += 1;
            }
            Err(error) => {
                summary.refused += 1;
                assert!(
                    !accepted,
                    "refused {command:?}, which the model accepts: {error}"
                );
                assert!(
                    matches!(
                        error.code(),
                        StatusCode::InvalidArgument | StatusCode::OutOfRange
                    ),
                    "{error}"
                );
            }
        }
    }
    let commands = builder.finish();
    assert_eq!(commands.mode(), mode);
    assert_eq!(commands.commands().len(), model.commands.len());
    assert_eq!(commands.slot_count(), model.slot_count());

    let mut table = BindingTable::new();
    let mut model_table = BTreeMap::new();
    for entry in &input.table {
        let buffer = entry.buffer as usize % BUFFERS;
        let range = direct(&buffers[buffer], entry.offset.get(), entry.length.get());
        let slot = entry.slot.get();
        let placed = (buffer, range.offset(), range.len());
        match table.set(slot, range) {
            Ok(_) => {
                assert!(slot < MAX_BINDING_SLOTS);
                model_table.insert(slot, placed);
            }
            Err(error) => {
                assert!(slot >= MAX_BINDING_SLOTS);
                assert_eq!(error.code(), StatusCode::OutOfRange, "{error}");
            }
        }
    }
    let expected = model.resolve(&model_table);
    let first = commands.resolve(Some(&table));
    summary.slots = commands.slot_count();
    summary.resolved = first.is_ok();
    match (&first, expected) {
        (Ok(resolved), Ok(())) => check_resolved(resolved, &model, &buffers, &model_table),
        (Err(error), Err(code)) => assert_eq!(error.code(), code, "{error}"),
        (Ok(_), Err(code)) => panic!("resolution succeeded; the model expects {code}"),
        (Err(error), Ok(())) => panic!("resolution failed, the model expects success: {error}"),
    }
    match mode {
        CommandBufferMode::OneShot => {
            let error = commands.resolve(Some(&table)).unwrap_err();
            assert_eq!(error.code(), StatusCode::FailedPrecondition, "{error}");
        }
        CommandBufferMode::Reusable => {
            let again = commands.resolve(Some(&table));
            assert_eq!(
                again.as_ref().map(|c| c.len()).map_err(|e| e.code()),
                first.as_ref().map(|c| c.len()).map_err(|e| e.code())
            );
            let without = commands.resolve(None);
            assert_eq!(without.is_err(), commands.slot_count() > 0);
            if let Err(error) = without {
                assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
            }
        }
    }
    summary
}
