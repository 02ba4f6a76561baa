//! The CUDA objects behind [`CudaApi`](crate::CudaApi)'s handles, each destroyed by its
//! `Drop`.
//!
//! [`StreamApi`](halcyon_stream::StreamApi)'s methods are safe, and its handles are numbers:
//! a caller can keep one after destroying what it named, make one up, or pass one of another
//! device's API. The driver dereferences `CUstream`s, `CUevent`s, `CUfunction`s and
//! `CUgraphExec`s unchecked, so `CudaApi` keeps the objects it made in
//! [`Registry`](halcyon_stream::registry::Registry)s, one per kind, and refuses a handle that
//! is not live there (`InvalidArgument`) before any driver call. A call holds the object for as
//! long as it uses it; a destroy on another thread meanwhile only unregisters it, and the last
//! holder destroys it ([`destroy_last`] makes the destroy's own call report the driver's error
//! when it is that holder, which is the usual case).
//!
//! | object        | destroyed by                                                       |
//! |---------------|--------------------------------------------------------------------|
//! | [`Stream`]    | `cuStreamDestroy` (work enqueued still runs to completion)         |
//! | [`Event`]     | `cuEventDestroy` (a pending record completes harmlessly)           |
//! | [`Module`]    | `cuModuleUnload`, behind the capture gate ([`crate::capture`]); its functions hold it |
//! | [`Function`]  | nothing of its own: it holds its module and the kernel's checked signature |
//! | [`Graph`]     | `cuGraphExecDestroy` (launches in flight finish first), then `cuGraphDestroy` of the graph it was made from |
//!
//! Every driver call here needs the API's context current on the calling thread: the objects
//! are only dropped inside `CudaApi`'s methods after they bound it (each method binds before it
//! takes an object from a registry, so the object is released first), and by its `Drop`, which
//! binds too (or forgets them if it cannot: the context's destruction takes them with it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{
    CUdevice, CUevent, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUmodule, CUstream,
};
use halcyon::Result;
use halcyon_stream::arguments::KernelSignature;

use crate::capture::CaptureGate;
use crate::result::check;
use crate::sys;

/// An object the API destroys exactly once: by [`Destroy::destroy`] or, failing that, by its
/// `Drop`.
pub(crate) trait Destroy {
    /// Destroys the CUDA object now and reports the driver's result; later calls (and the
    /// `Drop`) do nothing. The caller has the API's context bound.
    fn destroy(&mut self) -> Result<()>;
}

/// Destroys `object` now if `object` is its last holder and reports the driver's result;
/// otherwise the holder that lets go last destroys it (its `Drop`) and this returns `Ok`.
pub(crate) fn destroy_last<T: Destroy>(object: Arc<T>) -> Result<()> {
    match Arc::try_unwrap(object) {
        Ok(mut object) => object.destroy(),
        Err(_) => Ok(()),
    }
}

