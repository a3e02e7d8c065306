//! Reduction operations ([`Op`], `MPI_Op`) on packed data: every
//! predefined operation on every predefined type it is defined for, and
//! user-defined operations, commutative or not.
//!
//! Data are *packed* elements ([`Datatype::pack`]'s format): a reduction
//! of a derived type built from one predefined type works on the
//! sequence of its basic elements ([`Datatype::reduce_basic`]).
//! [`reduce_local`] computes `inout[i] = input[i] op inout[i]`, with
//! `input` the left operand, as `MPI_Reduce_local` does.
//!
//! | operations | types |
//! |---|---|
//! | `MAX`, `MIN` | integers (C, fixed width, `MPI_CHAR`), floating point (`long double` through `double`) |
//! | `SUM`, `PROD` | integers, floating point, complex |
//! | `LAND`, `LOR`, `LXOR` | integers, `MPI_C_BOOL` |
//! | `BAND`, `BOR`, `BXOR` | integers, `MPI_BYTE` |
//! | `MINLOC`, `MAXLOC` | the pair types (`MPI_DOUBLE_INT`, `MPI_2INT`, ...) |
//! | `REPLACE`, `NO_OP` | any (one-sided accumulate only; refused by the collectives) |
//!
//! Anything else is [`Error::InvalidOp`] (`MPI_ERR_OP`). `long double`
//! (x87 extended precision) is computed in `double` precision.

use crate::datatype::BasicType;
use crate::{Datatype, Error, ReduceOp};
use std::sync::Arc;

/// A user-defined reduction on packed bytes: `f(input, inout)` with both
/// slices holding the same whole number of elements, computing
/// `inout = input op inout` element-wise.
pub type UserFn = dyn Fn(&[u8], &mut [u8]) -> Result<(), Error> + Send + Sync;

/// A reduction operation (`MPI_Op`).
#[derive(Clone)]
#[non_exhaustive]
pub enum Op {
    /// `MPI_MAX`.
    Max,
    /// `MPI_MIN`.
    Min,
    /// `MPI_SUM`.
    Sum,
    /// `MPI_PROD`.
    Prod,
    /// `MPI_LAND`.
    Land,
    /// `MPI_BAND`.
    Band,
    /// `MPI_LOR`.
    Lor,
    /// `MPI_BOR`.
    Bor,
    /// `MPI_LXOR`.
    Lxor,
    /// `MPI_BXOR`.
    Bxor,
    /// `MPI_MINLOC`.
    MinLoc,
    /// `MPI_MAXLOC`.
    MaxLoc,
    /// `MPI_REPLACE` (one-sided accumulate).
    Replace,
    /// `MPI_NO_OP` (one-sided accumulate).
    NoOp,
    /// A user-defined operation (`MPI_Op_create`).
    User {
        /// The function.
        f: Arc<UserFn>,
        /// Whether it is commutative (it is always associative).
        commutative: bool,
    },
}

impl core::fmt::Debug for Op {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Op::User { commutative, .. } => f
                .debug_struct("User")
                .field("commutative", commutative)
                .finish_non_exhaustive(),
            o => f.write_str(o.name()),
        }
    }
}

impl From<ReduceOp> for Op {
    fn from(op: ReduceOp) -> Op {
        match op {
            ReduceOp::Sum => Op::Sum,
            ReduceOp::Prod => Op::Prod,
            ReduceOp::Min => Op::Min,
            ReduceOp::Max => Op::Max,
            ReduceOp::BitAnd => Op::Band,
            ReduceOp::BitOr => Op::Bor,
            ReduceOp::BitXor => Op::Bxor,
        }
    }
}

impl Op {
    /// A user-defined operation.
    pub fn user(
        f: impl Fn(&[u8], &mut [u8]) -> Result<(), Error> + Send + Sync + 'static,
        commutative: bool,
    ) -> Op {
        Op::User {
            f: Arc::new(f),
            commutative,
        }
    }

