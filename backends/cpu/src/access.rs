//! How Rust kernels may access their bindings, decided per dispatch and checked so that the
//! safe views of [`crate::WorkgroupContext`] never race.
//!
//! Every binding belongs to an *alias group*: the bindings of the dispatch whose byte ranges
//! overlap, directly or through each other (usually a group of one). The first workgroup that
//! asks for a view of a group fixes the group's [`Mode`] for the whole dispatch; a workgroup
//! asking for a view of another mode gets an error (and its dispatch fails) instead of a view.
//! So in one dispatch a group's memory is only read, only written in per-workgroup chunks of one
//! size (a group of one binding only), only accessed atomically with one width, or only accessed
//! through the unsafe raw view, whose contract covers the rest.
//!
//! Dispatches that the semaphores let run at the same time (two dispatches submitted without a
//! wait between them, on one queue or two) are checked against each other too: fixing a group's
//! mode registers its ranges in a process-wide table, and a mode that conflicts with another
//! running dispatch's registration over overlapping bytes is refused the same way. A dispatch
//! removes its registrations when its last workgroup is done, before anything after it runs.
//!
//! Queue transfers register too ([`Access::transfer`]): a fill, update or copy target as
//! [`Mode::Transfer`], which coexists with nothing, and a copy source as [`Mode::Read`]. So a
//! transfer that nothing orders against a running dispatch's views (or another transfer) over
//! the same bytes is refused instead of racing them: the views are plain Rust references, and
//! a concurrent write under a `&[T]` is undefined behaviour, not merely unspecified bytes.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::kernel::PerBinding;

/// What a dispatch does with an alias group's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Shared `&[T]` views only.
    Read,
    /// Each workgroup writes its own chunk of this many bytes (`&mut [T]`).
    Chunk(u64),
    /// Atomic views of this element width in bytes.
    Atomic(u64),
    /// The unsafe raw view: its caller answers for every access.
    Raw,
    /// Written by a queue transfer (fill, update or copy target), through raw pointers.
    Transfer,
}

impl Mode {
    fn encode(self) -> u64 {
        match self {
            Mode::Read => 1,
            Mode::Raw => 2,
            Mode::Chunk(bytes) => 3 | (bytes << 3),
            Mode::Atomic(width) => 4 | (width << 3),
            Mode::Transfer => 5,
        }
    }

    fn decode(value: u64) -> Option<Mode> {
        match value & 7 {
            1 => Some(Mode::Read),
            2 => Some(Mode::Raw),
            3 => Some(Mode::Chunk(value >> 3)),
            4 => Some(Mode::Atomic(value >> 3)),
            5 => Some(Mode::Transfer),
            _ => None,
        }
    }

    /// Whether two dispatches may use overlapping memory at the same time in these modes.
    fn coexists_with(self, other: Mode) -> bool {
        matches!(
            (self, other),
            (Mode::Read, Mode::Read) | (Mode::Raw, Mode::Raw)
        ) || matches!((self, other), (Mode::Atomic(a), Mode::Atomic(b)) if a == b)
    }

    pub(crate) fn describe(self) -> String {
        match self {
            Mode::Read => "read through shared views (WorkgroupContext::binding)".into(),
            Mode::Chunk(bytes) => format!(
                "written in per-workgroup chunks of {bytes} bytes (WorkgroupContext::chunk_mut)"
            ),
            Mode::Atomic(width) => {
                format!("accessed atomically {width} bytes at a time (WorkgroupContext::atomics)")
            }
            Mode::Raw => {
                "accessed through the unsafe raw view (WorkgroupContext::raw_binding)".into()
            }
            Mode::Transfer => "written by a queue transfer (fill, update or copy)".into(),
        }
    }
}

/// What registers ranges in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A kernel dispatch: its ranges are its bindings.
    Dispatch,
    /// A fill, update or copy: range 0 is the target, range 1 a copy's source.
    Transfer,
    /// A queue read back to the host: range 0.
    Read,
}

