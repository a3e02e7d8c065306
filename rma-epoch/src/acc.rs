//! Accumulate arithmetic on native-endian element buffers.

use tm_proto::rma::{AccOp, ElemType};

/// True if `op` is defined on `elem` (MPI: bitwise ops on integers and bytes,
/// logical and arithmetic ops on numbers, REPLACE and NO_OP on everything).
pub fn op_valid(op: AccOp, elem: ElemType) -> bool {
    use AccOp::*;
    match op {
        Replace | NoOp => true,
        Band | Bor | Bxor => !matches!(elem, ElemType::F32 | ElemType::F64),
        Sum | Prod | Min | Max | Land | Lor | Lxor => elem != ElemType::Byte,
    }
}

macro_rules! int_apply {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let a: $t = $a;
        let b: $t = $b;
        match $op {
            AccOp::Replace => b,
            AccOp::NoOp => a,
            AccOp::Sum => a.wrapping_add(b),
            AccOp::Prod => a.wrapping_mul(b),
            AccOp::Min => a.min(b),
            AccOp::Max => a.max(b),
            AccOp::Band => a & b,
            AccOp::Bor => a | b,
            AccOp::Bxor => a ^ b,
            AccOp::Land => ((a != 0) && (b != 0)) as $t,
            AccOp::Lor => ((a != 0) || (b != 0)) as $t,
            AccOp::Lxor => ((a != 0) != (b != 0)) as $t,
        }
    }};
}

macro_rules! float_apply {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let a: $t = $a;
        let b: $t = $b;
        match $op {
            AccOp::Replace => b,
            AccOp::Sum => a + b,
            AccOp::Prod => a * b,
            AccOp::Min => a.min(b),
            AccOp::Max => a.max(b),
            AccOp::Land => ((a != 0.0) && (b != 0.0)) as u8 as $t,
            AccOp::Lor => ((a != 0.0) || (b != 0.0)) as u8 as $t,
            AccOp::Lxor => ((a != 0.0) != (b != 0.0)) as u8 as $t,
            // NO_OP, and bitwise ops that `op_valid` refuses: leave the target.
            _ => a,
        }
    }};
}

macro_rules! each {
    ($t:ty, $n:expr, $target:expr, $origin:expr, $f:ident, $op:expr) => {{
        for (t, o) in $target.chunks_exact_mut($n).zip($origin.chunks_exact($n)) {
            let (Ok(ta), Ok(ob)) = (<[u8; $n]>::try_from(&*t), <[u8; $n]>::try_from(o)) else {
                continue;
            };
            let r = $f!($t, $op, <$t>::from_ne_bytes(ta), <$t>::from_ne_bytes(ob));
            t.copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

/// `target[i] = target[i] op origin[i]` element-wise. Lengths should be equal
/// whole multiples of the element size; extra bytes are left alone. Invalid
/// combinations (see [`op_valid`]) leave the target unchanged except REPLACE.
pub fn apply(op: AccOp, elem: ElemType, target: &mut [u8], origin: &[u8]) {
    if !op_valid(op, elem) {
        return;
    }
    match elem {
        ElemType::Byte => each!(u8, 1, target, origin, int_apply, op),
        ElemType::I32 => each!(i32, 4, target, origin, int_apply, op),
        ElemType::I64 => each!(i64, 8, target, origin, int_apply, op),
        ElemType::U32 => each!(u32, 4, target, origin, int_apply, op),
        ElemType::U64 => each!(u64, 8, target, origin, int_apply, op),
        ElemType::F32 => each!(f32, 4, target, origin, float_apply, op),
        ElemType::F64 => each!(f64, 8, target, origin, float_apply, op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_logicals() {
        let mut t = 5u64.to_ne_bytes();
        apply(AccOp::Sum, ElemType::U64, &mut t, &7u64.to_ne_bytes());
        assert_eq!(u64::from_ne_bytes(t), 12);
        let mut t = (-3i32).to_ne_bytes();
        apply(AccOp::Max, ElemType::I32, &mut t, &(-9i32).to_ne_bytes());
        assert_eq!(i32::from_ne_bytes(t), -3);
        let mut t = 2.5f64.to_ne_bytes();
        apply(AccOp::Prod, ElemType::F64, &mut t, &2.0f64.to_ne_bytes());
        assert_eq!(f64::from_ne_bytes(t), 5.0);
        let mut t = [0b1100u8];
        apply(AccOp::Bxor, ElemType::Byte, &mut t, &[0b1010]);
        assert_eq!(t, [0b0110]);
        let mut t = 0u32.to_ne_bytes();
        apply(AccOp::Lor, ElemType::U32, &mut t, &4u32.to_ne_bytes());
        assert_eq!(u32::from_ne_bytes(t), 1);
        assert!(!op_valid(AccOp::Band, ElemType::F32));
        assert!(!op_valid(AccOp::Sum, ElemType::Byte));
    }
}
