//! Communicators: the unique ids `ncclGetUniqueId` makes, the group of ranks one id names (a
//! *clique*), ranks joining it (`ncclCommInitRank`, `ncclCommInitAll`) and leaving it
//! (`ncclCommDestroy`, `ncclCommAbort`, or their device's primary context going), and the
//! waits of the ranks in it.
//!
//! Lock order: the driver's lock, then a clique's, then the memory table's. Nothing here takes
//! the driver's lock while it holds a clique's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cudarc::nccl::sys::{ncclResult_t, ncclUniqueId};

use super::collective::{Mail, Round};
use super::{fail, NRet};
use crate::model::contract::lock;
use crate::model::driver::{driver, next_handle};

/// The first bytes of every unique id the fake makes.
const ID_MAGIC: &[u8; 16] = b"halcyon-fake-nc\0";

/// The number of the next unique id (ids are numbered from 1).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh clique number, as an id names one.
pub(crate) fn next_clique() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A fresh unique id: [`ID_MAGIC`], this process's id and the id's number, then zeros.
pub(crate) fn new_id() -> ncclUniqueId {
    let mut bytes = [0u8; 128];
    bytes[..16].copy_from_slice(ID_MAGIC);
    bytes[16..20].copy_from_slice(&std::process::id().to_ne_bytes());
    bytes[24..32].copy_from_slice(&next_clique().to_ne_bytes());
    ncclUniqueId {
        internal: bytes.map(|b| b as std::ffi::c_char),
    }
}

/// The clique number `id` names, if this process's `ncclGetUniqueId` made it.
pub(crate) fn parse_id(id: &ncclUniqueId) -> Option<u64> {
    let bytes = id.internal.map(|c| c as u8);
    let pid = u32::from_ne_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let number = u64::from_ne_bytes(bytes[24..32].try_into().expect("8 bytes"));
    (bytes[..16] == *ID_MAGIC
        && pid == std::process::id()
        && (1..NEXT_ID.load(Ordering::Relaxed)).contains(&number)
        && bytes[32..].iter().all(|&b| b == 0))
    .then_some(number)
}

/// The test's limit on the fake's waits, in milliseconds (0: the defaults).
static WAIT_LIMIT_MS: AtomicU64 = AtomicU64::new(0);

/// Sets the limit on the fake's NCCL waits (0: the defaults, 30 s for an initialisation and
/// 60 s for a collective; `HALCYON_FAKE_GPU_NCCL_WAIT_MS` sets it too).
pub(crate) fn set_wait_limit(ms: u64) {
    WAIT_LIMIT_MS.store(ms, Ordering::Relaxed);
}

/// How long a rank waits for the others: `default` unless a limit was set.
pub(crate) fn wait_limit(default: Duration) -> Duration {
    static FROM_ENV: LazyLock<u64> = LazyLock::new(|| {
        std::env::var("HALCYON_FAKE_GPU_NCCL_WAIT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    match WAIT_LIMIT_MS.load(Ordering::Relaxed) {
        0 if *FROM_ENV == 0 => default,
        0 => Duration::from_millis(*FROM_ENV),
        ms => Duration::from_millis(ms),
    }
}

/// How long `ncclCommInitRank` (or `ncclGroupEnd`) waits for the other ranks.
pub(crate) const INIT_WAIT: Duration = Duration::from_secs(30);

/// One rank of a clique.
pub(crate) struct Member {
    pub device: u32,
    /// What `ncclCommGetAsyncError` answers.
    pub async_error: ncclResult_t,
    /// Destroyed, aborted, or its context went: its operations complete without running.
    pub left: bool,
}

/// What a clique's ranks share, under its lock.
#[derive(Default)]
pub(crate) struct CliqueState {
    /// Each rank's member, once it joined.
    pub members: Vec<Option<Member>>,
    /// The collectives under way, by sequence number.
    pub rounds: HashMap<u64, Round>,
    /// Sends not yet received, by (sender, receiver, the sender's k-th send to it).
    pub mail: HashMap<(usize, usize, u64), Mail>,
}

impl CliqueState {
    /// Rank `rank`'s member (it joined).
    pub(crate) fn member(&mut self, rank: usize) -> &mut Member {
        self.members[rank]
            .as_mut()
            .expect("a rank with a communicator joined")
    }

    /// Sets the async error of every rank still in the clique that has none yet.
    pub(crate) fn fail_all(&mut self, code: ncclResult_t) {
        for m in self.members.iter_mut().flatten() {
            if m.async_error == ncclResult_t::ncclSuccess {
                m.async_error = code;
            }
        }
    }

    /// The ranks that have not joined (or have left).
    pub(crate) fn absent(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&r| self.members[r].as_ref().is_none_or(|m| m.left))
            .collect()
    }
}

/// The ranks one unique id names.
pub(crate) struct Clique {
    /// The id's number.
    pub id: u64,
    pub nranks: usize,
    state: Mutex<CliqueState>,
    changed: Condvar,
}

/// Every clique, by its id's number.
static CLIQUES: LazyLock<Mutex<HashMap<u64, Arc<Clique>>>> = LazyLock::new(Mutex::default);

impl Clique {
    /// The clique of id `id` with `nranks` ranks (made by its first rank):
    /// `ncclInvalidArgument` if it was made with another number of ranks.
    pub(crate) fn of(id: u64, nranks: usize) -> NRet<Arc<Clique>> {
        let mut cliques = lock(&CLIQUES);
        let clique = cliques.entry(id).or_insert_with(|| {
            Arc::new(Clique {
                id,
                nranks,
                state: Mutex::new(CliqueState {
                    members: (0..nranks).map(|_| None).collect(),
                    ..CliqueState::default()
                }),
                changed: Condvar::new(),
            })
        });
        if clique.nranks != nranks {
            return Err(fail(
                ncclResult_t::ncclInvalidArgument,
                format!(
                    "the id's communicator has {} ranks, not {nranks}",
                    clique.nranks
                ),
            ));
        }
        Ok(clique.clone())
    }

    /// Its state, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, CliqueState> {
        lock(&self.state)
    }

    /// Wakes every rank waiting in the clique.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    /// Waits until something changed or `deadline` passed.
    pub(crate) fn wait<'a>(
        &self,
        state: MutexGuard<'a, CliqueState>,
        deadline: Instant,
    ) -> MutexGuard<'a, CliqueState> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.changed
            .wait_timeout(state, left)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }
}

