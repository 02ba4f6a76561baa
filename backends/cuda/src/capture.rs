//! Graph captures kept apart from the calls that synchronise the whole context.
//!
//! CUDA calls it invalid to synchronise a context while one of its streams captures a graph,
//! and a capture that meets such a synchronisation is invalidated: its graph is lost, and the
//! operations it took never run. `cuMemFree`, `cuMemFreeHost`, `cuModuleLoadDataEx` and
//! `cuModuleUnload` may synchronise the context, and halcyon makes them on threads other than
//! the capturing one (the reclaimer, a thread dropping the last handle to a buffer, a thread
//! loading an executable). halcyon captures in relaxed mode,
//! which lets those threads make the calls but promises nothing about the capture.
//!
//! So captures and those calls exclude each other on each device (all `CudaApi`s of one
//! device share its primary context), as two classes of readers of a lock: any number of
//! captures may run together, or any number of such calls, never both.
//! [`CaptureGate::begin`] and [`CaptureGate::end`] bracket a capture; [`CaptureGate::sync`]
//! brackets one such call. A capture waits for the calls already under way (each is one
//! driver call, which at worst waits for the device), and while a capture waits or runs, new
//! calls wait: captures are short (they enqueue a list's operations, which do not wait for the
//! device), so those waits are too. A thread that itself has a capture open never waits in
//! [`CaptureGate::sync`] (it would wait for itself): should it make such a call, the driver
//! may invalidate the capture, and the stream layer then issues the list directly. Nor does a
//! thread already inside such a call on the device (a failing module load unloads what it
//! loaded, say): the outer call already keeps captures out, and waiting behind a capture that
//! waits for the outer call would never end.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

use cudarc::driver::sys::CUdevice;

/// One device's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Device {
    /// Captures running.
    captures: usize,
    /// Captures waiting for the calls under way to finish.
    waiting: usize,
    /// Context-synchronising calls under way.
    syncs: usize,
}

/// The captures and context-synchronising calls of each device, process-wide.
pub(crate) struct CaptureGate {
    devices: Mutex<BTreeMap<CUdevice, Device>>,
    changed: Condvar,
    /// Captures begun and not ended, by device and the thread that began them. Shared, not
    /// thread-local: a capture may be ended on another thread than the one that began it, and
    /// the beginning thread must count it closed then.
    /// (Few entries: one per thread with a capture open.)
    open: Mutex<Vec<(CUdevice, ThreadId, usize)>>,
}

static GATE: CaptureGate = CaptureGate {
    devices: Mutex::new(BTreeMap::new()),
    changed: Condvar::new(),
    open: Mutex::new(Vec::new()),
};

thread_local! {
    /// Context-synchronising calls under way on the calling thread ([`SyncCall`]s alive), per
    /// device.
    static SYNCS_HERE: RefCell<BTreeMap<CUdevice, usize>> = const { RefCell::new(BTreeMap::new()) };
}

/// Adds `change` to the calling thread's count for `device` in `counts`.
fn count_here(
    counts: &'static std::thread::LocalKey<RefCell<BTreeMap<CUdevice, usize>>>,
    device: CUdevice,
    change: isize,
) {
    counts.with(|counts| {
        let mut counts = counts.borrow_mut();
        let count = counts.entry(device).or_default();
        *count = count.saturating_add_signed(change);
        if *count == 0 {
            counts.remove(&device);
        }
    });
}

/// Whether the calling thread's `counts` has `device`.
fn here_on(
    counts: &'static std::thread::LocalKey<RefCell<BTreeMap<CUdevice, usize>>>,
    device: CUdevice,
) -> bool {
    counts.with(|counts| counts.borrow().contains_key(&device))
}

