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

/// `target[i] = f(target[i], origin[i])` over the whole elements of both.
/// The operation is chosen outside this loop, so each instance is a
/// straight loop the compiler vectorizes.
#[inline(always)]
fn zip<const N: usize, T: Copy>(
    target: &mut [u8],
    origin: &[u8],
    from: impl Fn([u8; N]) -> T,
    to: impl Fn(T) -> [u8; N],
    f: impl Fn(T, T) -> T,
) {
    for (t, o) in target.chunks_exact_mut(N).zip(origin.chunks_exact(N)) {
        let (Ok(ta), Ok(ob)) = (<[u8; N]>::try_from(&*t), <[u8; N]>::try_from(o)) else {
            continue;
        };
        t.copy_from_slice(&to(f(from(ta), from(ob))));
    }
}

/// REPLACE: the origin's whole elements over the target's.
fn replace(target: &mut [u8], origin: &[u8], size: usize) {
    let n = target.len().min(origin.len()) / size * size;
    if let (Some(t), Some(o)) = (target.get_mut(..n), origin.get(..n)) {
        t.copy_from_slice(o);
    }
}

macro_rules! int_ops {
    ($t:ty, $n:expr, $op:expr, $tg:expr, $or:expr) => {{
        let (tg, or): (&mut [u8], &[u8]) = ($tg, $or);
        let fr = <$t>::from_ne_bytes;
        let to = <$t>::to_ne_bytes;
        match $op {
            AccOp::Replace => replace(tg, or, $n),
            AccOp::NoOp => {}
            AccOp::Sum => zip::<$n, $t>(tg, or, fr, to, |a, b| a.wrapping_add(b)),
            AccOp::Prod => zip::<$n, $t>(tg, or, fr, to, |a, b| a.wrapping_mul(b)),
            AccOp::Min => zip::<$n, $t>(tg, or, fr, to, |a, b| a.min(b)),
            AccOp::Max => zip::<$n, $t>(tg, or, fr, to, |a, b| a.max(b)),
            AccOp::Band => zip::<$n, $t>(tg, or, fr, to, |a, b| a & b),
            AccOp::Bor => zip::<$n, $t>(tg, or, fr, to, |a, b| a | b),
            AccOp::Bxor => zip::<$n, $t>(tg, or, fr, to, |a, b| a ^ b),
            AccOp::Land => zip::<$n, $t>(tg, or, fr, to, |a, b| ((a != 0) && (b != 0)) as $t),
            AccOp::Lor => zip::<$n, $t>(tg, or, fr, to, |a, b| ((a != 0) || (b != 0)) as $t),
            AccOp::Lxor => zip::<$n, $t>(tg, or, fr, to, |a, b| ((a != 0) != (b != 0)) as $t),
        }
    }};
}

macro_rules! float_ops {
    ($t:ty, $n:expr, $op:expr, $tg:expr, $or:expr) => {{
        let (tg, or): (&mut [u8], &[u8]) = ($tg, $or);
        let fr = <$t>::from_ne_bytes;
        let to = <$t>::to_ne_bytes;
        match $op {
            AccOp::Replace => replace(tg, or, $n),
            AccOp::Sum => zip::<$n, $t>(tg, or, fr, to, |a, b| a + b),
            AccOp::Prod => zip::<$n, $t>(tg, or, fr, to, |a, b| a * b),
            AccOp::Min => zip::<$n, $t>(tg, or, fr, to, |a, b| a.min(b)),
            AccOp::Max => zip::<$n, $t>(tg, or, fr, to, |a, b| a.max(b)),
            AccOp::Land => zip::<$n, $t>(tg, or, fr, to, |a, b| {
                ((a != 0.0) && (b != 0.0)) as u8 as $t
            }),
            AccOp::Lor => zip::<$n, $t>(tg, or, fr, to, |a, b| {
                ((a != 0.0) || (b != 0.0)) as u8 as $t
            }),
            AccOp::Lxor => zip::<$n, $t>(tg, or, fr, to, |a, b| {
                ((a != 0.0) != (b != 0.0)) as u8 as $t
            }),
            // NO_OP, and bitwise ops that `op_valid` refuses: leave the target.
            _ => {}
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
        ElemType::Byte => int_ops!(u8, 1, op, target, origin),
        ElemType::I32 => int_ops!(i32, 4, op, target, origin),
        ElemType::I64 => int_ops!(i64, 8, op, target, origin),
        ElemType::U32 => int_ops!(u32, 4, op, target, origin),
        ElemType::U64 => int_ops!(u64, 8, op, target, origin),
        ElemType::F32 => float_ops!(f32, 4, op, target, origin),
        ElemType::F64 => float_ops!(f64, 8, op, target, origin),
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
