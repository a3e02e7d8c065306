//! The constructors' arguments ([`Contents`], `MPI_Type_get_contents`)
//! and the constructors built from the basic ones: [`Datatype::dup`],
//! [`Datatype::indexed_block`], [`Datatype::hindexed_block`],
//! [`Datatype::subarray`] and [`Datatype::darray`] (the latter two as
//! MPICH composes them, so that their type maps, bounds and extents are
//! MPICH's).

use super::{Combiner, Datatype};
use crate::Error;

/// The arguments a type was made with, as `MPI_Type_get_contents`
/// returns them (integers, addresses, datatypes, in MPI's order for the
/// type's [`Combiner`]).
#[derive(Debug, Clone, Default)]
pub struct Contents {
    /// The integer arguments (counts, block lengths, element
    /// displacements, ...).
    pub integers: Vec<i64>,
    /// The address arguments (byte displacements and strides, bounds).
    pub addresses: Vec<isize>,
    /// The datatype arguments.
    pub types: Vec<Datatype>,
}

/// Array storage order (`MPI_ORDER_C`, `MPI_ORDER_FORTRAN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major: the last dimension varies fastest.
    C,
    /// Column-major: the first dimension varies fastest.
    Fortran,
}

impl Order {
    fn code(self) -> i64 {
        match self {
            Order::C => 56,
            Order::Fortran => 57,
        }
    }
}

/// How a dimension of a distributed array is spread over processes
/// (`MPI_Type_create_darray`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// `MPI_DISTRIBUTE_BLOCK` with a block size (`None`:
    /// `MPI_DISTRIBUTE_DFLT_DARG`, ⌈size / processes⌉).
    Block(Option<i64>),
    /// `MPI_DISTRIBUTE_CYCLIC` with a block size (`None`: 1).
    Cyclic(Option<i64>),
    /// `MPI_DISTRIBUTE_NONE`: not distributed.
    None,
}

impl Distribution {
    /// `(distrib, darg)` as C passes them.
    fn codes(self) -> (i64, i64) {
        const DFLT: i64 = -49767;
        match self {
            Distribution::Block(d) => (121, d.unwrap_or(DFLT)),
            Distribution::Cyclic(d) => (122, d.unwrap_or(DFLT)),
            Distribution::None => (123, DFLT),
        }
    }
}

fn dims_err(what: &'static str) -> Error {
    Error::InvalidArgument { what }
}

impl Datatype {
    /// `MPI_Type_dup`: a new type with the same type map, bounds and
    /// extent (combiner [`Combiner::Dup`]).
    pub fn dup(&self) -> Result<Datatype, Error> {
        let t = Datatype::contiguous(1, self)?;
        if self.is_committed() {
            t.commit()?;
        }
        Ok(t.record(
            Combiner::Dup,
            Contents {
                types: vec![self.clone()],
                ..Contents::default()
            },
        ))
    }

    /// `MPI_Type_create_indexed_block`: blocks of `blocklen` copies of
    /// `old` at `displs` *elements*.
    pub fn indexed_block(blocklen: i64, displs: &[i64], old: &Datatype) -> Result<Datatype, Error> {
        let lens = vec![blocklen; displs.len()];
        let t = Datatype::indexed(&lens, displs, old)?;
        let mut integers = vec![displs.len() as i64, blocklen];
        integers.extend_from_slice(displs);
        Ok(t.record(
            Combiner::IndexedBlock,
            Contents {
                integers,
                types: vec![old.clone()],
                ..Contents::default()
            },
        ))
    }

    /// `MPI_Type_create_hindexed_block`: blocks of `blocklen` copies of
    /// `old` at `displs` bytes.
    pub fn hindexed_block(
        blocklen: i64,
        displs: &[isize],
        old: &Datatype,
    ) -> Result<Datatype, Error> {
        let lens = vec![blocklen; displs.len()];
        let t = Datatype::hindexed(&lens, displs, old)?;
        Ok(t.record(
            Combiner::HindexedBlock,
            Contents {
                integers: vec![displs.len() as i64, blocklen],
                addresses: displs.to_vec(),
                types: vec![old.clone()],
            },
        ))
    }