    /// The C name (`"MPI_SUM"`; `"user"` for a user-defined operation).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Max => "MPI_MAX",
            Op::Min => "MPI_MIN",
            Op::Sum => "MPI_SUM",
            Op::Prod => "MPI_PROD",
            Op::Land => "MPI_LAND",
            Op::Band => "MPI_BAND",
            Op::Lor => "MPI_LOR",
            Op::Bor => "MPI_BOR",
            Op::Lxor => "MPI_LXOR",
            Op::Bxor => "MPI_BXOR",
            Op::MinLoc => "MPI_MINLOC",
            Op::MaxLoc => "MPI_MAXLOC",
            Op::Replace => "MPI_REPLACE",
            Op::NoOp => "MPI_NO_OP",
            Op::User { .. } => "user",
        }
    }

    /// `MPI_Op_commutative`: every predefined operation is commutative.
    pub fn is_commutative(&self) -> bool {
        match self {
            Op::User { commutative, .. } => *commutative,
            _ => true,
        }
    }

    /// Whether the collectives accept it (not `REPLACE`/`NO_OP`).
    pub(crate) fn for_collectives(&self) -> Result<(), Error> {
        match self {
            Op::Replace | Op::NoOp => Err(Error::InvalidOp {
                op: self.name(),
                ty: "a collective reduction",
            }),
            _ => Ok(()),
        }
    }

    /// Checks that this operation is defined for `ty` (without data: a
    /// look-up, no kernel run; a user-defined operation, `REPLACE` and
    /// `NO_OP` take any type).
    pub fn check(&self, ty: &Datatype) -> Result<(), Error> {
        if matches!(self, Op::User { .. } | Op::NoOp | Op::Replace) {
            return Ok(());
        }
        match ty.reduce_basic() {
            Some(b) if defined(self, b) => Ok(()),
            b => Err(Error::InvalidOp {
                op: self.name(),
                ty: b.map_or("a mixed datatype", BasicType::name),
            }),
        }
    }
}

/// Whether [`kernel`] has predefined operation `op` for basic type `b`
/// in [`Form::Right`] (the table of the module's documentation).
fn defined(op: &Op, b: BasicType) -> bool {
    use BasicType as B;
    let arith = matches!(op, Op::Max | Op::Min | Op::Sum | Op::Prod);
    let logical = matches!(op, Op::Land | Op::Lor | Op::Lxor);
    let bitwise = matches!(op, Op::Band | Op::Bor | Op::Bxor);
    match b {
        B::I8 | B::Char | B::U8 | B::I16 | B::U16 | B::I32 | B::U32 | B::I64 | B::U64 => {
            arith || logical || bitwise
        }
        B::Byte => bitwise,
        B::Bool => logical,
        B::F32 | B::F64 | B::LongDouble => arith,
        B::ComplexF32 | B::ComplexF64 | B::ComplexLongDouble => {
            matches!(op, Op::Sum | Op::Prod)
        }
        pair if pair.is_pair() => matches!(op, Op::MaxLoc | Op::MinLoc),
        _ => false,
    }
}

/// `MPI_Reduce_local` on packed data: `inout = input op inout` for each
/// element (`input` is the left operand). Both slices hold the same
/// whole number of elements of `ty`.
pub fn reduce_local(op: &Op, ty: &Datatype, input: &[u8], inout: &mut [u8]) -> Result<(), Error> {
    if input.len() != inout.len() {
        return Err(Error::Truncated {
            need: inout.len(),
            have: input.len(),
        });
    }
    match op {
        Op::User { f, .. } => return f(input, inout),
        Op::NoOp => return Ok(()),
        Op::Replace => {
            inout.copy_from_slice(input);
            return Ok(());
        }
        _ => {}
    }
    let bad = || Error::InvalidOp {
        op: op.name(),
        ty: ty
            .reduce_basic()
            .map_or("a mixed datatype", BasicType::name),
    };
    let b = ty.reduce_basic().ok_or_else(bad)?;
    if input.len() % b.size() != 0 {
        return Err(Error::Truncated {
            need: input.len().next_multiple_of(b.size()),
            have: input.len(),
        });
    }
    if kernel(op, b, input, inout, Form::Right) {
        Ok(())
    } else {
        Err(bad())
    }
}

