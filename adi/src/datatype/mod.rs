//! MPI datatypes: constructors, bounds, commit, pack/unpack and a flattened
//! form.
//!
//! A [`Datatype`] describes where the bytes of one *element* lie relative to
//! the start of a user buffer: the MPI *type map*, a sequence of
//! `(basic type, displacement)` entries. Derived types are built from others
//! with [`contiguous`](Datatype::contiguous), [`vector`](Datatype::vector),
//! [`hvector`](Datatype::hvector), [`indexed`](Datatype::indexed),
//! [`hindexed`](Datatype::hindexed), [`struct_type`](Datatype::struct_type) and
//! [`resized`](Datatype::resized), nested arbitrarily.
//!
//! # Model
//!
//! - **Buffers are slices.** Displacements are relative to the first byte of
//!   the `&[u8]`/`&mut [u8]` given to [`pack`](Datatype::pack) and friends.
//!   Before any byte is read or written, the whole range that `count` elements
//!   touch is checked against the slice; a type that reaches below its start
//!   (negative displacements) or past its end is
//!   [`Error::BufferOutOfBounds`], never an out-of-bounds access. To use a
//!   type with negative displacements, pass a slice that starts earlier and
//!   wrap the type in a one-block [`hindexed`](Datatype::hindexed) that shifts
//!   it.
//! - **Bounds.** `lb`/`ub` follow MPI: the lowest and highest byte of the type
//!   map, or the explicit bounds set by [`resized`](Datatype::resized), which
//!   are *sticky* (they propagate through later constructors and win over
//!   the data's own bounds). A [`struct_type`](Datatype::struct_type) without
//!   explicit bounds pads its extent up to the largest alignment of the basic
//!   types it contains, as MPICH does. `true_lb`/`true_ub` are always the
//!   first byte and one past the last byte of actual data. Extents are never
//!   negative (`resized` rejects a negative extent).
//! - **Commit.** Predefined (basic) types are committed. A derived type must
//!   be [`commit`](Datatype::commit)ted before packing or communication; it can
//!   be used to build other types before. Commit computes the flattened form.
//! - **Flattened form.** [`Flat`]: the element's data bytes as a list of
//!   strided [`Run`]s (`count` blocks of `len` bytes, `stride` apart) in
//!   type-map order, with pieces that continue each other merged, and
//!   prefix sums so that any byte offset of the packed stream is found by
//!   binary search. A vector of a basic or contiguous type is one run
//!   whatever its count; a vector of vectors is one run per outer block
//!   (one in all if the outer stride continues the inner pattern); a dense
//!   repetition is one block. A type whose flattened form would exceed
//!   [`MAX_FLAT_BLOCKS`] runs cannot be committed ([`Error::TooManyBlocks`]):
//!   only types with that many irregular pieces (an indexed type with 2²⁰
//!   differently spaced or sized blocks) reach it.
//! - **Packing walks runs.** [`pack_part`](Datatype::pack_part) and
//!   [`unpack_part`](Datatype::unpack_part) find their start offset with one
//!   division and then copy run by run; blocks of 1, 2, 4, 8 or 16 bytes
//!   move as fixed-size copies (no call per block). Before this, each
//!   block cost a division, a binary-search check and a `memcpy`
//!   call: a 4 KiB vector of doubles (stride 2) took 14 µs per ping-pong
//!   leg against MPICH's 1.4; after it, ≈ 1.0 (a scratch run), and 0.54 against
//!   MPICH's 0.73 once the ADI pooled its packing buffers.
//! - **Lifetime.** A `Datatype` is an [`Arc`] handle: cloning is cheap, and an
//!   operation that holds a clone keeps the type alive after the user drops
//!   (frees) theirs, as the paper's `MPI_Type_free` example requires.
//! - **Packed format.** Homogeneous: the packed bytes are the data bytes in
//!   type-map order, unconverted. `pack_size(count)` is exactly
//!   `count * size`.
//!
//! Resumable packing works by byte offset into the packed stream:
//! [`pack_part`](Datatype::pack_part) and [`unpack_part`](Datatype::unpack_part)
//! produce or consume any sub-range, so a large message can be sent in
//! pipelined parts (see [`plan_send`]). [`segments`](Datatype::segments)
//! yields the same sub-range as regions of the user buffer, for zero-copy
//! (gather/scatter) transports.
//!
//! ```
//! use adi::{BasicType, Datatype};
//!
//! // Column 1 of a 3x4 row-major matrix of i32: 3 blocks of 1, stride 4.
//! let column = Datatype::vector(3, 1, 4, &Datatype::basic(BasicType::I32))?;
//! column.commit()?;
//! assert_eq!(column.size(), 12);
//! assert_eq!(column.extent(), 36); // from the first int to the end of the last
//!
//! let matrix: Vec<u8> = (0..48).collect();
//! let mut packed = vec![0u8; column.pack_size(1)?];
//! let mut position = 0;
//! column.pack(&matrix[4..], 1, &mut packed, &mut position)?;
//! assert_eq!(packed, [4, 5, 6, 7, 20, 21, 22, 23, 36, 37, 38, 39]);
//! # Ok::<(), adi::Error>(())
//! ```

mod basic;
mod blocks;
mod contents;
mod elements;
mod external;
mod plan;
mod segments;

pub use basic::BasicType;
pub use contents::{Contents, Distribution, Order};
pub use plan::{plan_send, Part, Parts, PlanLimits, SendPlan};
pub use segments::Segments;

use std::sync::{Arc, OnceLock};

use crate::Error;
use blocks::{append_blocks, gather_blocks, scatter_blocks, APPEND_CHUNK};

