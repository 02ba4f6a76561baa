//! Collectives on the CPU device: its buffers are host memory, so each collective goes to its
//! channel's engine over host memory (MPI, [`halcyon::backend::HostEngine`]) with the
//! addresses of its ranges, and the engine's report settles it.
//!
//! The ranges are registered in the access table ([`crate::access`]) like a transfer's (the
//! range written as its target, the range read as its source) until the engine reports, so
//! a dispatch or transfer that nothing orders against the collective is refused instead of
//! racing the engine. An engine that abandons a collective keeps the registration and the
//! memory for good ([`halcyon::backend::CollectiveDone`]).

use halcyon::backend::{Collective, CollectiveDone, HostJob};
use halcyon::{Error, Fence, Result, StatusCode};

use crate::access::Access;
use crate::executor::{ended, finish, host, started, Host, Issued};

/// Hands `collective` to its channel's host engine; the engine's report signals (or fails)
/// `signal` and drops `issued`. A collective that cannot start fails `signal` at once, and
/// its turn on the channel with it.
pub(crate) fn start(mut collective: Collective, signal: Fence, issued: Issued) {
    let channel = collective.channel().clone();
    let prepared = match channel.backend().host() {
        Some(engine) => prepare(&collective).map(|parts| (engine, parts)),
        None => Err(Error::new(
            StatusCode::Unimplemented,
            format!(
                "the CPU device runs collectives over host memory, and the {} engine is not \
                 one",
                channel.engine()
            ),
        )),
    };
    let (engine, (send, recv, access)) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            finish(&signal, Err(error));
            drop(issued);
            return; // `collective` drops with its turn unpassed: the channel fails from it
        }
    };
    started(&signal, true);
    let (send_ptr, send_len) = send.as_ref().map_or((std::ptr::null(), 0), |h| {
        (h.ptr.as_ptr().cast_const(), h.len)
    });
    let (recv_ptr, recv_len) = recv
        .as_ref()
        .map_or((std::ptr::null_mut(), 0), |h| (h.ptr.as_ptr(), h.len));
    let buffers = (collective.send().into_iter())
        .chain(collective.recv())
        .map(|r| r.buffer().clone())
        .collect();
    let done = CollectiveDone::new(
        move |result: Result<()>| {
            ended(&signal);
            finish(&signal, result);
            drop(issued);
        },
        (send, recv, access),
        buffers,
    );
    let job = HostJob {
        kind: collective.kind(),
        send: send_ptr,
        send_len,
        recv: recv_ptr,
        recv_len,
        done,
    };
    // SAFETY: the pointers address the live memory of the collective's ranges, which `done`
    // holds (the `Host`s keep it alive) until the engine completes the job, and forever if it
    // abandons it; the access registration `done` holds refuses any dispatch or transfer over
    // those bytes meanwhile, and the core refuses host mappings of the buffers while the
    // collective is in flight (it tracks them), and for good once abandoned.
    unsafe { engine.start(job) };
    collective.issued();
}

/// The collective's ranges resolved to host memory and registered in the access table.
fn prepare(collective: &Collective) -> Result<(Option<Host>, Option<Host>, Access)> {
    let send = collective.send().map(host).transpose()?;
    let recv = collective.recv().map(host).transpose()?;
    let access = match (&send, &recv) {
        (_, Some(recv)) => Access::transfer(
            (recv.ptr.as_ptr(), recv.len as u64),
            send.as_ref()
                .map(|s| (s.ptr.as_ptr().cast_const(), s.len as u64)),
        ),
        (Some(send), None) => Access::read(send.ptr.as_ptr(), send.len as u64),
        (None, None) => Err("a collective with no range".to_owned()),
    }
    .map_err(|m| Error::new(StatusCode::FailedPrecondition, m))?;
    Ok((send, recv, access))
}
