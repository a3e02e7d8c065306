//! The `ibverbs` provider: a TM-capable device (mlx5, ConnectX-5 and later)
//! through the system's libibverbs.
//!
//! The TM verbs are `static inline` in rdma-core's `verbs.h`: they dispatch
//! through `struct verbs_context`, which no released Rust binding covers
//! (the `ibverbs` crate reaches neither SRQs nor extended CQs, and
//! `ibverbs-sys` builds all of rdma-core with cmake and libclang). So a
//! small C shim (`csrc/shim.c`, compiled with `cc` against the system
//! headers, only with this feature) exports flat functions over the
//! inlines, and this module calls them. `unsafe` is confined to those calls
//! and to the registered buffers the device reads and writes.

use core::ffi::{c_char, c_int, c_void};
use core::ptr::{self, NonNull};

use crate::verbs::{
    errno, CqId, CqInitAttr, DeviceCaps, OpsWr, QpId, QpInitAttr, QpState, RecvWr, SendWr, Sge,
    SrqId, SrqInitAttr, TmCaps, TmInfo, Wc, WcOpcode, WcStatus,
};
use crate::{Error, Mr, Provider, Result};

mod ffi {
    use core::ffi::{c_char, c_int, c_void};

    #[repr(C)]
    pub struct VtmDev {
        _opaque: [u8; 0],
    }

    #[repr(C)]
    #[derive(Default)]
    pub struct VtmCaps {
        pub max_rndv_hdr_size: u32,
        pub max_num_tags: u32,
        pub flags: u32,
        pub max_ops: u32,
        pub max_sge: u32,
        pub max_srq_wr: u32,
        pub max_qp_wr: u32,
        pub max_cqe: u32,
        pub path_mtu: u32,
        pub max_mr_size: u64,
    }

    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    pub struct VtmSge {
        pub addr: u64,
        pub length: u32,
        pub lkey: u32,
    }

    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    pub struct VtmOp {
        pub wr_id: u64,
        pub opcode: u32,
        pub flags: u32,
        pub unexpected_cnt: u32,
        pub handle: u32,
        pub recv_wr_id: u64,
        pub tag: u64,
        pub mask: u64,
        pub sge: VtmSge,
        pub num_sge: i32,
    }

    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    pub struct VtmWc {
        pub wr_id: u64,
        pub status: u32,
        pub opcode: u32,
        pub wc_flags: u32,
        pub byte_len: u32,
        pub imm_data: u32,
        pub qp_num: u32,
        pub tm_tag: u64,
        pub tm_priv: u32,
        pub pad: u32,
    }

    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    pub struct VtmAddr {
        pub gid: [u8; 16],
        pub qpn: u32,
        pub psn: u32,
        pub mtu: u32,
        pub lid: u16,
        pub pad: u16,
    }

