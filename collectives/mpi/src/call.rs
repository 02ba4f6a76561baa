//! The translation table: one halcyon collective as MPI calls on a communicator.
//!
//! Every call is MPI's blocking one ([`MPI_Allreduce`], [`MPI_Allgather`],
//! [`MPI_Reduce_scatter_block`], [`MPI_Bcast`], [`MPI_Send`], [`MPI_Recv`]): it runs on the
//! channel's communication thread, and blocking calls get the library's tuned algorithms
//! (the non-blocking ones progress only when tested). Counts are C `int`s, so an all-reduce,
//! broadcast, send or receive of more than `i32::MAX` elements goes as several calls; an
//! all-gather or reduce-scatter that large is refused. MPI has no standard 16-bit float
//! type, and reduces none. An all-reduce in place (the same range read and written) reduces a
//! copy of the input, since the portable spelling of "in place" (`MPI_IN_PLACE`) is not among
//! the bindings.
//!
//! [`MPI_Allreduce`]: https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report/node132.htm
//! [`MPI_Allgather`]: https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report/node124.htm
//! [`MPI_Reduce_scatter_block`]: https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report/node136.htm
//! [`MPI_Bcast`]: https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report/node117.htm
//! [`MPI_Send`]: https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report/node40.htm
//! [`MPI_Recv`]: https://www.mpi-forum.org/docs/mpi-4.1/mpi41-report/node44.htm

use std::ffi::{c_char, c_int, c_void};

use halcyon::backend::CollectiveKind;
use halcyon::{ElementType, Error, ReduceOp, Result, StatusCode};
use mpi::ffi;

/// A communicator handle (a pointer in Open MPI's ABI), usable from any thread: the library
/// is initialised with `MPI_THREAD_MULTIPLE`.
#[derive(Clone, Copy)]
pub(crate) struct Comm(pub(crate) ffi::MPI_Comm);

// SAFETY: MPI handles are process-wide; `MPI_THREAD_MULTIPLE` (checked at initialisation)
// lets any thread use them.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

/// The most elements one MPI call takes.
const MAX_COUNT: usize = i32::MAX as usize;

/// The tag of halcyon's point-to-point messages.
const TAG: c_int = 0x4859;

/// The MPI datatype of `element`; `Unimplemented` for the 16-bit floats.
pub(crate) fn datatype(element: ElementType) -> Result<ffi::MPI_Datatype> {
    // SAFETY: the RSMPI_* handles are constants the shim library initialises at load.
    let datatype = unsafe {
        match element {
            ElementType::F32 => ffi::RSMPI_FLOAT,
            ElementType::F64 => ffi::RSMPI_DOUBLE,
            ElementType::I8 => ffi::RSMPI_INT8_T,
            ElementType::U8 => ffi::RSMPI_UINT8_T,
            ElementType::I16 => ffi::RSMPI_INT16_T,
            ElementType::U16 => ffi::RSMPI_UINT16_T,
            ElementType::I32 => ffi::RSMPI_INT32_T,
            ElementType::U32 => ffi::RSMPI_UINT32_T,
            ElementType::I64 => ffi::RSMPI_INT64_T,
            ElementType::U64 => ffi::RSMPI_UINT64_T,
            _ => {
                return Err(Error::new(
                    StatusCode::Unimplemented,
                    format!(
                        "MPI has no standard {element} type to reduce; reduce f32 or f64 \
                         (or use NCCL/RCCL on GPUs, which have it)"
                    ),
                ))
            }
        }
    };
    Ok(datatype)
}

/// The MPI operation of `op`; `Unimplemented` for a reduction this crate does not map.
fn op(op: ReduceOp) -> Result<ffi::MPI_Op> {
    // SAFETY: as in `datatype`.
    let mapped = unsafe {
        match op {
            ReduceOp::Sum => ffi::RSMPI_SUM,
            ReduceOp::Prod => ffi::RSMPI_PROD,
            ReduceOp::Min => ffi::RSMPI_MIN,
            ReduceOp::Max => ffi::RSMPI_MAX,
            // `ReduceOp` is non-exhaustive: a reduction added later is refused, not guessed.
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::new(
                    StatusCode::Unimplemented,
                    format!("halcyon-mpi does not map the {} reduction", other.name()),
                ))
            }
        }
    };
    Ok(mapped)
}

/// Whether MPI runs `kind` (checked at submission).
pub(crate) fn check(kind: &CollectiveKind) -> Result<()> {
    match kind.reduction() {
        Some((o, element)) => op(o).and(datatype(element)).map(drop),
        None => Ok(()),
    }
}

/// The bytes of one collective's ranges.
pub(crate) struct Ranges {
    pub(crate) send: *const u8,
    pub(crate) send_len: usize,
    pub(crate) recv: *mut u8,
    pub(crate) recv_len: usize,
}

