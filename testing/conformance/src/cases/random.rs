//! Random programs: hundreds of operations of every kind over a handful of buffers, spread over
//! every queue (and, in the two-device case, over both devices), with failures injected, each
//! outcome checked against a model of the program.
//!
//! Each buffer (a *cell*) has a semaphore counting the operations that touched it: an operation
//! waits for each cell it touches to reach the count before it and signals the count after it.
//! So one cell's operations run one after another in program order, while operations on other
//! cells, on other queues, or on the other device are free to overlap, park on the reactor or
//! become device-side waits. The model replays the program in order: each cell's values, and
//! for a failed cell the failures it may have failed with. A failure reaches every cell an
//! operation touches, and a failed cell's later operations never run, so its values freeze.
//!
//! Every program is run four ways: submitted in program order; shuffled (an operation is
//! submitted before the ones it waits on, so it parks until they are); all behind a host gate;
//! and shuffled behind a gate with failures injected (the failing kernel where the backend's
//! kernels can fail, and host calls returning an error). About one submission in ten is
//! dropped unawaited, which must change nothing. `HALCYON_CONFORMANCE_SEED` picks another
//! program (the seed is printed with every failure).

use std::collections::BTreeSet;
use std::fmt;

use halcyon::{
    Binding, BindingTable, Buffer, BufferParams, CommandBuffer, CommandBufferMode, Device, Error,
    Fence, Queue, QueueCapabilities, Result, Semaphore, StatusCode, Submission, Timepoints,
};

use crate::harness::{block_on, bytes_u32, download_u32, eventually, signals, upload_u32, within};
use crate::kernels::{workgroups, Kernels, StandardKernels};

/// `u32`s in a cell.
const CELL_LEN: u32 = 64;
/// Bytes in a cell.
const CELL_BYTES: u64 = CELL_LEN as u64 * 4;
/// Operations in one program.
const OPERATIONS: usize = 120;

/// A small deterministic generator (splitmix64), so that a seed names a program.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True once in `n` times.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A random non-empty range of `u32`s within a cell: `(start, length)`.
    fn span(&mut self) -> (u32, u32) {
        let len = 1 + self.below(CELL_LEN as usize) as u32;
        (self.below((CELL_LEN - len + 1) as usize) as u32, len)
    }

    /// An element of `items` (non-empty).
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// The seed programs derive from: `HALCYON_CONFORMANCE_SEED` or a fixed one.
fn base_seed() -> u64 {
    std::env::var("HALCYON_CONFORMANCE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED)
}

/// Where a failure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Root {
    /// A dispatch of the failing kernel on this side (its error is the backend's).
    Kernel(usize),
    /// A host call returning [`injected`] error `k`.
    Injected(u32),
}

/// The failures a cell or an operation may have failed with.
type Roots = BTreeSet<Root>;

/// The error an injected failing host call returns.
fn injected(k: u32) -> Error {
    Error::new(StatusCode::DataLoss, format!("{INJECTED}{k}."))
}

/// How an [`injected`] error's message starts.
const INJECTED: &str = "injected failure #";

/// One device of the program with its queues and kernels.
struct Side {
    device: Device,
    /// Every queue of the device.
    queues: Vec<Queue>,
    /// The queues that can dispatch.
    dispatch: Vec<Queue>,
    /// The queues that can transfer.
    transfer: Vec<Queue>,
    kernels: StandardKernels,
    /// Reusable: increment slot 0, copy its first half over slot 1's second half, increment
    /// slot 1.
    replay: CommandBuffer,
    /// What a dispatch of the failing kernel failed with here, once (`None` if it cannot
    /// fail): its code is what every failing dispatch must fail with.
    kernel_error: Option<Error>,
}