/// Most runs a committed type's flattened form may have (2²⁰, about 40 MiB
/// of run list and prefix sums). Regular repetitions are one run each, so
/// only irregular types reach it.
pub const MAX_FLAT_BLOCKS: usize = 1 << 20;

/// Deepest nesting of constructors (a basic type has depth 0). Commit and
/// drop walk the nesting recursively; the bound keeps that within a thread's
/// default 2 MiB stack, even in debug builds.
pub const MAX_DEPTH: usize = 256;

/// How a datatype was constructed (`MPI_Type_get_envelope`'s combiner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Combiner {
    /// A predefined type.
    Named,
    /// [`Datatype::contiguous`].
    Contiguous,
    /// [`Datatype::vector`].
    Vector,
    /// [`Datatype::hvector`].
    Hvector,
    /// [`Datatype::indexed`].
    Indexed,
    /// [`Datatype::hindexed`].
    Hindexed,
    /// [`Datatype::struct_type`].
    Struct,
    /// [`Datatype::resized`].
    Resized,
    /// [`Datatype::dup`].
    Dup,
    /// [`Datatype::indexed_block`].
    IndexedBlock,
    /// [`Datatype::hindexed_block`].
    HindexedBlock,
    /// [`Datatype::subarray`].
    Subarray,
    /// [`Datatype::darray`].
    Darray,
}

/// One contiguous run of data bytes of a flattened type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Block {
    /// Displacement of the first byte from the element's origin.
    pub disp: isize,
    /// Number of bytes (never zero).
    pub len: usize,
}

/// A strided run of a flattened type: `count` blocks of `len` bytes, block
/// `j` at `disp + j * stride`, in that (packed) order. A vector of a basic
/// type is one run, whatever its count; a plain block is a run of count 1
/// (stride 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Run {
    /// Displacement of the first block from the element's origin.
    pub disp: isize,
    /// Bytes per block (never zero).
    pub len: usize,
    /// Number of blocks (never zero).
    pub count: usize,
    /// Distance between the starts of consecutive blocks (0 when `count`
    /// is 1; never equal to `len` when `count` > 1: such a run is one
    /// block).
    pub stride: isize,
}

/// The flattened form of one element: its data bytes as strided runs in
/// type-map order, adjacent pieces merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flat {
    runs: Vec<Run>,
    /// `starts[i]` = packed offset of `runs[i]` within one element.
    starts: Vec<usize>,
    size: usize,
}

impl Flat {
    /// The runs, in type-map (= packed) order.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// The runs expanded into blocks, adjacent blocks merged (one entry per
    /// block of every run: for inspection and tests, not for large types).
    pub fn blocks(&self) -> Vec<Block> {
        let mut out: Vec<Block> = Vec::new();
        for r in &self.runs {
            for j in 0..r.count {
                let disp = r.disp + j as isize * r.stride;
                match out.last_mut() {
                    Some(b) if b.disp + b.len as isize == disp => b.len += r.len,
                    _ => out.push(Block { disp, len: r.len }),
                }
            }
        }
        out
    }

    /// Sum of the block lengths: the type's size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the stream of elements `extent` apart is one region: one
    /// block as long as the extent.
    fn is_dense(&self, extent: isize) -> bool {
        matches!(self.runs.as_slice(), [r] if r.count == 1 && r.len as isize == extent)
    }

    /// Where packed byte `pos` of the stream lies (`size > 0`): its
    /// element, run, block within the run and byte within the block.
    fn locate(&self, pos: usize) -> (usize, usize, usize, usize) {
        let within = pos % self.size;
        let run = self
            .starts
            .partition_point(|&s| s <= within)
            .saturating_sub(1);
        let into = within - self.starts.get(run).copied().unwrap_or(0);
        let len = self.runs.get(run).map_or(1, |r| r.len);
        (pos / self.size, run, into / len, into % len)
    }
}

/// Accumulates merged runs with the [`MAX_FLAT_BLOCKS`] limit.
struct FlatBuilder {
    runs: Vec<Run>,
}

fn overflow(what: &'static str) -> Error {
    Error::Overflow { what }
}

impl FlatBuilder {
    fn new() -> Self {
        FlatBuilder { runs: Vec::new() }
    }

    /// Appends `count` blocks of `len` bytes, block `j` at
    /// `disp + j * stride`, merging with the last run where the pattern
    /// continues.
    fn push(&mut self, disp: i128, len: u128, count: u128, stride: i128) -> Result<(), Error> {
        if len == 0 || count == 0 {
            return Ok(());
        }
        let (len, count, stride) = if count == 1 {
            (len, 1, 0)
        } else if stride == len as i128 {
            // Dense repetition: one block.
            (
                len.checked_mul(count)
                    .ok_or_else(|| overflow("type size"))?,
                1,
                0,
            )
        } else {
            (len, count, stride)
        };
        let disp = isize::try_from(disp).map_err(|_| overflow("block displacement"))?;
        let len = usize::try_from(len).map_err(|_| overflow("block length"))?;
        let count = usize::try_from(count).map_err(|_| overflow("block count"))?;
        let stride = isize::try_from(stride).map_err(|_| overflow("stride"))?;
        // The last block's displacement and the run's bytes must be
        // representable: iteration computes both without further checks.
        isize::try_from(disp as i128 + (count as i128 - 1) * stride as i128)
            .map_err(|_| overflow("block displacement"))?;
        len.checked_mul(count)
            .ok_or_else(|| overflow("type size"))?;
        if let Some(last) = self.runs.last_mut() {
            let next = last.disp as i128 + last.count as i128 * last.stride as i128;
            if last.count == 1 && count == 1 && last.disp as i128 + last.len as i128 == disp as i128
            {
                // A block right after a block: one longer block.
                last.len = last
                    .len
                    .checked_add(len)
                    .ok_or_else(|| overflow("block length"))?;
                return Ok(());
            }
            if last.len == len {
                if last.count > 1 && (count == 1 || stride == last.stride) && next == disp as i128 {
                    // The run's pattern continues.
                    last.count = last
                        .count
                        .checked_add(count)
                        .ok_or_else(|| overflow("block count"))?;
                    return Ok(());
                }
                if last.count == 1 {
                    let gap = disp as i128 - last.disp as i128;
                    if let Ok(gap) = isize::try_from(gap) {
                        if count == 1 || gap == stride {
                            // Two equal blocks start a run (a gap equal to
                            // the length was merged above).
                            last.count = count
                                .checked_add(1)
                                .ok_or_else(|| overflow("block count"))?;
                            last.stride = gap;
                            return Ok(());
                        }
                    }
                }
            }
        }
        if self.runs.len() >= MAX_FLAT_BLOCKS {
            return Err(Error::TooManyBlocks {
                max: MAX_FLAT_BLOCKS,
            });
        }
        self.runs.push(Run {
            disp,
            len,
            count,
            stride,
        });
        Ok(())
    }

