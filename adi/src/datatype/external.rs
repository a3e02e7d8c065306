//! `MPI_Pack_external` with the `external32` representation: the packed
//! bytes with every basic value in big-endian order (each half of a
//! complex number, each member of a pair swapped on its own). The sizes
//! are the native ones, which are `external32`'s for every type but
//! `long`, `unsigned long` and `wchar_t`; `long double` (whose
//! `external32` form is a 16-byte IEEE quad) is refused.

use super::{BasicType, Datatype, Kind};
use crate::Error;

impl Datatype {
    /// The byte-swap units of one element, in packed order (0: a value
    /// whose bytes are not swapped).
    fn swap_units(&self, out: &mut Vec<usize>) -> Result<(), Error> {
        match &self.inner.kind {
            Kind::Basic(t) => {
                use BasicType as B;
                match t {
                    B::LongDouble | B::ComplexLongDouble | B::LongDoubleInt => {
                        return Err(Error::Unsupported {
                            what: "long double in external32",
                        })
                    }
                    B::ComplexF32 => out.extend([4, 4]),
                    B::ComplexF64 => out.extend([8, 8]),
                    B::Byte | B::Char | B::I8 | B::U8 | B::Bool => out.push(1),
                    t => out.extend(t.parts().iter().map(|p| p.1)),
                }
            }
            Kind::Vector {
                count,
                blocklen,
                old,
                ..
            } => {
                let mut one = Vec::new();
                old.swap_units(&mut one)?;
                for _ in 0..count.saturating_mul(*blocklen) {
                    out.extend_from_slice(&one);
                }
            }
            Kind::Indexed { blocks, old } => {
                let mut one = Vec::new();
                old.swap_units(&mut one)?;
                for &(n, _) in blocks {
                    for _ in 0..n {
                        out.extend_from_slice(&one);
                    }
                }
            }
            Kind::Struct { blocks } => {
                for (n, _, t) in blocks {
                    let mut one = Vec::new();
                    t.swap_units(&mut one)?;
                    for _ in 0..*n {
                        out.extend_from_slice(&one);
                    }
                }
            }
            Kind::Resized { old } => old.swap_units(out)?,
        }
        Ok(())
    }

    /// Swaps the packed bytes of `count` elements between native and
    /// `external32` order (its own inverse).
    fn swap_external(&self, data: &mut [u8], count: usize) -> Result<(), Error> {
        let mut units = Vec::new();
        self.swap_units(&mut units)?;
        let mut at = 0;
        for _ in 0..count {
            for &u in &units {
                if let Some(v) = data.get_mut(at..at + u) {
                    v.reverse();
                }
                at += u;
            }
        }
        Ok(())
    }

    /// `MPI_Pack_external_size` (`external32`).
    pub fn pack_external_size(&self, count: i64) -> Result<usize, Error> {
        let mut units = Vec::new();
        self.swap_units(&mut units)?;
        self.pack_size(count)
    }

    /// `MPI_Pack_external` (`external32`): like [`pack`](Self::pack),
    /// with every value big-endian.
    pub fn pack_external(
        &self,
        src: &[u8],
        count: i64,
        out: &mut [u8],
        position: &mut usize,
    ) -> Result<(), Error> {
        let start = *position;
        self.pack(src, count, out, position)?;
        let n = usize::try_from(count).unwrap_or(0);
        self.swap_external(&mut out[start..*position], n)
    }

    /// `MPI_Unpack_external` (`external32`).
    pub fn unpack_external(
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
        let mut native = rest[..need].to_vec();
        let n = usize::try_from(count).unwrap_or(0);
        self.swap_external(&mut native, n)?;
        let mut p = 0;
        self.unpack(&native, &mut p, dst, count)?;
        *position += p;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{BasicType, Datatype};

    #[test]
    fn external32_is_big_endian_per_value() {
        let i = Datatype::basic(BasicType::I32);
        let s = Datatype::basic(BasicType::I16);
        let t = Datatype::struct_type(&[1, 2], &[0, 4], &[i, s]).unwrap();
        t.commit().unwrap();
        let mut src = Vec::new();
        src.extend_from_slice(&0x0102_0304i32.to_ne_bytes());
        src.extend_from_slice(&0x0506i16.to_ne_bytes());
        src.extend_from_slice(&0x0708i16.to_ne_bytes());
        let mut out = vec![0u8; 8];
        let mut pos = 0;
        t.pack_external(&src, 1, &mut out, &mut pos).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
        let mut back = vec![0u8; 8];
        let mut p = 0;
        t.unpack_external(&out, &mut p, &mut back, 1).unwrap();
        assert_eq!((back, p), (src, 8));
        let ld = Datatype::basic(BasicType::LongDouble);
        assert!(ld.pack_external_size(1).is_err());
    }
}