/// `left = left op right` element-wise on packed data (`left` is the
/// left operand and receives the result), for the predefined operations
/// on the basic types: `Ok(false)` (nothing done) for user operations and
/// the pair types, which only [`reduce_local`]'s form has. Both slices
/// hold the same whole number of elements of `ty`, whose operation
/// [`Op::check`] accepted.
pub(crate) fn reduce_into_left(
    op: &Op,
    ty: &Datatype,
    left: &mut [u8],
    right: &[u8],
) -> Result<bool, Error> {
    if left.len() != right.len() {
        return Err(Error::Truncated {
            need: left.len(),
            have: right.len(),
        });
    }
    let Some(b) = ty.reduce_basic() else {
        return Ok(false);
    };
    if matches!(op, Op::User { .. } | Op::NoOp | Op::Replace)
        || b.is_pair()
        || left.len() % b.size() != 0
    {
        return Ok(false);
    }
    Ok(kernel(op, b, right, left, Form::Left))
}

/// Whether [`reduce_into_left`] computes `op` on whole elements of `ty`
/// (a predefined operation on one basic type, not a pair type) rather
/// than answering `Ok(false)`; for data whose length is a whole number of
/// `ty`'s elements.
pub(crate) fn into_left_ok(op: &Op, ty: &Datatype) -> bool {
    !matches!(op, Op::User { .. } | Op::NoOp | Op::Replace)
        && ty.reduce_basic().is_some_and(|b| !b.is_pair())
}

/// How a kernel combines its operands (`a op b`: `a` is the left one).
#[derive(Clone, Copy)]
enum Form<'a> {
    /// `inout = input op inout`.
    Right,
    /// `inout = inout op input`.
    Left,
    /// `inout = input op right` (`inout` only written).
    Into(&'a [u8]),
}

/// `out = left op right` element-wise on packed data, `out` only written
/// (neither operand is changed), for the predefined operations on the
/// basic types: `Ok(false)` (nothing done) for user operations and the
/// pair types. The three slices hold the same whole number of elements of
/// `ty`, whose operation [`Op::check`] accepted.
pub(crate) fn reduce_to(
    op: &Op,
    ty: &Datatype,
    left: &[u8],
    right: &[u8],
    out: &mut [u8],
) -> Result<bool, Error> {
    if left.len() != out.len() || right.len() != out.len() {
        return Err(Error::Truncated {
            need: out.len(),
            have: left.len().min(right.len()),
        });
    }
    let Some(b) = ty.reduce_basic() else {
        return Ok(false);
    };
    if matches!(op, Op::User { .. } | Op::NoOp | Op::Replace)
        || b.is_pair()
        || out.len() % b.size() != 0
    {
        return Ok(false);
    }
    Ok(kernel(op, b, left, out, Form::Into(right)))
}

/// Applies element-wise `f(a, b) -> a op b` to `N`-byte elements in the
/// given form. The loop is monomorphised per kernel (`f` is a closure,
/// not a pointer).
#[inline(always)]
fn each<const N: usize>(
    input: &[u8],
    inout: &mut [u8],
    form: Form<'_>,
    f: impl Fn([u8; N], [u8; N]) -> [u8; N],
) {
    let load = |a: &[u8]| {
        let mut x = [0u8; N];
        x.copy_from_slice(a);
        x
    };
    let one = inout.len() == N
        && input.len() == N
        && match form {
            Form::Into(right) => right.len() == N,
            _ => true,
        };
    if one {
        // One element (an 8-byte allreduce): no iterator set-up.
        let (x, y) = (load(input), load(inout));
        let r = match form {
            Form::Right => f(x, y),
            Form::Left => f(y, x),
            Form::Into(right) => f(x, load(right)),
        };
        inout.copy_from_slice(&r);
        return;
    }
    match form {
        Form::Right => {
            for (a, b) in input.chunks_exact(N).zip(inout.chunks_exact_mut(N)) {
                let (x, y) = (load(a), load(b));
                b.copy_from_slice(&f(x, y));
            }
        }
        Form::Left => {
            for (a, b) in input.chunks_exact(N).zip(inout.chunks_exact_mut(N)) {
                let (x, y) = (load(a), load(b));
                b.copy_from_slice(&f(y, x));
            }
        }
        Form::Into(right) => {
            let pairs = input.chunks_exact(N).zip(right.chunks_exact(N));
            for ((a, r), b) in pairs.zip(inout.chunks_exact_mut(N)) {
                b.copy_from_slice(&f(load(a), load(r)));
            }
        }
    }
}