    /// Appends `n` copies of `unit`, copy `j` shifted by `base + j * step`.
    fn replicate(&mut self, base: i128, unit: &[Run], n: u128, step: i128) -> Result<(), Error> {
        if n == 0 {
            return Ok(());
        }
        match unit {
            // Copies of one block: one run (or one block, if dense).
            [u] if u.count == 1 => return self.push(base + u.disp as i128, u.len as u128, n, step),
            // Copies of a run that continue its pattern: one longer run.
            [u] if step == u.count as i128 * u.stride as i128 => {
                let count = (u.count as u128)
                    .checked_mul(n)
                    .ok_or_else(|| overflow("block count"))?;
                return self.push(
                    base + u.disp as i128,
                    u.len as u128,
                    count,
                    u.stride as i128,
                );
            }
            _ => {}
        }
        // Each copy adds at least one run that cannot merge (the unit is
        // already merged, and the cases where copies continue it are
        // above), so more copies than the limit cannot commit; this also
        // bounds the loop.
        if n > MAX_FLAT_BLOCKS as u128 {
            return Err(Error::TooManyBlocks {
                max: MAX_FLAT_BLOCKS,
            });
        }
        let mut shift = base;
        for _ in 0..n {
            for r in unit {
                self.push(
                    shift + r.disp as i128,
                    r.len as u128,
                    r.count as u128,
                    r.stride as i128,
                )?;
            }
            shift += step;
        }
        Ok(())
    }

    fn finish(self) -> Flat {
        let mut starts = Vec::with_capacity(self.runs.len());
        let mut size = 0usize;
        for r in &self.runs {
            starts.push(size);
            size += r.len * r.count;
        }
        Flat {
            runs: self.runs,
            starts,
            size,
        }
    }
}

#[derive(Debug)]
enum Kind {
    Basic(BasicType),
    /// `count` blocks of `blocklen` elements of `old`, block `i` at byte
    /// `i * stride` (contiguous: one block).
    Vector {
        count: usize,
        blocklen: usize,
        stride: isize,
        old: Datatype,
    },
    /// Blocks `(len, byte displacement)` of `old`.
    Indexed {
        blocks: Vec<(usize, isize)>,
        old: Datatype,
    },
    /// Blocks `(len, byte displacement, type)`.
    Struct {
        blocks: Vec<(usize, isize, Datatype)>,
    },
    /// `old` with explicit bounds.
    Resized {
        old: Datatype,
    },
}

#[derive(Debug)]
struct Inner {
    kind: Kind,
    combiner: Combiner,
    size: usize,
    lb: isize,
    ub: isize,
    sticky: bool,
    true_lb: isize,
    true_ub: isize,
    align: usize,
    /// Nesting depth (0 for basic types), at most [`MAX_DEPTH`].
    depth: usize,
    /// Set by commit (always set for basic types).
    flat: OnceLock<Arc<Flat>>,
    /// The constructor's arguments (`MPI_Type_get_contents`); `None` for
    /// a predefined type.
    contents: Option<Box<Contents>>,
}

/// An MPI datatype: a cheap-to-clone, immutable, reference-counted handle.
///
/// See the [module documentation](self) for the model.
#[derive(Debug, Clone)]
pub struct Datatype {
    inner: Arc<Inner>,
}

/// Bounds accumulated over the blocks of a new type.
#[derive(Default)]
struct Bounds {
    lb: Option<i128>,
    ub: Option<i128>,
    sticky_lb: Option<i128>,
    sticky_ub: Option<i128>,
    true_lb: Option<i128>,
    true_ub: Option<i128>,
    size: u128,
    align: usize,
}

fn min_opt(a: Option<i128>, b: i128) -> Option<i128> {
    Some(a.map_or(b, |a| a.min(b)))
}

fn max_opt(a: Option<i128>, b: i128) -> Option<i128> {
    Some(a.map_or(b, |a| a.max(b)))
}

fn to_isize(v: i128, what: &'static str) -> Result<isize, Error> {
    isize::try_from(v).map_err(|_| Error::Overflow { what })
}

fn count_arg(value: i64, what: &'static str) -> Result<usize, Error> {
    if value < 0 {
        return Err(Error::NegativeCount { what, value });
    }
    usize::try_from(value).map_err(|_| Error::Overflow { what })
}

