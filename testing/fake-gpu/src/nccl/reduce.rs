//! NCCL's data types and reduction operators, and the element-wise reductions a collective
//! computes over native-endian bytes.

use std::ffi::c_uint;

use cudarc::nccl::sys::{ncclDataType_t, ncclRedOp_t};
use half::{bf16, f16};

/// A data type the fake reduces and moves (`ncclDataType_t`; the 8-bit float types are not
/// modelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dtype {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
}

impl Dtype {
    /// The data type whose `ncclDataType_t` number is `raw`, if the fake models it.
    pub(crate) fn from_raw(raw: c_uint) -> Option<Dtype> {
        use ncclDataType_t::*;
        [
            (ncclInt8, Dtype::I8),
            (ncclUint8, Dtype::U8),
            (ncclInt32, Dtype::I32),
            (ncclUint32, Dtype::U32),
            (ncclInt64, Dtype::I64),
            (ncclUint64, Dtype::U64),
            (ncclFloat16, Dtype::F16),
            (ncclFloat32, Dtype::F32),
            (ncclFloat64, Dtype::F64),
            (ncclBfloat16, Dtype::Bf16),
        ]
        .into_iter()
        .find(|(nccl, _)| *nccl as c_uint == raw)
        .map(|(_, dtype)| dtype)
    }

    /// The size of one element, in bytes.
    pub(crate) fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }
}

/// A reduction operator (`ncclRedOp_t`; operators made with `ncclRedOpCreatePreMulSum` are
/// not modelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    /// The sum divided by the number of ranks (integer division for integer types).
    Avg,
}

impl RedOp {
    /// The operator whose `ncclRedOp_t` number is `raw`, if the fake models it.
    pub(crate) fn from_raw(raw: c_uint) -> Option<RedOp> {
        use ncclRedOp_t::*;
        [
            (ncclSum, RedOp::Sum),
            (ncclProd, RedOp::Prod),
            (ncclMax, RedOp::Max),
            (ncclMin, RedOp::Min),
            (ncclAvg, RedOp::Avg),
        ]
        .into_iter()
        .find(|(nccl, _)| *nccl as c_uint == raw)
        .map(|(_, op)| op)
    }
}

/// One element of a data type, read from and written to native-endian bytes.
trait Element: Copy {
    fn load(bytes: &[u8]) -> Self;
    fn store(self, bytes: &mut [u8]);
    /// `self op other` (`Avg` sums; [`Element::divide`] finishes it).
    fn combine(self, other: Self, op: RedOp) -> Self;
    /// `self / n`.
    fn divide(self, n: usize) -> Self;
}

macro_rules! integer_elements {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().expect("one element's bytes"))
            }
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            fn combine(self, other: Self, op: RedOp) -> Self {
                match op {
                    RedOp::Sum | RedOp::Avg => self.wrapping_add(other),
                    RedOp::Prod => self.wrapping_mul(other),
                    RedOp::Max => self.max(other),
                    RedOp::Min => self.min(other),
                }
            }
            fn divide(self, n: usize) -> Self {
                (i128::from(self) / n as i128) as $t
            }
        }
    )*};
}

integer_elements!(i8, u8, i32, u32, i64, u64);

macro_rules! float_elements {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().expect("one element's bytes"))
            }
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            fn combine(self, other: Self, op: RedOp) -> Self {
                match op {
                    RedOp::Sum | RedOp::Avg => self + other,
                    RedOp::Prod => self * other,
                    RedOp::Max => self.max(other),
                    RedOp::Min => self.min(other),
                }
            }
            fn divide(self, n: usize) -> Self {
                self / n as $t
            }
        }
    )*};
}

float_elements!(f32, f64);

/// The 16-bit floats compute in `f32` and round back after every step, as a reduction of
/// 16-bit values pairwise does.
macro_rules! half_elements {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().expect("one element's bytes"))
            }
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            fn combine(self, other: Self, op: RedOp) -> Self {
                <$t>::from_f32(self.to_f32().combine(other.to_f32(), op))
            }
            fn divide(self, n: usize) -> Self {
                <$t>::from_f32(self.to_f32() / n as f32)
            }
        }
    )*};
}

