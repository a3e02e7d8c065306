//! `MPI_Get_elements`: how many basic elements a number of packed bytes
//! holds ([`Datatype::elements_in`]).

use super::{BasicType, Datatype, Kind};

impl Datatype {
    /// `MPI_Get_elements`: the number of basic elements (the entries of
    /// the type map; a pair type such as `MPI_2INT` counts two) in the
    /// first `bytes` bytes of a packed stream of this type, or `None`
    /// (`MPI_UNDEFINED`) if `bytes` ends inside a basic element. A type
    /// without data gives `Some(0)`.
    ///
    /// ```
    /// use adi::{BasicType, Datatype};
    /// let i = Datatype::basic(BasicType::I32);
    /// let d = Datatype::basic(BasicType::F64);
    /// // struct { int; double; }: 12 bytes of data, two elements.
    /// let t = Datatype::struct_type(&[1, 1], &[0, 8], &[i, d])?;
    /// assert_eq!(t.elements_in(12 + 4), Some(3)); // one struct and an int
    /// assert_eq!(t.elements_in(12 + 6), None);    // ends inside the double
    /// # Ok::<(), adi::Error>(())
    /// ```
    pub fn elements_in(&self, bytes: usize) -> Option<usize> {
        let size = self.size();
        if size == 0 {
            return Some(0);
        }
        let full = (bytes / size).saturating_mul(self.basic_count());
        let mut left = bytes % size;
        let part = self.prefix_elements(&mut left)?;
        (left == 0).then(|| full.saturating_add(part))
    }

    /// The one basic type of every entry of this type's type map, if
    /// there is one: what a predefined reduction combines (a `contiguous`
    /// of `MPI_INT` reduces as `MPI_INT`s). `None` for a mixed or empty
    /// type.
    pub fn reduce_basic(&self) -> Option<BasicType> {
        match &self.inner.kind {
            Kind::Basic(t) => Some(*t),
            Kind::Vector { old, .. } | Kind::Indexed { old, .. } | Kind::Resized { old } => {
                old.reduce_basic()
            }
            Kind::Struct { blocks } => {
                let mut one = None;
                for (n, _, t) in blocks {
                    if *n == 0 || t.size() == 0 {
                        continue;
                    }
                    let b = t.reduce_basic()?;
                    if one.is_some_and(|o| o != b) {
                        return None;
                    }
                    one = Some(b);
                }
                one
            }
        }
    }

    /// Basic elements in one element of this type.
    fn basic_count(&self) -> usize {
        match &self.inner.kind {
            Kind::Basic(t) => t.parts().len(),
            Kind::Vector {
                count,
                blocklen,
                old,
                ..
            } => count
                .saturating_mul(*blocklen)
                .saturating_mul(old.basic_count()),
            Kind::Indexed { blocks, old } => blocks
                .iter()
                .map(|b| b.0)
                .fold(0usize, usize::saturating_add)
                .saturating_mul(old.basic_count()),
            Kind::Struct { blocks } => blocks
                .iter()
                .map(|(n, _, t)| n.saturating_mul(t.basic_count()))
                .fold(0, usize::saturating_add),
            Kind::Resized { old } => old.basic_count(),
        }
    }

    /// Walks the type map in packed order, consuming `*left` bytes:
    /// returns the elements wholly consumed, with `*left` at 0, or `None`
    /// if the bytes end inside a basic element. Stops early (with
    /// `*left` > 0) only when the element is exhausted.
    fn prefix_elements(&self, left: &mut usize) -> Option<usize> {
        match &self.inner.kind {
            Kind::Basic(t) => {
                let mut n = 0;
                for &(_, len) in t.parts() {
                    if *left == 0 {
                        break;
                    }
                    if *left < len {
                        return None;
                    }
                    *left -= len;
                    n += 1;
                }
                Some(n)
            }
            Kind::Vector {
                count,
                blocklen,
                old,
                ..
            } => old.copies_prefix(count.saturating_mul(*blocklen), left),
            Kind::Indexed { blocks, old } => {
                let copies = blocks
                    .iter()
                    .map(|b| b.0)
                    .fold(0usize, usize::saturating_add);
                old.copies_prefix(copies, left)
            }
            Kind::Struct { blocks } => {
                let mut n = 0usize;
                for (copies, _, t) in blocks {
                    if *left == 0 {
                        break;
                    }
                    n = n.saturating_add(t.copies_prefix(*copies, left)?);
                }
                Some(n)
            }
            Kind::Resized { old } => old.prefix_elements(left),
        }
    }

    /// [`prefix_elements`](Self::prefix_elements) over `copies`
    /// consecutive copies of this type.
    fn copies_prefix(&self, copies: usize, left: &mut usize) -> Option<usize> {
        let size = self.size();
        if size == 0 || copies == 0 {
            return Some(0);
        }
        let whole = (*left / size).min(copies);
        *left -= whole * size;
        let mut n = whole.saturating_mul(self.basic_count());
        if *left > 0 && whole < copies {
            n = n.saturating_add(self.prefix_elements(left)?);
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use crate::{BasicType, Datatype};

    #[test]
    fn elements_of_basic_vector_and_pairs() {
        let i = Datatype::basic(BasicType::I32);
        assert_eq!(i.elements_in(12), Some(3));
        assert_eq!(i.elements_in(13), None);
        let v = Datatype::vector(2, 3, 5, &i).unwrap();
        assert_eq!(v.elements_in(24 + 8), Some(6 + 2));
        let p = Datatype::basic(BasicType::DoubleInt);
        assert_eq!(p.elements_in(12), Some(2));
        assert_eq!(p.elements_in(8), Some(1));
        let empty = Datatype::contiguous(0, &i).unwrap();
        assert_eq!(empty.elements_in(0), Some(0));
    }
}
