//! MPI for halcyon, on the system's MPI library (Open MPI, MPICH) through the [`mpi`] crate.
//!
//! # What it gives
//!
//! [`Mpi`] initialises MPI for the process and is the [`halcyon::ChannelProvider`] of the
//! processes `mpirun` started: their ranks, and the exchange of an engine id (how NCCL and
//! RCCL channels get rank 0's unique id). A CPU device's channel through it
//! ([`halcyon::Device::channel`]) is an MPI channel: its collectives read and write the
//! device's host memory with MPI's blocking collectives, on a communication thread of its own.
//!
//! ```no_run
//! use halcyon::{ChannelParams, ElementType, ReduceOp, Timepoints};
//!
//! # async fn demo() -> halcyon::Result<()> {
//! let mpi = halcyon_mpi::Mpi::init()?;
//! let device = halcyon_cpu::default_device()?;
//! let channel = device.channel(&mpi, &ChannelParams::default())?;
//! let data = device.allocator().allocate(1 << 20, halcyon::BufferParams::DEVICE)?;
//! let queue = device.queue(0)?;
//! let all = data.whole();
//! queue.all_reduce(Timepoints::default(), &channel, ReduceOp::Sum, ElementType::F32, &all, &all).await?;
//! # Ok(()) }
//! ```
//!
//! # Building
//!
//! The [`mpi`] crate links the MPI library when it builds, so building this crate needs one
//! installed with its compiler wrapper (`mpicc`), and `libclang` for the bindings: Debian's
//! `libopenmpi-dev` and `libclang-dev`. Run the program under `mpirun` (as root, Open MPI
//! needs `--allow-run-as-root`).

pub use mpi;

mod call;
mod engine;
mod provider;

pub use provider::Mpi;