impl Side {
    async fn new(device: Device, provider: &dyn Kernels) -> Result<Side> {
        let kernels = StandardKernels::load(&device, provider)?;
        let with = |caps| device.queues(device.queue_affinity(caps));
        let (queues, dispatch) = (device.queues(u64::MAX)?, with(QueueCapabilities::DISPATCH)?);
        let transfer = with(QueueCapabilities::TRANSFER)?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        let (whole, half) = (Binding::slot(0, 0, CELL_BYTES), CELL_BYTES / 2);
        builder
            .dispatch(
                &kernels
                    .add_one
                    .launch(workgroups(CELL_LEN))
                    .constant(CELL_LEN)
                    .binding(whole),
            )?
            .barrier()
            .copy(Binding::slot(0, 0, half), Binding::slot(1, half, half))?
            .barrier()
            .dispatch(
                &kernels
                    .add_one
                    .launch(workgroups(CELL_LEN))
                    .constant(CELL_LEN)
                    .binding(Binding::slot(1, 0, CELL_BYTES)),
            )?;
        let kernel_error = if provider.can_fail() {
            let probe = device.create_semaphore(0)?;
            let outcome = within("a dispatch of the failing kernel", {
                kernels.fail(&dispatch[0], signals(&probe, 1))
            })
            .await?;
            Some(outcome.expect_err("a dispatch of the failing kernel succeeded"))
        } else {
            None
        };
        Ok(Side {
            replay: builder.finish(),
            device,
            queues,
            dispatch,
            transfer,
            kernels,
            kernel_error,
        })
    }
}

/// A buffer of the program and its model.
struct Cell {
    side: usize,
    buffer: Buffer,
    semaphore: Semaphore,
    /// Operations planned on it so far (the value its semaphore ends at, unless it fails).
    version: u64,
    /// Its values once every planned operation ran.
    values: Vec<u32>,
    /// The failures it may have failed with, once an operation touching it failed.
    failed: Option<Roots>,
    /// Whether its first operation is still to be planned (it waits on the gate).
    untouched: bool,
}

/// One operation of the program. Ranges are in `u32`s.
#[derive(Debug)]
enum Op {
    /// Increment the first `n` values.
    AddOne { cell: usize, n: u32 },
    /// Copy `len` values from `from[from_at..]` to `to[to_at..]`.
    Copy {
        from: usize,
        from_at: u32,
        to: usize,
        to_at: u32,
        len: u32,
    },
    /// Fill `len` values at `at` with `value`.
    Fill {
        cell: usize,
        at: u32,
        len: u32,
        value: u32,
    },
    /// Update `data.len()` values at `at`.
    Update {
        cell: usize,
        at: u32,
        data: Vec<u32>,
    },
    /// Write the whole cell from the host.
    Write { cell: usize, data: Vec<u32> },
    /// Read the whole cell back.
    Read { cell: usize },
    /// A barrier over the cells.
    Barrier { cells: Vec<usize> },
    /// A host call over the cells, failing with [`injected`] error `k` for `fails: Some(k)`.
    HostCall {
        cells: Vec<usize>,
        fails: Option<u32>,
    },
    /// The failing kernel, ordered as an operation on the cell.
    Fail { cell: usize },
    /// A one-shot command buffer: increment `x`'s first `n`, copy `len` values from `x[at..]`
    /// to `y[to_at..]`, fill `y[fill_at..fill_at + fill_len]` with `value`.
    Recorded {
        x: usize,
        y: usize,
        n: u32,
        at: u32,
        to_at: u32,
        len: u32,
        fill_at: u32,
        fill_len: u32,
        value: u32,
    },
    /// The side's reusable command buffer with `x` in slot 0 and `y` in slot 1.
    Replay { x: usize, y: usize },
    /// Through a queue-ordered scratch buffer: alloca, copy the cell in, increment it twice,
    /// copy it back, dealloca, each step on a random queue.
    Scratch { cell: usize },
}

impl Op {
    /// The cells it touches, in a fixed order.
    fn cells(&self) -> Vec<usize> {
        match self {
            Op::AddOne { cell, .. }
            | Op::Fill { cell, .. }
            | Op::Update { cell, .. }
            | Op::Write { cell, .. }
            | Op::Read { cell }
            | Op::Fail { cell }
            | Op::Scratch { cell } => vec![*cell],
            Op::Copy { from, to, .. } => vec![*from, *to],
            Op::Recorded { x, y, .. } | Op::Replay { x, y } => vec![*x, *y],
            Op::Barrier { cells } | Op::HostCall { cells, .. } => cells.clone(),
        }
    }