    extern "C" {
        pub fn vtm_open(
            name: *const c_char,
            out: *mut *mut VtmDev,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        pub fn vtm_close(dev: *mut VtmDev);
        pub fn vtm_dev_name(dev: *mut VtmDev) -> *const c_char;
        pub fn vtm_dev_context(dev: *mut VtmDev) -> *mut c_void;
        pub fn vtm_dev_pd(dev: *mut VtmDev) -> *mut c_void;
        pub fn vtm_query(dev: *mut VtmDev, caps: *mut VtmCaps) -> c_int;
        pub fn vtm_create_cq(
            ctx: *mut c_void,
            cqe: u32,
            wc_flags: u64,
            extended: c_int,
            out: *mut *mut c_void,
        ) -> c_int;
        pub fn vtm_destroy_cq(cq: *mut c_void) -> c_int;
        pub fn vtm_create_srq(
            ctx: *mut c_void,
            pd: *mut c_void,
            comp_mask: u32,
            srq_type: u32,
            cq: *mut c_void,
            max_wr: *mut u32,
            max_sge: *mut u32,
            max_num_tags: u32,
            max_ops: u32,
            out: *mut *mut c_void,
        ) -> c_int;
        pub fn vtm_destroy_srq(srq: *mut c_void) -> c_int;
        pub fn vtm_post_srq_ops(
            srq: *mut c_void,
            ops: *mut VtmOp,
            n: c_int,
            bad: *mut c_int,
        ) -> c_int;
        pub fn vtm_post_srq_recv(
            srq: *mut c_void,
            wr_id: u64,
            sge: *const VtmSge,
            n: c_int,
        ) -> c_int;
        pub fn vtm_create_qp(
            pd: *mut c_void,
            send_cq: *mut c_void,
            recv_cq: *mut c_void,
            srq: *mut c_void,
            max_send_wr: u32,
            max_send_sge: u32,
            out: *mut *mut c_void,
        ) -> c_int;
        pub fn vtm_destroy_qp(qp: *mut c_void) -> c_int;
        pub fn vtm_qp_num(qp: *mut c_void) -> u32;
        pub fn vtm_local_addr(dev: *mut VtmDev, qp: *mut c_void, out: *mut VtmAddr) -> c_int;
        pub fn vtm_connect(
            dev: *mut VtmDev,
            qp: *mut c_void,
            local: *const VtmAddr,
            remote: *const VtmAddr,
        ) -> c_int;
        pub fn vtm_qp_state(qp: *mut c_void, state: *mut c_int) -> c_int;
        pub fn vtm_post_send(
            qp: *mut c_void,
            wr_id: u64,
            opcode: u32,
            flags: u32,
            sge: *const VtmSge,
            n: c_int,
            imm: u32,
            remote_addr: u64,
            rkey: u32,
        ) -> c_int;
        pub fn vtm_reg_mr(
            pd: *mut c_void,
            addr: *mut c_void,
            len: usize,
            access: u32,
            out: *mut *mut c_void,
            lkey: *mut u32,
            rkey: *mut u32,
        ) -> c_int;
        pub fn vtm_dereg_mr(mr: *mut c_void) -> c_int;
        pub fn vtm_poll(cq: *mut c_void, out: *mut VtmWc, max: c_int) -> c_int;
    }
}

/// Most SGEs the shim passes per work request.
const MAX_SGE: usize = 4;

fn check(call: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::verbs(call, rc))
    }
}

fn sges(list: &[Sge]) -> Result<([ffi::VtmSge; MAX_SGE], c_int)> {
    if list.len() > MAX_SGE {
        return Err(Error::verbs("sg_list", errno::EINVAL));
    }
    let mut out = [ffi::VtmSge::default(); MAX_SGE];
    for (o, g) in out.iter_mut().zip(list) {
        *o = ffi::VtmSge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        };
    }
    Ok((out, list.len() as c_int))
}

/// A registered buffer: the device may write it while it is the target of a
/// posted receive or READ, so it lives behind a raw pointer until
/// deregistration gives it back.
#[derive(Debug)]
struct MrSlot {
    mr: *mut c_void,
    buf: *mut u8,
    len: usize,
    key: u32,
}

/// An opened TM-capable device. See the [module docs](self).
#[derive(Debug)]
pub struct Device {
    dev: NonNull<ffi::VtmDev>,
    name: String,
    cqs: Vec<*mut c_void>,
    srqs: Vec<*mut c_void>,
    qps: Vec<*mut c_void>,
    mrs: Vec<Option<MrSlot>>,
}

// SAFETY: libibverbs objects may be used from any thread; a `Device` is
// owned by one thread at a time (`&mut self` for every verb that changes
// state), and the registered buffers are only reached through it.
unsafe impl Send for Device {}