macro_rules! int_kernel {
    ($t:ty, $op:expr, $input:expr, $inout:expr, $form:expr) => {{
        const N: usize = core::mem::size_of::<$t>();
        macro_rules! k {
            (|$a:ident, $b:ident| $e:expr) => {{
                each::<N>($input, $inout, $form, |x, y| {
                    let ($a, $b) = (<$t>::from_ne_bytes(x), <$t>::from_ne_bytes(y));
                    <$t>::to_ne_bytes($e)
                });
                true
            }};
        }
        match $op {
            Op::Max => k!(|a, b| if b > a { b } else { a }),
            Op::Min => k!(|a, b| if b < a { b } else { a }),
            Op::Sum => k!(|a, b| a.wrapping_add(b)),
            Op::Prod => k!(|a, b| a.wrapping_mul(b)),
            Op::Land => k!(|a, b| <$t>::from((a != 0) && (b != 0))),
            Op::Lor => k!(|a, b| <$t>::from((a != 0) || (b != 0))),
            Op::Lxor => k!(|a, b| <$t>::from((a != 0) != (b != 0))),
            Op::Band => k!(|a, b| a & b),
            Op::Bor => k!(|a, b| a | b),
            Op::Bxor => k!(|a, b| a ^ b),
            _ => false,
        }
    }};
}

/// `MAX`/`MIN`/`SUM`/`PROD` on a float type via `f64` conversions.
fn float_op(op: &Op) -> Option<fn(f64, f64) -> f64> {
    match op {
        // As MPICH: `inout = (inout > in) ? inout : in`.
        Op::Max => Some(|a, b| if b > a { b } else { a }),
        Op::Min => Some(|a, b| if b < a { b } else { a }),
        Op::Sum => Some(|a, b| a + b),
        Op::Prod => Some(|a, b| a * b),
        _ => None,
    }
}

/// A complex number as `(re, im)`.
type Complex = (f64, f64);

/// `(re, im)` products and sums.
fn complex_op(op: &Op) -> Option<fn(Complex, Complex) -> Complex> {
    match op {
        Op::Sum => Some(|a, b| (a.0 + b.0, a.1 + b.1)),
        Op::Prod => Some(|a, b| (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)),
        _ => None,
    }
}

/// `MINLOC`/`MAXLOC` of `(value, index)` pairs: the better value, and on
/// a tie the smaller index.
fn loc<V: PartialOrd + Copy, I: PartialOrd + Copy>(max: bool, a: (V, I), b: (V, I)) -> (V, I) {
    let better = if max { a.0 > b.0 } else { a.0 < b.0 };
    if better {
        a
    } else if a.0 == b.0 {
        (b.0, if a.1 < b.1 { a.1 } else { b.1 })
    } else {
        b
    }
}

fn f32_at(b: &[u8]) -> f32 {
    f32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}