    /// Applies it to the model's cell values (`values[i]` of cell `i`).
    fn apply(&self, values: &mut [Vec<u32>]) {
        let increment = |v: &mut [u32]| v.iter_mut().for_each(|v| *v = v.wrapping_add(1));
        match self {
            Op::AddOne { cell, n } => increment(&mut values[*cell][..*n as usize]),
            Op::Copy {
                from,
                from_at,
                to,
                to_at,
                len,
            } => {
                let source = values[*from][*from_at as usize..][..*len as usize].to_vec();
                values[*to][*to_at as usize..][..*len as usize].copy_from_slice(&source);
            }
            Op::Fill {
                cell,
                at,
                len,
                value,
            } => values[*cell][*at as usize..][..*len as usize].fill(*value),
            Op::Update { cell, at, data } => {
                values[*cell][*at as usize..][..data.len()].copy_from_slice(data)
            }
            Op::Write { cell, data } => values[*cell].copy_from_slice(data),
            Op::Read { .. } | Op::Barrier { .. } | Op::HostCall { .. } | Op::Fail { .. } => {}
            Op::Recorded {
                x,
                y,
                n,
                at,
                to_at,
                len,
                fill_at,
                fill_len,
                value,
            } => {
                increment(&mut values[*x][..*n as usize]);
                let source = values[*x][*at as usize..][..*len as usize].to_vec();
                values[*y][*to_at as usize..][..*len as usize].copy_from_slice(&source);
                values[*y][*fill_at as usize..][..*fill_len as usize].fill(*value);
            }
            Op::Replay { x, y } => {
                increment(&mut values[*x]);
                let half = CELL_LEN as usize / 2;
                let source = values[*x][..half].to_vec();
                values[*y][half..].copy_from_slice(&source);
                increment(&mut values[*y]);
            }
            Op::Scratch { cell } => {
                increment(&mut values[*cell]);
                increment(&mut values[*cell]);
            }
        }
    }
}

/// What an operation's submissions must complete with.
#[derive(Clone, Debug)]
enum Expect {
    /// Success.
    Done,
    /// Success with these values (a read).
    Values(Vec<u32>),
    /// Failure with the error of one of these roots.
    Failed(Roots),
}

/// A planned operation: what it does, where, its timepoints and what it must complete with.
struct Step {
    index: usize,
    op: Op,
    side: usize,
    /// Picks the queues among the side's (reduced modulo their number).
    queue: usize,
    wait: Fence,
    signal: Fence,
    expect: Expect,
    /// Whether its submissions are dropped unawaited.
    dropped: bool,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "operation {} ({:?} on device {}, queue choice {})",
            self.index, self.op, self.side, self.queue
        )
    }
}

/// How a program is submitted.
#[derive(Clone, Copy, Debug)]
struct Mode {
    shuffled: bool,
    gated: bool,
    failures: bool,
}

/// The four ways every program runs.
const MODES: [Mode; 4] = [
    Mode {
        shuffled: false,
        gated: false,
        failures: false,
    },
    Mode {
        shuffled: true,
        gated: false,
        failures: false,
    },
    Mode {
        shuffled: false,
        gated: true,
        failures: true,
    },
    Mode {
        shuffled: true,
        gated: true,
        failures: true,
    },
];

/// A submitted operation's pending outcome.
enum Pending {
    Unit(Submission),
    Bytes(Submission<Vec<u8>>),
}

/// A random program over `cells_per_side` cells of each side, run in every [`MODES`] mode.
async fn run_programs(sides: &[Side], cells_per_side: usize, cross_side: bool) -> Result<()> {
    let seed = base_seed();
    for (round, mode) in MODES.into_iter().enumerate() {
        let seed = seed.wrapping_add(round as u64 * 1_000_003);
        run_program(sides, cells_per_side, cross_side, mode, seed)
            .await
            .map_err(|e| e.context(format!("random program (seed {seed}, {mode:?})")))?;
    }
    Ok(())
}

