//! The C types and constants of MPICH's `mpi.h` (4.0.x, as Debian's
//! `libmpich-dev` installs it for x86-64): every value here is what a
//! program compiled against that header passes or expects.
//!
//! Handles are `int`s. MPICH encodes a handle's kind in its top bits:
//! bits 30–31 say builtin (`01`), direct (`10`) or indirect (`11`), bits
//! 26–29 the object kind. Predefined objects keep MPICH's values; objects
//! this library creates get the indirect prefix of their kind with a table
//! index below (see `handles.rs`), so they never collide with a
//! predefined value or a null handle.

#![allow(non_camel_case_types)]

use core::ffi::c_int;

/// `MPI_Comm`.
pub type MPI_Comm = c_int;
/// `MPI_Datatype`.
pub type MPI_Datatype = c_int;
/// `MPI_Group`.
pub type MPI_Group = c_int;
/// `MPI_Request`.
pub type MPI_Request = c_int;
/// `MPI_Message`.
pub type MPI_Message = c_int;
/// `MPI_Op`.
pub type MPI_Op = c_int;
/// `MPI_Errhandler`.
pub type MPI_Errhandler = c_int;
/// `MPI_Info`.
pub type MPI_Info = c_int;
/// `MPI_Win`.
pub type MPI_Win = c_int;
/// `MPI_Aint` (`long`).
pub type MPI_Aint = i64;
/// `MPI_Count` (`long`).
pub type MPI_Count = i64;
/// `MPI_Offset` (`long`).
pub type MPI_Offset = i64;
/// `MPI_Fint` (`int`).
pub type MPI_Fint = c_int;

/// `MPI_Status`: five `int`s. The count (in bytes) is split in
/// `count_lo` and the upper 31 bits of `count_hi_and_cancelled`, whose
/// bit 0 is the cancelled flag (MPICH's `MPIR_STATUS_SET_COUNT`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MPI_Status {
    /// Low 32 bits of the byte count.
    pub count_lo: c_int,
    /// Bits 32.. of the byte count, shifted left by one; bit 0: cancelled.
    pub count_hi_and_cancelled: c_int,
    /// `MPI_SOURCE`.
    pub source: c_int,
    /// `MPI_TAG`.
    pub tag: c_int,
    /// `MPI_ERROR`.
    pub error: c_int,
}

impl MPI_Status {
    /// The byte count.
    pub fn count(&self) -> i64 {
        (((self.count_hi_and_cancelled as u32 >> 1) as i64) << 32) | (self.count_lo as u32 as i64)
    }

    /// Sets the byte count, keeping the cancelled bit.
    pub fn set_count(&mut self, count: i64) {
        self.count_lo = count as u32 as c_int;
        self.count_hi_and_cancelled =
            (self.count_hi_and_cancelled & 1) | (((count >> 32) << 1) as c_int);
    }

    /// Whether the cancelled bit is set.
    pub fn cancelled(&self) -> bool {
        self.count_hi_and_cancelled & 1 != 0
    }

    /// Sets the cancelled bit.
    pub fn set_cancelled(&mut self, flag: bool) {
        self.count_hi_and_cancelled = (self.count_hi_and_cancelled & !1) | c_int::from(flag);
    }
}

// ------------------------------------------------------------ null handles
pub const MPI_COMM_NULL: MPI_Comm = 0x0400_0000;
pub const MPI_OP_NULL: MPI_Op = 0x1800_0000;
pub const MPI_GROUP_NULL: MPI_Group = 0x0800_0000;
pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x0c00_0000;
pub const MPI_REQUEST_NULL: MPI_Request = 0x2c00_0000;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x1400_0000;
pub const MPI_MESSAGE_NULL: MPI_Message = 0x2c00_0000;
pub const MPI_MESSAGE_NO_PROC: MPI_Message = 0x6c00_0000;
pub const MPI_INFO_NULL: MPI_Info = 0x1c00_0000;
pub const MPI_INFO_ENV: MPI_Info = 0x5c00_0001;
pub const MPI_WIN_NULL: MPI_Win = 0x2000_0000;
pub const MPI_KEYVAL_INVALID: c_int = 0x2400_0000;