impl Kind {
    /// Range `index` of such a user, for messages.
    fn part(self, index: usize) -> String {
        match (self, index) {
            (Kind::Dispatch, i) => format!("binding {i}"),
            (Kind::Transfer, 0) => "the target".into(),
            (Kind::Transfer, _) => "the source".into(),
            (Kind::Read, _) => "the range read".into(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Dispatch => "dispatch",
            Kind::Transfer => "transfer",
            Kind::Read => "queue read",
        }
    }
}

/// A registration in the process-wide table: one running user's use of a byte range.
struct Claim {
    dispatch: u64,
    kind: Kind,
    bytes: Range<usize>,
    mode: Mode,
    binding: usize,
}

/// Running dispatches' registered ranges. Touched once per alias group per dispatch (the first
/// view of the group), never per element.
static CLAIMS: Mutex<Vec<Claim>> = Mutex::new(Vec::new());

static NEXT_DISPATCH: AtomicU64 = AtomicU64::new(1);

/// One dispatch's access state.
pub(crate) struct Access {
    id: u64,
    kind: Kind,
    /// Per binding (one vector, not three: each lookup goes through one `SmallVec`).
    slots: PerBinding<Slot>,
    /// Whether any group has more than one binding (usually not: then a binding's group is
    /// itself, and claims and alias queries skip looking for other members).
    aliased: bool,
}

/// One binding's access state.
struct Slot {
    /// Its byte range in host addresses.
    range: Range<usize>,
    /// Its alias group (the lowest binding index in it).
    group: usize,
    /// If it leads its group, the group's encoded [`Mode`] (0 = not fixed yet); else unused.
    mode: AtomicU64,
}

impl Access {
    pub(crate) fn new(kind: Kind, ptrs: &[*mut u8], lengths: &[u64]) -> Access {
        let mut slots: PerBinding<Slot> = PerBinding::new();
        for (i, (&ptr, &len)) in ptrs.iter().zip(lengths).enumerate() {
            let start = ptr as usize;
            slots.push(Slot {
                range: start..start.saturating_add(len as usize),
                group: i,
                mode: AtomicU64::new(0),
            });
        }
        let mut aliased = false;
        for i in 0..slots.len() {
            for j in 0..i {
                let (gi, gj) = (slots[i].group, slots[j].group);
                if overlap(&slots[i].range, &slots[j].range) && gi != gj {
                    aliased = true;
                    let (keep, merge) = (gi.min(gj), gi.max(gj));
                    for slot in slots.iter_mut().filter(|s| s.group == merge) {
                        slot.group = keep;
                    }
                }
            }
        }
        Access {
            id: NEXT_DISPATCH.fetch_add(1, Ordering::Relaxed),
            kind,
            slots,
            aliased,
        }
    }

    /// Binding `binding`'s alias group.
    fn group(&self, binding: usize) -> usize {
        self.slots[binding].group
    }

    /// Registers a queue transfer that writes `target` and reads `source` (a buffer range, not
    /// captured bytes). `Err` names the running dispatch or transfer it conflicts with. The
    /// registration lasts until [`Access::release`] (or drop).
    pub(crate) fn transfer(
        target: (*mut u8, u64),
        source: Option<(*const u8, u64)>,
    ) -> Result<Access, String> {
        let mut ptrs: PerBinding<*mut u8> = smallvec::smallvec![target.0];
        let mut lengths: PerBinding<u64> = smallvec::smallvec![target.1];
        if let Some((ptr, len)) = source {
            ptrs.push(ptr.cast_mut());
            lengths.push(len);
        }
        let access = Access::new(Kind::Transfer, &ptrs, &lengths);
        access.claim(0, Mode::Transfer)?;
        // A source overlapping the target (slots of one buffer) is in its group, already
        // claimed for writing.
        if access.slots.len() == 2 && access.group(1) != access.group(0) {
            access.claim(1, Mode::Read)?;
        }
        Ok(access)
    }

    /// Registers a queue read of `len` bytes at `ptr` back to the host. `Err` names the running
    /// dispatch or transfer writing them.
    pub(crate) fn read(ptr: *const u8, len: u64) -> Result<Access, String> {
        let access = Access::new(Kind::Read, &[ptr.cast_mut()], &[len]);
        access.claim(0, Mode::Read)?;
        Ok(access)
    }

    /// The other bindings of `binding`'s alias group.
    pub(crate) fn aliases(&self, binding: usize) -> Vec<usize> {
        if !self.aliased {
            return Vec::new();
        }
        let leader = self.group(binding);
        (0..self.slots.len())
            .filter(|&i| i != binding && self.group(i) == leader)
            .collect()
    }

    /// Fixes (or checks) the mode of `binding`'s alias group for this dispatch. After `Ok`,
    /// every access this dispatch makes to the group's memory is of mode `mode`, and no other
    /// running dispatch accesses overlapping memory in a mode that conflicts with it.
    pub(crate) fn claim(&self, binding: usize, mode: Mode) -> Result<(), String> {
        let leader = self.group(binding);
        let slot = &self.slots[leader].mode;
        // Acquire: pairs with the Release store below, so a workgroup that sees the mode also
        // sees the registration made before it (and everything the first claimer did).
        let current = slot.load(Ordering::Acquire);
        if current == mode.encode() {
            return Ok(());
        }
        if current == 0 {
            let mut claims = CLAIMS.lock().unwrap_or_else(|p| p.into_inner());
            // Re-read under the lock: the slow path of every workgroup of this dispatch runs
            // under it, so the first one to get here fixes the mode.
            let current = slot.load(Ordering::Acquire);
            if current == 0 {
                if self.aliased {
                    let members: PerBinding<usize> = (0..self.slots.len())
                        .filter(|&i| self.group(i) == leader)
                        .collect();
                    for &member in &members {
                        self.check(&claims, member, mode)?;
                    }
                    for member in members {
                        claims.push(self.registration(member, mode));
                    }
                } else {
                    // A group of one: no member list to build.
                    self.check(&claims, leader, mode)?;
                    claims.push(self.registration(leader, mode));
                }
                slot.store(mode.encode(), Ordering::Release);
                return Ok(());
            }
            drop(claims);
            if current == mode.encode() {
                return Ok(());
            }
            return Err(self.conflict(binding, current, mode));
        }
        Err(self.conflict(binding, current, mode))
    }