impl Bounds {
    /// Adds `n` consecutive copies of `t` starting at byte `d` (copy `j` at
    /// `d + j * extent(t)`).
    fn add(&mut self, d: i128, n: u128, t: &Inner) {
        if n == 0 {
            return;
        }
        let ext = (t.ub as i128) - (t.lb as i128); // >= 0 by construction
        let last = d + (n as i128 - 1) * ext;
        if t.sticky {
            self.sticky_lb = min_opt(self.sticky_lb, d + t.lb as i128);
            self.sticky_ub = max_opt(self.sticky_ub, last + t.ub as i128);
        } else if t.size > 0 {
            self.lb = min_opt(self.lb, d + t.lb as i128);
            self.ub = max_opt(self.ub, last + t.ub as i128);
        }
        if t.size > 0 {
            self.true_lb = min_opt(self.true_lb, d + t.true_lb as i128);
            self.true_ub = max_opt(self.true_ub, last + t.true_ub as i128);
        }
        self.size += n * t.size as u128;
        self.align = self.align.max(t.align);
    }

    fn finish(self, kind: Kind, combiner: Combiner, pad: bool) -> Result<Datatype, Error> {
        let depth = 1 + match &kind {
            Kind::Basic(_) => 0,
            Kind::Vector { old, .. } | Kind::Indexed { old, .. } | Kind::Resized { old } => {
                old.inner.depth
            }
            Kind::Struct { blocks } => blocks.iter().map(|b| b.2.inner.depth).max().unwrap_or(0),
        };
        if depth > MAX_DEPTH {
            return Err(Error::TooDeep { max: MAX_DEPTH });
        }
        let sticky = self.sticky_lb.is_some() || self.sticky_ub.is_some();
        let lb = self.sticky_lb.or(self.lb).unwrap_or(0);
        let mut ub = self.sticky_ub.or(self.ub).unwrap_or(0);
        if pad && !sticky && self.align > 1 {
            let ext = ub - lb;
            let rem = ext.rem_euclid(self.align as i128);
            if rem != 0 {
                ub += self.align as i128 - rem;
            }
        }
        let size = usize::try_from(self.size).map_err(|_| Error::Overflow { what: "type size" })?;
        // The extent must be representable too, so that `count * extent`
        // arithmetic starts from valid values.
        to_isize(ub - lb, "type extent")?;
        Ok(Datatype {
            inner: Arc::new(Inner {
                kind,
                combiner,
                size,
                lb: to_isize(lb, "lower bound")?,
                ub: to_isize(ub, "upper bound")?,
                sticky,
                true_lb: to_isize(self.true_lb.unwrap_or(0), "true lower bound")?,
                true_ub: to_isize(self.true_ub.unwrap_or(0), "true upper bound")?,
                align: self.align.max(1),
                depth,
                flat: OnceLock::new(),
                contents: None,
            }),
        })
    }
}

impl Datatype {
    /// A predefined type (already committed). Its data are the pieces of
    /// [`BasicType::parts`] (one for a plain type, two for a pair type such
    /// as `MPI_SHORT_INT`), its extent [`BasicType::extent`].
    pub fn basic(t: BasicType) -> Datatype {
        let size = t.size();
        let mut runs = FlatBuilder::new();
        for &(disp, len) in t.parts() {
            // Two pieces of a pair: never the block limit, never overflow.
            let _ = runs.push(disp as i128, len as u128, 1, 0);
        }
        let true_ub = t.parts().last().map_or(0, |&(d, l)| d + l);
        let flat = OnceLock::new();
        let _ = flat.set(Arc::new(runs.finish()));
        Datatype {
            inner: Arc::new(Inner {
                kind: Kind::Basic(t),
                combiner: Combiner::Named,
                size,
                lb: 0,
                ub: t.extent() as isize,
                sticky: false,
                true_lb: 0,
                true_ub: true_ub as isize,
                align: t.align(),
                depth: 0,
                flat,
                contents: None,
            }),
        }
    }

    /// `MPI_Type_contiguous`: `count` consecutive copies of `old`.
    pub fn contiguous(count: i64, old: &Datatype) -> Result<Datatype, Error> {
        let count = count_arg(count, "count")?;
        let mut b = Bounds::default();
        b.add(0, count as u128, &old.inner);
        b.finish(
            Kind::Vector {
                count: 1,
                blocklen: count,
                stride: 0,
                old: old.clone(),
            },
            Combiner::Contiguous,
            false,
        )
        .map(|t| {
            t.record(
                Combiner::Contiguous,
                Contents {
                    integers: vec![count as i64],
                    types: vec![old.clone()],
                    ..Contents::default()
                },
            )
        })
    }

    /// `MPI_Type_vector`: `count` blocks of `blocklen` copies of `old`, the
    /// starts of consecutive blocks `stride` *elements* (extents of `old`)
    /// apart. The stride may be negative.
    pub fn vector(
        count: i64,
        blocklen: i64,
        stride: i64,
        old: &Datatype,
    ) -> Result<Datatype, Error> {
        let bytes = (stride as i128) * (old.extent() as i128);
        let bytes = isize::try_from(bytes).map_err(|_| Error::Overflow { what: "stride" })?;
        Self::vector_bytes(count, blocklen, bytes, old, Combiner::Vector).map(|t| {
            t.record(
                Combiner::Vector,
                Contents {
                    integers: vec![count, blocklen, stride],
                    types: vec![old.clone()],
                    ..Contents::default()
                },
            )
        })
    }

    /// `MPI_Type_create_hvector`: like [`vector`](Self::vector) with the
    /// stride in bytes.
    pub fn hvector(
        count: i64,
        blocklen: i64,
        stride_bytes: isize,
        old: &Datatype,
    ) -> Result<Datatype, Error> {
        Self::vector_bytes(count, blocklen, stride_bytes, old, Combiner::Hvector).map(|t| {
            t.record(
                Combiner::Hvector,
                Contents {
                    integers: vec![count, blocklen],
                    addresses: vec![stride_bytes],
                    types: vec![old.clone()],
                },
            )
        })
    }

