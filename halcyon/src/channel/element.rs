//! The element types collective reductions combine.

use std::fmt;

/// The type of a buffer's elements, as a reduction ([`crate::Queue::all_reduce`],
/// [`crate::Queue::reduce_scatter`]) reads and combines them. Which types an engine reduces
/// is the engine's: NCCL and RCCL have every one, MPI has no 16-bit floats.
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
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
}

impl ElementType {
    /// Every type.
    pub const ALL: [ElementType; 10] = [
        ElementType::F16,
        ElementType::BF16,
        ElementType::F32,
        ElementType::F64,
        ElementType::I8,
        ElementType::U8,
        ElementType::I32,
        ElementType::U32,
        ElementType::I64,
        ElementType::U64,
    ];

    /// The size of one element in bytes.
    ///
    /// ```
    /// assert_eq!(halcyon::ElementType::BF16.size(), 2);
    /// ```
    pub fn size(self) -> u64 {
        match self {
            ElementType::I8 | ElementType::U8 => 1,
            ElementType::F16 | ElementType::BF16 => 2,
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
            ElementType::I32 => "i32",
            ElementType::U32 => "u32",
            ElementType::I64 => "i64",
            ElementType::U64 => "u64",
        }
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