// ------------------------------------------------------- predefined objects
pub const MPI_COMM_WORLD: MPI_Comm = 0x4400_0000;
pub const MPI_COMM_SELF: MPI_Comm = 0x4400_0001;
pub const MPI_GROUP_EMPTY: MPI_Group = 0x4800_0000;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x5400_0000;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x5400_0001;
pub const MPIR_ERRORS_THROW_EXCEPTIONS: MPI_Errhandler = 0x5400_0002;
pub const MPI_ERRORS_ABORT: MPI_Errhandler = 0x5400_0003;

// ------------------------------------------------------------- operations
pub const MPI_MAX: MPI_Op = 0x5800_0001;
pub const MPI_MIN: MPI_Op = 0x5800_0002;
pub const MPI_SUM: MPI_Op = 0x5800_0003;
pub const MPI_PROD: MPI_Op = 0x5800_0004;
pub const MPI_LAND: MPI_Op = 0x5800_0005;
pub const MPI_BAND: MPI_Op = 0x5800_0006;
pub const MPI_LOR: MPI_Op = 0x5800_0007;
pub const MPI_BOR: MPI_Op = 0x5800_0008;
pub const MPI_LXOR: MPI_Op = 0x5800_0009;
pub const MPI_BXOR: MPI_Op = 0x5800_000a;
pub const MPI_MINLOC: MPI_Op = 0x5800_000b;
pub const MPI_MAXLOC: MPI_Op = 0x5800_000c;
pub const MPI_REPLACE: MPI_Op = 0x5800_000d;
pub const MPI_NO_OP: MPI_Op = 0x5800_000e;

// ------------------------------------------------------------- datatypes
pub const MPI_CHAR: MPI_Datatype = 0x4c00_0101;
pub const MPI_SIGNED_CHAR: MPI_Datatype = 0x4c00_0118;
pub const MPI_UNSIGNED_CHAR: MPI_Datatype = 0x4c00_0102;
pub const MPI_BYTE: MPI_Datatype = 0x4c00_010d;
pub const MPI_WCHAR: MPI_Datatype = 0x4c00_040e;
pub const MPI_SHORT: MPI_Datatype = 0x4c00_0203;
pub const MPI_UNSIGNED_SHORT: MPI_Datatype = 0x4c00_0204;
pub const MPI_INT: MPI_Datatype = 0x4c00_0405;
pub const MPI_UNSIGNED: MPI_Datatype = 0x4c00_0406;
pub const MPI_LONG: MPI_Datatype = 0x4c00_0807;
pub const MPI_UNSIGNED_LONG: MPI_Datatype = 0x4c00_0808;
pub const MPI_FLOAT: MPI_Datatype = 0x4c00_040a;
pub const MPI_DOUBLE: MPI_Datatype = 0x4c00_080b;
pub const MPI_LONG_DOUBLE: MPI_Datatype = 0x4c00_100c;
pub const MPI_LONG_LONG_INT: MPI_Datatype = 0x4c00_0809;
pub const MPI_UNSIGNED_LONG_LONG: MPI_Datatype = 0x4c00_0819;
pub const MPI_PACKED: MPI_Datatype = 0x4c00_010f;
pub const MPI_LB: MPI_Datatype = 0x4c00_0010;
pub const MPI_UB: MPI_Datatype = 0x4c00_0011;
pub const MPI_FLOAT_INT: MPI_Datatype = 0x8c00_0000_u32 as i32;
pub const MPI_DOUBLE_INT: MPI_Datatype = 0x8c00_0001_u32 as i32;
pub const MPI_LONG_INT: MPI_Datatype = 0x8c00_0002_u32 as i32;
pub const MPI_SHORT_INT: MPI_Datatype = 0x8c00_0003_u32 as i32;
pub const MPI_2INT: MPI_Datatype = 0x4c00_0816;
pub const MPI_LONG_DOUBLE_INT: MPI_Datatype = 0x8c00_0004_u32 as i32;
pub const MPI_COMPLEX: MPI_Datatype = 0x4c00_081e;
pub const MPI_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_1022;
pub const MPI_LOGICAL: MPI_Datatype = 0x4c00_041d;
pub const MPI_REAL: MPI_Datatype = 0x4c00_041c;
pub const MPI_DOUBLE_PRECISION: MPI_Datatype = 0x4c00_081f;
pub const MPI_INTEGER: MPI_Datatype = 0x4c00_041b;
pub const MPI_2INTEGER: MPI_Datatype = 0x4c00_0820;
pub const MPI_2REAL: MPI_Datatype = 0x4c00_0821;
pub const MPI_2DOUBLE_PRECISION: MPI_Datatype = 0x4c00_1023;
pub const MPI_CHARACTER: MPI_Datatype = 0x4c00_011a;
pub const MPI_REAL4: MPI_Datatype = 0x4c00_0427;
pub const MPI_REAL8: MPI_Datatype = 0x4c00_0829;
pub const MPI_REAL16: MPI_Datatype = 0x4c00_102b;
pub const MPI_COMPLEX8: MPI_Datatype = 0x4c00_0828;
pub const MPI_COMPLEX16: MPI_Datatype = 0x4c00_102a;
pub const MPI_COMPLEX32: MPI_Datatype = 0x4c00_202c;
pub const MPI_INTEGER1: MPI_Datatype = 0x4c00_012d;
pub const MPI_INTEGER2: MPI_Datatype = 0x4c00_022f;
pub const MPI_INTEGER4: MPI_Datatype = 0x4c00_0430;
pub const MPI_INTEGER8: MPI_Datatype = 0x4c00_0831;
pub const MPI_INT8_T: MPI_Datatype = 0x4c00_0137;
pub const MPI_INT16_T: MPI_Datatype = 0x4c00_0238;
pub const MPI_INT32_T: MPI_Datatype = 0x4c00_0439;
pub const MPI_INT64_T: MPI_Datatype = 0x4c00_083a;
pub const MPI_UINT8_T: MPI_Datatype = 0x4c00_013b;
pub const MPI_UINT16_T: MPI_Datatype = 0x4c00_023c;
pub const MPI_UINT32_T: MPI_Datatype = 0x4c00_043d;
pub const MPI_UINT64_T: MPI_Datatype = 0x4c00_083e;
pub const MPI_C_BOOL: MPI_Datatype = 0x4c00_013f;
pub const MPI_C_FLOAT_COMPLEX: MPI_Datatype = 0x4c00_0840;
pub const MPI_C_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_1041;
pub const MPI_C_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_2042;
pub const MPI_AINT: MPI_Datatype = 0x4c00_0843;
pub const MPI_OFFSET: MPI_Datatype = 0x4c00_0844;
pub const MPI_COUNT: MPI_Datatype = 0x4c00_0845;
pub const MPI_CXX_BOOL: MPI_Datatype = 0x4c00_0133;
pub const MPI_CXX_FLOAT_COMPLEX: MPI_Datatype = 0x4c00_0834;
pub const MPI_CXX_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_1035;
pub const MPI_CXX_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_2036;