async fn run_program(
    sides: &[Side],
    cells_per_side: usize,
    cross_side: bool,
    mode: Mode,
    seed: u64,
) -> Result<()> {
    let mut rng = Rng(seed);
    let context = format!("random program (seed {seed}, {mode:?})");
    let mut cells = Vec::new();
    for (s, side) in sides.iter().enumerate() {
        for _ in 0..cells_per_side {
            let values: Vec<u32> = (0..CELL_LEN).map(|_| rng.next() as u32).collect();
            cells.push(Cell {
                side: s,
                buffer: upload_u32(&side.transfer[0], &values).await?,
                semaphore: side.device.create_semaphore(0)?,
                version: 0,
                values,
                failed: None,
                untouched: true,
            });
        }
    }
    let gate = sides[0].device.create_semaphore(0)?;
    let mut steps = Vec::new();
    let mut injected_count = 0;
    for index in 0..OPERATIONS {
        let side = rng.below(sides.len());
        let op = random_op(
            &mut rng,
            &cells,
            sides,
            side,
            cross_side,
            mode,
            &mut injected_count,
        );
        steps.push(plan(&mut cells, &gate, mode, index, side, op, &mut rng));
    }

    let mut order: Vec<usize> = (0..steps.len()).collect();
    if mode.shuffled {
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
    }
    let mut pending = Vec::new();
    for &i in &order {
        let step = &steps[i];
        let submitted = submit(&sides[step.side], &cells, step)?;
        if !step.dropped {
            pending.extend(submitted.into_iter().map(|p| (i, p)));
        }
    }
    if mode.gated {
        gate.signal(1)?;
    }

    for (i, outcome) in pending {
        let step = &steps[i];
        let outcome = match outcome {
            Pending::Unit(s) => within(&step.to_string(), s).await?.map(|()| None),
            Pending::Bytes(s) => within(&step.to_string(), s).await?.map(Some),
        };
        check(&context, step, sides, outcome)?;
    }

    for (c, cell) in cells.iter().enumerate() {
        let what = format!("{context}: cell {c} (device {})", cell.side);
        let settled = within(&what, cell.semaphore.wait(cell.version)).await?;
        match (&cell.failed, settled) {
            (None, Ok(())) => assert_eq!(
                cell.semaphore.query()?,
                cell.version,
                "{what}: its semaphore passed the last operation's value"
            ),
            (None, Err(error)) => {
                panic!("{what}: its semaphore failed, but no failure reaches it: {error}")
            }
            (Some(roots), Ok(())) => panic!(
                "{what}: its semaphore reached {} though one of {roots:?} must have failed it",
                cell.version
            ),
            (Some(roots), Err(error)) => assert!(
                matches(&error, roots, sides),
                "{what}: its semaphore failed with '{error}', which is none of {roots:?}"
            ),
        }
        // A failed cell's later operations never ran: its values froze at the failure.
        let queue = &sides[cell.side].transfer[0];
        let values = download_u32(queue, Fence::new(), &cell.buffer.whole()).await?;
        if let Some(i) = (0..values.len()).find(|&i| values[i] != cell.values[i]) {
            panic!(
                "{what}: element {i} is {} but the model says {} (the cell {})",
                values[i],
                cell.values[i],
                match &cell.failed {
                    None => "ran all its operations".to_string(),
                    Some(roots) => format!("stopped at a failure among {roots:?}"),
                }
            );
        }
        eventually(&format!("{what}: its semaphore's waiters leave"), || {
            cell.semaphore.waiter_count() == 0
        })
        .await?;
    }
    assert_eq!(
        gate.waiter_count(),
        0,
        "{context}: a waiter on the gate remains"
    );
    Ok(())
}

