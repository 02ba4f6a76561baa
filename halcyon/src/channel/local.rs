//! [`LocalGroup`]: the rendezvous of several devices of one process.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::device::Device;
use crate::error::{Error, Result, StatusCode};

use super::{Channel, ChannelParams, ChannelProvider};

/// A rendezvous of `count` ranks in this process (several local GPUs, each its own rank):
/// [`LocalGroup::rank`] is rank `r`'s [`ChannelProvider`], and the id exchange hands rank 0's
/// id to the others through memory. [`LocalGroup::channels`] makes one channel per device,
/// each on a thread of its own (an engine's channel creation blocks until every rank has
/// joined).
///
/// ```no_run
/// use halcyon::channel::LocalGroup;
///
/// # fn demo(gpus: &[halcyon::Device]) -> halcyon::Result<()> {
/// // One NCCL channel per GPU, rank i on gpus[i].
/// let channels = LocalGroup::channels(gpus, &halcyon::ChannelParams::default())?;
/// assert_eq!(channels[1].rank(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LocalGroup {
    shared: Arc<Shared>,
}

struct Shared {
    count: u32,
    exchange: Mutex<Exchange>,
    changed: Condvar,
}

/// The exchanges so far: each rank's n-th `exchange_id` takes rank 0's n-th id.
#[derive(Default)]
struct Exchange {
    ids: Vec<Vec<u8>>,
    calls: Vec<usize>,
}

/// How long a rank waits for rank 0's id before giving up: ranks of one process that never
/// arrive are a bug of the caller, not a slow peer.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

impl LocalGroup {
    /// A rendezvous of `count` ranks (at least 1).
    pub fn new(count: u32) -> LocalGroup {
        LocalGroup {
            shared: Arc::new(Shared {
                count: count.max(1),
                exchange: Mutex::new(Exchange {
                    ids: Vec::new(),
                    calls: vec![0; count.max(1) as usize],
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Rank `rank`'s provider; `OutOfRange` past the group's count.
    pub fn rank(&self, rank: u32) -> Result<LocalRank> {
        if rank >= self.shared.count {
            return Err(Error::new(
                StatusCode::OutOfRange,
                format!(
                    "rank {rank} of a local group of {} ranks",
                    self.shared.count
                ),
            ));
        }
        Ok(LocalRank {
            group: self.clone(),
            rank,
        })
    }

    /// One channel per device of `devices`, rank `i` on `devices[i]`, made on a thread per
    /// device. Blocks until all are made; the first error (in rank order) if any fails.
    pub fn channels(devices: &[Device], params: &ChannelParams) -> Result<Vec<Channel>> {
        let group = LocalGroup::new(devices.len() as u32);
        let results: Vec<Result<Channel>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (devices.iter().enumerate())
                .map(|(rank, device)| {
                    let provider = group.rank(rank as u32);
                    scope.spawn(move || device.channel(&provider?, params))
                })
                .collect();
            (handles.into_iter())
                .map(|handle| {
                    handle.join().unwrap_or_else(|_| {
                        Err(Error::new(
                            StatusCode::Internal,
                            "making a channel panicked",
                        ))
                    })
                })
                .collect()
        });
        results.into_iter().collect()
    }
}

/// One rank of a [`LocalGroup`].
pub struct LocalRank {
    group: LocalGroup,
    rank: u32,
}

impl ChannelProvider for LocalRank {
    fn name(&self) -> &str {
        "local"
    }

    fn rank(&self) -> u32 {
        self.rank
    }

    fn count(&self) -> u32 {
        self.group.shared.count
    }

    fn exchange_id(&self, id: &mut [u8]) -> Result<()> {
        let shared = &self.group.shared;
        let mut exchange = shared.exchange.lock().unwrap_or_else(|p| p.into_inner());
        let n = exchange.calls[self.rank as usize];
        exchange.calls[self.rank as usize] += 1;
        if self.rank == 0 {
            exchange.ids.push(id.to_vec());
            shared.changed.notify_all();
            return Ok(());
        }
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        while exchange.ids.len() <= n {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::new(
                    StatusCode::DeadlineExceeded,
                    format!(
                        "rank {} waited {EXCHANGE_TIMEOUT:?} for rank 0 of its local group to \
                         exchange an id; make every rank's channel at the same time (each on \
                         a thread of its own, or with LocalGroup::channels)",
                        self.rank
                    ),
                ));
            }
            exchange = (shared.changed.wait_timeout(exchange, deadline - now))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let from = &exchange.ids[n];
        if from.len() != id.len() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "rank 0 exchanged an id of {} bytes and rank {} expects {}",
                    from.len(),
                    self.rank,
                    id.len()
                ),
            ));
        }
        id.copy_from_slice(from);
        Ok(())
    }
}
