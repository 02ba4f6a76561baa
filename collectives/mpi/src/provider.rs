//! [`Mpi`]: MPI initialised for halcyon, the channel provider across processes and hosts.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, Weak};

use halcyon::backend::ChannelBackend;
use halcyon::{ChannelParams, ChannelProvider, Error, Result, StatusCode};
use mpi::environment::Universe;
use mpi::ffi;
use mpi::Threading;

use crate::call::{self, Comm};
use crate::engine::{Engine, MpiChannel};

/// MPI, initialised for halcyon: the [`ChannelProvider`] of the processes `mpirun` started
/// (their ranks in `MPI_COMM_WORLD`), and the engine of the channels it gives devices over
/// host memory (the CPU device's, [`ChannelProvider::host_channel`]).
///
/// Make one per process, with [`Mpi::init`], before any other MPI use, and drop it on the
/// thread that made it, after the channels' collectives are done: the drop waits for each
/// channel's communication thread to finish its queue, then finalises MPI. If a collective
/// was abandoned (its timeout passed), a thread may be blocked in MPI for good, and MPI is
/// left unfinalised (`mpirun` then reports the process ended without `MPI_Finalize`).
pub struct Mpi {
    shared: Arc<Shared>,
    universe: Option<Universe>,
}

/// What the channels share with their provider.
pub(crate) struct Shared {
    rank: u32,
    count: u32,
    channels: Mutex<Vec<Weak<Engine>>>,
}

impl Shared {
    /// Remembers a channel, for finalisation to wait for.
    pub(crate) fn register(&self, engine: &Arc<Engine>) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.retain(|c| c.strong_count() > 0);
        channels.push(Arc::downgrade(engine));
    }
}

impl Mpi {
    /// Initialises MPI with `MPI_THREAD_MULTIPLE` (each channel calls MPI from a thread of its
    /// own). `FailedPrecondition` if MPI was initialised already in this process;
    /// `Unavailable` if the library cannot give `MPI_THREAD_MULTIPLE`.
    pub fn init() -> Result<Mpi> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| {
                Error::new(
                    StatusCode::FailedPrecondition,
                    "MPI is already initialised in this process; halcyon_mpi::Mpi::init must \
                     be the one initialisation",
                )
            })?;
        if threading != Threading::Multiple {
            drop(universe);
            return Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "the MPI library gives threading level {threading:?}, and halcyon's MPI \
                     channels need Multiple (MPI_THREAD_MULTIPLE); use a library built with \
                     it (Open MPI, MPICH)"
                ),
            ));
        }
        // SAFETY: the world communicator and error handler are the shim's constants, valid
        // once MPI is initialised. Errors return (as codes) instead of aborting the job.
        call::status(unsafe {
            ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, ffi::RSMPI_ERRORS_RETURN)
        })?;
        let (rank, count) = call::rank_and_count(world())?;
        Ok(Mpi {
            shared: Arc::new(Shared {
                rank,
                count,
                channels: Mutex::default(),
            }),
            universe: Some(universe),
        })
    }

    /// The MPI world, for calling MPI directly alongside halcyon (through the re-exported
    /// [`mpi`] crate).
    pub fn world(&self) -> mpi::topology::SimpleCommunicator {
        self.universe.as_ref().expect("present until drop").world()
    }
}

/// `MPI_COMM_WORLD`.
fn world() -> Comm {
    // SAFETY: reads the shim's constant.
    Comm(unsafe { ffi::RSMPI_COMM_WORLD })
}

impl ChannelProvider for Mpi {
    fn name(&self) -> &str {
        "mpi"
    }

    fn rank(&self) -> u32 {
        self.shared.rank
    }

    fn count(&self) -> u32 {
        self.shared.count
    }

    /// `MPI_Bcast` of the bytes from rank 0 of the world.
    fn exchange_id(&self, id: &mut [u8]) -> Result<()> {
        let len = c_int::try_from(id.len())
            .map_err(|_| Error::new(StatusCode::InvalidArgument, "an id over 2 GiB"))?;
        // SAFETY: `id` is valid for `len` bytes; the world and byte type are the shim's.
        call::status(unsafe {
            ffi::MPI_Bcast(
                id.as_mut_ptr().cast(),
                len,
                ffi::RSMPI_UINT8_T,
                0,
                world().0,
            )
        })
        .map_err(|e| e.context("exchanging a channel id over MPI"))
    }

    /// A channel over a communicator of its own (`MPI_Comm_dup` of the world).
    fn host_channel(&self, params: &ChannelParams) -> Result<Box<dyn ChannelBackend>> {
        let mut comm: ffi::MPI_Comm = world().0;
        // SAFETY: duplicates the world into `comm`, an output handle.
        call::status(unsafe { ffi::MPI_Comm_dup(world().0, &mut comm) })
            .map_err(|e| e.context("creating an MPI channel's communicator"))?;
        let channel = MpiChannel::start(self.shared.clone(), Comm(comm), params.timeout)?;
        Ok(Box::new(channel))
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        let channels: Vec<_> = {
            let channels = self.shared.channels.lock();
            let channels = channels.unwrap_or_else(|p| p.into_inner());
            channels.iter().filter_map(Weak::upgrade).collect()
        };
        for engine in &channels {
            engine.close();
        }
        // Every channel's, even after one is found stuck: each ends or is given up on.
        let ended = channels
            .iter()
            .filter(|engine| !engine.wait_ended())
            .count()
            == 0;
        drop(channels);
        let universe = self.universe.take();
        if !ended {
            // A channel's thread may be blocked in MPI for good: finalising would hang.
            std::mem::forget(universe);
        } else {
            drop(universe); // MPI_Finalize
        }
    }
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.shared.rank)
            .field("count", &self.shared.count)
            .finish()
    }
}