/// A random operation on `side` (cells of other sides only for barriers and host calls when
/// `cross_side`).
fn random_op(
    rng: &mut Rng,
    cells: &[Cell],
    sides: &[Side],
    side: usize,
    cross_side: bool,
    mode: Mode,
    injected_count: &mut u32,
) -> Op {
    let own: Vec<usize> = (0..cells.len())
        .filter(|&c| cells[c].side == side)
        .collect();
    let two = |rng: &mut Rng| {
        let x = rng.pick(&own);
        let y = loop {
            let y = rng.pick(&own);
            if y != x {
                break y;
            }
        };
        (x, y)
    };
    let some = |rng: &mut Rng| {
        let pool: Vec<usize> = if cross_side {
            (0..cells.len()).collect()
        } else {
            own.clone()
        };
        let mut chosen = BTreeSet::new();
        for _ in 0..1 + rng.below(3) {
            chosen.insert(rng.pick(&pool));
        }
        chosen.into_iter().collect::<Vec<_>>()
    };
    let can_fail = mode.failures && sides[side].kernel_error.is_some();
    loop {
        return match rng.below(100) {
            0..=14 => Op::AddOne {
                cell: rng.pick(&own),
                n: rng.span().1,
            },
            15..=26 => {
                let (from, to) = two(rng);
                let (from_at, len) = rng.span();
                let to_at = rng.below((CELL_LEN - len + 1) as usize) as u32;
                Op::Copy {
                    from,
                    from_at,
                    to,
                    to_at,
                    len,
                }
            }
            27..=34 => {
                let (at, len) = rng.span();
                Op::Fill {
                    cell: rng.pick(&own),
                    at,
                    len,
                    value: rng.next() as u32,
                }
            }
            35..=40 => {
                let (at, len) = rng.span();
                Op::Update {
                    cell: rng.pick(&own),
                    at,
                    data: (0..len).map(|_| rng.next() as u32).collect(),
                }
            }
            41..=45 => Op::Write {
                cell: rng.pick(&own),
                data: (0..CELL_LEN).map(|_| rng.next() as u32).collect(),
            },
            46..=53 => Op::Read {
                cell: rng.pick(&own),
            },
            54..=61 => Op::Barrier { cells: some(rng) },
            62..=71 => {
                let fails = (mode.failures && rng.one_in(10)).then(|| {
                    *injected_count += 1;
                    *injected_count
                });
                Op::HostCall {
                    cells: some(rng),
                    fails,
                }
            }
            72..=73 if can_fail => Op::Fail {
                cell: rng.pick(&own),
            },
            72..=73 => continue,
            74..=81 => {
                let (x, y) = two(rng);
                let (at, len) = rng.span();
                let (fill_at, fill_len) = rng.span();
                Op::Recorded {
                    x,
                    y,
                    n: rng.span().1,
                    at,
                    to_at: rng.below((CELL_LEN - len + 1) as usize) as u32,
                    len,
                    fill_at,
                    fill_len,
                    value: rng.next() as u32,
                }
            }
            82..=91 => {
                let (x, y) = two(rng);
                Op::Replay { x, y }
            }
            _ => Op::Scratch {
                cell: rng.pick(&own),
            },
        };
    }
}

/// Plans `op` after the operations planned so far: its timepoints, its expected outcome, and
/// the model's cells after it.
fn plan(
    cells: &mut [Cell],
    gate: &Semaphore,
    mode: Mode,
    index: usize,
    side: usize,
    op: Op,
    rng: &mut Rng,
) -> Step {
    let touched = op.cells();
    let (mut wait, mut signal) = (Fence::new(), Fence::new());
    let mut inherited = Roots::new();
    for &c in &touched {
        let cell = &mut cells[c];
        wait.insert(&cell.semaphore, cell.version);
        if mode.gated && cell.untouched {
            wait.insert(gate, 1);
        }
        cell.untouched = false;
        cell.version += 1;
        signal.insert(&cell.semaphore, cell.version);
        inherited.extend(cell.failed.iter().flatten().copied());
    }
    let own = match &op {
        Op::Fail { .. } => Some(Root::Kernel(side)),
        Op::HostCall { fails: Some(k), .. } => Some(Root::Injected(*k)),
        _ => None,
    };
    let expect = if !inherited.is_empty() {
        Expect::Failed(inherited)
    } else if let Some(root) = own {
        Expect::Failed([root].into())
    } else {
        let mut values: Vec<Vec<u32>> = cells.iter().map(|c| c.values.clone()).collect();
        op.apply(&mut values);
        for &c in &touched {
            cells[c].values = std::mem::take(&mut values[c]);
        }
        match &op {
            Op::Read { cell } => Expect::Values(cells[*cell].values.clone()),
            _ => Expect::Done,
        }
    };
    if let Expect::Failed(roots) = &expect {
        for &c in &touched {
            cells[c].failed.get_or_insert_with(|| roots.clone());
        }
    }
    Step {
        index,
        op,
        side,
        queue: rng.below(64),
        wait,
        signal,
        expect,
        dropped: rng.one_in(10),
    }
}