/// Runs `kind` over `ranges` on `comm`, blocking until this rank's part is done.
///
/// # Safety
///
/// `ranges` must be valid as [`halcyon::backend::HostEngine::start`] requires, for the
/// whole call.
pub(crate) unsafe fn run(comm: Comm, kind: &CollectiveKind, ranges: &Ranges) -> Result<()> {
    // SAFETY: reads a constant the shim library initialises at load.
    let bytes = || unsafe { ffi::RSMPI_UINT8_T };
    match *kind {
        CollectiveKind::AllReduce { op: o, element } => {
            let (datatype, op) = (datatype(element)?, op(o)?);
            let size = element.size() as usize;
            // In place: reduce a copy of the input (see the module docs).
            let copy;
            let send = if std::ptr::eq(ranges.send, ranges.recv.cast_const()) {
                // SAFETY: `send` is valid for reads of `send_len` bytes (the contract).
                copy = unsafe { std::slice::from_raw_parts(ranges.send, ranges.send_len) }.to_vec();
                copy.as_ptr()
            } else {
                ranges.send
            };
            let elements = ranges.recv_len / size;
            let mut done = 0;
            while done < elements {
                let n = (elements - done).min(MAX_COUNT);
                let at = done * size;
                // SAFETY: both ranges hold `elements` elements (checked at submission), so
                // `[at, at + n * size)` lies in each; they are apart (the copy, or checked).
                status(unsafe {
                    ffi::MPI_Allreduce(
                        send.add(at).cast(),
                        ranges.recv.add(at).cast(),
                        n as c_int,
                        datatype,
                        op,
                        comm.0,
                    )
                })?;
                done += n;
            }
            Ok(())
        }
        CollectiveKind::AllGather => {
            let n = count(ranges.send_len, "an all-gather")?;
            // SAFETY: `recv` holds `count` times `send_len` bytes (checked at submission).
            status(unsafe {
                ffi::MPI_Allgather(
                    ranges.send.cast(),
                    n,
                    bytes(),
                    ranges.recv.cast(),
                    n,
                    bytes(),
                    comm.0,
                )
            })
        }
        CollectiveKind::ReduceScatter { op: o, element } => {
            let (datatype, op) = (datatype(element)?, op(o)?);
            let n = count(
                ranges.recv_len / element.size() as usize,
                "a reduce-scatter",
            )?;
            // SAFETY: `send` holds `count` times `recv_len` bytes (checked at submission).
            status(unsafe {
                ffi::MPI_Reduce_scatter_block(
                    ranges.send.cast(),
                    ranges.recv.cast(),
                    n,
                    datatype,
                    op,
                    comm.0,
                )
            })
        }
        CollectiveKind::Broadcast { root } => chunks(ranges.recv, ranges.recv_len, |at, n| {
            // SAFETY: `[at, at + n)` lies in the one range (`chunks`).
            status(unsafe { ffi::MPI_Bcast(at.cast(), n, bytes(), root as c_int, comm.0) })
        }),
        CollectiveKind::Send { peer } => {
            chunks(ranges.send.cast_mut(), ranges.send_len, |at, n| {
                // SAFETY: as above; MPI only reads a send buffer.
                status(unsafe {
                    ffi::MPI_Send(at.cast::<c_void>(), n, bytes(), peer as c_int, TAG, comm.0)
                })
            })
        }
        CollectiveKind::Recv { peer } => chunks(ranges.recv, ranges.recv_len, |at, n| {
            // SAFETY: as above.
            status(unsafe {
                ffi::MPI_Recv(
                    at.cast(),
                    n,
                    bytes(),
                    peer as c_int,
                    TAG,
                    comm.0,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            })
        }),
        _ => Err(Error::new(
            StatusCode::Unimplemented,
            format!("MPI channels do not run {kind}"),
        )),
    }
}

/// `len` as one call's count; `Unimplemented` past `i32::MAX`.
fn count(len: usize, what: &str) -> Result<c_int> {
    c_int::try_from(len).map_err(|_| {
        Error::new(
            StatusCode::Unimplemented,
            format!("{what} of {len} elements per rank: MPI counts stop at {MAX_COUNT}"),
        )
    })
}

/// Calls `call` for each piece of at most `i32::MAX` bytes of `[ptr, ptr + len)` (once, with
/// no bytes, for an empty range).
fn chunks(
    ptr: *mut u8,
    len: usize,
    mut call: impl FnMut(*mut u8, c_int) -> Result<()>,
) -> Result<()> {
    if len == 0 {
        return call(ptr, 0);
    }
    let mut done = 0;
    while done < len {
        let n = (len - done).min(MAX_COUNT);
        // SAFETY: `done < len`: the piece lies in the range.
        call(unsafe { ptr.add(done) }, n as c_int)?;
        done += n;
    }
    Ok(())
}

/// An MPI return code as a result, with the library's text for it.
pub(crate) fn status(code: c_int) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let mut text = [0 as c_char; 512];
    let mut len: c_int = 0;
    // SAFETY: `text` holds MPI_MAX_ERROR_STRING (256 in Open MPI, 512 in MPICH) characters.
    let described = unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr(), &mut len) } == 0;
    let text = if described {
        let bytes: Vec<u8> = text[..len.clamp(0, 511) as usize]
            .iter()
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        "no description".to_owned()
    };
    Err(Error::new(
        StatusCode::Internal,
        format!("MPI error {code}: {text}"),
    ))
}

/// This process's rank in `comm`, and its size.
pub(crate) fn rank_and_count(comm: Comm) -> Result<(u32, u32)> {
    let (mut rank, mut size): (c_int, c_int) = (0, 0);
    // SAFETY: `comm` is a valid communicator; the outputs are plain integers.
    status(unsafe { ffi::MPI_Comm_rank(comm.0, &mut rank) })?;
    // SAFETY: as above.
    status(unsafe { ffi::MPI_Comm_size(comm.0, &mut size) })?;
    Ok((rank as u32, size as u32))
}
