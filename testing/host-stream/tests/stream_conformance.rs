//! The conformance suite on the generic stream device over the host stream API, once per
//! completion strategy (flag-write with and without a spin budget), with the standard kernels written as host kernels; and the failure
//! case once more per strategy with a `fail` kernel that fails through a status word, as a GPU
//! kernel does, instead of returning an error from its launch. The multi-device cases run on two
//! such devices (each over its own host stream API), for both completion strategies, and their
//! failure case once more per strategy with the status-word `fail` kernel.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Duration;

use halcyon::{Device, Executable, Result};
use halcyon_conformance::kernels;
use halcyon_host_stream::{HostModule, HostStreamApi, LaunchArgs};
use halcyon_stream::{create_device, CompletionStrategy, StreamDeviceOptions};

/// How the `fail` kernel fails its dispatch.
#[derive(Clone, Copy)]
enum Fail {
    /// Its launch returns an error (the host API's own way: the stream reports it).
    LaunchError,
    /// It writes 1 to its status word and returns normally (the way CUDA and HIP kernels fail:
    /// the stream device checks the word on completion).
    StatusWord,
}

/// The suite's standard kernels as host-stream kernels.
struct HostKernels(Fail);

impl halcyon_conformance::Kernels for HostKernels {
    fn load(&self, device: &Device) -> Result<Executable> {
        let module = HostModule::new()
            .kernel(kernels::add_one_u32(), add_one_u32)
            .kernel(kernels::saxpy_f32(), saxpy_f32);
        let module = match self.0 {
            Fail::LaunchError => module.kernel(kernels::fail(), |_| {
                Err("the conformance suite's 'fail' kernel always fails".into())
            }),
            Fail::StatusWord => module.kernel_with_status_word(kernels::fail(), |args| {
                let word = args
                    .status_word()
                    .ok_or("the launch passed no status word")?;
                word.store(1, Ordering::Relaxed);
                Ok(())
            }),
        };
        device.load_executable(&module.spec())
    }
}

/// The global x indices of this block's threads that are below `n`, or an error if a binding of
/// `len` elements is too short for `n`.
fn threads(args: &LaunchArgs<'_>, n: usize, len: usize) -> Result<Range<usize>, String> {
    if len < n {
        return Err(format!("n = {n} but a binding holds only {len} elements"));
    }
    let size = args.block()[0] as usize;
    let start = args.block_id()[0] as usize * size;
    Ok(start.min(n)..(start + size).min(n))
}

fn add_one_u32(args: &LaunchArgs<'_>) -> Result<(), String> {
    let n = args.constants()[0] as usize;
    // SAFETY: the only binding.
    let x = unsafe { args.binding_mut::<u32>(0) };
    for i in threads(args, n, x.len())? {
        x[i] = x[i].wrapping_add(1);
    }
    Ok(())
}

fn saxpy_f32(args: &LaunchArgs<'_>) -> Result<(), String> {
    let a = f32::from_bits(args.constants()[0]);
    let n = args.constants()[1] as usize;
    // SAFETY: x is only read and y only written; the suite binds different buffers.
    let (x, y) = unsafe { (args.binding::<f32>(0), args.binding_mut::<f32>(1)) };
    for i in threads(args, n, x.len().min(y.len()))? {
        y[i] += a * x[i];
    }
    Ok(())
}

fn options(completion: CompletionStrategy) -> StreamDeviceOptions {
    StreamDeviceOptions::default()
        .with_queue_count(2)
        .with_completion(completion)
        .with_probe_interval(Duration::from_millis(10))
}

/// Completions through host functions on callback streams, posted to the reactor.
mod host_callback {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device(
            HostStreamApi::new(),
            options(CompletionStrategy::HostCallback)
        ),
        HostKernels(Fail::LaunchError)
    );
}

/// Completions through a thread per queue blocked on blocking-sync events.
mod completion_thread {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device(
            HostStreamApi::new(),
            options(CompletionStrategy::CompletionThread)
        ),
        HostKernels(Fail::LaunchError)
    );
}