/// A context-synchronising call under way ([`CaptureGate::sync`]); ends when dropped, on the
/// thread that made it (it is not `Send`).
pub(crate) struct SyncCall {
    /// Counted in the gate (the thread's outermost call).
    counted: Option<CUdevice>,
    /// Counted in the thread's `SYNCS_HERE` (every call but those a capture of the thread let
    /// through).
    here: Option<CUdevice>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for SyncCall {
    fn drop(&mut self) {
        if let Some(device) = self.here {
            count_here(&SYNCS_HERE, device, -1);
        }
        if let Some(device) = self.counted {
            GATE.update(device, |d| d.syncs -= 1);
        }
    }
}

impl CaptureGate {
    /// The process's gate.
    pub(crate) fn get() -> &'static CaptureGate {
        &GATE
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<CUdevice, Device>> {
        self.devices.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits while `blocked` holds for `device`'s state, then applies `change` to it.
    fn wait_then(
        &self,
        device: CUdevice,
        blocked: impl Fn(&Device) -> bool,
        change: impl Fn(&mut Device),
    ) {
        let devices = self.lock();
        let mut devices = self
            .changed
            .wait_while(devices, |d| {
                blocked(&d.get(&device).copied().unwrap_or_default())
            })
            .unwrap_or_else(|p| p.into_inner());
        change(devices.entry(device).or_default());
    }

    /// Applies `change` to `device`'s state and wakes the waiters.
    fn update(&self, device: CUdevice, change: impl Fn(&mut Device)) {
        let mut devices = self.lock();
        let state = devices.entry(device).or_default();
        change(state);
        if *state == Device::default() {
            devices.remove(&device);
        }
        drop(devices);
        self.changed.notify_all();
    }

    /// A capture on `device` begins on the calling thread, once the context-synchronising
    /// calls under way finished.
    pub(crate) fn begin(&self, device: CUdevice) {
        self.update(device, |d| d.waiting += 1);
        self.wait_then(
            device,
            |d| d.syncs > 0,
            |d| {
                d.waiting -= 1;
                d.captures += 1;
            },
        );
        self.count_open(device, std::thread::current().id(), 1);
    }

    /// Adds `change` to the captures open on `device` that `thread` began.
    fn count_open(&self, device: CUdevice, thread: ThreadId, change: isize) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let at = match open
            .iter()
            .position(|&(d, t, _)| (d, t) == (device, thread))
        {
            Some(at) => at,
            None => {
                open.push((device, thread, 0));
                open.len() - 1
            }
        };
        open[at].2 = open[at].2.saturating_add_signed(change);
        if open[at].2 == 0 {
            open.swap_remove(at);
        }
    }

    /// Whether the calling thread began a capture on `device` that is still open.
    fn open_here(&self, device: CUdevice) -> bool {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let here = std::thread::current().id();
        open.iter().any(|&(d, t, _)| (d, t) == (device, here))
    }

    /// A capture on `device` that [`CaptureGate::begin`] counted, begun by thread `began_by`,
    /// has ended (or failed to begin), on whichever thread.
    pub(crate) fn end(&self, device: CUdevice, began_by: ThreadId) {
        self.update(device, |d| d.captures = d.captures.saturating_sub(1));
        self.count_open(device, began_by, -1);
    }

    /// A call that may synchronise `device`'s context is about to be made: waits until no
    /// capture of the device runs or waits (unless the calling thread has one open, or is
    /// inside such a call on the device already), and keeps new captures from beginning until
    /// the returned guard drops.
    pub(crate) fn sync(&self, device: CUdevice) -> SyncCall {
        let mut call = SyncCall {
            counted: None,
            here: None,
            _not_send: std::marker::PhantomData,
        };
        if self.open_here(device) {
            return call;
        }
        if !here_on(&SYNCS_HERE, device) {
            self.wait_then(
                device,
                |d| d.captures > 0 || d.waiting > 0,
                |d| d.syncs += 1,
            );
            call.counted = Some(device);
        }
        count_here(&SYNCS_HERE, device, 1);
        call.here = Some(device);
        call
    }

