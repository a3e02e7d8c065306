//! Memory regions of the software device: registration, access by the
//! driver, scatter of arriving data, and the pool of large payload buffers.

use super::{MrEntry, Nic, RegionRef};
use crate::verbs::{errno, Sge, WcStatus, IBV_ACCESS_LOCAL_WRITE};
use crate::{Error, Mr, Result};

/// Buffers kept in the pool.
pub(super) const POOL_BUFS: usize = 16;
/// Largest buffer kept in the pool.
pub(super) const POOL_MAX: usize = 16 << 20;
/// Smallest capacity a payload buffer is allocated with (eager messages
/// of different sizes then share pooled buffers).
pub(super) const MIN_CAP: usize = 4 << 10;

impl Nic {
    /// An empty buffer for a payload of `len` bytes: the smallest pooled
    /// buffer that holds it, else the largest pooled one grown, else a new
    /// one.
    pub(super) fn buf(&mut self, len: usize) -> Vec<u8> {
        if let Some(v) = self.pool.take_fit(len) {
            self.stats.staging_reused += 1;
            return v;
        }
        self.stats.staging_allocs += 1;
        if let Some(mut v) = self.pool.take_largest() {
            v.reserve(len);
            return v;
        }
        Vec::with_capacity(len.max(MIN_CAP))
    }

    /// Takes back a payload buffer the driver has written or copied. A full
    /// pool keeps the larger buffers.
    pub fn recycle(&mut self, mut v: Vec<u8>) {
        if self.pool.keeps(v.capacity()) {
            v.clear();
            self.pool.put(v);
        }
    }

    /// The bytes `off..off + len` of region `mr` (with key `key`), for
    /// writing; `None` if the region is gone or the range outside it.
    pub fn region_mut(&mut self, mr: u32, key: u32, off: usize, len: usize) -> Option<&mut [u8]> {
        let m = self.mrs.get_mut(mr as usize)?.as_mut()?;
        if m.key != key {
            return None;
        }
        let end = off.checked_add(len)?;
        m.buf.get_mut(off..end)
    }

    /// The bytes a READ response refers to; `None` if the region is gone
    /// (or was registered again) or the range is outside it.
    pub fn region(&self, r: &RegionRef) -> Option<&[u8]> {
        let m = self.mrs.get(r.mr as usize)?.as_ref()?;
        if m.key != r.key {
            return None;
        }
        m.buf.get(r.off..r.off.checked_add(r.len)?)
    }

    /// A READ response's data copied out of its region into a payload
    /// buffer (counted in [`super::NicStats::read_bytes_staged`]).
    pub fn staged(&mut self, r: RegionRef) -> Option<Vec<u8>> {
        self.region(&r)?;
        let mut v = self.buf(r.len);
        let src = self.region(&r)?;
        v.extend_from_slice(src);
        self.stats.read_bytes_staged += r.len as u64;
        Some(v)
    }

    pub fn reg_mr(
        &mut self,
        buf: Vec<u8>,
        access: u32,
    ) -> core::result::Result<Mr, (Error, Vec<u8>)> {
        if buf.len() as u64 > self.cfg.caps.max_mr_size {
            return Err((Error::verbs("ibv_reg_mr", errno::EINVAL), buf));
        }
        let idx = match self.free_mrs.pop() {
            Some(i) => i,
            None => {
                self.mrs.push(None);
                (self.mrs.len() - 1) as u32
            }
        };
        // Each region its own 4 GiB window of the device address space.
        let base = (u64::from(idx) + 1) << 32;
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1).max(0x100);
        let len = buf.len();
        self.keys.insert(key, idx);
        self.mrs[idx as usize] = Some(MrEntry {
            buf,
            base,
            access,
            key,
        });
        Ok(Mr::new(idx, base, len, key, key))
    }

    pub fn dereg_mr(&mut self, mr: Mr) -> Result<Vec<u8>> {
        match self.mrs.get_mut(mr.id() as usize) {
            Some(slot @ Some(_)) if slot.as_ref().is_some_and(|m| m.key == mr.lkey()) => {
                let Some(m) = slot.take() else {
                    return Err(Error::verbs("ibv_dereg_mr", errno::EINVAL));
                };
                self.keys.remove(&m.key);
                self.free_mrs.push(mr.id());
                Ok(m.buf)
            }
            _ => Err(Error::verbs("ibv_dereg_mr", errno::EINVAL)),
        }
    }

    pub(super) fn mr_entry(&self, mr: &Mr) -> Result<&MrEntry> {
        match self.mrs.get(mr.id() as usize) {
            Some(Some(m)) if m.key == mr.lkey() => Ok(m),
            _ => Err(Error::verbs("mr access", errno::EINVAL)),
        }
    }

    pub fn mr_read(&self, mr: &Mr, offset: usize, dst: &mut [u8]) -> Result<()> {
        let m = self.mr_entry(mr)?;
        let src = offset
            .checked_add(dst.len())
            .and_then(|end| m.buf.get(offset..end))
            .ok_or(Error::verbs("mr read", errno::EFAULT))?;
        dst.copy_from_slice(src);
        Ok(())
    }

    pub fn mr_write(&mut self, mr: &Mr, offset: usize, src: &[u8]) -> Result<()> {
        match self.mrs.get_mut(mr.id() as usize) {
            Some(Some(m)) if m.key == mr.lkey() => {
                let dst = offset
                    .checked_add(src.len())
                    .and_then(|end| m.buf.get_mut(offset..end))
                    .ok_or(Error::verbs("mr write", errno::EFAULT))?;
                dst.copy_from_slice(src);
                Ok(())
            }
            _ => Err(Error::verbs("mr write", errno::EINVAL)),
        }
    }

    /// The region and offset of a local address.
    pub(super) fn locate(&self, addr: u64, lkey: u32) -> Option<(u32, usize)> {
        let idx = *self.keys.get(&lkey)?;
        let m = self.mrs.get(idx as usize)?.as_ref()?;
        let off = addr.checked_sub(m.base)?;
        (off <= m.buf.len() as u64).then_some((idx, off as usize))
    }

    /// Writes `data` across `sges` (at most their total length); the bytes
    /// written, or `LOC_PROT_ERR`.
    pub(super) fn scatter(
        &mut self,
        sges: &[Sge],
        mut data: &[u8],
    ) -> core::result::Result<usize, WcStatus> {
        let mut n = 0;
        for g in sges {
            if data.is_empty() {
                break;
            }
            if !self.check_sge(g, IBV_ACCESS_LOCAL_WRITE) {
                return Err(WcStatus::LOC_PROT_ERR);
            }
            let (mr, off) = self.locate(g.addr, g.lkey).ok_or(WcStatus::LOC_PROT_ERR)?;
            let take = data.len().min(g.length as usize);
            let Some(Some(m)) = self.mrs.get_mut(mr as usize) else {
                return Err(WcStatus::LOC_PROT_ERR);
            };
            m.buf[off..off + take].copy_from_slice(&data[..take]);
            data = &data[take..];
            n += take;
        }
        Ok(n)
    }
}
