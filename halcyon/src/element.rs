//! Element types: what the bytes of a buffer view or a reduction hold.

use std::fmt;

/// The type of a buffer's elements: what a [`crate::BufferView`] holds, and what a reduction
/// ([`crate::Queue::all_reduce`], [`crate::Queue::reduce_scatter`]) reads and combines. Which
/// types an engine reduces is the engine's: NCCL and RCCL have the floats and the 8-, 32- and
/// 64-bit integers, MPI no 16-bit floats; no engine reduces `Bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElementType {
    /// IEEE 754 half precision.
    F16,
    /// bfloat16 (the top half of an `f32`).
    BF16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `i8`.
    I8,
    /// `u8`.
    U8,
    /// `i16`.
    I16,
    /// `u16`.
    U16,
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// `bool`, one byte: 0 or 1.
    Bool,
}

impl ElementType {
    /// Every type.
    pub const ALL: [ElementType; 13] = [
        ElementType::F16,
        ElementType::BF16,
        ElementType::F32,
        ElementType::F64,
        ElementType::I8,
        ElementType::U8,
        ElementType::I16,
        ElementType::U16,
        ElementType::I32,
        ElementType::U32,
        ElementType::I64,
        ElementType::U64,
        ElementType::Bool,
    ];

    /// The size of one element in bytes.
    ///
    /// ```
    /// assert_eq!(halcyon::ElementType::BF16.size(), 2);
    /// ```
    pub fn size(self) -> u64 {
        match self {
            ElementType::I8 | ElementType::U8 | ElementType::Bool => 1,
            ElementType::F16 | ElementType::BF16 | ElementType::I16 | ElementType::U16 => 2,
            ElementType::F32 | ElementType::I32 | ElementType::U32 => 4,
            ElementType::F64 | ElementType::I64 | ElementType::U64 => 8,
        }
    }

    /// The type's name (`"f32"`).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::F16 => "f16",
            ElementType::BF16 => "bf16",
            ElementType::F32 => "f32",
            ElementType::F64 => "f64",
            ElementType::I8 => "i8",
            ElementType::U8 => "u8",
            ElementType::I16 => "i16",
            ElementType::U16 => "u16",
            ElementType::I32 => "i32",
            ElementType::U32 => "u32",
            ElementType::I64 => "i64",
            ElementType::U64 => "u64",
            ElementType::Bool => "bool",
        }
    }
}

/// A Rust type whose values are elements of an [`ElementType`]: what typed transfers of views
/// ([`crate::BufferView::from_host`], [`crate::BufferView::to_host`]) take and give. The
/// 16-bit floats and `bool` have no such type in `std`: move their bytes as `u16` and `u8`
/// with [`crate::BufferView::from_host_as`].
pub trait Element: bytemuck::Pod + Send {
    /// Its element type.
    const TYPE: ElementType;
}

macro_rules! elements {
    ($($t:ty => $e:ident),*) => {$(
        impl Element for $t {
            const TYPE: ElementType = ElementType::$e;
        }
    )*};
}

elements!(
    f32 => F32, f64 => F64, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32,
    u32 => U32, i64 => I64, u64 => U64
);

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