impl Device {
    /// Opens the first active device with `IBV_TM_CAP_RC` (or the one named
    /// `name`). [`Error::NoDevice`] with the reason in one line otherwise.
    pub fn open(name: Option<&str>) -> Result<Self> {
        let want = match name {
            Some(n) => Some(std::ffi::CString::new(n).map_err(|_| Error::NoDevice {
                reason: "device name with a NUL byte".into(),
            })?),
            None => None,
        };
        let mut err = [0 as c_char; 160];
        let mut dev: *mut ffi::VtmDev = ptr::null_mut();
        // SAFETY: `want` outlives the call (or is NULL), `dev` and `err` are
        // valid for writes of the sizes given; the shim NUL-terminates `err`.
        let rc = unsafe {
            ffi::vtm_open(
                want.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                &mut dev,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        let Some(dev) = NonNull::new(dev).filter(|_| rc == 0) else {
            // SAFETY: the shim wrote a NUL-terminated string into `err`
            // (snprintf), which is zero-initialised anyway.
            let reason = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            return Err(Error::NoDevice { reason });
        };
        // SAFETY: `dev` is the live device the shim just opened; the name is
        // a NUL-terminated array inside it.
        let name = unsafe { std::ffi::CStr::from_ptr(ffi::vtm_dev_name(dev.as_ptr())) }
            .to_string_lossy()
            .into_owned();
        Ok(Device {
            dev,
            name,
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            mrs: Vec::new(),
        })
    }

    fn cq(&self, cq: CqId) -> Result<*mut c_void> {
        self.cqs
            .get(cq.0 as usize)
            .copied()
            .filter(|p| !p.is_null())
            .ok_or(Error::verbs("cq", errno::EINVAL))
    }

    fn srq(&self, srq: SrqId) -> Result<*mut c_void> {
        self.srqs
            .get(srq.0 as usize)
            .copied()
            .filter(|p| !p.is_null())
            .ok_or(Error::verbs("srq", errno::EINVAL))
    }

    fn qp(&self, qp: QpId) -> Result<*mut c_void> {
        self.qps
            .get(qp.0 as usize)
            .copied()
            .filter(|p| !p.is_null())
            .ok_or(Error::verbs("qp", errno::EINVAL))
    }

    fn slot(&self, mr: &Mr) -> Result<&MrSlot> {
        match self.mrs.get(mr.id() as usize) {
            Some(Some(s)) if s.key == mr.lkey() => Ok(s),
            _ => Err(Error::verbs("mr", errno::EINVAL)),
        }
    }

    fn addr(&self, qp: *mut c_void) -> Result<ffi::VtmAddr> {
        let mut a = ffi::VtmAddr::default();
        // SAFETY: `qp` is a live QP of this device; `a` is valid for a write.
        check("ibv_query_qp", unsafe {
            ffi::vtm_local_addr(self.dev.as_ptr(), qp, &mut a)
        })?;
        Ok(a)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Objects the user did not destroy, children first.
        for qp in self.qps.drain(..).filter(|p| !p.is_null()) {
            // SAFETY: a live QP of this device, destroyed once.
            unsafe { ffi::vtm_destroy_qp(qp) };
        }
        for srq in self.srqs.drain(..).filter(|p| !p.is_null()) {
            // SAFETY: a live SRQ of this device, its QPs gone.
            unsafe { ffi::vtm_destroy_srq(srq) };
        }
        for cq in self.cqs.drain(..).filter(|p| !p.is_null()) {
            // SAFETY: a live CQ of this device, its users gone.
            unsafe { ffi::vtm_destroy_cq(cq) };
        }
        for s in self.mrs.drain(..).flatten() {
            // SAFETY: a live MR; after deregistration the device no longer
            // touches the buffer, which `Box::from_raw` then frees (it came
            // from `Box::into_raw` of a boxed slice of `len` bytes).
            unsafe {
                ffi::vtm_dereg_mr(s.mr);
                drop(Box::from_raw(ptr::slice_from_raw_parts_mut(s.buf, s.len)));
            }
        }
        // SAFETY: the device, closed once, with every object gone.
        unsafe { ffi::vtm_close(self.dev.as_ptr()) };
    }
}

fn push(v: &mut Vec<*mut c_void>, p: *mut c_void) -> u32 {
    v.push(p);
    (v.len() - 1) as u32
}

impl Provider for Device {
    fn name(&self) -> &str {
        &self.name
    }

    fn query_device(&self) -> Result<DeviceCaps> {
        let mut c = ffi::VtmCaps::default();
        // SAFETY: a live device; `c` is valid for a write.
        check("ibv_query_device_ex", unsafe {
            ffi::vtm_query(self.dev.as_ptr(), &mut c)
        })?;
        Ok(DeviceCaps {
            tm: TmCaps {
                max_rndv_hdr_size: c.max_rndv_hdr_size,
                max_num_tags: c.max_num_tags,
                flags: c.flags,
                max_ops: c.max_ops,
                max_sge: c.max_sge,
            },
            max_srq_wr: c.max_srq_wr,
            max_qp_wr: c.max_qp_wr,
            max_cqe: c.max_cqe,
            path_mtu: c.path_mtu,
            max_mr_size: c.max_mr_size,
        })
    }

    fn create_cq(&mut self, attr: &CqInitAttr) -> Result<CqId> {
        let mut cq = ptr::null_mut();
        // SAFETY: the device's context; `cq` is valid for a write.
        check("ibv_create_cq_ex", unsafe {
            ffi::vtm_create_cq(
                ffi::vtm_dev_context(self.dev.as_ptr()),
                attr.cqe,
                attr.wc_flags,
                c_int::from(attr.extended),
                &mut cq,
            )
        })?;
        Ok(CqId(push(&mut self.cqs, cq)))
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        let p = self.cq(cq)?;
        // SAFETY: a live CQ of this device; its slot is cleared below so it
        // is destroyed once.
        check("ibv_destroy_cq", unsafe { ffi::vtm_destroy_cq(p) })?;
        self.cqs[cq.0 as usize] = ptr::null_mut();
        Ok(())
    }

    fn create_srq(&mut self, attr: &mut SrqInitAttr) -> Result<SrqId> {
        let cq = match attr.cq {
            Some(c) => self.cq(c)?,
            None => ptr::null_mut(),
        };
        let (mut max_wr, mut max_sge) = (attr.max_wr, attr.max_sge);
        let mut srq = ptr::null_mut();
        // SAFETY: the device's context and PD, a live CQ (or NULL); the
        // out-pointers are valid for writes.
        check("ibv_create_srq_ex", unsafe {
            ffi::vtm_create_srq(
                ffi::vtm_dev_context(self.dev.as_ptr()),
                ffi::vtm_dev_pd(self.dev.as_ptr()),
                attr.comp_mask,
                attr.srq_type.0,
                cq,
                &mut max_wr,
                &mut max_sge,
                attr.tm_cap.max_num_tags,
                attr.tm_cap.max_ops,
                &mut srq,
            )
        })?;
        attr.max_wr = max_wr;
        attr.max_sge = max_sge;
        Ok(SrqId(push(&mut self.srqs, srq)))
    }

    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        let p = self.srq(srq)?;
        // SAFETY: a live SRQ of this device, destroyed once (slot cleared).
        check("ibv_destroy_srq", unsafe { ffi::vtm_destroy_srq(p) })?;
        self.srqs[srq.0 as usize] = ptr::null_mut();
        Ok(())
    }

    fn post_srq_ops(&mut self, srq: SrqId, wrs: &mut [OpsWr<'_>]) -> Result<()> {
        let p = self.srq(srq).map_err(|_| Error::PostOps {
            bad_wr: 0,
            errno: errno::EINVAL,
        })?;
        let mut done = 0;
        // The shim takes chains of up to 64.
        for chunk in wrs.chunks_mut(64) {
            let mut ops: Vec<ffi::VtmOp> = chunk
                .iter()
                .map(|w| {
                    let g = w.add.sg_list.first().copied().unwrap_or_default();
                    ffi::VtmOp {
                        wr_id: w.wr_id,
                        opcode: w.opcode.0,
                        flags: w.flags,
                        unexpected_cnt: w.unexpected_cnt,
                        handle: w.handle,
                        recv_wr_id: w.add.recv_wr_id,
                        tag: w.add.tag,
                        mask: w.add.mask,
                        sge: ffi::VtmSge {
                            addr: g.addr,
                            length: g.length,
                            lkey: g.lkey,
                        },
                        num_sge: w.add.sg_list.len().min(1) as i32,
                    }
                })
                .collect();
            let mut bad: c_int = 0;
            // SAFETY: a live TM-SRQ; `ops` holds `ops.len()` initialised
            // entries the shim reads and writes (handles) in place; `bad` is
            // valid for a write. The tagged buffers are registered regions
            // this device owns.
            let rc =
                unsafe { ffi::vtm_post_srq_ops(p, ops.as_mut_ptr(), ops.len() as c_int, &mut bad) };
            let posted = if rc == 0 {
                ops.len()
            } else {
                bad.max(0) as usize
            };
            for (w, o) in chunk.iter_mut().zip(&ops).take(posted) {
                w.handle = o.handle;
            }
            if rc != 0 {
                return Err(Error::PostOps {
                    bad_wr: done + posted,
                    errno: rc,
                });
            }
            done += chunk.len();
        }
        Ok(())
    }

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        let p = self.srq(srq)?;
        let (g, n) = sges(wr.sg_list)?;
        // SAFETY: a live SRQ; `g` holds `n` SGEs of registered regions.
        check("ibv_post_srq_recv", unsafe {
            ffi::vtm_post_srq_recv(p, wr.wr_id, g.as_ptr(), n)
        })
    }

    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<QpId> {
        let (scq, rcq) = (self.cq(attr.send_cq)?, self.cq(attr.recv_cq)?);
        let srq = match attr.srq {
            Some(s) => self.srq(s)?,
            None => ptr::null_mut(),
        };
        let mut qp = ptr::null_mut();
        // SAFETY: the device's PD, live CQs and SRQ (or NULL); `qp` is valid
        // for a write.
        check("ibv_create_qp", unsafe {
            ffi::vtm_create_qp(
                ffi::vtm_dev_pd(self.dev.as_ptr()),
                scq,
                rcq,
                srq,
                attr.max_send_wr,
                attr.max_send_sge,
                &mut qp,
            )
        })?;
        Ok(QpId(push(&mut self.qps, qp)))
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let p = self.qp(qp)?;
        // SAFETY: a live QP, destroyed once (slot cleared).
        check("ibv_destroy_qp", unsafe { ffi::vtm_destroy_qp(p) })?;
        self.qps[qp.0 as usize] = ptr::null_mut();
        Ok(())
    }

    fn qp_num(&self, qp: QpId) -> Result<u32> {
        let p = self.qp(qp)?;
        // SAFETY: a live QP; the shim reads its `qp_num` field.
        Ok(unsafe { ffi::vtm_qp_num(p) })
    }

    fn local_address(&self, qp: QpId) -> Result<Vec<u8>> {
        let a = self.addr(self.qp(qp)?)?;
        let mut v = a.gid.to_vec();
        for x in [a.qpn, a.psn, a.mtu, u32::from(a.lid)] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        Ok(v)
    }

    fn connect(&mut self, qp: QpId, remote: &[u8]) -> Result<()> {
        if remote.len() != 32 {
            return Err(Error::BadAddress(format!(
                "ibverbs QP address of {} bytes",
                remote.len()
            )));
        }
        let u =
            |i: usize| u32::from_le_bytes([remote[i], remote[i + 1], remote[i + 2], remote[i + 3]]);
        let mut r = ffi::VtmAddr::default();
        r.gid.copy_from_slice(&remote[..16]);
        r.qpn = u(16);
        r.psn = u(20);
        r.mtu = u(24);
        r.lid = u(28) as u16;
        let p = self.qp(qp)?;
        let l = self.addr(p)?;
        // SAFETY: a live QP of this device; both addresses are valid reads.
        check("ibv_modify_qp", unsafe {
            ffi::vtm_connect(self.dev.as_ptr(), p, &l, &r)
        })
    }

    fn qp_state(&self, qp: QpId) -> QpState {
        let Ok(p) = self.qp(qp) else {
            return QpState::Error("no such QP".into());
        };
        let mut s: c_int = 0;
        // SAFETY: a live QP; `s` is valid for a write.
        if unsafe { ffi::vtm_qp_state(p, &mut s) } != 0 {
            return QpState::Error("ibv_query_qp failed".into());
        }
        match s {
            0 => QpState::Reset,
            1 | 2 => QpState::Connecting,
            3 | 4 => QpState::Ready,
            other => QpState::Error(format!("QP in state {other} (IBV_QPS_SQE/ERR)")),
        }
    }

    fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        let p = self.qp(qp)?;
        let (g, n) = sges(wr.sg_list)?;
        // SAFETY: a live QP; `g` holds `n` SGEs of registered regions that
        // stay registered until the WR's completion.
        check("ibv_post_send", unsafe {
            ffi::vtm_post_send(
                p,
                wr.wr_id,
                wr.opcode.0,
                wr.send_flags,
                g.as_ptr(),
                n,
                wr.imm_data,
                wr.remote_addr,
                wr.rkey,
            )
        })
    }