    /// `device`'s state now: captures running, captures waiting, calls under way.
    #[cfg(test)]
    fn state(&self, device: CUdevice) -> (usize, usize, usize) {
        let d = self.lock().get(&device).copied().unwrap_or_default();
        (d.captures, d.waiting, d.syncs)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// Waits (a bounded time) until `device`'s state is `state`.
    fn until(gate: &CaptureGate, device: CUdevice, state: (usize, usize, usize)) {
        for _ in 0..1000 {
            if gate.state(device) == state {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("{:?}, not {state:?}", gate.state(device));
    }

    #[test]
    fn calls_wait_for_the_device_s_captures_but_never_for_their_own() {
        let gate = CaptureGate::get();
        let device: CUdevice = 1000; // no real device: tests of other modules never use it
        gate.begin(device);
        // This thread has the capture open: it does not wait (nor count).
        drop(gate.sync(device));
        // Another device's calls do not wait either.
        drop(gate.sync(device + 1));
        let done = Arc::new(AtomicBool::new(false));
        let caller = {
            let done = done.clone();
            std::thread::spawn(move || {
                let sync = gate.sync(device);
                done.store(true, Ordering::SeqCst);
                drop(sync);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!done.load(Ordering::SeqCst), "waits while the capture runs");
        assert_eq!(gate.state(device), (1, 0, 0));
        gate.end(device, std::thread::current().id());
        caller.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(gate.state(device), (0, 0, 0));
    }

    /// A capture begun on this thread but ended on another (`end_capture` or `destroy_stream`
    /// there) no longer counts as this thread's: its later calls wait for other captures again.
    #[test]
    fn a_capture_ended_elsewhere_stops_counting_as_the_beginning_thread_s() {
        let gate = CaptureGate::get();
        let device: CUdevice = 4000;
        gate.begin(device);
        let began_by = std::thread::current().id();
        std::thread::spawn(move || gate.end(device, began_by))
            .join()
            .unwrap();
        assert_eq!(gate.state(device), (0, 0, 0));
        // Another thread's capture runs now; this thread's call must wait for it.
        let (to_capture, ending) = std::sync::mpsc::channel::<()>();
        let capture = std::thread::spawn(move || {
            gate.begin(device);
            ending.recv().unwrap();
            gate.end(device, std::thread::current().id());
        });
        until(gate, device, (1, 0, 0));
        let done = Arc::new(AtomicBool::new(false));
        let caller = {
            let done = done.clone();
            // The call is made on the thread that began (and did not end) the first capture:
            // here, so run it on this thread after a delay releases the capture instead.
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let was_done = done.load(Ordering::SeqCst);
                to_capture.send(()).unwrap();
                was_done
            })
        };
        let sync = gate.sync(device);
        done.store(true, Ordering::SeqCst);
        drop(sync);
        assert!(
            !caller.join().unwrap(),
            "a call on the thread that began a capture ended elsewhere did not wait"
        );
        capture.join().unwrap();
        assert_eq!(gate.state(device), (0, 0, 0));
    }

    #[test]
    fn captures_wait_for_the_calls_under_way_and_hold_back_new_ones() {
        let gate = CaptureGate::get();
        let device: CUdevice = 2000;
        let sync = gate.sync(device);
        let capture = std::thread::spawn(move || {
            gate.begin(device);
            std::thread::sleep(Duration::from_millis(20));
            gate.end(device, std::thread::current().id());
        });
        until(gate, device, (0, 1, 1));
        // A call arriving while a capture waits waits for it too.
        let late = std::thread::spawn(move || drop(gate.sync(device)));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(gate.state(device), (0, 1, 1), "neither started");
        drop(sync);
        capture.join().unwrap();
        late.join().unwrap();
        assert_eq!(gate.state(device), (0, 0, 0));
    }

    #[test]
    fn a_call_inside_a_call_on_the_same_thread_does_not_wait_for_a_waiting_capture() {
        use std::sync::mpsc::channel;
        let gate = CaptureGate::get();
        let device: CUdevice = 3000;
        let (to_caller, from_test) = channel::<()>();
        let (to_test, from_caller) = channel::<&str>();
        let caller = std::thread::spawn(move || {
            let outer = gate.sync(device);
            to_test.send("outer").unwrap();
            from_test.recv().unwrap(); // a capture waits for `outer` now
                                       // Before, this waited for the capture, which waits for `outer`: a deadlock.
            let inner = gate.sync(device);
            to_test.send("inner").unwrap();
            from_test.recv().unwrap();
            drop(inner);
            to_test.send("inner dropped").unwrap();
            from_test.recv().unwrap();
            drop(outer);
            // The thread's count is back to zero: a new call counts again.
            let again = gate.sync(device);
            to_test.send("again").unwrap();
            from_test.recv().unwrap();
            drop(again);
        });
        let step = || from_caller.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(step(), "outer");
        let capture = std::thread::spawn(move || {
            gate.begin(device);
            gate.end(device, std::thread::current().id());
        });
        until(gate, device, (0, 1, 1));
        to_caller.send(()).unwrap();
        assert_eq!(step(), "inner", "the inner call went ahead");
        assert_eq!(
            gate.state(device),
            (0, 1, 1),
            "counted once, by the outer call"
        );
        to_caller.send(()).unwrap();
        assert_eq!(step(), "inner dropped");
        assert_eq!(
            gate.state(device),
            (0, 1, 1),
            "the outer call still holds the capture"
        );
        to_caller.send(()).unwrap();
        capture.join().unwrap();
        assert_eq!(step(), "again");
        assert_eq!(gate.state(device), (0, 0, 1));
        to_caller.send(()).unwrap();
        caller.join().unwrap();
        assert_eq!(gate.state(device), (0, 0, 0));
    }
}