/// Submits `step` on its side; its submissions (a scratch operation has several).
fn submit(side: &Side, cells: &[Cell], step: &Step) -> Result<Vec<Pending>> {
    let pick = |queues: &[Queue], salt: usize| queues[(step.queue + salt) % queues.len()].clone();
    let (dispatch, transfer, any) = (
        pick(&side.dispatch, 0),
        pick(&side.transfer, 0),
        pick(&side.queues, 0),
    );
    let timepoints = Timepoints::new(step.wait.clone(), step.signal.clone());
    let whole = |c: usize| cells[c].buffer.whole();
    let part = |c: usize, at: u32, len: u32| {
        cells[c]
            .buffer
            .slice(u64::from(at) * 4..u64::from(at + len) * 4)
    };
    let k = &side.kernels;
    let unit = |s: Submission| Ok(vec![Pending::Unit(s)]);
    match &step.op {
        Op::AddOne { cell, n } => unit(k.add_one(&dispatch, timepoints, &whole(*cell), *n)),
        Op::Copy {
            from,
            from_at,
            to,
            to_at,
            len,
        } => unit(transfer.copy(
            timepoints,
            &part(*from, *from_at, *len)?,
            &part(*to, *to_at, *len)?,
        )),
        Op::Fill {
            cell,
            at,
            len,
            value,
        } => unit(transfer.fill(timepoints, *value, &part(*cell, *at, *len)?)),
        Op::Update { cell, at, data } => {
            let target = part(*cell, *at, data.len() as u32)?;
            unit(transfer.update(timepoints, data, &target))
        }
        Op::Write { cell, data } => unit(transfer.write(timepoints, data, &whole(*cell))),
        Op::Read { cell } => Ok(vec![Pending::Bytes(
            transfer.read(timepoints, &whole(*cell)),
        )]),
        Op::Barrier { .. } => unit(any.barrier(timepoints)),
        Op::HostCall { fails, .. } => {
            let fails = *fails;
            unit(any.host_call(timepoints, move || match fails {
                Some(k) => Err(injected(k)),
                None => Ok(()),
            }))
        }
        Op::Fail { .. } => unit(k.fail(&dispatch, timepoints)),
        Op::Recorded {
            x,
            y,
            n,
            at,
            to_at,
            len,
            fill_at,
            fill_len,
            value,
        } => {
            let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
            builder
                .dispatch(
                    &k.add_one
                        .launch(workgroups(*n))
                        .constant(*n)
                        .binding(whole(*x)),
                )?
                .barrier()
                .copy(part(*x, *at, *len)?, part(*y, *to_at, *len)?)?
                .barrier()
                .fill(*value, part(*y, *fill_at, *fill_len)?)?;
            unit(dispatch.execute(timepoints, &builder.finish(), None))
        }
        Op::Replay { x, y } => {
            let table = BindingTable::from_ranges([whole(*x), whole(*y)]);
            unit(dispatch.execute(timepoints, &side.replay, Some(&table)))
        }
        Op::Scratch { cell } => {
            let chain = side.device.create_semaphore(0)?;
            let link =
                |from: u64| Timepoints::new(Fence::at(&chain, from), Fence::at(&chain, from + 1));
            let (scratch, alloca) = pick(&side.queues, 1).alloca(
                (step.wait.clone(), Fence::at(&chain, 1)),
                CELL_BYTES,
                BufferParams::DEVICE,
            )?;
            let n = CELL_LEN;
            let submissions = vec![
                alloca,
                pick(&side.transfer, 2).copy(link(1), &whole(*cell), &scratch.whole()),
                k.add_one(&pick(&side.dispatch, 3), link(2), &scratch.whole(), n),
                k.add_one(&pick(&side.dispatch, 4), link(3), &scratch.whole(), n),
                pick(&side.transfer, 5).copy(link(4), &scratch.whole(), &whole(*cell)),
                pick(&side.queues, 6)
                    .dealloca((Fence::at(&chain, 5), step.signal.clone()), &scratch),
            ];
            Ok(submissions.into_iter().map(Pending::Unit).collect())
        }
    }
}

