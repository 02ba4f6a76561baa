//! Two processes on this host, started by `mpirun`, run collectives on CPU devices through MPI
//! channels. The test re-runs its own binary under `mpirun -n 2`; each rank (a process with
//! `OMPI_COMM_WORLD_RANK` set) runs the scenarios and checks its own results, and the test
//! passes when both ranks exit 0.

use std::process::Command;
use std::time::{Duration, Instant};

use halcyon::{
    Buffer, BufferParams, Channel, ChannelParams, ChannelProvider, Device, ElementType, Queue,
    ReduceOp, Semaphore, StatusCode, Timepoints,
};
use halcyon_mpi::mpi::traits::*;
use halcyon_mpi::Mpi;

/// Runs `test` of this binary as two MPI ranks; `None` if `mpirun` is not installed.
fn under_mpirun(test: &str) -> Option<std::process::Output> {
    let exe = std::env::current_exe().expect("the test binary");
    let output = Command::new("mpirun")
        .args(["-n", "2", "--allow-run-as-root", "--oversubscribe"])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env("HALCYON_MPI_RANK_TEST", test)
        .output();
    match output {
        Ok(output) => Some(output),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("cannot run mpirun: {e}"),
    }
}

/// Whether this process is a rank under `mpirun` running `test`.
fn is_rank(test: &str) -> bool {
    std::env::var("HALCYON_MPI_RANK_TEST").is_ok_and(|t| t == test)
        && std::env::var_os("OMPI_COMM_WORLD_RANK").is_some()
}