fn f64_at(b: &[u8]) -> f64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    f64::from_ne_bytes(a)
}
fn i32_at(b: &[u8]) -> i32 {
    i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

/// The operation's kernel for basic type `b` in the given form; `false`
/// if undefined (the pair types: only in `Form::Right`).
fn kernel(op: &Op, b: BasicType, input: &[u8], inout: &mut [u8], form: Form<'_>) -> bool {
    use BasicType as B;
    match b {
        B::I8 | B::Char => int_kernel!(i8, op, input, inout, form),
        B::U8 => int_kernel!(u8, op, input, inout, form),
        B::I16 => int_kernel!(i16, op, input, inout, form),
        B::U16 => int_kernel!(u16, op, input, inout, form),
        B::I32 => int_kernel!(i32, op, input, inout, form),
        B::U32 => int_kernel!(u32, op, input, inout, form),
        B::I64 => int_kernel!(i64, op, input, inout, form),
        B::U64 => int_kernel!(u64, op, input, inout, form),
        B::Byte => match op {
            Op::Band | Op::Bor | Op::Bxor => int_kernel!(u8, op, input, inout, form),
            _ => false,
        },
        B::Bool => match op {
            Op::Land | Op::Lor | Op::Lxor => int_kernel!(u8, op, input, inout, form),
            _ => false,
        },
        B::F32 => float_op(op).is_some_and(|g| {
            each::<4>(input, inout, form, |a, b| {
                (g(f32::from_ne_bytes(a) as f64, f32::from_ne_bytes(b) as f64) as f32).to_ne_bytes()
            });
            true
        }),
        B::F64 => match op {
            // Exact in f64 itself; no conversion needed.
            Op::Sum => {
                each::<8>(input, inout, form, |a, b| {
                    (f64::from_ne_bytes(a) + f64::from_ne_bytes(b)).to_ne_bytes()
                });
                true
            }
            _ => float_op(op).is_some_and(|g| {
                each::<8>(input, inout, form, |a, b| {
                    g(f64::from_ne_bytes(a), f64::from_ne_bytes(b)).to_ne_bytes()
                });
                true
            }),
        },
        B::LongDouble => float_op(op).is_some_and(|g| {
            each::<16>(input, inout, form, |a, b| {
                f64_to_f80(g(f80_to_f64(&a), f80_to_f64(&b)))
            });
            true
        }),
        B::ComplexF32 => complex_op(op).is_some_and(|g| {
            each::<8>(input, inout, form, |a, b| {
                let (re, im) = g(
                    (f32_at(&a[..4]) as f64, f32_at(&a[4..]) as f64),
                    (f32_at(&b[..4]) as f64, f32_at(&b[4..]) as f64),
                );
                let mut out = [0u8; 8];
                out[..4].copy_from_slice(&(re as f32).to_ne_bytes());
                out[4..].copy_from_slice(&(im as f32).to_ne_bytes());
                out
            });
            true
        }),
        B::ComplexF64 => complex_op(op).is_some_and(|g| {
            each::<16>(input, inout, form, |a, b| {
                let (re, im) = g(
                    (f64_at(&a[..8]), f64_at(&a[8..])),
                    (f64_at(&b[..8]), f64_at(&b[8..])),
                );
                let mut out = [0u8; 16];
                out[..8].copy_from_slice(&re.to_ne_bytes());
                out[8..].copy_from_slice(&im.to_ne_bytes());
                out
            });
            true
        }),
        B::ComplexLongDouble => complex_op(op).is_some_and(|g| {
            each::<32>(input, inout, form, |a, b| {
                let (re, im) = g(
                    (f80_to_f64(&a[..16]), f80_to_f64(&a[16..])),
                    (f80_to_f64(&b[..16]), f80_to_f64(&b[16..])),
                );
                let mut out = [0u8; 32];
                out[..16].copy_from_slice(&f64_to_f80(re));
                out[16..].copy_from_slice(&f64_to_f80(im));
                out
            });
            true
        }),
        pair if pair.is_pair() && matches!(form, Form::Right) => {
            let max = match op {
                Op::MaxLoc => true,
                Op::MinLoc => false,
                _ => return false,
            };
            pair_kernel(max, pair, input, inout)
        }
        _ => false,
    }
}

/// `MINLOC`/`MAXLOC` on packed pairs (value bytes, then index bytes).
fn pair_kernel(max: bool, b: BasicType, input: &[u8], inout: &mut [u8]) -> bool {
    use BasicType as B;
    let n = b.size();
    for (a, o) in input.chunks_exact(n).zip(inout.chunks_exact_mut(n)) {
        match b {
            B::FloatInt => {
                let r = loc(
                    max,
                    (f32_at(a), i32_at(&a[4..])),
                    (f32_at(o), i32_at(&o[4..])),
                );
                o[..4].copy_from_slice(&r.0.to_ne_bytes());
                o[4..8].copy_from_slice(&r.1.to_ne_bytes());
            }
            B::DoubleInt => {
                let r = loc(
                    max,
                    (f64_at(a), i32_at(&a[8..])),
                    (f64_at(o), i32_at(&o[8..])),
                );
                o[..8].copy_from_slice(&r.0.to_ne_bytes());
                o[8..12].copy_from_slice(&r.1.to_ne_bytes());
            }
            B::LongInt => {
                let v = |x: &[u8]| i64::from_ne_bytes(x[..8].try_into().unwrap_or([0; 8]));
                let r = loc(max, (v(a), i32_at(&a[8..])), (v(o), i32_at(&o[8..])));
                o[..8].copy_from_slice(&r.0.to_ne_bytes());
                o[8..12].copy_from_slice(&r.1.to_ne_bytes());
            }
            B::ShortInt => {
                let v = |x: &[u8]| i16::from_ne_bytes([x[0], x[1]]);
                let r = loc(max, (v(a), i32_at(&a[2..])), (v(o), i32_at(&o[2..])));
                o[..2].copy_from_slice(&r.0.to_ne_bytes());
                o[2..6].copy_from_slice(&r.1.to_ne_bytes());
            }
            B::TwoInt => {
                let r = loc(
                    max,
                    (i32_at(a), i32_at(&a[4..])),
                    (i32_at(o), i32_at(&o[4..])),
                );
                o[..4].copy_from_slice(&r.0.to_ne_bytes());
                o[4..8].copy_from_slice(&r.1.to_ne_bytes());
            }
            B::LongDoubleInt => {
                let (va, vo) = (f80_to_f64(&a[..16]), f80_to_f64(&o[..16]));
                let (ia, io) = (i32_at(&a[16..]), i32_at(&o[16..]));
                let better = if max { va > vo } else { va < vo };
                if better {
                    // The winner's exact bytes, not a rounded copy.
                    o[..16].copy_from_slice(&a[..16]);
                    o[16..20].copy_from_slice(&ia.to_ne_bytes());
                } else if va == vo {
                    o[16..20].copy_from_slice(&ia.min(io).to_ne_bytes());
                }
            }
            B::TwoF32 => {
                let r = loc(
                    max,
                    (f32_at(a), f32_at(&a[4..])),
                    (f32_at(o), f32_at(&o[4..])),
                );
                o[..4].copy_from_slice(&r.0.to_ne_bytes());
                o[4..8].copy_from_slice(&r.1.to_ne_bytes());
            }
            B::TwoF64 => {
                let r = loc(
                    max,
                    (f64_at(a), f64_at(&a[8..])),
                    (f64_at(o), f64_at(&o[8..])),
                );
                o[..8].copy_from_slice(&r.0.to_ne_bytes());
                o[8..16].copy_from_slice(&r.1.to_ne_bytes());
            }
            _ => return false,
        }
    }
    true
}

/// An x87 80-bit extended value (16 bytes of storage, little-endian) as
/// `f64` (rounded).
pub(crate) fn f80_to_f64(b: &[u8]) -> f64 {
    let mut m = [0u8; 8];
    m.copy_from_slice(&b[..8]);
    let mant = u64::from_le_bytes(m);
    let se = u16::from_le_bytes([b[8], b[9]]);
    let sign = if se & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = (se & 0x7fff) as i32;
    if exp == 0 && mant == 0 {
        return sign * 0.0;
    }
    if exp == 0x7fff {
        return if mant << 1 == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    // value = mant * 2^(exp - 16383 - 63), split to avoid overflow in powi.
    let e = exp - 16383 - 63;
    let v = mant as f64;
    let half = e / 2;
    sign * v * 2f64.powi(half) * 2f64.powi(e - half)
}

/// `f64` as an x87 80-bit extended value in 16 bytes (exact).
pub(crate) fn f64_to_f80(v: f64) -> [u8; 16] {
    let mut out = [0u8; 16];
    let bits = v.to_bits();
    let sign: u16 = if bits >> 63 != 0 { 0x8000 } else { 0 };
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (mant, e80): (u64, u16) = if exp == 0 && frac == 0 {
        (0, 0)
    } else if exp == 0x7ff {
        (
            if frac == 0 {
                1 << 63
            } else {
                (1 << 63) | (1 << 62)
            },
            0x7fff,
        )
    } else if exp == 0 {
        // Subnormal: normalize.
        let shift = frac.leading_zeros() as i32; // >= 12
        let m = frac << shift;
        let e = -1022 - (shift - 11) + 16383;
        (m, e as u16)
    } else {
        ((frac | (1 << 52)) << 11, (exp - 1023 + 16383) as u16)
    };
    out[..8].copy_from_slice(&mant.to_le_bytes());
    out[8..10].copy_from_slice(&(e80 | sign).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(b: BasicType) -> Datatype {
        Datatype::basic(b)
    }

    fn ints(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn integer_ops() {
        let t = dt(BasicType::I32);
        let mut io = ints(&[5, -1, 0, 7]);
        reduce_local(&Op::Sum, &t, &ints(&[1, 2, 3, 4]), &mut io).unwrap();
        assert_eq!(io, ints(&[6, 1, 3, 11]));
        reduce_local(&Op::Max, &t, &ints(&[9, 0, 0, 0]), &mut io).unwrap();
        assert_eq!(io, ints(&[9, 1, 3, 11]));
        reduce_local(&Op::Land, &t, &ints(&[1, 0, 5, 2]), &mut io).unwrap();
        assert_eq!(io, ints(&[1, 0, 1, 1]));
        reduce_local(&Op::Bxor, &t, &ints(&[3, 3, 3, 3]), &mut io).unwrap();
        assert_eq!(io, ints(&[2, 3, 2, 2]));
    }

    #[test]
    fn undefined_combinations_are_op_errors() {
        let mut io = 1.0f64.to_ne_bytes().to_vec();
        let e = reduce_local(&Op::Band, &dt(BasicType::F64), &io.clone(), &mut io).unwrap_err();
        assert_eq!(e.class(), crate::ErrorClass::Op);
        let mut b = vec![1u8];
        assert!(reduce_local(&Op::Sum, &dt(BasicType::Byte), &[1], &mut b).is_err());
        assert!(reduce_local(&Op::Bor, &dt(BasicType::Byte), &[2], &mut b).is_ok());
        assert_eq!(b, [3]);
        assert!(Op::MaxLoc.check(&dt(BasicType::I32)).is_err());
        assert!(Op::MaxLoc.check(&dt(BasicType::DoubleInt)).is_ok());
    }

    #[test]
    fn check_agrees_with_the_kernels() {
        let ops = [
            Op::Max,
            Op::Min,
            Op::Sum,
            Op::Prod,
            Op::Land,
            Op::Band,
            Op::Lor,
            Op::Bor,
            Op::Lxor,
            Op::Bxor,
            Op::MinLoc,
            Op::MaxLoc,
        ];
        for b in BasicType::ALL {
            for op in &ops {
                // One element of zeros through the kernel itself.
                let one = vec![0u8; b.size()];
                let mut io = one.clone();
                let ran = reduce_local(op, &dt(b), &one, &mut io).is_ok();
                assert_eq!(op.check(&dt(b)).is_ok(), ran, "{op:?} on {b:?}");
            }
        }
    }

    #[test]
    fn maxloc_takes_the_smaller_index_on_ties() {
        let t = dt(BasicType::TwoInt);
        let mut io = ints(&[5, 3, 7, 1]);
        reduce_local(&Op::MaxLoc, &t, &ints(&[5, 2, 6, 0]), &mut io).unwrap();
        assert_eq!(io, ints(&[5, 2, 7, 1]));
        reduce_local(&Op::MinLoc, &t, &ints(&[1, 9, 7, 0]), &mut io).unwrap();
        assert_eq!(io, ints(&[1, 9, 7, 0]));
    }

    #[test]
    fn complex_product() {
        let t = dt(BasicType::ComplexF64);
        let c = |re: f64, im: f64| [re.to_ne_bytes(), im.to_ne_bytes()].concat();
        let mut io = c(1.0, 2.0);
        reduce_local(&Op::Prod, &t, &c(3.0, -1.0), &mut io).unwrap();
        assert_eq!(io, c(5.0, 5.0));
    }

    #[test]
    fn f80_round_trips_doubles() {
        for v in [
            0.0,
            -0.0,
            1.0,
            -2.5,
            1e300,
            3e-310,
            f64::INFINITY,
            123456.789,
        ] {
            let b = f64_to_f80(v);
            assert_eq!(f80_to_f64(&b).to_bits(), v.to_bits(), "{v}");
        }
        // 1.0 in x87 form: mantissa 0x8000000000000000, exponent 16383.
        let one = f64_to_f80(1.0);
        assert_eq!(&one[..10], &[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f]);
    }

    #[test]
    fn reduce_into_left_and_reduce_to_are_reduce_local_with_the_operands_in_order() {
        // `left = left op right` must equal `reduce_local(left, right)`'s
        // `right`, bit for bit: NaNs and signed zeros tell the operand
        // order apart for MAX/MIN (`inout > in ? inout : in`).
        let floats = [
            1.5f64,
            f64::NAN,
            -0.0,
            0.0,
            -3.0,
            f64::INFINITY,
            2.0,
            f64::NAN,
        ];
        let others = [f64::NAN, 1.0, 0.0, -0.0, -3.0, 7.0, f64::NAN, 2.0];
        let f64s = |v: &[f64]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let f32s = |v: &[f64]| {
            v.iter()
                .flat_map(|&x| (x as f32).to_ne_bytes())
                .collect::<Vec<u8>>()
        };
        let cases: Vec<(BasicType, Vec<u8>, Vec<u8>)> = vec![
            (BasicType::F64, f64s(&floats), f64s(&others)),
            (BasicType::F32, f32s(&floats), f32s(&others)),
            (BasicType::I32, ints(&[5, -1, 0, 7]), ints(&[-5, 3, 0, 9])),
            (BasicType::U8, vec![0, 1, 200, 255], vec![1, 0, 100, 255]),
            (BasicType::ComplexF64, f64s(&floats), f64s(&others)),
        ];
        let ops = [
            Op::Max,
            Op::Min,
            Op::Sum,
            Op::Prod,
            Op::Land,
            Op::Lor,
            Op::Lxor,
            Op::Band,
            Op::Bor,
            Op::Bxor,
        ];
        for (b, left, right) in &cases {
            let t = dt(*b);
            for op in &ops {
                let mut want = right.clone();
                let defined = reduce_local(op, &t, left, &mut want).is_ok();
                let mut got = left.clone();
                let done = reduce_into_left(op, &t, &mut got, right).unwrap();
                assert_eq!(done, defined, "{op:?} on {b:?}");
                let mut out = vec![0xa5; left.len()];
                let done_to = reduce_to(op, &t, left, right, &mut out).unwrap();
                assert_eq!(done_to, defined, "{op:?} on {b:?} (to)");
                if defined {
                    assert_eq!(got, want, "{op:?} on {b:?}");
                    assert_eq!(out, want, "{op:?} on {b:?} (to)");
                }
            }
        }
        // Pair types and user operations: not done (the caller reduces
        // the other way round and copies).
        let pair = dt(BasicType::TwoInt);
        let mut l = ints(&[1, 2]);
        assert!(!reduce_into_left(&Op::MaxLoc, &pair, &mut l, &ints(&[3, 4])).unwrap());
        assert_eq!(l, ints(&[1, 2]));
        let mut o = ints(&[0, 0]);
        assert!(!reduce_to(&Op::MaxLoc, &pair, &l, &ints(&[3, 4]), &mut o).unwrap());
        let user = Op::user(|_, _| Ok(()), false);
        assert!(!reduce_into_left(&user, &dt(BasicType::U8), &mut [1], &[2]).unwrap());
    }

    #[test]
    fn user_ops_see_packed_bytes() {
        let op = Op::user(
            |a, b| {
                for (x, y) in a.iter().zip(b.iter_mut()) {
                    *y = x.wrapping_sub(*y);
                }
                Ok(())
            },
            false,
        );
        assert!(!op.is_commutative());
        let mut io = vec![1u8, 2];
        reduce_local(&op, &dt(BasicType::U8), &[10, 10], &mut io).unwrap();
        assert_eq!(io, [9, 8]);
    }
}
