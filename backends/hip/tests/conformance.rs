//! The conformance suite on `hip://0`, once per completion strategy, with the standard kernels
//! written in HIP C++ (`tests/data/conformance.hip`) and compiled at test time with hiprtc for
//! the device's architecture: `HALCYON_HIP_OFFLOAD_ARCH=gfxNNN` if set, else the one all of the
//! machine's GPUs share according to the kernel driver ([`rtc::kfd_offload_arch`]), else
//! whatever hiprtc finds for the current device.
//!
//! Without an AMD GPU (or without the HIP runtime) the device is `Unavailable` and every case
//! prints why and passes; with a GPU but no kernel compiler (no hiprtc), or a hiprtc that
//! cannot tell the architecture (the stand-alone hiprtc asks `libamdhip64.so`, a name that
//! installs with only versioned runtime libraries lack; see [`rtc`]), likewise, saying so.

use std::sync::OnceLock;
use std::time::Duration;

use halcyon::{Device, Driver, Error, Executable, Result, StatusCode};
use halcyon_conformance::kernels;
use halcyon_hip::rtc::{self, HipRtc};
use halcyon_hip::{HipDeviceOptions, HipDriver, HipModule, HostVisibleMemory};
use halcyon_stream::CompletionStrategy;

const SOURCE: &str = include_str!("data/conformance.hip");

/// The suite's standard entry points.
fn entries() -> Vec<halcyon::EntryPoint> {
    vec![
        kernels::add_one_u32(),
        kernels::saxpy_f32(),
        kernels::fail(),
    ]
}

/// The module of [`SOURCE`] with the standard entry points, compiled once per process for the
/// GPU current on the first thread that asks (device 0, made current by its creation): hiprtc
/// output, so a module made safely ([`HipRtc::compile_module`]).
fn module() -> Result<HipModule> {
    static CODE: OnceLock<Result<HipModule>> = OnceLock::new();
    CODE.get_or_init(|| {
        let rtc = HipRtc::load_default().map_err(|e| {
            Error::new(
                StatusCode::Unavailable,
                format!("no kernel compiler is available for the HIP conformance kernels: {e}"),
            )
        })?;
        let arch = std::env::var("HALCYON_HIP_OFFLOAD_ARCH")
            .ok()
            .filter(|arch| !arch.is_empty())
            .or_else(rtc::kfd_offload_arch);
        let option = arch.as_ref().map(|arch| format!("--offload-arch={arch}"));
        let mut options = vec!["-O3"];
        // Without --offload-arch hiprtc compiles for the current device, if it can find it.
        options.extend(option.as_deref());
        let module = match rtc.compile_module(SOURCE, "conformance.hip", &options, entries()) {
            Ok(code) => code,
            Err(e) if arch.is_none() && rtc::is_missing_architecture(&e) => {
                return Err(Error::new(
                    StatusCode::Unavailable,
                    format!(
                        "hiprtc ({}) cannot tell which architecture to compile the HIP \
                         conformance kernels for, and neither could the KFD topology (GPUs: \
                         {:?}): set HALCYON_HIP_OFFLOAD_ARCH=gfxNNN; {e}",
                        rtc.soname(),
                        rtc::kfd_gfx_targets()
                    ),
                ))
            }
            Err(e) => return Err(e),
        };
        eprintln!(
            "compiled the conformance kernels with hiprtc ({}) for {}: {} bytes",
            rtc.soname(),
            arch.as_deref().unwrap_or("the current device"),
            module.code_object().len()
        );
        Ok(module)
    })
    .clone()
}

/// The suite's standard kernels as a HIP code object.
struct HipKernels;

impl halcyon_conformance::Kernels for HipKernels {
    fn load(&self, device: &Device) -> Result<Executable> {
        device.load_executable(&module()?.spec())
    }

    /// A HIP kernel fails its dispatch through a status word (the status-word convention,
    /// docs/ARCHITECTURE.md), never a trap
    /// (`abort()`, `__builtin_trap()`), a device fault on which ROCm aborts the whole process:
    /// `fail` in data/conformance.hip takes one.
    fn can_fail(&self) -> bool {
        true
    }
}

fn device(completion: CompletionStrategy) -> Result<Device> {
    let device = HipDriver::new().create_device_with(
        0,
        &HipDeviceOptions::default()
            .with_queue_count(2)
            .with_completion(completion)
            .with_probe_interval(Duration::from_millis(10))
            .with_host_visible_memory(HostVisibleMemory::Auto),
    )?;
    // Compile (once) with the device current on this thread; no compiler means no kernels,
    // which skips the cases like a missing device does.
    module()?;
    Ok(device)
}

#[test]
fn hip_driver_reports_what_is_missing() {
    match HipDriver::new().create_device(0) {
        Ok(device) => eprintln!(
            "running the HIP conformance suite on {}",
            device.info().name
        ),
        Err(e) => {
            assert_eq!(e.code(), StatusCode::Unavailable, "{e}");
            eprintln!("the HIP conformance cases skip: {e}");
        }
    }
}

/// The conformance code object in an offload bundle (as `hipcc --genco` output is, here made
/// by `halcyon_hip::code_object::offload_bundle`): HIP picks the device's entry and runs it.
#[test]
fn the_code_object_runs_from_an_offload_bundle() {
    struct Bundled;
    impl halcyon_conformance::Kernels for Bundled {
        fn load(&self, device: &Device) -> Result<Executable> {
            let bundle = halcyon_hip::code_object::offload_bundle(&[module()?.code_object()])?;
            // SAFETY: hiprtc's unmodified output for this device, whose metadata the
            // standard entry points agree with (checked by `compile_module`), in a bundle
            // `offload_bundle` wrote.
            let module = unsafe { HipModule::from_code_object_unchecked(bundle, entries()) }?;
            device.load_executable(&module.spec())
        }

        fn can_fail(&self) -> bool {
            true
        }
    }
    let new_device = || device(CompletionStrategy::CompletionThread);
    halcyon_conformance::run(
        "saxpy_dispatch",
        new_device,
        &Bundled,
        halcyon_conformance::cases::saxpy_dispatch,
    );
    halcyon_conformance::run(
        "failing_dispatch_fails_the_chain",
        new_device,
        &Bundled,
        halcyon_conformance::cases::failing_dispatch_fails_the_chain,
    );
}

/// Two halcyon devices over `hip://0` (the code object is compiled for its architecture, which
/// a second GPU need not share), each with its own streams, events and memory.
fn pair(completion: CompletionStrategy) -> Result<(Device, Device)> {
    Ok((device(completion)?, device(completion)?))
}

/// The multi-device cases with completion threads.
mod completion_thread_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || pair(CompletionStrategy::CompletionThread),
        HipKernels
    );
}

/// The multi-device cases with stream callbacks.
mod host_callback_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(|| pair(CompletionStrategy::HostCallback), HipKernels);
}

/// Completions through a thread per queue blocked on blocking-sync events (the default).
mod completion_thread {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || device(CompletionStrategy::CompletionThread),
        HipKernels
    );
}

/// Completions through stream callbacks on dedicated callback streams.
mod host_callback {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || device(CompletionStrategy::HostCallback),
        HipKernels
    );
}

/// Completions through `hipStreamWriteValue32` into pinned words read by one scanner thread.
mod flag_write {
    use super::*;

    halcyon_conformance::conformance_tests!(|| device(CompletionStrategy::FlagWrite), HipKernels);
}