/// The parent's side: both ranks must exit 0.
fn run_ranks(test: &str) {
    let Some(output) = under_mpirun(test) else {
        eprintln!("SKIPPED {test}: mpirun is not installed (Debian: openmpi-bin)");
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the ranks failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(
        stdout.matches("rank passed").count(),
        2,
        "both ranks must report:\n{stdout}\n{stderr}"
    );
}

fn buffer(device: &Device, bytes: u64) -> Buffer {
    device
        .allocator()
        .allocate(bytes, BufferParams::HOST)
        .expect("a host buffer")
}

async fn upload<T: bytemuck::Pod>(queue: &Queue, data: &[T], to: &Buffer) {
    queue
        .write(Timepoints::default(), data, &to.whole())
        .await
        .expect("upload");
}

async fn download<T: bytemuck::Pod + Send>(queue: &Queue, from: &Buffer) -> Vec<T> {
    queue
        .read(Timepoints::default(), &from.whole())
        .await
        .expect("download")
}

#[test]
fn mpi_collectives_on_two_ranks() {
    const TEST: &str = "mpi_collectives_on_two_ranks";
    if !is_rank(TEST) {
        return run_ranks(TEST);
    }
    let mpi = Mpi::init().expect("MPI initialises");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(collectives(&mpi));
    drop(runtime);
    println!("rank passed");
    drop(mpi);
}

async fn collectives(mpi: &Mpi) {
    let (rank, count) = (mpi.rank(), mpi.count());
    assert_eq!(count, 2);
    let device = halcyon_cpu::default_device().unwrap();
    let queue = device.queue(0).unwrap();
    let channel = device.channel(mpi, &ChannelParams::default()).unwrap();
    assert_eq!(
        (channel.rank(), channel.count(), channel.engine()),
        (rank, 2, "mpi")
    );

    // The id exchange hands rank 0's bytes to every rank.
    let mut id = [rank as u8 + 1; 16];
    mpi.exchange_id(&mut id).unwrap();
    assert_eq!(id, [1; 16]);

    // all_reduce: sum of f32, max of i32, min of f64, in place prod of u32.
    let n = 1000usize;
    let mine: Vec<f32> = (0..n).map(|i| (i * (rank as usize + 1)) as f32).collect();
    let (send, recv) = (buffer(&device, 4 * n as u64), buffer(&device, 4 * n as u64));
    upload(&queue, &mine, &send).await;
    let f32s = ElementType::F32;
    queue
        .all_reduce(
            Timepoints::default(),
            &channel,
            ReduceOp::Sum,
            f32s,
            &send.whole(),
            &recv.whole(),
        )
        .await
        .unwrap();
    let sum: Vec<f32> = download(&queue, &recv).await;
    assert!(
        sum.iter().enumerate().all(|(i, &x)| x == (3 * i) as f32),
        "sum"
    );

    let ints: Vec<i32> = (0..n as i32)
        .map(|i| if rank == 0 { i } else { -i })
        .collect();
    upload(&queue, &ints, &send).await;
    let i32s = ElementType::I32;
    queue
        .all_reduce(
            Timepoints::default(),
            &channel,
            ReduceOp::Max,
            i32s,
            &send.whole(),
            &recv.whole(),
        )
        .await
        .unwrap();
    let max: Vec<i32> = download(&queue, &recv).await;
    assert!(max.iter().enumerate().all(|(i, &x)| x == i as i32), "max");

    let factors: Vec<u32> = vec![rank + 2; n];
    upload(&queue, &factors, &recv).await;
    let all = recv.whole();
    queue
        .all_reduce(
            Timepoints::default(),
            &channel,
            ReduceOp::Prod,
            ElementType::U32,
            &all,
            &all,
        )
        .await
        .unwrap();
    let prod: Vec<u32> = download(&queue, &recv).await;
    assert!(prod.iter().all(|&x| x == 6), "in-place product");

    // all_gather: rank order.
    let gathered = buffer(&device, 8 * n as u64);
    upload(&queue, &vec![rank as u8 + 10; 4 * n], &send).await;
    queue
        .all_gather(
            Timepoints::default(),
            &channel,
            &send.whole(),
            &gathered.whole(),
        )
        .await
        .unwrap();
    let bytes: Vec<u8> = download(&queue, &gathered).await;
    assert!(bytes[..4 * n].iter().all(|&b| b == 10) && bytes[4 * n..].iter().all(|&b| b == 11));

    // reduce_scatter: block `rank` of the sum.
    let doubles: Vec<f64> = (0..n).map(|i| i as f64).collect();
    upload(&queue, &doubles, &gathered).await;
    let half = recv.slice(0..4 * n as u64).unwrap();
    queue
        .reduce_scatter(
            Timepoints::default(),
            &channel,
            ReduceOp::Sum,
            ElementType::F64,
            &gathered.whole(),
            &half,
        )
        .await
        .unwrap();
    let block: Vec<f64> = download(&queue, &recv).await[..n / 2].to_vec();
    let base = rank as usize * n / 2;
    assert!(
        block
            .iter()
            .enumerate()
            .all(|(i, &x)| x == 2.0 * (base + i) as f64),
        "block"
    );

    // broadcast from rank 1.
    upload(&queue, &vec![rank as u8; 4 * n], &send).await;
    queue
        .broadcast(Timepoints::default(), &channel, 1, &send.whole())
        .await
        .unwrap();
    let bytes: Vec<u8> = download(&queue, &send).await;
    assert!(bytes.iter().all(|&b| b == 1), "broadcast");

    // send / recv: rank 0 sends, rank 1 receives.
    if rank == 0 {
        upload(&queue, &vec![42u8; 4 * n], &send).await;
        queue
            .send(Timepoints::default(), &channel, 1, &send.whole())
            .await
            .unwrap();
    } else {
        queue
            .recv(Timepoints::default(), &channel, 0, &recv.whole())
            .await
            .unwrap();
        let bytes: Vec<u8> = download(&queue, &recv).await;
        assert!(bytes.iter().all(|&b| b == 42), "received");
    }

    in_submission_order(&device, &queue, &channel).await;
    refused_in_order(&device, &queue, mpi).await;
    timed_out(&device, &queue, mpi).await;
}

/// Collectives reach MPI in the order they were submitted, whatever order their waits are
/// reached in: the first waits on a semaphore the host signals after the second's wait is
/// long reached.
async fn in_submission_order(device: &Device, queue: &Queue, channel: &Channel) {
    let rank = channel.rank();
    let (a, b) = (buffer(device, 4), buffer(device, 4));
    upload(queue, &[rank + 1], &a).await;
    upload(queue, &[10 * (rank + 1)], &b).await;
    let gate = Semaphore::new(0);
    let u32s = ElementType::U32;
    let first = queue.all_reduce(
        Timepoints::new(halcyon::Fence::at(&gate, 1), halcyon::Fence::new()),
        channel,
        ReduceOp::Sum,
        u32s,
        &a.whole(),
        &a.whole(),
    );
    let second = queue.all_reduce(
        Timepoints::default(),
        channel,
        ReduceOp::Max,
        u32s,
        &b.whole(),
        &b.whole(),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.signal(1).unwrap();
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(download::<u32>(queue, &a).await, [3]);
    assert_eq!(download::<u32>(queue, &b).await, [20]);
}

/// A collective refused on this rank (both ranks refuse it alike here) fails, and this rank's
/// later collectives on the channel fail with it instead of mismatching the other ranks'.
async fn refused_in_order(device: &Device, queue: &Queue, mpi: &Mpi) {
    let channel = device.channel(mpi, &ChannelParams::default()).unwrap();
    let x = buffer(device, 8);
    let error = queue
        .all_reduce(
            Timepoints::default(),
            &channel,
            ReduceOp::Sum,
            ElementType::F16,
            &x.whole(),
            &x.whole(),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), StatusCode::Unimplemented, "{error}");
    assert!(error.to_string().contains("f16"), "{error}");
    let later = queue
        .all_reduce(
            Timepoints::default(),
            &channel,
            ReduceOp::Sum,
            ElementType::F32,
            &x.whole(),
            &x.whole(),
        )
        .await
        .unwrap_err();
    // It fails with the refusal, through the channel's order.
    let text = later.to_string();
    assert!(text.contains("order") && text.contains("f16"), "{later}");
}

/// Rank 1 joins a collective only after rank 0's timeout passed: rank 0's fails with
/// `DeadlineExceeded` within its timeout, its buffer refuses further use, and the channel
/// refuses later collectives. Rank 1 then joins, so rank 0's blocked MPI call comes back and
/// MPI finalises cleanly.
async fn timed_out(device: &Device, queue: &Queue, mpi: &Mpi) {
    let rank = mpi.rank();
    let params = ChannelParams::default().timeout(Duration::from_millis(500));
    let channel = device.channel(mpi, &params).unwrap();
    let x = buffer(device, 64);
    let f32s = ElementType::F32;
    if rank == 0 {
        let start = Instant::now();
        let error = queue
            .all_reduce(
                Timepoints::default(),
                &channel,
                ReduceOp::Sum,
                f32s,
                &x.whole(),
                &x.whole(),
            )
            .await
            .unwrap_err();
        assert_eq!(error.code(), StatusCode::DeadlineExceeded, "{error}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let Err(unusable) = x.map_read(..) else {
            panic!("the buffer of an abandoned collective must refuse mapping");
        };
        assert!(unusable.to_string().contains("abandoned"), "{unusable}");
        let later = queue
            .all_reduce(
                Timepoints::default(),
                &channel,
                ReduceOp::Sum,
                f32s,
                &x.whole(),
                &x.whole(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                later.code(),
                StatusCode::Unavailable | StatusCode::FailedPrecondition
            ),
            "{later}"
        );
        mpi.world().barrier();
    } else {
        mpi.world().barrier();
        queue
            .all_reduce(
                Timepoints::default(),
                &channel,
                ReduceOp::Sum,
                f32s,
                &x.whole(),
                &x.whole(),
            )
            .await
            .unwrap();
    }
}
