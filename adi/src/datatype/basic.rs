//! The predefined element types ([`BasicType`]): their sizes, extents,
//! alignments and data pieces, with the layouts of x86-64 Linux (LP64,
//! the System V ABI), which is what MPICH's `mpi.h` describes there.

/// The predefined element types.
///
/// One variant per machine representation: C names with the same
/// representation (`MPI_INT` and `MPI_INT32_T`, `MPI_LONG` and
/// `MPI_INT64_T`) share a variant, and a binding keeps their names. The
/// pair types of `MPI_MINLOC`/`MPI_MAXLOC` (`MPI_DOUBLE_INT`, ...) are
/// predefined too: a value and an `int` index, with C's padding between
/// and after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BasicType {
    /// `MPI_INT8_T` (`MPI_SIGNED_CHAR`).
    I8,
    /// `MPI_INT16_T` (`MPI_SHORT`).
    I16,
    /// `MPI_INT32_T` (`MPI_INT`).
    I32,
    /// `MPI_INT64_T` (`MPI_LONG`, `MPI_LONG_LONG`, `MPI_AINT`, ...).
    I64,
    /// `MPI_UINT8_T` (`MPI_UNSIGNED_CHAR`).
    U8,
    /// `MPI_UINT16_T` (`MPI_UNSIGNED_SHORT`).
    U16,
    /// `MPI_UINT32_T` (`MPI_UNSIGNED`).
    U32,
    /// `MPI_UINT64_T` (`MPI_UNSIGNED_LONG`, ...).
    U64,
    /// `MPI_FLOAT`.
    F32,
    /// `MPI_DOUBLE`.
    F64,
    /// `MPI_BYTE`: uninterpreted bytes (also `MPI_PACKED`).
    Byte,
    /// `MPI_CHAR`.
    Char,
    /// `MPI_WCHAR` (`wchar_t`: 4 bytes).
    WChar,
    /// `MPI_C_BOOL` (`_Bool`: 1 byte).
    Bool,
    /// `MPI_LONG_DOUBLE` (x87 extended precision in 16 bytes).
    LongDouble,
    /// `MPI_C_FLOAT_COMPLEX`.
    ComplexF32,
    /// `MPI_C_DOUBLE_COMPLEX`.
    ComplexF64,
    /// `MPI_C_LONG_DOUBLE_COMPLEX`.
    ComplexLongDouble,
    /// `MPI_FLOAT_INT`: `struct { float; int; }`.
    FloatInt,
    /// `MPI_DOUBLE_INT`: `struct { double; int; }` (size 12, extent 16).
    DoubleInt,
    /// `MPI_LONG_INT`: `struct { long; int; }` (size 12, extent 16).
    LongInt,
    /// `MPI_SHORT_INT`: `struct { short; int; }` (size 6, extent 8).
    ShortInt,
    /// `MPI_2INT`: `struct { int; int; }`.
    TwoInt,
    /// `MPI_LONG_DOUBLE_INT`: `struct { long double; int; }` (size 20,
    /// extent 32).
    LongDoubleInt,
    /// `MPI_2REAL`: two `float`s (value and index).
    TwoF32,
    /// `MPI_2DOUBLE_PRECISION`: two `double`s (value and index).
    TwoF64,
}

impl BasicType {
    /// Every predefined type.
    pub const ALL: [BasicType; 26] = {
        use BasicType::*;
        [
            I8,
            I16,
            I32,
            I64,
            U8,
            U16,
            U32,
            U64,
            F32,
            F64,
            Byte,
            Char,
            WChar,
            Bool,
            LongDouble,
            ComplexF32,
            ComplexF64,
            ComplexLongDouble,
            FloatInt,
            DoubleInt,
            LongInt,
            ShortInt,
            TwoInt,
            LongDoubleInt,
            TwoF32,
            TwoF64,
        ]
    };

    /// Bytes of data (`MPI_Type_size`): the padding of a pair type is not
    /// data.
    pub const fn size(self) -> usize {
        use BasicType::*;
        match self {
            I8 | U8 | Byte | Char | Bool => 1,
            I16 | U16 => 2,
            I32 | U32 | F32 | WChar => 4,
            I64 | U64 | F64 | ComplexF32 | FloatInt | TwoInt | TwoF32 => 8,
            ShortInt => 6,
            DoubleInt | LongInt => 12,
            LongDouble | ComplexF64 | TwoF64 => 16,
            LongDoubleInt => 20,
            ComplexLongDouble => 32,
        }
    }

    /// The distance between consecutive elements (`sizeof` in C): the
    /// size plus trailing padding.
    pub const fn extent(self) -> usize {
        use BasicType::*;
        match self {
            ShortInt => 8,
            DoubleInt | LongInt => 16,
            LongDoubleInt => 32,
            t => t.size(),
        }
    }