    fn reg_mr(&mut self, buf: Vec<u8>, access: u32) -> core::result::Result<Mr, (Error, Vec<u8>)> {
        let len = buf.len();
        // Registering zero bytes is refused by some providers: one byte.
        let boxed: Box<[u8]> = if len == 0 {
            vec![0u8; 1].into_boxed_slice()
        } else {
            buf.into_boxed_slice()
        };
        let reg_len = boxed.len();
        let raw = Box::into_raw(boxed) as *mut u8;
        let (mut mr, mut lkey, mut rkey) = (ptr::null_mut(), 0u32, 0u32);
        // SAFETY: `raw` points to `reg_len` bytes we own until dereg (or the
        // failure path below); the out-pointers are valid for writes.
        let rc = unsafe {
            ffi::vtm_reg_mr(
                ffi::vtm_dev_pd(self.dev.as_ptr()),
                raw.cast(),
                reg_len,
                access,
                &mut mr,
                &mut lkey,
                &mut rkey,
            )
        };
        if rc != 0 {
            // SAFETY: registration failed, the device never saw the buffer;
            // it came from `Box::into_raw` of `reg_len` bytes.
            let b = unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(raw, reg_len)) };
            let mut v = b.into_vec();
            v.truncate(len);
            return Err((Error::verbs("ibv_reg_mr", rc), v));
        }
        let id = self.mrs.len() as u32;
        self.mrs.push(Some(MrSlot {
            mr,
            buf: raw,
            len: reg_len,
            key: lkey,
        }));
        Ok(Mr::new(id, raw as u64, len, lkey, rkey))
    }

    fn dereg_mr(&mut self, mr: Mr) -> Result<Vec<u8>> {
        self.slot(&mr)?;
        let Some(s) = self.mrs.get_mut(mr.id() as usize).and_then(Option::take) else {
            return Err(Error::verbs("ibv_dereg_mr", errno::EINVAL));
        };
        // SAFETY: a live MR of this device, deregistered once (slot taken).
        let rc = unsafe { ffi::vtm_dereg_mr(s.mr) };
        if rc != 0 {
            let e = Error::verbs("ibv_dereg_mr", rc);
            self.mrs[mr.id() as usize] = Some(s);
            return Err(e);
        }
        // SAFETY: the device no longer uses the buffer; it came from
        // `Box::into_raw` of `s.len` bytes.
        let b = unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(s.buf, s.len)) };
        let mut v = b.into_vec();
        v.truncate(mr.len());
        Ok(v)
    }

    fn mr_read(&self, mr: &Mr, offset: usize, dst: &mut [u8]) -> Result<()> {
        let s = self.slot(mr)?;
        if offset.checked_add(dst.len()).is_none_or(|e| e > s.len) {
            return Err(Error::verbs("mr read", errno::EFAULT));
        }
        // SAFETY: the range is inside the registered buffer (checked above);
        // the driver reads a region only after the completion that ended
        // the device's writes to it (polled through the CQ, which orders
        // the DMA before the read).
        unsafe { ptr::copy_nonoverlapping(s.buf.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn mr_write(&mut self, mr: &Mr, offset: usize, src: &[u8]) -> Result<()> {
        let s = self.slot(mr)?;
        if offset.checked_add(src.len()).is_none_or(|e| e > s.len) {
            return Err(Error::verbs("mr write", errno::EFAULT));
        }
        // SAFETY: inside the registered buffer (checked above); the driver
        // writes a send buffer only while no WR that reads it is in flight.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), s.buf.add(offset), src.len()) };
        Ok(())
    }

    fn poll_cq(&mut self, cq: CqId, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        let p = self.cq(cq)?;
        let mut buf = [ffi::VtmWc::default(); 64];
        let want = max.min(buf.len()) as c_int;
        // SAFETY: a live extended CQ; `buf` has room for `want` entries.
        let n = unsafe { ffi::vtm_poll(p, buf.as_mut_ptr(), want) };
        if n < 0 {
            return Err(Error::verbs("ibv_start_poll", -n));
        }
        for w in &buf[..n as usize] {
            out.push(Wc {
                wr_id: w.wr_id,
                status: WcStatus(w.status),
                opcode: WcOpcode(w.opcode),
                wc_flags: w.wc_flags,
                byte_len: w.byte_len,
                imm_data: w.imm_data,
                qp_num: w.qp_num,
                tm_info: TmInfo {
                    tag: w.tm_tag,
                    priv_: w.tm_priv,
                },
            });
        }
        Ok(n as usize)
    }
}