/// Completion threads that poll for up to 100 µs before they sleep
/// (`StreamDeviceOptions::completion_spin`): the same outcomes, whichever of the poll or the
/// sleep sees a completion.
mod completion_thread_spin {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device(
            HostStreamApi::new(),
            options(CompletionStrategy::CompletionThread)
                .with_completion_spin(Duration::from_micros(100))
        ),
        HostKernels(Fail::LaunchError)
    );
}

/// Completions through words the streams write into pinned memory, read by one scanner thread
/// (`CompletionStrategy::FlagWrite`), which spins for 20 µs after its last progress.
mod flag_write {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device(
            HostStreamApi::new(),
            options(CompletionStrategy::FlagWrite).with_completion_spin(Duration::from_micros(20))
        ),
        HostKernels(Fail::LaunchError)
    );
}

/// The same without a spin budget: the scanner reads the words every poll interval while work
/// is pending and sleeps when none is, so every submission of the suite's sequential chains
/// wakes it from idle.
mod flag_write_no_spin {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device(HostStreamApi::new(), options(CompletionStrategy::FlagWrite)),
        HostKernels(Fail::LaunchError)
    );
}

/// The failure case with the `fail` kernel failing through its status word, in every completion
/// strategy (the rest of the suite does not dispatch `fail`).
mod status_word {
    use super::*;

    fn failing_dispatch_fails_the_chain(completion: CompletionStrategy) {
        halcyon_conformance::run(
            "failing_dispatch_fails_the_chain",
            || create_device(HostStreamApi::new(), options(completion)),
            &HostKernels(Fail::StatusWord),
            halcyon_conformance::cases::failing_dispatch_fails_the_chain,
        );
    }

    #[test]
    fn failing_dispatch_fails_the_chain_host_callback() {
        failing_dispatch_fails_the_chain(CompletionStrategy::HostCallback);
    }

    #[test]
    fn failing_dispatch_fails_the_chain_completion_thread() {
        failing_dispatch_fails_the_chain(CompletionStrategy::CompletionThread);
    }

    #[test]
    fn failing_dispatch_fails_the_chain_flag_write() {
        failing_dispatch_fails_the_chain(CompletionStrategy::FlagWrite);
    }
}

/// Two devices, each over its own host stream API, with the given completion strategy.
fn pair(completion: CompletionStrategy) -> Result<(Device, Device)> {
    Ok((
        create_device(HostStreamApi::new(), options(completion))?,
        create_device(HostStreamApi::new(), options(completion))?,
    ))
}

/// The multi-device cases with host-callback completions on both devices.
mod host_callback_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || pair(CompletionStrategy::HostCallback),
        HostKernels(Fail::LaunchError)
    );
}

/// The multi-device cases with flag-write completion on both devices.
mod flag_write_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || pair(CompletionStrategy::FlagWrite),
        HostKernels(Fail::LaunchError)
    );
}

/// The multi-device cases with completion threads on both devices.
mod completion_thread_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || pair(CompletionStrategy::CompletionThread),
        HostKernels(Fail::LaunchError)
    );
}

/// The cross-device failure case with the `fail` kernel failing through its status word (whose
/// submissions signal from the host after the check), in both completion strategies.
mod status_word_pair {
    use super::*;

    fn cross_device_failure_propagates(completion: CompletionStrategy) {
        halcyon_conformance::run_pair(
            "cross_device_failure_propagates",
            || pair(completion),
            &HostKernels(Fail::StatusWord),
            halcyon_conformance::cases::cross_device_failure_propagates,
        );
    }

    #[test]
    fn cross_device_failure_propagates_host_callback() {
        cross_device_failure_propagates(CompletionStrategy::HostCallback);
    }

    #[test]
    fn cross_device_failure_propagates_completion_thread() {
        cross_device_failure_propagates(CompletionStrategy::CompletionThread);
    }

    #[test]
    fn cross_device_failure_propagates_flag_write() {
        cross_device_failure_propagates(CompletionStrategy::FlagWrite);
    }
}