#[derive(Default)]
struct Counters {
    /// Collectives enqueued so far (the next one's sequence number).
    collectives: u64,
    /// Sends to each peer so far.
    sends: HashMap<usize, u64>,
    /// Receives from each peer so far.
    recvs: HashMap<usize, u64>,
}

/// A communicator: one rank of a clique, on one device.
pub(crate) struct Comm {
    pub handle: u64,
    pub clique: Arc<Clique>,
    pub rank: usize,
    pub device: u32,
    counters: Mutex<Counters>,
    /// Operations enqueued (or waiting for `ncclGroupEnd`) that have not completed.
    queued: AtomicU64,
}

impl Comm {
    /// Joins `clique` as rank `rank` on device `device` and registers the communicator with
    /// the driver (on the device's primary context): `ncclInvalidArgument` if the rank joined
    /// already, `ncclInvalidUsage` if another rank is on that device (NCCL's "duplicate GPU").
    pub(crate) fn join(clique: &Arc<Clique>, rank: usize, device: u32) -> NRet<Arc<Comm>> {
        let handle = next_handle();
        {
            let mut state = clique.lock();
            if state.members[rank].is_some() {
                return Err(fail(
                    ncclResult_t::ncclInvalidArgument,
                    format!("rank {rank} already joined this id's communicator"),
                ));
            }
            if let Some(other) = state
                .members
                .iter()
                .position(|m| m.as_ref().is_some_and(|m| !m.left && m.device == device))
            {
                return Err(fail(
                    ncclResult_t::ncclInvalidUsage,
                    format!("duplicate GPU: ranks {other} and {rank} are both on device {device}"),
                ));
            }
            state.members[rank] = Some(Member {
                device,
                async_error: ncclResult_t::ncclSuccess,
                left: false,
            });
            clique.notify();
        }
        let comm = Arc::new(Comm {
            handle,
            clique: clique.clone(),
            rank,
            device,
            counters: Mutex::default(),
            queued: AtomicU64::new(0),
        });
        let mut driver = driver();
        driver.comms.insert(handle, comm.clone());
        driver.adopt(handle, device);
        Ok(comm)
    }

    /// Whether every rank of the clique joined.
    pub(crate) fn ready(&self) -> bool {
        self.clique.lock().members.iter().all(Option::is_some)
    }

    /// Waits (at most until `deadline`) until every rank of the clique joined; if they do not,
    /// leaves the clique (its rank may join again) and is destroyed: `ncclSystemError`.
    pub(crate) fn wait_ready(&self, deadline: Instant) -> NRet {
        let mut state = self.clique.lock();
        loop {
            if state.members.iter().all(Option::is_some) {
                return Ok(());
            }
            if state.member(self.rank).left {
                return Err(fail(
                    ncclResult_t::ncclInvalidUsage,
                    "the communicator went (its context was released) while it was initialised",
                ));
            }
            if Instant::now() >= deadline {
                let absent = state.absent();
                state.members[self.rank] = None;
                drop(state);
                let mut driver = driver();
                if driver.comms.remove(&self.handle).is_some() {
                    driver.retire(self.handle);
                }
                return Err(fail(
                    ncclResult_t::ncclSystemError,
                    format!(
                        "ranks {absent:?} of {} never joined (the fake's wait is bounded)",
                        self.clique.nranks
                    ),
                ));
            }
            state = self.clique.wait(state, deadline);
        }
    }

    /// The sequence number of the next collective.
    pub(crate) fn next_collective(&self) -> u64 {
        let mut counters = lock(&self.counters);
        counters.collectives += 1;
        counters.collectives
    }

    /// The number of the next send to `peer` (`send`) or receive from it.
    pub(crate) fn next_p2p(&self, peer: usize, send: bool) -> u64 {
        let mut counters = lock(&self.counters);
        let counter = if send {
            counters.sends.entry(peer).or_default()
        } else {
            counters.recvs.entry(peer).or_default()
        };
        *counter += 1;
        *counter
    }

    /// One more operation queued.
    pub(crate) fn queue(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// One operation completed (or was dropped).
    pub(crate) fn unqueue(&self) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }

    /// Operations queued that have not completed.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// What `ncclCommGetAsyncError` answers.
    pub(crate) fn async_error(&self) -> ncclResult_t {
        self.clique.lock().member(self.rank).async_error
    }

    /// Leaves the clique: its waiting and queued operations complete without running; with
    /// `peers`, every other rank still in the clique gets that async error (a peer aborted).
    pub(crate) fn leave(&self, peers: Option<ncclResult_t>) {
        let mut state = self.clique.lock();
        state.member(self.rank).left = true;
        if let Some(code) = peers {
            for (r, m) in state.members.iter_mut().enumerate() {
                if let Some(m) = m.as_mut().filter(|m| r != self.rank && !m.left) {
                    if m.async_error == ncclResult_t::ncclSuccess {
                        m.async_error = code;
                    }
                }
            }
        }
        self.clique.notify();
    }
}
