//! [`Segments`]: the user-buffer regions of a packed sub-range
//! ([`Datatype::segments`](super::Datatype::segments)).

use super::Flat;

/// Iterator over the user-buffer regions of a packed sub-range; see
/// [`Datatype::segments`](super::Datatype::segments).
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    flat: &'a Flat,
    extent: isize,
    /// One run whose length is the extent: the whole stream is one region.
    dense: bool,
    /// Position: element, run, block within the run, byte within the block.
    elem: usize,
    run: usize,
    block: usize,
    off: usize,
    /// Packed bytes still to yield (from the position on).
    left: usize,
    /// Packed offset of the position (for the dense case).
    pos: usize,
    /// A region read ahead while merging.
    ahead: Option<(usize, usize)>,
}

impl<'a> Segments<'a> {
    /// Inlined into [`Datatype::segments`](super::Datatype::segments),
    /// which every datatype receive calls first (to check its buffer).
    #[inline]
    pub(super) fn new(flat: &'a Flat, extent: isize, pos: usize, end: usize) -> Self {
        let dense = flat.is_dense(extent);
        let mut s = Segments {
            flat,
            extent,
            dense,
            elem: 0,
            run: 0,
            block: 0,
            off: 0,
            left: end.saturating_sub(pos),
            pos,
            ahead: None,
        };
        if flat.size > 0 && s.left > 0 && !dense {
            (s.elem, s.run, s.block, s.off) = flat.locate(pos);
        }
        s
    }

    /// The next block piece, unmerged.
    fn piece(&mut self) -> Option<(usize, usize)> {
        if self.left == 0 || self.flat.size == 0 {
            return None;
        }
        if self.dense {
            let r = self.flat.runs.first()?;
            let start = r.disp as i128 + self.pos as i128;
            let n = self.left;
            self.left = 0;
            return Some((usize::try_from(start).ok()?, n));
        }
        let r = *self.flat.runs.get(self.run)?;
        let start = self.elem as i128 * self.extent as i128
            + r.disp as i128
            + self.block as i128 * r.stride as i128
            + self.off as i128;
        let n = (r.len - self.off).min(self.left);
        self.left -= n;
        self.off += n;
        if self.off == r.len {
            self.off = 0;
            self.block += 1;
            if self.block == r.count {
                self.block = 0;
                self.run += 1;
                if self.run == self.flat.runs.len() {
                    self.run = 0;
                    self.elem += 1;
                }
            }
        }
        // The buffer check of `segments` guarantees 0 <= start; a failed
        // conversion here would be a bug, reported as the end of iteration
        // (and caught by the property tests).
        Some((usize::try_from(start).ok()?, n))
    }
}

impl Iterator for Segments<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let (start, mut len) = self.ahead.take().or_else(|| self.piece())?;
        while let Some((s, l)) = self.piece() {
            if s == start + len {
                len += l;
            } else {
                self.ahead = Some((s, l));
                break;
            }
        }
        Some((start, len))
    }
}