half_elements!(f16, bf16);

fn reduce_as<T: Element>(parts: &[Vec<u8>], op: RedOp) -> Vec<u8> {
    let size = std::mem::size_of::<T>();
    let mut out = parts.first().cloned().unwrap_or_default();
    for part in parts.iter().skip(1) {
        for (acc, x) in out.chunks_exact_mut(size).zip(part.chunks_exact(size)) {
            T::load(acc).combine(T::load(x), op).store(acc);
        }
    }
    if op == RedOp::Avg {
        for acc in out.chunks_exact_mut(size) {
            T::load(acc).divide(parts.len()).store(acc);
        }
    }
    out
}

/// Reduces `parts` (one per rank, each the same whole number of `dtype` elements) element
/// by element with `op`, in rank order: the result, as long as one part.
pub(crate) fn reduce(parts: &[Vec<u8>], dtype: Dtype, op: RedOp) -> Vec<u8> {
    match dtype {
        Dtype::I8 => reduce_as::<i8>(parts, op),
        Dtype::U8 => reduce_as::<u8>(parts, op),
        Dtype::I32 => reduce_as::<i32>(parts, op),
        Dtype::U32 => reduce_as::<u32>(parts, op),
        Dtype::I64 => reduce_as::<i64>(parts, op),
        Dtype::U64 => reduce_as::<u64>(parts, op),
        Dtype::F16 => reduce_as::<f16>(parts, op),
        Dtype::F32 => reduce_as::<f32>(parts, op),
        Dtype::F64 => reduce_as::<f64>(parts, op),
        Dtype::Bf16 => reduce_as::<bf16>(parts, op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Element>(values: &[T]) -> Vec<u8> {
        let size = std::mem::size_of::<T>();
        let mut out = vec![0; std::mem::size_of_val(values)];
        for (v, b) in values.iter().zip(out.chunks_exact_mut(size)) {
            v.store(b);
        }
        out
    }

    fn values<T: Element>(bytes: &[u8]) -> Vec<T> {
        bytes
            .chunks_exact(std::mem::size_of::<T>())
            .map(T::load)
            .collect()
    }

    #[test]
    fn nccl_reductions_of_every_type() {
        let ints = [bytes(&[1i32, -7, 3]), bytes(&[4i32, 2, -3])];
        let cases = [
            (RedOp::Sum, vec![5, -5, 0]),
            (RedOp::Prod, vec![4, -14, -9]),
            (RedOp::Max, vec![4, 2, 3]),
            (RedOp::Min, vec![1, -7, -3]),
            (RedOp::Avg, vec![2, -2, 0]),
        ];
        for (op, want) in cases {
            assert_eq!(
                values::<i32>(&reduce(&ints, Dtype::I32, op)),
                want,
                "{op:?}"
            );
        }
        let wrap = [bytes(&[250u8]), bytes(&[10u8])];
        assert_eq!(reduce(&wrap, Dtype::U8, RedOp::Sum), vec![4], "wraps");
        let f = [bytes(&[1.5f64, -2.0]), bytes(&[2.0f64, 8.0])];
        assert_eq!(
            values::<f64>(&reduce(&f, Dtype::F64, RedOp::Prod)),
            vec![3.0, -16.0]
        );
        let h = [
            bytes(&[f16::from_f32(1.5), f16::from_f32(-4.0)]),
            bytes(&[f16::from_f32(2.25), f16::from_f32(1.0)]),
        ];
        assert_eq!(
            values::<f16>(&reduce(&h, Dtype::F16, RedOp::Sum)),
            vec![f16::from_f32(3.75), f16::from_f32(-3.0)]
        );
        let b = [bytes(&[bf16::from_f32(3.0)]), bytes(&[bf16::from_f32(5.0)])];
        assert_eq!(
            values::<bf16>(&reduce(&b, Dtype::Bf16, RedOp::Avg)),
            vec![bf16::from_f32(4.0)]
        );
        assert_eq!(Dtype::from_raw(9), Some(Dtype::Bf16));
        assert_eq!(Dtype::from_raw(10), None, "fp8 is not modelled");
        assert_eq!(RedOp::from_raw(5), None);
    }
}