    /// `Err` if binding `member`'s range, used in `mode`, conflicts with another running
    /// user's registration in `claims`.
    fn check(&self, claims: &[Claim], member: usize, mode: Mode) -> Result<(), String> {
        let range = &self.slots[member].range;
        let conflicting = claims.iter().find(|c| {
            c.dispatch != self.id && overlap(&c.bytes, range) && !c.mode.coexists_with(mode)
        });
        match conflicting {
            None => Ok(()),
            Some(other) => Err(format!(
                "{} overlaps {} of another {} running at the same time, which {}; this {} \
                 wants it {}. Order the two with a semaphore (a queue timeline) so they do \
                 not overlap",
                self.kind.part(member),
                other.kind.part(other.binding),
                other.kind.name(),
                other.mode.describe(),
                self.kind.name(),
                mode.describe()
            )),
        }
    }

    /// Binding `member`'s registration in `mode`.
    fn registration(&self, member: usize, mode: Mode) -> Claim {
        Claim {
            dispatch: self.id,
            kind: self.kind,
            bytes: self.slots[member].range.clone(),
            mode,
            binding: member,
        }
    }

    fn conflict(&self, binding: usize, current: u64, wanted: Mode) -> String {
        let fixed = Mode::decode(current).map_or_else(|| "used".into(), Mode::describe);
        let aliases = self.aliases(binding);
        let group = if aliases.is_empty() {
            format!("binding {binding}")
        } else {
            format!("binding {binding} (which overlaps bindings {aliases:?})")
        };
        format!(
            "{group} is {fixed} by another workgroup of this dispatch, so it cannot also be {}: \
             every workgroup of a dispatch must access a binding the same way",
            wanted.describe()
        )
    }

    /// Removes this dispatch's registrations: called once its last workgroup is done.
    pub(crate) fn release(&self) {
        if self
            .slots
            .iter()
            .all(|s| s.mode.load(Ordering::Relaxed) == 0)
        {
            return;
        }
        let mut claims = CLAIMS.lock().unwrap_or_else(|p| p.into_inner());
        // Order does not matter (claims are only searched): remove by swapping in the last.
        let mut i = claims.len();
        while i > 0 {
            i -= 1;
            if claims[i].dispatch == self.id {
                claims.swap_remove(i);
            }
        }
    }
}

impl Drop for Access {
    fn drop(&mut self) {
        // A dispatch dropped without finishing (its run failed before it ended) must not keep
        // its ranges registered.
        self.release();
    }
}

/// Whether two byte ranges share a byte (an empty range shares none).
fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(ranges: &[(usize, u64)]) -> Access {
        let ptrs: Vec<*mut u8> = ranges.iter().map(|&(p, _)| p as *mut u8).collect();
        let lengths: Vec<u64> = ranges.iter().map(|&(_, l)| l).collect();
        Access::new(Kind::Dispatch, &ptrs, &lengths)
    }

    #[test]
    fn overlapping_bindings_share_a_group_transitively() {
        // 0 overlaps 2, 2 overlaps 1; 3 is apart; 4 is empty and overlaps nothing.
        let a = access(&[
            (0x1000, 16),
            (0x1018, 16),
            (0x1008, 24),
            (0x2000, 8),
            (0x1004, 0),
        ]);
        let groups: Vec<usize> = (0..5).map(|i| a.group(i)).collect();
        assert_eq!(groups, [0, 0, 0, 3, 4]);
        assert_eq!(a.aliases(1), [0, 2]);
        assert!(a.aliases(3).is_empty());
    }

    #[test]
    fn a_group_keeps_its_first_mode() {
        let a = access(&[(0x10_0000, 64), (0x10_0020, 64)]);
        a.claim(0, Mode::Read).unwrap();
        a.claim(1, Mode::Read).unwrap();
        let err = a.claim(1, Mode::Chunk(16)).unwrap_err();
        assert!(err.contains("overlaps bindings [0]"), "{err}");
        let b = access(&[(0x20_0000, 64)]);
        b.claim(0, Mode::Chunk(16)).unwrap();
        assert!(b.claim(0, Mode::Chunk(32)).is_err());
    }

    #[test]
    fn running_dispatches_are_checked_against_each_other() {
        let first = access(&[(0x30_0000, 64)]);
        let second = access(&[(0x30_0020, 64)]);
        first.claim(0, Mode::Read).unwrap();
        second.claim(0, Mode::Read).unwrap();
        let third = access(&[(0x30_0010, 8)]);
        let err = third.claim(0, Mode::Chunk(4)).unwrap_err();
        assert!(err.contains("another dispatch"), "{err}");
        first.release();
        drop(second);
        third.claim(0, Mode::Chunk(4)).unwrap();
    }
}