    /// `MPI_Type_create_subarray`: the `subsizes` block at `starts` of an
    /// array of `sizes` elements of `old`, in `order`. Its lower bound is
    /// 0 and its extent the whole array's.
    pub fn subarray(
        sizes: &[i64],
        subsizes: &[i64],
        starts: &[i64],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype, Error> {
        let nd = sizes.len();
        if nd == 0 || subsizes.len() != nd || starts.len() != nd {
            return Err(dims_err(
                "subarray: sizes, subsizes and starts differ in length",
            ));
        }
        for i in 0..nd {
            if sizes[i] <= 0
                || subsizes[i] <= 0
                || subsizes[i] > sizes[i]
                || starts[i] < 0
                || starts[i] > sizes[i] - subsizes[i]
            {
                return Err(dims_err("subarray: a dimension is out of range"));
            }
        }
        // Dimensions from the fastest varying to the slowest.
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        let ext = old.extent() as i128;
        let to_isize =
            |v: i128| isize::try_from(v).map_err(|_| Error::Overflow { what: "subarray" });
        let mut t = Datatype::contiguous(subsizes[dims[0]], old)?;
        let mut stride = sizes[dims[0]] as i128 * ext;
        for &d in &dims[1..] {
            t = Datatype::hvector(subsizes[d], 1, to_isize(stride)?, &t)?;
            stride *= sizes[d] as i128;
        }
        let mut disp = 0i128;
        let mut s = ext;
        for &d in &dims {
            disp += starts[d] as i128 * s;
            s *= sizes[d] as i128;
        }
        let t = Datatype::hindexed(&[1], &[to_isize(disp)?], &t)?;
        let t = Datatype::resized(&t, 0, to_isize(stride)?)?;
        let mut integers = vec![nd as i64];
        integers.extend_from_slice(sizes);
        integers.extend_from_slice(subsizes);
        integers.extend_from_slice(starts);
        integers.push(order.code());
        Ok(t.record(
            Combiner::Subarray,
            Contents {
                integers,
                types: vec![old.clone()],
                ..Contents::default()
            },
        ))
    }

    /// `MPI_Type_create_darray`: process `rank`'s part of a `gsizes` array
    /// of `old` distributed over a `psizes` grid of `size` processes
    /// (process coordinates in row-major order), in `order`.
    #[allow(clippy::too_many_arguments)]
    pub fn darray(
        size: i32,
        rank: i32,
        gsizes: &[i64],
        distribs: &[Distribution],
        psizes: &[i64],
        order: Order,
        old: &Datatype,
    ) -> Result<Datatype, Error> {
        let nd = gsizes.len();
        if nd == 0 || distribs.len() != nd || psizes.len() != nd {
            return Err(dims_err("darray: argument arrays differ in length"));
        }
        if size <= 0 || rank < 0 || rank >= size {
            return Err(Error::InvalidRank { rank, size });
        }
        if psizes.iter().any(|&p| p <= 0) || gsizes.iter().any(|&g| g <= 0) {
            return Err(dims_err("darray: sizes must be positive"));
        }
        if psizes.iter().product::<i64>() != size as i64 {
            return Err(dims_err(
                "darray: the process grid does not have `size` processes",
            ));
        }
        for (d, p) in distribs.iter().zip(psizes) {
            if *d == Distribution::None && *p != 1 {
                return Err(dims_err(
                    "darray: an undistributed dimension needs one process",
                ));
            }
        }
        // Coordinates in the process grid, row-major.
        let mut coords = vec![0i64; nd];
        let (mut procs, mut r) = (size as i64, rank as i64);
        for i in 0..nd {
            procs /= psizes[i];
            coords[i] = r / procs;
            r %= procs;
        }
        let ext = old.extent() as i128;
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        let first = dims[0];
        let mut t = old.clone();
        let mut offsets = vec![0i64; nd];
        for &d in &dims {
            let (nt, off) = match distribs[d] {
                Distribution::Block(darg) => {
                    dist_block(gsizes, d, order, psizes[d], coords[d], darg, ext, &t)?
                }
                Distribution::Cyclic(darg) => dist_cyclic(
                    gsizes,
                    d,
                    order,
                    psizes[d],
                    coords[d],
                    darg,
                    ext,
                    &t,
                    d == first,
                )?,
                Distribution::None => dist_block(gsizes, d, order, 1, 0, None, ext, &t)?,
            };
            t = nt;
            offsets[d] = off;
        }
        // The displacement of this process's first element, and the
        // whole array's extent.
        let mut disp = offsets[dims[0]] as i128;
        let mut tmp = 1i128;
        for w in dims.windows(2) {
            tmp *= gsizes[w[0]] as i128;
            disp += tmp * offsets[w[1]] as i128;
        }
        let to_isize = |v: i128| isize::try_from(v).map_err(|_| Error::Overflow { what: "darray" });
        let total: i128 = gsizes.iter().map(|&g| g as i128).product::<i128>() * ext;
        let t = Datatype::hindexed(&[1], &[to_isize(disp * ext)?], &t)?;
        let t = Datatype::resized(&t, 0, to_isize(total)?)?;
        let mut integers = vec![size as i64, rank as i64, nd as i64];
        integers.extend_from_slice(gsizes);
        integers.extend(distribs.iter().map(|d| d.codes().0));
        integers.extend(distribs.iter().map(|d| d.codes().1));
        integers.extend_from_slice(psizes);
        integers.push(order.code());
        Ok(t.record(
            Combiner::Darray,
            Contents {
                integers,
                types: vec![old.clone()],
                ..Contents::default()
            },
        ))
    }
}

/// The stride (bytes) between consecutive indices of dimension `d`.
fn dim_stride(gsizes: &[i64], d: usize, order: Order, ext: i128) -> i128 {
    let mut s = ext;
    match order {
        Order::Fortran => gsizes[..d].iter().for_each(|&g| s *= g as i128),
        Order::C => gsizes[d + 1..].iter().for_each(|&g| s *= g as i128),
    }
    s
}

/// One block-distributed dimension (MPICH's `MPIR_Type_block`): the new
/// type and the start offset (in elements of the dimension).
#[allow(clippy::too_many_arguments)]
fn dist_block(
    gsizes: &[i64],
    d: usize,
    order: Order,
    nprocs: i64,
    coord: i64,
    darg: Option<i64>,
    ext: i128,
    old: &Datatype,
) -> Result<(Datatype, i64), Error> {
    let global = gsizes[d];
    let blksize = match darg {
        None => (global + nprocs - 1) / nprocs,
        Some(b) if b <= 0 || b * nprocs < global => {
            return Err(dims_err("darray: block size too small for the dimension"))
        }
        Some(b) => b,
    };
    let mysize = blksize.min(global - blksize * coord).max(0);
    let innermost = match order {
        Order::Fortran => d == 0,
        Order::C => d + 1 == gsizes.len(),
    };
    let t = if innermost {
        Datatype::contiguous(mysize, old)?
    } else {
        let stride =
            isize::try_from(dim_stride(gsizes, d, order, ext)).map_err(|_| Error::Overflow {
                what: "darray stride",
            })?;
        Datatype::hvector(mysize, 1, stride, old)?
    };
    let off = if mysize == 0 { 0 } else { blksize * coord };
    // As MPICH: the dimension's type spans the whole dimension.
    Ok((dim_resized(t, gsizes[d], old)?, off))
}

/// `t` with lower bound 0 and the extent of `g` elements of `old`.
fn dim_resized(t: Datatype, g: i64, old: &Datatype) -> Result<Datatype, Error> {
    let e = isize::try_from(g as i128 * old.extent() as i128).map_err(|_| Error::Overflow {
        what: "darray extent",
    })?;
    Datatype::resized(&t, 0, e)
}

/// One cyclically distributed dimension (MPICH's `MPIR_Type_cyclic`).
#[allow(clippy::too_many_arguments)]
fn dist_cyclic(
    gsizes: &[i64],
    d: usize,
    order: Order,
    nprocs: i64,
    coord: i64,
    darg: Option<i64>,
    ext: i128,
    old: &Datatype,
    first: bool,
) -> Result<(Datatype, i64), Error> {
    let blksize = match darg {
        None => 1,
        Some(b) if b <= 0 => return Err(dims_err("darray: cyclic block size must be positive")),
        Some(b) => b,
    };
    let st_index = coord * blksize;
    let end_index = gsizes[d] - 1;
    let local = if end_index < st_index {
        0
    } else {
        let span = end_index - st_index + 1;
        (span / (nprocs * blksize)) * blksize + (span % (nprocs * blksize)).min(blksize)
    };
    let count = local / blksize;
    let rem = local % blksize;
    let stride = nprocs as i128 * blksize as i128 * dim_stride(gsizes, d, order, ext);
    let stride_b = isize::try_from(stride).map_err(|_| Error::Overflow {
        what: "darray stride",
    })?;
    let mut t = Datatype::hvector(count, blksize, stride_b, old)?;
    if rem > 0 {
        let last = isize::try_from(count as i128 * stride).map_err(|_| Error::Overflow {
            what: "darray displacement",
        })?;
        t = Datatype::struct_type(&[1, rem], &[0, last], &[t, old.clone()])?;
    }
    if first {
        let lb = isize::try_from(coord as i128 * blksize as i128 * ext).map_err(|_| {
            Error::Overflow {
                what: "darray displacement",
            }
        })?;
        let e = isize::try_from(ext * gsizes[d] as i128).map_err(|_| Error::Overflow {
            what: "darray extent",
        })?;
        t = Datatype::hindexed(&[1], &[lb], &t)?;
        t = Datatype::resized(&t, 0, e)?;
        return Ok((dim_resized(t, gsizes[d], old)?, 0));
    }
    let off = if local == 0 { 0 } else { coord * blksize };
    Ok((dim_resized(t, gsizes[d], old)?, off))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BasicType;

    fn int() -> Datatype {
        Datatype::basic(BasicType::I32)
    }

    fn blocks(t: &Datatype) -> Vec<(isize, usize)> {
        t.commit().unwrap();
        t.flat()
            .unwrap()
            .blocks()
            .iter()
            .map(|b| (b.disp, b.len))
            .collect()
    }

    #[test]
    fn subarray_of_a_matrix() {
        // 4x5 ints, the 2x3 block at (1, 2), C order.
        let t = Datatype::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &int()).unwrap();
        assert_eq!(blocks(&t), vec![(28, 12), (48, 12)]);
        assert_eq!((t.lb(), t.extent(), t.size()), (0, 80, 24));
        assert_eq!(t.combiner(), Combiner::Subarray);
        let c = t.contents().unwrap();
        assert_eq!(c.integers, vec![2, 4, 5, 2, 3, 1, 2, 56]);
        // Fortran order: the first dimension is contiguous.
        let f = Datatype::subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, &int()).unwrap();
        assert_eq!(blocks(&f), vec![(36, 8), (52, 8), (68, 8)]);
        assert!(Datatype::subarray(&[4], &[5], &[0], Order::C, &int()).is_err());
    }

    #[test]
    fn darray_block_and_cyclic() {
        // 8 ints over 2 processes, block: process 1 has 4..8.
        let t = Datatype::darray(
            2,
            1,
            &[8],
            &[Distribution::Block(None)],
            &[2],
            Order::C,
            &int(),
        )
        .unwrap();
        assert_eq!(blocks(&t), vec![(16, 16)]);
        assert_eq!((t.lb(), t.extent()), (0, 32));
        // Cyclic(1) over 3 processes: process 1 has 1, 4, 7.
        let c = Datatype::darray(
            3,
            1,
            &[8],
            &[Distribution::Cyclic(None)],
            &[3],
            Order::C,
            &int(),
        )
        .unwrap();
        assert_eq!(blocks(&c), vec![(4, 4), (16, 4), (28, 4)]);
        // 2-D: 4x4 over a 2x2 grid, block x block, process 3 = (1, 1).
        let b = Datatype::darray(
            4,
            3,
            &[4, 4],
            &[Distribution::Block(None), Distribution::Block(None)],
            &[2, 2],
            Order::C,
            &int(),
        )
        .unwrap();
        assert_eq!(blocks(&b), vec![(40, 8), (56, 8)]);
    }

    #[test]
    fn dup_and_blocks_record_contents() {
        let d = int().dup().unwrap();
        assert_eq!(d.combiner(), Combiner::Dup);
        assert!(d.contents().unwrap().types[0].same(&d.contents().unwrap().types[0]));
        let ib = Datatype::indexed_block(2, &[0, 5], &int()).unwrap();
        assert_eq!(blocks(&ib), vec![(0, 8), (20, 8)]);
        assert_eq!(ib.contents().unwrap().integers, vec![2, 2, 0, 5]);
        let hb = Datatype::hindexed_block(1, &[4, 12], &int()).unwrap();
        assert_eq!(hb.combiner(), Combiner::HindexedBlock);
        assert_eq!(hb.contents().unwrap().addresses, vec![4, 12]);
    }
}