/// Whether `error` is the error of one of `roots`, itself or inherited from it.
fn matches(error: &Error, roots: &Roots, sides: &[Side]) -> bool {
    let error = error.origin();
    roots.iter().any(|root| match root {
        Root::Injected(k) => {
            let expected = injected(*k);
            error.code() == expected.code() && error.message() == expected.message()
        }
        // The message may name the dispatch or differ from one failure to the next.
        Root::Kernel(s) => sides[*s]
            .kernel_error
            .as_ref()
            .is_some_and(|e| e.code() == error.code() && !error.message().contains(INJECTED)),
    })
}

/// Checks one submission's outcome against its step's expectation.
fn check(
    context: &str,
    step: &Step,
    sides: &[Side],
    outcome: Result<Option<Vec<u8>>>,
) -> Result<()> {
    match (&step.expect, outcome) {
        (Expect::Done, Ok(_)) => {}
        (Expect::Values(expected), Ok(Some(bytes))) => {
            let values = bytes_u32(&bytes)?;
            if let Some(i) = (0..expected.len()).find(|&i| values.get(i) != Some(&expected[i])) {
                panic!(
                    "{context}: {step} read {:?} at element {i}, but the model says {}",
                    values.get(i),
                    expected[i]
                );
            }
        }
        (Expect::Values(_), Ok(None)) => unreachable!("a read completes with bytes"),
        (Expect::Failed(roots), Ok(_)) => {
            panic!("{context}: {step} succeeded, but must fail with one of {roots:?}")
        }
        (Expect::Done | Expect::Values(_), Err(error)) => {
            panic!("{context}: {step} failed, but no failure reaches it: {error}")
        }
        (Expect::Failed(roots), Err(error)) => assert!(
            matches(&error, roots, sides),
            "{context}: {step} failed with '{error}', which is none of {roots:?}"
        ),
    }
    Ok(())
}

/// Random programs of `OPERATIONS` operations over eight cells, on every queue of the device
/// (see the module docs): transfers, dispatches, one-shot and reusable command buffers
/// (the reusable one with a new binding table each time), queue reads, barriers, host calls and
/// queue-ordered scratch buffers, in program order, shuffled and behind a gate, with failures
/// injected. Every submission completes with what the model says (a read with the model's
/// values, a failure with the error of a failure that reaches it), every cell's semaphore ends
/// at its last value or failed with such an error, every cell holds the model's values (frozen
/// at its failure), and no semaphore keeps a waiter.
pub fn random_programs(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    block_on(async {
        let side = Side::new(device.clone(), kernels).await?;
        run_programs(&[side], 8, false).await
    })
}

/// [`random_programs`] over two devices, five cells each: every operation runs on a random
/// device with that device's cells, and barriers and host calls also order cells of both
/// devices (so a device's work waits on, and fails with, the other's).
pub fn random_programs_across_devices(a: Device, b: Device, kernels: &dyn Kernels) -> Result<()> {
    block_on(async {
        let sides = [Side::new(a, kernels).await?, Side::new(b, kernels).await?];
        run_programs(&sides, 5, true).await
    })
}
