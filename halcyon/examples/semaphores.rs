//! A semaphore/fence pipeline awaited in tokio.
//!
//! Three stages of a pretend device (upload, compute, download) run as queue actions on a
//! completion reactor. Each waits on the previous stage's semaphore and signals its own, so the
//! whole pipeline is submitted up front, before anything runs; a host signal starts it, and the
//! tokio task awaits the end without blocking its executor. A second pipeline shows a failure
//! travelling down the chain.
//!
//! Run with `cargo run --example semaphores`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use halcyon::backend::reactor::Reactor;
use halcyon::backend::ActionQueue;
use halcyon::{Error, Fence, Semaphore, StatusCode};

/// Submits upload -> compute -> download, each a host action that transforms `data` and then
/// signals its stage's semaphore. Returns the semaphore the last stage signals.
fn submit_pipeline(
    queue: &ActionQueue,
    start: &Semaphore,
    data: &Arc<Mutex<Vec<f32>>>,
    fail_compute: bool,
) -> Semaphore {
    let uploaded = Semaphore::new(0);
    let computed = Semaphore::new(0);
    let downloaded = Semaphore::new(0);

    let d = data.clone();
    queue.submit(
        Fence::at(start, 1),
        Fence::at(&uploaded, 1),
        Box::new(move |signal: &Fence| {
            d.lock().unwrap().extend((0..8).map(|i| i as f32));
            signal.signal()
        }),
    );
    let d = data.clone();
    queue.submit(
        Fence::at(&uploaded, 1),
        Fence::at(&computed, 1),
        Box::new(move |signal: &Fence| {
            if fail_compute {
                return Err(Error::new(StatusCode::Internal, "compute kernel trapped"));
            }
            d.lock()
                .unwrap()
                .iter_mut()
                .for_each(|x| *x = 2.0 * *x + 1.0);
            signal.signal()
        }),
    );
    queue.submit(
        Fence::at(&computed, 1),
        Fence::at(&downloaded, 1),
        Box::new(|signal: &Fence| signal.signal()),
    );
    downloaded
}

#[tokio::main]
async fn main() -> halcyon::Result<()> {
    let reactor = Reactor::new("quickstart")?;
    let queue = ActionQueue::new(reactor.handle());

    // 1. A pipeline that succeeds.
    let start = Semaphore::new(0);
    let data = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let done = submit_pipeline(&queue, &start, &data, false);
    println!(
        "submitted 3 stages; {} pending on the reactor, nothing has run: {:?}",
        queue.pending(),
        data.lock().unwrap()
    );

    // Start the pipeline from another OS thread, as a device or another subsystem would.
    let starter = start.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        starter.signal(1)
    });

    tokio::time::timeout(Duration::from_secs(5), done.wait(1))
        .await
        .map_err(|_| Error::new(StatusCode::DeadlineExceeded, "pipeline did not finish"))??;
    println!(
        "pipeline finished in {:?}: 2x+1 over 0..8 = {:?}",
        t0.elapsed(),
        data.lock().unwrap()
    );

    // 2. A pipeline whose compute stage fails: the failure reaches the final semaphore, and the
    //    download stage never runs.
    let start = Semaphore::new(0);
    let done = submit_pipeline(&queue, &start, &Arc::new(Mutex::new(Vec::new())), true);
    start.signal(1)?;
    let err = done.wait(1).await.unwrap_err();
    println!("failing pipeline ended with: {err}");

    // 3. Waits compose with select!: whichever of two semaphores is reached first.
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    b.signal(3)?;
    let mut either = Fence::new();
    either.insert(&a, 1);
    either.insert(&b, 3);
    let index = either.wait_any().await?;
    println!("wait_any: entry {index} (semaphore b) was reached first");

    println!("reactor: {:?}", reactor.handle().stats());
    Ok(())
}