// ------------------------------------------------------------- keyvals
pub const MPI_TAG_UB: c_int = 0x6440_0001;
pub const MPI_HOST: c_int = 0x6440_0003;
pub const MPI_IO: c_int = 0x6440_0005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x6440_0007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x6440_0009;
pub const MPI_LASTUSEDCODE: c_int = 0x6440_000b;
pub const MPI_APPNUM: c_int = 0x6440_000d;
pub const MPI_WIN_BASE: c_int = 0x6600_0001;
pub const MPI_WIN_SIZE: c_int = 0x6600_0003;
pub const MPI_WIN_DISP_UNIT: c_int = 0x6600_0005;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 0x6600_0007;
pub const MPI_WIN_MODEL: c_int = 0x6600_0009;

// ------------------------------------------------------------- numbers
pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;
pub const MPI_MAX_PROCESSOR_NAME: usize = 128;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_INFO_KEY: usize = 255;
pub const MPI_MAX_INFO_VAL: usize = 1024;
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_BSEND_OVERHEAD: c_int = 96;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ROOT: c_int = -3;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_LOCK_EXCLUSIVE: c_int = 234;
pub const MPI_LOCK_SHARED: c_int = 235;
pub const MPI_GRAPH: c_int = 1;
pub const MPI_CART: c_int = 2;
pub const MPI_DIST_GRAPH: c_int = 3;
pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;
pub const MPI_TYPECLASS_REAL: c_int = 1;
pub const MPI_TYPECLASS_INTEGER: c_int = 2;
pub const MPI_TYPECLASS_COMPLEX: c_int = 3;
pub const MPI_ORDER_C: c_int = 56;
pub const MPI_ORDER_FORTRAN: c_int = 57;
pub const MPI_DISTRIBUTE_BLOCK: c_int = 121;
pub const MPI_DISTRIBUTE_CYCLIC: c_int = 122;
pub const MPI_DISTRIBUTE_NONE: c_int = 123;
pub const MPI_DISTRIBUTE_DFLT_DARG: c_int = -49767;
pub const MPI_MODE_NOCHECK: c_int = 1024;
pub const MPI_MODE_NOSTORE: c_int = 2048;
pub const MPI_MODE_NOPUT: c_int = 4096;
pub const MPI_MODE_NOPRECEDE: c_int = 8192;
pub const MPI_MODE_NOSUCCEED: c_int = 16384;
pub const MPI_COMM_TYPE_SHARED: c_int = 1;
pub const MPI_WIN_FLAVOR_CREATE: c_int = 1;
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 2;
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 3;
pub const MPI_WIN_FLAVOR_SHARED: c_int = 4;
pub const MPI_WIN_SEPARATE: c_int = 1;
pub const MPI_WIN_UNIFIED: c_int = 2;