    fn vector_bytes(
        count: i64,
        blocklen: i64,
        stride: isize,
        old: &Datatype,
        combiner: Combiner,
    ) -> Result<Datatype, Error> {
        let count = count_arg(count, "count")?;
        let blocklen = count_arg(blocklen, "block length")?;
        let mut b = Bounds::default();
        if count > 0 {
            // Bounds are a min/max over identical blocks: the first and the
            // last block decide them (the stride may be negative).
            b.add(0, blocklen as u128, &old.inner);
            if count > 1 {
                let last = (count as i128 - 1) * stride as i128;
                let mut other = Bounds::default();
                other.add(last, blocklen as u128, &old.inner);
                b.merge(other);
            }
            b.size = (count as u128) * (blocklen as u128) * (old.inner.size as u128);
        }
        b.finish(
            Kind::Vector {
                count,
                blocklen,
                stride,
                old: old.clone(),
            },
            combiner,
            false,
        )
    }

    /// `MPI_Type_indexed`: blocks of `blocklens[i]` copies of `old` at
    /// `displs[i]` *elements* (extents of `old`).
    pub fn indexed(blocklens: &[i64], displs: &[i64], old: &Datatype) -> Result<Datatype, Error> {
        if blocklens.len() != displs.len() {
            return Err(Error::InvalidArgument {
                what: "blocklens and displacements differ in length",
            });
        }
        let ext = old.extent() as i128;
        let bytes = displs
            .iter()
            .map(|&d| {
                isize::try_from(d as i128 * ext).map_err(|_| Error::Overflow {
                    what: "displacement",
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::indexed_bytes(blocklens, &bytes, old, Combiner::Indexed).map(|t| {
            let mut integers = vec![blocklens.len() as i64];
            integers.extend_from_slice(blocklens);
            integers.extend_from_slice(displs);
            t.record(
                Combiner::Indexed,
                Contents {
                    integers,
                    types: vec![old.clone()],
                    ..Contents::default()
                },
            )
        })
    }

    /// `MPI_Type_create_hindexed`: like [`indexed`](Self::indexed) with
    /// displacements in bytes.
    pub fn hindexed(
        blocklens: &[i64],
        displs_bytes: &[isize],
        old: &Datatype,
    ) -> Result<Datatype, Error> {
        if blocklens.len() != displs_bytes.len() {
            return Err(Error::InvalidArgument {
                what: "blocklens and displacements differ in length",
            });
        }
        Self::indexed_bytes(blocklens, displs_bytes, old, Combiner::Hindexed).map(|t| {
            let mut integers = vec![blocklens.len() as i64];
            integers.extend_from_slice(blocklens);
            t.record(
                Combiner::Hindexed,
                Contents {
                    integers,
                    addresses: displs_bytes.to_vec(),
                    types: vec![old.clone()],
                },
            )
        })
    }

    fn indexed_bytes(
        blocklens: &[i64],
        displs: &[isize],
        old: &Datatype,
        combiner: Combiner,
    ) -> Result<Datatype, Error> {
        let mut blocks = Vec::with_capacity(blocklens.len());
        let mut b = Bounds::default();
        for (&len, &d) in blocklens.iter().zip(displs) {
            let len = count_arg(len, "block length")?;
            b.add(d as i128, len as u128, &old.inner);
            blocks.push((len, d));
        }
        b.finish(
            Kind::Indexed {
                blocks,
                old: old.clone(),
            },
            combiner,
            false,
        )
    }

    /// `MPI_Type_create_struct`: blocks of `blocklens[i]` copies of
    /// `types[i]` at byte displacement `displs[i]`. Unless a member has
    /// explicit bounds ([`resized`](Self::resized)), the extent is padded to
    /// a multiple of the largest alignment of the basic types inside.
    pub fn struct_type(
        blocklens: &[i64],
        displs: &[isize],
        types: &[Datatype],
    ) -> Result<Datatype, Error> {
        if blocklens.len() != displs.len() || blocklens.len() != types.len() {
            return Err(Error::InvalidArgument {
                what: "blocklens, displacements and types differ in length",
            });
        }
        let mut blocks = Vec::with_capacity(blocklens.len());
        let mut b = Bounds::default();
        for ((&len, &d), t) in blocklens.iter().zip(displs).zip(types) {
            let len = count_arg(len, "block length")?;
            b.add(d as i128, len as u128, &t.inner);
            blocks.push((len, d, t.clone()));
        }
        b.finish(Kind::Struct { blocks }, Combiner::Struct, true)
            .map(|t| {
                let mut integers = vec![blocklens.len() as i64];
                integers.extend_from_slice(blocklens);
                t.record(
                    Combiner::Struct,
                    Contents {
                        integers,
                        addresses: displs.to_vec(),
                        types: types.to_vec(),
                    },
                )
            })
    }

    /// `MPI_Type_create_resized`: `old` with lower bound `lb` and extent
    /// `extent` (which must not be negative). The new bounds are sticky.
    pub fn resized(old: &Datatype, lb: isize, extent: isize) -> Result<Datatype, Error> {
        if extent < 0 {
            return Err(Error::InvalidArgument {
                what: "negative extent",
            });
        }
        let ub = lb.checked_add(extent).ok_or_else(|| Error::Overflow {
            what: "upper bound",
        })?;
        let o = &old.inner;
        if o.depth >= MAX_DEPTH {
            return Err(Error::TooDeep { max: MAX_DEPTH });
        }
        Ok(Datatype {
            inner: Arc::new(Inner {
                kind: Kind::Resized { old: old.clone() },
                combiner: Combiner::Resized,
                size: o.size,
                lb,
                ub,
                sticky: true,
                true_lb: o.true_lb,
                true_ub: o.true_ub,
                align: o.align,
                depth: o.depth + 1,
                flat: OnceLock::new(),
                contents: None,
            }),
        }
        .record(
            Combiner::Resized,
            Contents {
                addresses: vec![lb, extent],
                types: vec![old.clone()],
                ..Contents::default()
            },
        ))
    }

    /// How this type was built.
    pub fn combiner(&self) -> Combiner {
        self.inner.combiner
    }

    /// `MPI_Type_get_contents`: the arguments of the constructor that made
    /// this type (`None` for a predefined type).
    pub fn contents(&self) -> Option<&Contents> {
        self.inner.contents.as_deref()
    }

    /// Whether `self` and `other` are handles of the same type object.
    pub fn same(&self, other: &Datatype) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Sets how a type just built was made (its constructor's combiner and
    /// arguments): the type is not shared yet.
    fn record(mut self, combiner: Combiner, contents: Contents) -> Datatype {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.combiner = combiner;
            inner.contents = Some(Box::new(contents));
        }
        self
    }

    /// The basic type, for a predefined type.
    pub fn as_basic(&self) -> Option<BasicType> {
        match self.inner.kind {
            Kind::Basic(t) => Some(t),
            _ => None,
        }
    }

    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Lower bound (`MPI_Type_get_extent`).
    pub fn lb(&self) -> isize {
        self.inner.lb
    }

    /// Upper bound: `lb + extent`.
    pub fn ub(&self) -> isize {
        self.inner.ub
    }

    /// `ub - lb`: the distance between consecutive elements (never negative).
    pub fn extent(&self) -> isize {
        self.inner.ub - self.inner.lb
    }

    /// First byte of data (`MPI_Type_get_true_extent`); 0 for a type without
    /// data.
    pub fn true_lb(&self) -> isize {
        self.inner.true_lb
    }

    /// One past the last byte of data; 0 for a type without data.
    pub fn true_ub(&self) -> isize {
        self.inner.true_ub
    }

    /// `true_ub - true_lb`.
    pub fn true_extent(&self) -> isize {
        self.inner.true_ub - self.inner.true_lb
    }

    /// Whether the bounds were set explicitly (by `resized`, here or in a
    /// member).
    pub fn has_explicit_bounds(&self) -> bool {
        self.inner.sticky
    }

    /// Whether [`commit`](Self::commit) has run (always for basic types).
    pub fn is_committed(&self) -> bool {
        self.inner.flat.get().is_some()
    }

    /// `MPI_Type_commit`: computes the flattened form. Idempotent; fails only
    /// if the form exceeds [`MAX_FLAT_BLOCKS`] (the type stays uncommitted).
    pub fn commit(&self) -> Result<(), Error> {
        if self.inner.flat.get().is_none() {
            let flat = Arc::new(self.compute_flat()?);
            // A concurrent commit may have won; both computed the same value.
            let _ = self.inner.flat.set(flat);
        }
        Ok(())
    }

    /// The flattened form, once committed.
    pub fn flat(&self) -> Option<&Flat> {
        self.inner.flat.get().map(|f| &**f)
    }

    fn flat_or_compute(&self) -> Result<Arc<Flat>, Error> {
        match self.inner.flat.get() {
            Some(f) => Ok(Arc::clone(f)),
            None => Ok(Arc::new(self.compute_flat()?)),
        }
    }

    fn compute_flat(&self) -> Result<Flat, Error> {
        let mut out = FlatBuilder::new();
        match &self.inner.kind {
            Kind::Basic(t) => {
                for &(disp, len) in t.parts() {
                    out.push(disp as i128, len as u128, 1, 0)?;
                }
            }
            Kind::Vector {
                count,
                blocklen,
                stride,
                old,
            } => {
                let child = old.flat_or_compute()?;
                let mut unit = FlatBuilder::new();
                unit.replicate(0, &child.runs, *blocklen as u128, old.extent() as i128)?;
                out.replicate(0, &unit.runs, *count as u128, *stride as i128)?;
            }
            Kind::Indexed { blocks, old } => {
                let child = old.flat_or_compute()?;
                for &(len, d) in blocks {
                    out.replicate(d as i128, &child.runs, len as u128, old.extent() as i128)?;
                }
            }
            Kind::Struct { blocks } => {
                for (len, d, t) in blocks {
                    let child = t.flat_or_compute()?;
                    out.replicate(*d as i128, &child.runs, *len as u128, t.extent() as i128)?;
                }
            }
            Kind::Resized { old } => {
                let child = old.flat_or_compute()?;
                for r in &child.runs {
                    out.push(
                        r.disp as i128,
                        r.len as u128,
                        r.count as u128,
                        r.stride as i128,
                    )?;
                }
            }
        }
        Ok(out.finish())
    }

    fn committed_flat(&self) -> Result<&Flat, Error> {
        self.flat().ok_or_else(|| Error::NotCommitted)
    }

    /// `MPI_Pack_size`: bytes needed to pack `count` elements (exactly
    /// `count * size()`: the packed format is the raw data).
    pub fn pack_size(&self, count: i64) -> Result<usize, Error> {
        let count = count_arg(count, "count")?;
        count
            .checked_mul(self.inner.size)
            .ok_or_else(|| Error::Overflow {
                what: "packed size",
            })
    }

    /// `MPI_Get_count`: how many whole elements `bytes` packed bytes hold, or
    /// `None` (`MPI_UNDEFINED`) if they are not a whole number of elements.
    /// A type of size 0 gives `Some(0)`.
    pub fn count_of(&self, bytes: usize) -> Option<usize> {
        match self.inner.size {
            0 => Some(0),
            s if bytes % s == 0 => Some(bytes / s),
            _ => None,
        }
    }

    /// If `count` elements occupy one contiguous range of the user buffer,
    /// its `(start, len)`: the case the paper sends with the contiguous
    /// routines, without packing. `None` if the data has holes or the type is
    /// not committed. Zero bytes of data give `Some((0, 0))`.
    pub fn contiguous_range(&self, count: i64) -> Result<Option<(isize, usize)>, Error> {
        let flat = self.committed_flat()?;
        let total = self.pack_size(count)?;
        if total == 0 {
            return Ok(Some((0, 0)));
        }
        match flat.runs.as_slice() {
            [r] if r.count == 1 && (total == r.len || r.len as isize == self.extent()) => {
                Ok(Some((r.disp, total)))
            }
            _ => Ok(None),
        }
    }

    /// The byte range `lo..hi` of the user buffer that `count` elements touch
    /// (`0..0` if they hold no data).
    pub fn span(&self, count: i64) -> Result<(i128, i128), Error> {
        let n = count_arg(count, "count")?;
        if n == 0 || self.inner.size == 0 {
            return Ok((0, 0));
        }
        let last = (n as i128 - 1) * self.extent() as i128;
        Ok((
            self.inner.true_lb as i128,
            last + self.inner.true_ub as i128,
        ))
    }

    fn check_buffer(&self, count: i64, len: usize) -> Result<(), Error> {
        let (lo, hi) = self.span(count)?;
        if lo < hi && (lo < 0 || hi > len as i128) {
            return Err(Error::BufferOutOfBounds { lo, hi, len });
        }
        Ok(())
    }

    /// The regions of a user buffer of `buf_len` bytes that hold packed bytes
    /// `offset..offset + len` of `count` elements, in packed order, as
    /// `(start, len)` pairs (consecutive regions that touch are merged).
    /// `len` is capped at the end of the packed stream.
    ///
    /// Checks everything [`pack_part`](Self::pack_part) checks, so the
    /// regions are always inside the buffer.
    pub fn segments(
        &self,
        buf_len: usize,
        count: i64,
        offset: usize,
        len: usize,
    ) -> Result<Segments<'_>, Error> {
        let (flat, end) = self.checked_range(buf_len, count, offset, len)?;
        Ok(Segments::new(flat, self.extent(), offset, end))
    }

    /// The checks shared by [`segments`](Self::segments),
    /// [`pack_part`](Self::pack_part) and
    /// [`unpack_part`](Self::unpack_part): committed, `offset` within the
    /// stream, every byte `count` elements touch inside `buf_len`. Returns
    /// the flattened form and the end of the range.
    fn checked_range(
        &self,
        buf_len: usize,
        count: i64,
        offset: usize,
        len: usize,
    ) -> Result<(&Flat, usize), Error> {
        let flat = self.committed_flat()?;
        let total = self.pack_size(count)?;
        if offset > total {
            return Err(Error::OffsetOutOfRange { offset, len: total });
        }
        self.check_buffer(count, buf_len)?;
        Ok((flat, offset + len.min(total - offset)))
    }

    /// Packs bytes `offset..` of the packed stream of `count` elements of
    /// `src` into `out`, as many as fit; returns how many were written
    /// (`min(out.len(), pack_size - offset)`).
    ///
    /// Calling it with consecutive offsets and any chunk sizes produces the
    /// same bytes as one [`pack`](Self::pack): this is the resumable form for
    /// pipelined sends.
    pub fn pack_part(
        &self,
        src: &[u8],
        count: i64,
        offset: usize,
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let (flat, end) = self.checked_range(src.len(), count, offset, out.len())?;
        let n = end - offset;
        let have = out.len();
        let out = out
            .get_mut(..n)
            .ok_or_else(|| Error::Truncated { need: n, have })?;
        let mut at = 0usize;
        walk(
            flat,
            self.extent(),
            offset,
            end,
            |start, len, blocks, stride| {
                let bytes = len * blocks;
                let to = out
                    .get_mut(at..at + bytes)
                    .ok_or_else(|| Error::Truncated {
                        need: at + bytes,
                        have: at,
                    })?;
                at += bytes;
                gather_blocks(src, start, len, stride, to)
            },
        )?;
        Ok(n)
    }

    /// Appends the packed stream of `count` elements of `src` to `out`
    /// (the bytes [`pack`](Self::pack) writes); returns how many
    /// ([`pack_size`](Self::pack_size)). For a buffer that packing fills
    /// whole: `out` grows straight from the user's data, never
    /// zero-filled first. On an error `out` is as it was.
    pub fn pack_append(&self, src: &[u8], count: i64, out: &mut Vec<u8>) -> Result<usize, Error> {
        let (flat, end) = self.checked_range(src.len(), count, 0, usize::MAX)?;
        let base = out.len();
        out.try_reserve_exact(end).map_err(|_| Error::NoMem {
            bytes: end,
            what: "a packed buffer",
        })?;
        if end <= APPEND_CHUNK {
            // Small: zero-filling it costs less than the chunk would.
            out.resize(base + end, 0);
            return match self.pack_part(src, count, 0, &mut out[base..]) {
                Ok(n) => Ok(n),
                Err(e) => {
                    out.truncate(base);
                    Err(e)
                }
            };
        }
        let mut chunk = [0u8; APPEND_CHUNK];
        let r = walk(flat, self.extent(), 0, end, |start, len, blocks, stride| {
            append_blocks(src, start, len, blocks, stride, &mut chunk, out)
        });
        match r {
            Ok(()) if out.len() - base == end => Ok(end),
            Ok(()) => {
                let have = out.len() - base;
                out.truncate(base);
                Err(Error::Truncated { need: end, have })
            }
            Err(e) => {
                out.truncate(base);
                Err(e)
            }
        }
    }

    /// Unpacks `packed`, which holds bytes `offset..` of the packed stream of
    /// `count` elements, into `dst`; returns how many bytes were consumed
    /// (`min(packed.len(), pack_size - offset)`; bytes beyond the stream are
    /// left for the caller to report as truncation).
    ///
    /// Only the bytes the type map covers are written; every other byte of
    /// `dst` is left untouched.
    pub fn unpack_part(
        &self,
        packed: &[u8],
        dst: &mut [u8],
        count: i64,
        offset: usize,
    ) -> Result<usize, Error> {
        let (flat, end) = self.checked_range(dst.len(), count, offset, packed.len())?;
        let n = end - offset;
        let mut at = 0usize;
        walk(
            flat,
            self.extent(),
            offset,
            end,
            |start, len, blocks, stride| {
                let bytes = len * blocks;
                let from = packed.get(at..at + bytes).ok_or_else(|| Error::Truncated {
                    need: at + bytes,
                    have: packed.len(),
                })?;
                at += bytes;
                scatter_blocks(from, start, len, stride, dst)
            },
        )?;
        Ok(n)
    }

    /// `MPI_Pack`: packs `count` elements of `src` into `out` at
    /// `*position`, and advances `*position`. If they do not fit,
    /// [`Error::Truncated`] and nothing is written.
    pub fn pack(
        &self,
        src: &[u8],
        count: i64,
        out: &mut [u8],
        position: &mut usize,
    ) -> Result<(), Error> {
        let need = self.pack_size(count)?;
        let out_len = out.len();
        let rest = out
            .get_mut(*position..)
            .ok_or_else(|| Error::OffsetOutOfRange {
                offset: *position,
                len: out_len,
            })?;
        if rest.len() < need {
            return Err(Error::Truncated {
                need,
                have: rest.len(),
            });
        }
        let n = self.pack_part(src, count, 0, &mut rest[..need])?;
        *position += n;
        Ok(())
    }

    /// `MPI_Unpack`: unpacks `count` elements from `input` at `*position`
    /// into `dst`, and advances `*position`. If `input` holds fewer bytes,
    /// [`Error::Truncated`] and nothing is written.
    pub fn unpack(
        &self,
        input: &[u8],
        position: &mut usize,
        dst: &mut [u8],
        count: i64,
    ) -> Result<(), Error> {
        let need = self.pack_size(count)?;
        let rest = input
            .get(*position..)
            .ok_or_else(|| Error::OffsetOutOfRange {
                offset: *position,
                len: input.len(),
            })?;
        if rest.len() < need {
            return Err(Error::Truncated {
                need,
                have: rest.len(),
            });
        }
        let n = self.unpack_part(&rest[..need], dst, count, 0)?;
        *position += n;
        Ok(())
    }
}

impl Bounds {
    fn merge(&mut self, o: Bounds) {
        fn mn(a: Option<i128>, b: Option<i128>) -> Option<i128> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        fn mx(a: Option<i128>, b: Option<i128>) -> Option<i128> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        }
        self.lb = mn(self.lb, o.lb);
        self.ub = mx(self.ub, o.ub);
        self.sticky_lb = mn(self.sticky_lb, o.sticky_lb);
        self.sticky_ub = mx(self.sticky_ub, o.sticky_ub);
        self.true_lb = mn(self.true_lb, o.true_lb);
        self.true_ub = mx(self.true_ub, o.true_ub);
        self.size += o.size;
        self.align = self.align.max(o.align);
    }
}

/// Calls `f(start, len, blocks, stride)` for the packed bytes `pos..end` of
/// a stream of elements of `flat` (consecutive elements `extent` apart), in
/// packed order: `blocks` blocks of `len` bytes, block `k` at user-buffer
/// offset `start + k * stride`. Whole runs come as one call; a block cut by
/// `pos` or `end` comes alone. One division to find `pos`, none after.
fn walk(
    flat: &Flat,
    extent: isize,
    pos: usize,
    end: usize,
    mut f: impl FnMut(isize, usize, usize, isize) -> Result<(), Error>,
) -> Result<(), Error> {
    let size = flat.size;
    if pos >= end || size == 0 {
        return Ok(());
    }
    let at = |v: i128| isize::try_from(v).map_err(|_| overflow("buffer offset"));
    if flat.is_dense(extent) {
        // The whole stream is one region.
        let disp = flat.runs.first().map_or(0, |r| r.disp);
        return f(at(disp as i128 + pos as i128)?, end - pos, 1, 0);
    }
    let (mut elem, mut i, mut j, mut off) = flat.locate(pos);
    let mut left = end - pos;
    loop {
        let Some(r) = flat.runs.get(i) else {
            return Ok(());
        };
        let base = elem as i128 * extent as i128 + r.disp as i128;
        let block = |j: usize| base + j as i128 * r.stride as i128;
        if off > 0 {
            let n = (r.len - off).min(left);
            f(at(block(j) + off as i128)?, n, 1, 0)?;
            left -= n;
            j += 1;
        }
        if left == 0 {
            return Ok(());
        }
        let full = (r.count - j.min(r.count)).min(left / r.len);
        if full > 0 {
            f(at(block(j))?, r.len, full, r.stride)?;
            left -= full * r.len;
            j += full;
        }
        if left == 0 {
            return Ok(());
        }
        if j < r.count {
            // The range ends inside this block.
            return f(at(block(j))?, left, 1, 0);
        }
        (j, off) = (0, 0);
        i += 1;
        if i == flat.runs.len() {
            i = 0;
            elem += 1;
        }
    }
}

#[cfg(test)]
mod tests;
