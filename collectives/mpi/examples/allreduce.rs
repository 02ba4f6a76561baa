//! A 2-rank (or N-rank) all-reduce of 64 MiB of f32 through halcyon, across processes.
//!
//! ```sh
//! cargo run --release --example allreduce -- --ranks 2                 # CPU devices, MPI
//! cargo run --release --example allreduce -- --ranks 2 --devices cuda  # CUDA devices, NCCL
//! ```
//!
//! Run plainly, it starts itself under `mpirun -n RANKS` (with `--allow-run-as-root`, which
//! Open MPI needs as root); under `mpirun` each process is one rank. Every rank fills its
//! buffer with values of its own, all-reduces it (sum) through its device's channel, checks
//! every element, then times the all-reduce against `MPI_Allreduce` called directly on host
//! memory of the same size, alternating the two in the same run (medians), and prints both
//! bus bandwidths (bytes × 2(n−1)/n
//! per second, as nccl-tests count them). Rank 0 prints `allreduce ok` when every rank passed.
//!
//! Options: `--ranks N` (2), `--devices cpu|cuda` (cpu), `--mib M` (64), `--iterations I` (10).

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use halcyon::{BufferParams, ChannelParams, ChannelProvider, ElementType, ReduceOp, Timepoints};
use halcyon_mpi::mpi::collective::SystemOperation;
use halcyon_mpi::mpi::traits::*;
use halcyon_mpi::Mpi;

struct Options {
    ranks: u32,
    devices: String,
    mib: usize,
    iterations: usize,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        ranks: 2,
        devices: "cpu".into(),
        mib: 64,
        iterations: 10,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--ranks" => options.ranks = value()?.parse().map_err(|e| format!("--ranks: {e}"))?,
            "--devices" => options.devices = value()?,
            "--mib" => options.mib = value()?.parse().map_err(|e| format!("--mib: {e}"))?,
            "--iterations" => {
                options.iterations = value()?.parse().map_err(|e| format!("--iterations: {e}"))?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if options.ranks == 0 || options.iterations == 0 || options.mib == 0 {
        return Err("--ranks, --mib and --iterations must be at least 1".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("allreduce: {e}");
            return ExitCode::from(2);
        }
    };
    if std::env::var_os("OMPI_COMM_WORLD_RANK").is_none() && std::env::var_os("PMI_RANK").is_none()
    {
        return launch(&options);
    }
    match rank_main(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("allreduce: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts this program under `mpirun`, one process per rank.
fn launch(options: &Options) -> ExitCode {
    let exe = std::env::current_exe().expect("the program's path");
    let status = Command::new("mpirun")
        .args([
            "-n",
            &options.ranks.to_string(),
            "--allow-run-as-root",
            "--oversubscribe",
        ])
        .arg(exe)
        .args(std::env::args().skip(1))
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("allreduce: the ranks failed ({status})");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("allreduce: cannot run mpirun ({e}); install Open MPI (openmpi-bin)");
            ExitCode::FAILURE
        }
    }
}

/// One rank's run.
fn rank_main(options: &Options) -> halcyon::Result<()> {
    let mpi = Mpi::init()?;
    let (rank, ranks) = (mpi.rank(), mpi.count());
    let device = match options.devices.as_str() {
        "cpu" => halcyon_cpu::default_device()?,
        "cuda" => {
            let registry = halcyon::DriverRegistry::new();
            halcyon_cuda::register(&registry)?;
            // One GPU per rank of this host.
            let local: u32 = std::env::var("OMPI_COMM_WORLD_LOCAL_RANK")
                .ok()
                .and_then(|r| r.parse().ok())
                .unwrap_or(rank);
            registry.create_device(&format!("cuda://{local}"))?
        }
        other => {
            return Err(halcyon::Error::new(
                halcyon::StatusCode::InvalidArgument,
                format!("--devices {other}: choose cpu or cuda"),
            ))
        }
    };
    let channel = device.channel(&mpi, &ChannelParams::default())?;
    let queue = device.queue(0)?;
    let elements = options.mib * (1 << 20) / 4;
    let bytes = (elements * 4) as u64;
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");

    // Rank r holds (i mod 1024) + r; the sum is ranks * (i mod 1024) + ranks (ranks - 1) / 2.
    let mine: Vec<f32> = (0..elements)
        .map(|i| (i % 1024) as f32 + rank as f32)
        .collect();
    let send = device.allocator().allocate(bytes, BufferParams::DEVICE)?;
    let recv = device.allocator().allocate(bytes, BufferParams::DEVICE)?;
    let all_reduce = || {
        queue.all_reduce(
            Timepoints::default(),
            &channel,
            ReduceOp::Sum,
            ElementType::F32,
            &send.whole(),
            &recv.whole(),
        )
    };
    let sum: Vec<f32> = runtime.block_on(async {
        queue
            .write(Timepoints::default(), &mine, &send.whole())
            .await?;
        all_reduce().await?;
        queue.read(Timepoints::default(), &recv.whole()).await
    })?;
    let n = ranks as f32;
    let wrong = (sum.iter().enumerate())
        .filter(|&(i, &x)| x != n * (i % 1024) as f32 + n * (n - 1.0) / 2.0)
        .count();
    if wrong > 0 {
        return Err(halcyon::Error::new(
            halcyon::StatusCode::Internal,
            format!("rank {rank}: {wrong} of {elements} elements are wrong"),
        ));
    }

    // Timing: halcyon's all-reduce and MPI_Allreduce called directly on host memory of the
    // same size, alternating, each started together on every rank, so that both see the same
    // machine (on a small shared VM its speed drifts during a run).
    let world = mpi.world();
    let host_send = mine;
    let mut host_recv = vec![0f32; elements];
    let (mut halcyon_times, mut mpi_times) = (Vec::new(), Vec::new());
    for _ in 0..options.iterations + 1 {
        world.barrier();
        let start = Instant::now();
        runtime.block_on(all_reduce())?;
        halcyon_times.push(start.elapsed());
        world.barrier();
        let start = Instant::now();
        world.all_reduce_into(&host_send[..], &mut host_recv[..], SystemOperation::sum());
        mpi_times.push(start.elapsed());
    }
    // Every rank passed its check (a failing rank returned above and mpirun aborts the job).
    world.barrier();
    if rank == 0 {
        let bus = |times: &mut Vec<Duration>| {
            times.remove(0); // the first is a warm-up
            times.sort();
            let median = times[times.len() / 2];
            let moved = bytes as f64 * 2.0 * (n as f64 - 1.0) / n as f64;
            (median, moved / median.as_secs_f64() / 1e9)
        };
        let (ours, ours_bw) = bus(&mut halcyon_times);
        let (theirs, theirs_bw) = bus(&mut mpi_times);
        println!(
            "{ranks} ranks, {} MiB f32 on {} ({} channel): halcyon {:.2} ms, {:.2} GB/s bus; \
             MPI_Allreduce directly {:.2} ms, {:.2} GB/s bus; ratio {:.3}",
            options.mib,
            device.info().id,
            channel.engine(),
            ours.as_secs_f64() * 1e3,
            ours_bw,
            theirs.as_secs_f64() * 1e3,
            theirs_bw,
            ours_bw / theirs_bw,
        );
        println!("allreduce ok");
    }
    drop(channel);
    drop(runtime);
    drop(mpi);
    Ok(())
}
