//! The buffers a submission touches, each once, with its strongest access: what the submission
//! registers with each buffer's host-mapping tracker.
//!
//! Most submissions touch a handful of buffers, kept inline and found by a linear scan: no
//! allocation. Past [`INDEX_AT`] buffers (a long command buffer) an id index takes over, so
//! collecting stays linear in the bindings.

use std::collections::HashMap;

use smallvec::SmallVec;

use crate::buffer::{Access, Buffer};

/// The buffers past which a hash index finds them instead of a scan.
const INDEX_AT: usize = 16;

/// The buffers a submission touches (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct Touched {
    buffers: SmallVec<[(Buffer, Access); 4]>,
    /// Buffer id to position in `buffers`, once there are more than [`INDEX_AT`].
    index: Option<HashMap<u64, usize>>,
}

impl Touched {
    /// Adds `buffer` with `access`; a buffer added twice keeps the stronger access (a write).
    pub(crate) fn add(&mut self, buffer: &Buffer, access: Access) {
        let id = buffer.id();
        let found = match &self.index {
            Some(index) => index.get(&id).copied(),
            None => self.buffers.iter().position(|(b, _)| b.id() == id),
        };
        match found {
            Some(i) if access == Access::Write => self.buffers[i].1 = Access::Write,
            Some(_) => {}
            None => {
                self.buffers.push((buffer.clone(), access));
                let at = self.buffers.len() - 1;
                match &mut self.index {
                    Some(index) => {
                        index.insert(id, at);
                    }
                    None if self.buffers.len() > INDEX_AT => {
                        let ids = self.buffers.iter().enumerate();
                        self.index = Some(ids.map(|(i, (b, _))| (b.id(), i)).collect());
                    }
                    None => {}
                }
            }
        }
    }

    /// Each buffer once, with its access, in the order first added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(Buffer, Access)> {
        self.buffers.iter()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Duplicates collapse to one entry with the strongest access, below and above the index
    /// threshold alike.
    #[test]
    fn each_buffer_once_with_its_strongest_access() {
        for count in [3, INDEX_AT + 5] {
            let buffers: Vec<Buffer> = (0..count)
                .map(|_| crate::buffer::tests::host_buffer(2))
                .collect();
            let mut touched = Touched::default();
            for b in &buffers {
                touched.add(b, Access::Read);
            }
            for b in buffers.iter().step_by(2) {
                touched.add(b, Access::Write);
                touched.add(b, Access::Read);
            }
            let seen: Vec<(u64, Access)> = touched.iter().map(|(b, a)| (b.id(), *a)).collect();
            let expected: Vec<(u64, Access)> = (buffers.iter().enumerate())
                .map(|(i, b)| {
                    (
                        b.id(),
                        if i % 2 == 0 {
                            Access::Write
                        } else {
                            Access::Read
                        },
                    )
                })
                .collect();
            assert_eq!(seen, expected, "{count} buffers");
        }
    }
}
