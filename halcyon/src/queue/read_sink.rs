//! Where a queue read delivers its bytes: [`ReadSink`], the SPI side of
//! [`Queue::read`](crate::Queue::read) and [`Queue::read_into`](crate::Queue::read_into).

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

/// The vector a reader gets its elements in: a `Vec<T>` of some `Pod` type, seen as bytes.
trait ReadTarget: Send {
    /// The vector itself, if it is a `Vec<u8>` (a backend may then read straight into it).
    fn bytes_vec(&mut self) -> Option<&mut Vec<u8>>;
    /// Makes the vector hold exactly `bytes` (a whole number of elements), reusing its
    /// allocation.
    fn copy_from(&mut self, bytes: &[u8]);
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<T: Pod + Send> ReadTarget for Vec<T> {
    fn bytes_vec(&mut self) -> Option<&mut Vec<u8>> {
        (self as &mut dyn Any).downcast_mut::<Vec<u8>>()
    }

    fn copy_from(&mut self, bytes: &[u8]) {
        copy_into(self, bytes);
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// Makes `vec` hold exactly `bytes`, which are a whole number of `T`s (checked when the read
/// was submitted), in one copy: no zeroing first.
fn copy_into<T: Pod>(vec: &mut Vec<T>, bytes: &[u8]) {
    let size = std::mem::size_of::<T>().max(1);
    debug_assert_eq!(bytes.len() % size, 0);
    let n = bytes.len() / size;
    vec.clear();
    vec.reserve_exact(n);
    // SAFETY: the vector has room for `n` elements, `n * size_of::<T>() == bytes.len()` bytes,
    // which `bytes` (borrowed apart from the vector, so not overlapping it) fills completely;
    // `T: Pod`, so any bytes are a valid `T`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), vec.as_mut_ptr().cast::<u8>(), bytes.len());
        vec.set_len(n);
    }
}

/// What a backend delivered: its own bytes, or the reader's vector filled.
enum Delivered {
    Bytes(Vec<u8>),
    Target(Box<dyn ReadTarget>),
}

/// Where a queue read delivers its bytes (the SPI side of [`Queue::read`](crate::Queue::read) and
/// [`Queue::read_into`](crate::Queue::read_into)).
///
/// A reader asks for a `Vec<T>`; a backend sees bytes. Where the reader's vector is a
/// `Vec<u8>`, a backend may read straight into it ([`ReadSink::buffer`]); otherwise
/// [`ReadSink::deliver_copy`] copies into the reader's vector directly and
/// [`ReadSink::deliver`]ed bytes are copied into it once, when the read completes.
#[derive(Clone, Default)]
pub struct ReadSink {
    slot: Arc<Mutex<Option<Delivered>>>,
    /// The reader's vector ([`Queue::read_into`](crate::Queue::read_into), or a new one for a read of elements wider
    /// than a byte).
    spare: Arc<Mutex<Option<Box<dyn ReadTarget>>>>,
}

impl fmt::Debug for ReadSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let delivered = self.slot.lock().is_ok_and(|slot| slot.is_some());
        f.debug_struct("ReadSink")
            .field("delivered", &delivered)
            .finish()
    }
}

impl ReadSink {
    /// A sink for a read into a `Vec<T>`: `buffer`, or a new vector (none for bytes, which
    /// the backend allocates as it likes).
    pub(crate) fn typed<T: Pod + Send>(buffer: Option<Vec<T>>) -> ReadSink {
        let target: Option<Box<dyn ReadTarget>> = match buffer {
            Some(buffer) => Some(Box::new(buffer)),
            None if TypeId::of::<T>() == TypeId::of::<u8>() => None,
            None => Some(Box::new(Vec::<T>::new())),
        };
        ReadSink {
            spare: Arc::new(Mutex::new(target)),
            ..ReadSink::default()
        }
    }

    /// Hands over the bytes read. Call before signalling the operation's fence.
    pub fn deliver(&self, bytes: Vec<u8>) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(Delivered::Bytes(bytes));
    }

    /// The vector the reader supplied ([`Queue::read_into`](crate::Queue::read_into) of bytes), made `len` bytes long
    /// (its capacity reused, the bytes unspecified until written), for a backend to read into
    /// and [`ReadSink::deliver`]; `None` if the reader supplied none, wants elements wider
    /// than a byte (whose vector a `Vec<u8>` cannot stand for: [`ReadSink::deliver_copy`]
    /// writes those), or it was taken already: the backend then allocates its own. Memory a
    /// large read writes then needs no fresh pages: touching a freshly mapped 64 MiB costs
    /// tens of milliseconds of page faults on some hosts, more than the copy.
    pub fn buffer(&self, len: usize) -> Option<Vec<u8>> {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        let mut buffer = std::mem::take(spare.as_mut()?.bytes_vec()?);
        *spare = None;
        if buffer.len() > len {
            buffer.truncate(len);
        } else {
            buffer.resize(len, 0);
        }
        Some(buffer)
    }

    /// Delivers a copy of `bytes`: straight into the reader's vector where there is one.
    pub fn deliver_copy(&self, bytes: &[u8]) {
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).take();
        let delivered = match spare {
            Some(mut target) => {
                target.copy_from(bytes);
                Delivered::Target(target)
            }
            None => Delivered::Bytes(bytes.to_vec()),
        };
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(delivered);
    }

    /// The elements delivered, as the reader's `Vec<T>`.
    pub(crate) fn take<T: Pod + Send>(&self) -> Option<Vec<T>> {
        let delivered = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        let bytes = match delivered {
            Delivered::Target(target) => return target.into_any().downcast().ok().map(|v| *v),
            Delivered::Bytes(bytes) => bytes,
        };
        // Bytes read for bytes are the reader's already.
        let mut bytes = Some(bytes);
        if let Some(read) = (&mut bytes as &mut dyn Any).downcast_mut::<Option<Vec<T>>>() {
            return read.take();
        }
        // Wider elements: one copy, into the reader's vector where it supplied one.
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut vec = spare
            .and_then(|target| target.into_any().downcast::<Vec<T>>().ok())
            .map_or_else(Vec::new, |v| *v);
        copy_into(&mut vec, &bytes?);
        Some(vec)
    }
}
