//! Graphs: the operations a stream captured, replayed together by each launch, and which of
//! them are kernel launches, so that a launch's parameters can be replaced in place
//! (`update_graph_kernel`).

use halcyon::{Error, Result, StatusCode};
use halcyon_stream::api::{FunctionHandle, LaunchConfig};

use crate::invalid;
use crate::worker::Exec;

/// A captured (or instantiated) graph.
#[derive(Clone, Default)]
pub(crate) struct Graph {
    /// The operations, in capture order.
    pub(crate) ops: Vec<Exec>,
    /// The kernel launches among them, in launch order: where each is, and what it launches.
    kernels: Vec<(usize, FunctionHandle, LaunchConfig)>,
}

impl Graph {
    /// Adds an operation that is not a kernel launch.
    pub(crate) fn push(&mut self, exec: Exec) {
        self.ops.push(exec);
    }

    /// Adds a launch of `function` with `config`.
    pub(crate) fn push_kernel(
        &mut self,
        exec: Exec,
        function: FunctionHandle,
        config: LaunchConfig,
    ) {
        self.kernels.push((self.ops.len(), function, config));
        self.ops.push(exec);
    }

    /// Replaces launch `kernel` with `exec`, a launch of the same `function` and `config`.
    pub(crate) fn replace_kernel(
        &mut self,
        kernel: usize,
        function: FunctionHandle,
        config: LaunchConfig,
        exec: Exec,
    ) -> Result<()> {
        let &(at, captured, shape) = self.kernels.get(kernel).ok_or_else(|| {
            invalid(format!(
                "kernel launch {kernel} of a graph with {} launches",
                self.kernels.len()
            ))
        })?;
        if captured != function || shape != config {
            return Err(Error::new(
                StatusCode::FailedPrecondition,
                format!(
                    "kernel launch {kernel} of the graph launches {captured:?} with {shape:?}, \
                     not {function:?} with {config:?}: only its parameters can change"
                ),
            ));
        }
        self.ops[at] = exec;
        Ok(())
    }
}