macro_rules! owned {
    ($(#[$m:meta])* $name:ident($raw:ty), |$it:ident| $call:expr, $what:literal) => {
        $(#[$m])*
        pub(crate) struct $name {
            raw: $raw,
        }

        impl $name {
            pub(crate) fn new(raw: $raw) -> Self {
                $name { raw }
            }

            /// The CUDA handle, valid while `self` lives.
            pub(crate) fn raw(&self) -> $raw {
                self.raw
            }
        }

        impl Destroy for $name {
            fn destroy(&mut self) -> Result<()> {
                let $it = std::mem::replace(&mut self.raw, std::ptr::null_mut());
                if $it.is_null() {
                    return Ok(());
                }
                // SAFETY: the object this API created, destroyed once (the handle is cleared
                // first) by its last holder; the context is bound (see the module docs).
                check(unsafe { $call }, || format!(concat!($what, "({:p})"), $it))
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                let _ = self.destroy();
            }
        }

        // SAFETY: a CUDA handle, used from any thread that binds its context (the driver API
        // is thread-safe).
        unsafe impl Send for $name {}
        // SAFETY: as above; shared use only passes the handle to the driver.
        unsafe impl Sync for $name {}
    };
}

owned!(
    /// A `CUstream` made by `cuStreamCreate`.
    Stream(CUstream),
    |s| sys::cuStreamDestroy_v2(s),
    "cuStreamDestroy"
);

owned!(
    /// A `CUevent` made by `cuEventCreate`.
    Event(CUevent),
    |e| sys::cuEventDestroy_v2(e),
    "cuEventDestroy"
);

/// A kernel node's function, grid, block and dynamic shared memory.
pub(crate) type NodeShape = (CUfunction, [u32; 3], [u32; 3], u32);

/// An executable graph: the `CUgraphExec` made by `cuGraphInstantiateWithFlags`, with the
/// `CUgraph` it was instantiated from, whose nodes name what `cuGraphExecKernelNodeSetParams`
/// updates, and that graph's kernel nodes in capture order (`None` where the graph is not the
/// chain one stream's capture makes: it is then never updated).
pub(crate) struct Graph {
    exec: CUgraphExec,
    template: CUgraph,
    kernels: Option<Vec<CUgraphNode>>,
    /// Held by each launch and update: CUDA's graph objects must not be used by two threads
    /// at once. Guards each kernel node's function and shape as the first update read them
    /// (`cuGraphKernelNodeGetParams`), which every update must keep.
    pub(crate) in_use: Mutex<Vec<Option<NodeShape>>>,
}

impl Graph {
    pub(crate) fn new(
        exec: CUgraphExec,
        template: CUgraph,
        kernels: Option<Vec<CUgraphNode>>,
    ) -> Self {
        let checked = vec![None; kernels.as_ref().map_or(0, Vec::len)];
        Graph {
            exec,
            template,
            kernels,
            in_use: Mutex::new(checked),
        }
    }

    /// The `CUgraphExec`, valid while `self` lives.
    pub(crate) fn raw(&self) -> CUgraphExec {
        self.exec
    }

    /// The graph's kernel nodes in capture order (valid while `self` lives), if known.
    pub(crate) fn kernels(&self) -> Option<&[CUgraphNode]> {
        self.kernels.as_deref()
    }
}

impl Destroy for Graph {
    fn destroy(&mut self) -> Result<()> {
        let exec = std::mem::replace(&mut self.exec, std::ptr::null_mut());
        let template = std::mem::replace(&mut self.template, std::ptr::null_mut());
        self.kernels = None;
        if !template.is_null() {
            // SAFETY: the graph this API captured, destroyed once (cleared first) by its last
            // holder; the executable graph made from it does not depend on it for launches.
            let _ = unsafe { sys::cuGraphDestroy(template) };
        }
        if exec.is_null() {
            return Ok(());
        }
        // SAFETY: as above, for the executable graph; the context is bound (module docs).
        check(unsafe { sys::cuGraphExecDestroy(exec) }, || {
            format!("cuGraphExecDestroy({exec:p})")
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

// SAFETY: CUDA handles, used from any thread that binds their context (the driver API is
// thread-safe); launches and updates, which CUDA does not synchronise, take `in_use`.
unsafe impl Send for Graph {}
// SAFETY: as above.
unsafe impl Sync for Graph {}

/// A `CUmodule` loaded by `cuModuleLoadDataEx`, with the checked signature of each entry point
/// (what a launch of its kernels must pass).
pub(crate) struct Module {
    raw: CUmodule,
    /// The device whose capture gate its unload passes.
    device: CUdevice,
    /// By entry point name.
    pub(crate) signatures: HashMap<String, KernelSignature>,
}

impl Module {
    pub(crate) fn new(raw: CUmodule, device: CUdevice) -> Self {
        Module {
            raw,
            device,
            signatures: HashMap::new(),
        }
    }

    /// The CUDA handle, valid while `self` lives.
    pub(crate) fn raw(&self) -> CUmodule {
        self.raw
    }
}

impl Destroy for Module {
    fn destroy(&mut self) -> Result<()> {
        let module = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if module.is_null() {
            return Ok(());
        }
        // Unloading may synchronise the context, which would invalidate a capture under way.
        let _no_captures = CaptureGate::get().sync(self.device);
        // SAFETY: a module this API loaded, unloaded once by its last holder (every function
        // of it holds it); the stream layer unloads only after the work using it completed.
        check(unsafe { sys::cuModuleUnload(module) }, || {
            format!("cuModuleUnload({module:p})")
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

// SAFETY: as for the handles above.
unsafe impl Send for Module {}
// SAFETY: as above; the signatures are immutable once registered.
unsafe impl Sync for Module {}

/// A `CUfunction` handed out by `get_function`: its kernel's checked signature, and its module,
/// which stays loaded while the function is held.
pub(crate) struct Function {
    raw: CUfunction,
    /// The kernel's name, for messages.
    pub(crate) name: String,
    pub(crate) signature: KernelSignature,
    pub(crate) module: Arc<Module>,
}

impl Function {
    pub(crate) fn new(
        raw: CUfunction,
        name: &str,
        signature: KernelSignature,
        module: Arc<Module>,
    ) -> Self {
        Function {
            raw,
            name: name.to_owned(),
            signature,
            module,
        }
    }

    /// The CUDA handle, valid while `self` lives.
    pub(crate) fn raw(&self) -> CUfunction {
        self.raw
    }
}

// SAFETY: as for the handles above.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}