    /// Alignment used for struct padding (`_Alignof` in C).
    pub const fn align(self) -> usize {
        use BasicType::*;
        match self {
            ComplexF32 | FloatInt | TwoInt | ShortInt | TwoF32 => 4,
            ComplexF64 | DoubleInt | LongInt | TwoF64 => 8,
            LongDouble | ComplexLongDouble | LongDoubleInt => 16,
            t => t.size(),
        }
    }

    /// The data pieces of one element as `(displacement, length)`, in
    /// order: one for a plain type, the value and the index of a pair.
    pub const fn parts(self) -> &'static [(usize, usize)] {
        use BasicType::*;
        match self {
            FloatInt | TwoInt | TwoF32 => &[(0, 4), (4, 4)],
            DoubleInt | LongInt => &[(0, 8), (8, 4)],
            ShortInt => &[(0, 2), (4, 4)],
            LongDoubleInt => &[(0, 16), (16, 4)],
            TwoF64 => &[(0, 8), (8, 8)],
            I8 | U8 | Byte | Char | Bool => &[(0, 1)],
            I16 | U16 => &[(0, 2)],
            I32 | U32 | F32 | WChar => &[(0, 4)],
            I64 | U64 | F64 | ComplexF32 => &[(0, 8)],
            LongDouble | ComplexF64 => &[(0, 16)],
            ComplexLongDouble => &[(0, 32)],
        }
    }

    /// Whether this is a pair type (value and index, for
    /// `MPI_MINLOC`/`MPI_MAXLOC`).
    pub const fn is_pair(self) -> bool {
        use BasicType::*;
        matches!(
            self,
            FloatInt | DoubleInt | LongInt | ShortInt | TwoInt | LongDoubleInt | TwoF32 | TwoF64
        )
    }

    /// The MPI name, for example `"MPI_INT32_T"`.
    pub const fn name(self) -> &'static str {
        use BasicType::*;
        match self {
            I8 => "MPI_INT8_T",
            I16 => "MPI_INT16_T",
            I32 => "MPI_INT32_T",
            I64 => "MPI_INT64_T",
            U8 => "MPI_UINT8_T",
            U16 => "MPI_UINT16_T",
            U32 => "MPI_UINT32_T",
            U64 => "MPI_UINT64_T",
            F32 => "MPI_FLOAT",
            F64 => "MPI_DOUBLE",
            Byte => "MPI_BYTE",
            Char => "MPI_CHAR",
            WChar => "MPI_WCHAR",
            Bool => "MPI_C_BOOL",
            LongDouble => "MPI_LONG_DOUBLE",
            ComplexF32 => "MPI_C_FLOAT_COMPLEX",
            ComplexF64 => "MPI_C_DOUBLE_COMPLEX",
            ComplexLongDouble => "MPI_C_LONG_DOUBLE_COMPLEX",
            FloatInt => "MPI_FLOAT_INT",
            DoubleInt => "MPI_DOUBLE_INT",
            LongInt => "MPI_LONG_INT",
            ShortInt => "MPI_SHORT_INT",
            TwoInt => "MPI_2INT",
            LongDoubleInt => "MPI_LONG_DOUBLE_INT",
            TwoF32 => "MPI_2REAL",
            TwoF64 => "MPI_2DOUBLE_PRECISION",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BasicType;

    #[test]
    fn layouts_are_consistent() {
        for t in BasicType::ALL {
            let parts = t.parts();
            let data: usize = parts.iter().map(|p| p.1).sum();
            assert_eq!(data, t.size(), "{t:?}");
            let end = parts.last().map_or(0, |p| p.0 + p.1);
            assert!(end <= t.extent(), "{t:?}");
            assert_eq!(t.extent() % t.align(), 0, "{t:?}");
            assert_eq!(t.is_pair(), parts.len() == 2, "{t:?}");
            for w in parts.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "{t:?}");
            }
        }
    }

    #[test]
    fn pairs_match_c_struct_layouts() {
        // struct { short s; int i; }: int at 4, size 8.
        assert_eq!(
            (BasicType::ShortInt.parts(), BasicType::ShortInt.extent()),
            (&[(0, 2), (4, 4)][..], 8)
        );
        // struct { double d; int i; }: 12 bytes of data, sizeof 16.
        assert_eq!(
            (BasicType::DoubleInt.size(), BasicType::DoubleInt.extent()),
            (12, 16)
        );
        assert_eq!(
            (
                BasicType::LongDoubleInt.size(),
                BasicType::LongDoubleInt.extent()
            ),
            (20, 32)
        );
    }
}