/// The combiners of `MPI_Type_get_envelope`.
pub const MPI_COMBINER_NAMED: c_int = 1;
pub const MPI_COMBINER_DUP: c_int = 2;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 3;
pub const MPI_COMBINER_VECTOR: c_int = 4;
pub const MPI_COMBINER_HVECTOR: c_int = 6;
pub const MPI_COMBINER_INDEXED: c_int = 7;
pub const MPI_COMBINER_HINDEXED: c_int = 9;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 10;
pub const MPI_COMBINER_STRUCT: c_int = 12;
pub const MPI_COMBINER_SUBARRAY: c_int = 13;
pub const MPI_COMBINER_DARRAY: c_int = 14;
pub const MPI_COMBINER_RESIZED: c_int = 18;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 19;

/// `MPI_BOTTOM`.
pub const MPI_BOTTOM: usize = 0;
/// `MPI_IN_PLACE` (`(void *) -1`).
pub const MPI_IN_PLACE: usize = usize::MAX;
/// `MPI_STATUS_IGNORE` and `MPI_STATUSES_IGNORE` (`(MPI_Status *) 1`).
pub const MPI_STATUS_IGNORE: usize = 1;

// ---------------------------------------------------------- error classes
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 7;
pub const MPI_ERR_GROUP: c_int = 8;
pub const MPI_ERR_OP: c_int = 9;
pub const MPI_ERR_TOPOLOGY: c_int = 10;
pub const MPI_ERR_DIMS: c_int = 11;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_UNKNOWN: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 14;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_IN_STATUS: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_REQUEST: c_int = 19;
pub const MPI_ERR_FILE: c_int = 27;
pub const MPI_ERR_INFO: c_int = 28;
pub const MPI_ERR_INFO_KEY: c_int = 29;
pub const MPI_ERR_INFO_VALUE: c_int = 30;
pub const MPI_ERR_INFO_NOKEY: c_int = 31;
pub const MPI_ERR_NO_MEM: c_int = 34;
pub const MPI_ERR_SPAWN: c_int = 42;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPI_ERR_WIN: c_int = 45;
pub const MPI_ERR_BASE: c_int = 46;
pub const MPI_ERR_LOCKTYPE: c_int = 47;
pub const MPI_ERR_KEYVAL: c_int = 48;
pub const MPI_ERR_RMA_SYNC: c_int = 50;
pub const MPI_ERR_SIZE: c_int = 51;
pub const MPI_ERR_DISP: c_int = 52;
pub const MPI_ERR_ASSERT: c_int = 53;
pub const MPI_ERR_RMA_FLAVOR: c_int = 58;
/// The last predefined class MPICH defines (`MPICH_ERR_LAST_CLASS`).
pub const MPICH_ERR_LAST_CLASS: c_int = 78;
/// `MPI_ERR_LASTCODE`.
pub const MPI_ERR_LASTCODE: c_int = 0x3fff_ffff;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_five_ints_with_the_count_split() {
        assert_eq!(core::mem::size_of::<MPI_Status>(), 20);
        let mut s = MPI_Status::default();
        s.set_cancelled(true);
        s.set_count((5_i64 << 32) + 7);
        assert_eq!(s.count(), (5_i64 << 32) + 7);
        assert!(s.cancelled());
        assert_eq!((s.count_lo, s.count_hi_and_cancelled), (7, 11));
        s.set_cancelled(false);
        assert_eq!(s.count(), (5_i64 << 32) + 7);
        s.set_count(u32::MAX as i64);
        assert_eq!(s.count(), u32::MAX as i64);
    }
}
