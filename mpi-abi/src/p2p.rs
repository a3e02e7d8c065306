//! Point-to-point communication: sends in every mode, receives, probes,
//! matched probes, the attached buffer, persistent requests.
//!
//! Blocking calls lend `adi` the program's memory for the call. A
//! nonblocking send of contiguous data lends it until the request
//! completes (`adi::Comm::isend_raw`: MPI's rule for the buffer); of a
//! derived datatype, it packs the data at once. A nonblocking receive
//! of contiguous data lends the program's buffer too
//! (`adi::Comm::irecv_raw`); of a derived datatype, it gets a buffer of
//! `adi`'s, unpacked into the program's at completion ([`crate::req`]).

use crate::abi::*;
use crate::comm::{comm, comm_ref, world, world_ref, CommObj};
use crate::err::{check, err, run, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use crate::req::{
    new_request, new_send, outcome_of, sent_or_pending, status_of, PKind, Persistent, Req, Target,
};
use crate::types::{dense_bytes, dtype, dtype_ref, TypeObj, TypeRef};
use core::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, PoisonError};

/// A send mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Standard,
    Synchronous,
    Ready,
    Buffered,
}

/// `count` as the element count `adi` takes (checked non-negative).
fn elems(count: c_int) -> R<i64> {
    ffi::count(count).map(|n| n as i64)
}

/// A blocking send of `count` elements of `t` at `buf`.
///
/// # Safety
/// `buf` holds `count` elements of `t`.
unsafe fn send(
    buf: *const c_void,
    count: c_int,
    t: &TypeObj,
    dest: c_int,
    tag: c_int,
    o: &CommObj,
    mode: Mode,
) -> R<()> {
    let n = elems(count)?;
    let c = &o.comm;
    if let Some((start, len)) = t.contig(n)? {
        // SAFETY: the caller's contract; a contiguous range of the data.
        let data = unsafe { ffi::bytes(buf, start, len) };
        return Ok(match mode {
            Mode::Standard => c.send(data, dest, tag),
            Mode::Synchronous => c.ssend(data, dest, tag),
            Mode::Ready => c.rsend(data, dest, tag),
            Mode::Buffered => c.bsend(data, dest, tag),
        }?);
    }
    if mode == Mode::Standard {
        // SAFETY: the caller's contract.
        let (src, dt) = unsafe { t.view(buf, n) }?;
        return Ok(c.send_typed(src, n, &dt, dest, tag)?);
    }
    // SAFETY: the caller's contract.
    let data = unsafe { t.pack_from(buf, n) }?;
    Ok(match mode {
        Mode::Synchronous => c.ssend(&data, dest, tag),
        Mode::Ready => c.rsend(&data, dest, tag),
        _ => c.bsend(&data, dest, tag),
    }?)
}

/// A nonblocking send: the request.
///
/// # Safety
/// `buf` holds `count` elements of `t`.
pub(crate) unsafe fn isend(
    buf: *const c_void,
    count: c_int,
    t: &TypeObj,
    dest: c_int,
    tag: c_int,
    o: &CommObj,
    mode: Mode,
) -> R<Req> {
    let n = elems(count)?;
    let c = &o.comm;
    if let Some((start, len)) = t.contig(n)? {
        // Contiguous data are lent to `adi`, read in place until the
        // request completes (MPI's rule for a nonblocking send's buffer);
        // a buffered send copies them into the attached buffer at once.
        // SAFETY: the caller's contract; a contiguous range of the data.
        let data = unsafe { ffi::bytes(buf, start, len) };
        let (p, l) = (data.as_ptr(), data.len());
        // SAFETY: MPI: the buffer stays valid and unchanged until the
        // request completes.
        let r = unsafe {
            match mode {
                Mode::Standard => c.isend_raw(p, l, dest, tag),
                Mode::Synchronous => c.issend_raw(p, l, dest, tag),
                Mode::Ready => c.irsend_raw(p, l, dest, tag),
                Mode::Buffered => {
                    c.bsend(data, dest, tag)?;
                    let mut st = crate::req::empty_status();
                    st.set_count(l as i64);
                    return Ok(Req::Done((st, None)));
                }
            }
        }?;
        return Ok(Req::Op { r });
    }
    // SAFETY: the caller's contract.
    let data = unsafe { t.pack_from(buf, n) }?;
    let r = match mode {
        Mode::Standard => c.isend(data, dest, tag),
        Mode::Synchronous => c.issend(data, dest, tag),
        Mode::Ready => c.irsend(data, dest, tag),
        Mode::Buffered => {
            // Copied into the attached buffer: complete at once.
            c.bsend(&data, dest, tag)?;
            let mut st = crate::req::empty_status();
            st.set_count(data.len() as i64);
            return Ok(Req::Done((st, None)));
        }
    }?;
    Ok(Req::Op { r })
}

/// `MPI_Isend` of `len` contiguous bytes at `buf` on `MPI_COMM_WORLD`
/// (a dense predefined type): lent to `adi` at once, with none of the
/// general path's datatype and communicator objects. The request handle.
///
/// # Safety
/// `buf` holds `len` bytes, unchanged until the request completes.
#[inline]
unsafe fn isend_world(buf: *const c_void, len: usize, dest: c_int, tag: c_int) -> R<MPI_Request> {
    let w = world_ref()?;
    // SAFETY: the caller's contract (MPI's rule for the buffer).
    let r = unsafe { w.comm.isend_raw_or_done(buf.cast(), len, dest, tag) }?;
    sent_or_pending(MPI_COMM_WORLD, len, r)
}

/// `MPI_Irecv` into `len` contiguous bytes at `buf` on `MPI_COMM_WORLD`
/// (a dense predefined type), as [`isend_world`]. The request handle.
///
/// # Safety
/// `buf` has room for `len` bytes, left alone by the program until the
/// request completes.
#[inline]
unsafe fn irecv_world(buf: *mut c_void, len: usize, source: c_int, tag: c_int) -> R<MPI_Request> {
    let w = world_ref()?;
    // SAFETY: the caller's contract (MPI's rule for the buffer).
    let r = unsafe { w.comm.irecv_raw(buf.cast(), len, source, tag) }?;
    new_request(MPI_COMM_WORLD, Req::Op { r })
}

/// A blocking receive into `count` elements of `t` at `buf`.
///
/// # Safety
/// `buf` has room for `count` elements of `t`.
unsafe fn recv(
    buf: *mut c_void,
    count: c_int,
    t: &TypeObj,
    source: c_int,
    tag: c_int,
    o: &CommObj,
) -> Result<adi::Status, adi::Error> {
    let n = elems(count).map_err(|_| adi::Error::NegativeCount {
        what: "count",
        value: count as i64,
    })?;
    let c = &o.comm;
    match t.contig(n) {
        Ok(Some((start, len))) => {
            // SAFETY: the caller's contract; a contiguous range of it.
            let data = unsafe { ffi::bytes_mut(buf, start, len) };
            c.recv(data, source, tag)
        }
        _ => {
            // SAFETY: the caller's contract.
            let (dst, dt) = unsafe { t.view_mut(buf, n) }.map_err(|_| adi::Error::NotCommitted)?;
            c.recv_typed(dst, n, &dt, source, tag)
        }
    }
}

/// A nonblocking receive: the request.
///
/// # Safety
/// `buf` has room for `count` elements of `t` until the request completes.
pub(crate) unsafe fn irecv(
    buf: *mut c_void,
    count: c_int,
    t: &TypeRef,
    source: c_int,
    tag: c_int,
    o: &CommObj,
) -> R<Req> {
    let n = elems(count)?;
    check(
        t.dt.is_committed(),
        MPI_ERR_TYPE,
        "datatype used before MPI_Type_commit",
    )?;
    if let Some((start, len)) = t.contig(n)? {
        // Contiguous: the program's memory is lent to `adi`, which
        // delivers into it in place (MPI's rule for a nonblocking
        // receive's buffer).
        // SAFETY: the caller's contract; a contiguous range of the buffer.
        let into = unsafe { ffi::bytes_mut(buf, start, len) };
        let p = into.as_mut_ptr();
        // SAFETY: MPI: the buffer stays valid, and the program leaves it
        // alone, until the request completes.
        let r = unsafe { o.comm.irecv_raw(p, len, source, tag) }?;
        return Ok(Req::Op { r });
    }
    let stage = vec![0u8; t.packed(n)?];
    let r = o.comm.irecv(stage, source, tag)?;
    Ok(Req::Recv {
        r,
        to: Target {
            addr: buf as usize,
            count: n,
            ty: t.to_arc(),
        },
    })
}

/// Writes a receive's status and returns its error.
///
/// # Safety
/// `status` is `MPI_STATUS_IGNORE` or a writable status.
unsafe fn finish(r: Result<adi::Status, adi::Error>, status: *mut MPI_Status) -> R<()> {
    let (mut st, e) = outcome_of(r);
    if e.is_none() {
        st.error = MPI_SUCCESS;
    }
    // SAFETY: the caller's contract.
    unsafe { ffi::put_status(status, st) };
    e.map_or(Ok(()), Err)
}

macro_rules! blocking_send {
    ($(#[$m:meta])* $mpi:ident / $pmpi:ident, $mode:expr) => {
        mpi_fn! {
            $(#[$m])*
            fn $mpi / $pmpi(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, c: MPI_Comm) -> c_int {
                run(stringify!($mpi), On::Comm(c), || {
                    let o = comm_ref(c)?;
                    let t = dtype_ref(datatype)?;
                    // SAFETY: MPI: `buf` holds `count` elements of `datatype`.
                    unsafe { send(buf, count, &t, dest, tag, &o, $mode) }
                })
            }
        }
    };
}

blocking_send!(
    /// `MPI_Send`.
    MPI_Send / PMPI_Send, Mode::Standard);
blocking_send!(
    /// `MPI_Ssend`: returns once the receive has matched.
    MPI_Ssend / PMPI_Ssend, Mode::Synchronous);
blocking_send!(
    /// `MPI_Rsend` (sent as a standard send, which MPI allows).
    MPI_Rsend / PMPI_Rsend, Mode::Ready);
blocking_send!(
    /// `MPI_Bsend`: copied into the attached buffer.
    MPI_Bsend / PMPI_Bsend, Mode::Buffered);

macro_rules! nonblocking_send {
    ($(#[$m:meta])* $mpi:ident / $pmpi:ident, $mode:expr) => {
        mpi_fn! {
            $(#[$m])*
            fn $mpi / $pmpi(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, c: MPI_Comm, request: *mut MPI_Request) -> c_int {
                run(stringify!($mpi), On::Comm(c), || {
                    if $mode == Mode::Standard && c == MPI_COMM_WORLD {
                        if let Some(len) = dense_bytes(datatype, count) {
                            // SAFETY: MPI: `buf` holds `count` elements of
                            // a dense predefined type (`len` bytes).
                            let h = unsafe { isend_world(buf, len?, dest, tag) }?;
                            // SAFETY: MPI: `request` points to a handle.
                            return unsafe { ffi::put(request, h) };
                        }
                    }
                    let o = comm_ref(c)?;
                    let t = dtype_ref(datatype)?;
                    // SAFETY: MPI: `buf` holds `count` elements of `datatype`.
                    let r = unsafe { isend(buf, count, &t, dest, tag, &o, $mode) }?;
                    let h = match r {
                        Req::Op { r } => new_send(c, r)?,
                        r => new_request(c, r)?,
                    };
                    // SAFETY: MPI: `request` points to a handle.
                    unsafe { ffi::put(request, h) }
                })
            }
        }
    };
}

nonblocking_send!(
    /// `MPI_Isend`.
    MPI_Isend / PMPI_Isend, Mode::Standard);
nonblocking_send!(
    /// `MPI_Issend`.
    MPI_Issend / PMPI_Issend, Mode::Synchronous);
nonblocking_send!(
    /// `MPI_Irsend`.
    MPI_Irsend / PMPI_Irsend, Mode::Ready);
nonblocking_send!(
    /// `MPI_Ibsend`: copied into the attached buffer (complete at once).
    MPI_Ibsend / PMPI_Ibsend, Mode::Buffered);

mpi_fn! {
    /// `MPI_Recv`.
    fn MPI_Recv / PMPI_Recv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, c: MPI_Comm, status: *mut MPI_Status) -> c_int {
        run("MPI_Recv", On::Comm(c), || {
            let o = comm_ref(c)?;
            let t = dtype_ref(datatype)?;
            elems(count)?;
            check(t.dt.is_committed(), MPI_ERR_TYPE, "datatype used before MPI_Type_commit")?;
            // SAFETY: MPI: `buf` has room for `count` elements; `status` as documented.
            unsafe {
                let r = recv(buf, count, &t, source, tag, &o);
                finish(r, status)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Irecv`.
    fn MPI_Irecv / PMPI_Irecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, c: MPI_Comm, request: *mut MPI_Request) -> c_int {
        run("MPI_Irecv", On::Comm(c), || {
            if c == MPI_COMM_WORLD {
                if let Some(len) = dense_bytes(datatype, count) {
                    // SAFETY: MPI: `buf` has room for `count` elements of a
                    // dense predefined type (`len` bytes) until completion.
                    let h = unsafe { irecv_world(buf, len?, source, tag) }?;
                    // SAFETY: MPI: `request` points to a handle.
                    return unsafe { ffi::put(request, h) };
                }
            }
            let o = comm_ref(c)?;
            let t = dtype_ref(datatype)?;
            // SAFETY: MPI: `buf` has room for `count` elements until completion.
            let r = unsafe { irecv(buf, count, &t, source, tag, &o) }?;
            let h = new_request(c, r)?;
            // SAFETY: MPI: `request` points to a handle.
            unsafe { ffi::put(request, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Sendrecv`.
    fn MPI_Sendrecv / PMPI_Sendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, source: c_int, recvtag: c_int, c: MPI_Comm, status: *mut MPI_Status) -> c_int {
        run("MPI_Sendrecv", On::Comm(c), || {
            let o = comm_ref(c)?;
            let (st, rt) = (dtype_ref(sendtype)?, dtype_ref(recvtype)?);
            let sn = elems(sendcount)?;
            let packed;
            let data: &[u8] = match st.contig(sn)? {
                // SAFETY: MPI: the send buffer holds `sendcount` elements;
                // a contiguous range of them, read during the call.
                Some((start, len)) => unsafe { ffi::bytes(sendbuf, start, len) },
                None => {
                    // SAFETY: MPI: the send buffer holds `sendcount` elements.
                    packed = unsafe { st.pack_from(sendbuf, sn) }?;
                    &packed
                }
            };
            let rn = elems(recvcount)?;
            check(rt.dt.is_committed(), MPI_ERR_TYPE, "datatype used before MPI_Type_commit")?;
            let r = match rt.contig(rn)? {
                Some((start, len)) => {
                    // SAFETY: MPI: the receive buffer has room for `recvcount` elements.
                    let into = unsafe { ffi::bytes_mut(recvbuf, start, len) };
                    o.comm.sendrecv(data, dest, sendtag, into, source, recvtag)
                }
                None => {
                    let mut stage = vec![0u8; rt.packed(rn)?];
                    let r = o.comm.sendrecv(data, dest, sendtag, &mut stage, source, recvtag);
                    let n = match &r {
                        Ok(s) => s.count,
                        Err(adi::Error::RecvTruncated { status, .. }) => status.count,
                        Err(_) => 0,
                    };
                    // SAFETY: MPI: the receive buffer has room for `recvcount` elements.
                    unsafe { rt.unpack_to(recvbuf, rn, &stage[..n.min(stage.len())]) }?;
                    r
                }
            };
            // SAFETY: MPI: `status` as documented.
            unsafe { finish(r, status) }
        })
    }
}

mpi_fn! {
    /// `MPI_Sendrecv_replace`.
    fn MPI_Sendrecv_replace / PMPI_Sendrecv_replace(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, sendtag: c_int, source: c_int, recvtag: c_int, c: MPI_Comm, status: *mut MPI_Status) -> c_int {
        run("MPI_Sendrecv_replace", On::Comm(c), || {
            let o = comm(c)?;
            let t = dtype(datatype)?;
            let n = elems(count)?;
            // SAFETY: MPI: `buf` holds `count` elements.
            let mut data = unsafe { t.pack_from(buf, n) }?;
            let r = o.comm.sendrecv_replace(&mut data, dest, sendtag, source, recvtag);
            let got = match &r {
                Ok(s) => s.count,
                Err(adi::Error::RecvTruncated { status, .. }) => status.count,
                Err(_) => 0,
            };
            // SAFETY: MPI: `buf` has room for `count` elements.
            unsafe { t.unpack_to(buf, n, &data[..got.min(data.len())]) }?;
            // SAFETY: MPI: `status` as documented.
            unsafe { finish(r, status) }
        })
    }
}

mpi_fn! {
    /// `MPI_Probe`.
    fn MPI_Probe / PMPI_Probe(source: c_int, tag: c_int, c: MPI_Comm, status: *mut MPI_Status) -> c_int {
        run("MPI_Probe", On::Comm(c), || {
            let o = comm(c)?;
            let st = o.comm.probe(source, tag)?;
            // SAFETY: MPI: `status` as documented.
            unsafe { ffi::put_status(status, status_of(&st)) };
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Iprobe`.
    fn MPI_Iprobe / PMPI_Iprobe(source: c_int, tag: c_int, c: MPI_Comm, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
        run("MPI_Iprobe", On::Comm(c), || {
            let o = comm(c)?;
            let st = o.comm.iprobe(source, tag)?;
            // SAFETY: MPI: `flag` points to an int, `status` as documented.
            unsafe {
                ffi::put(flag, ffi::flag(st.is_some()))?;
                if let Some(st) = st {
                    ffi::put_status(status, status_of(&st));
                }
            }
            Ok(())
        })
    }
}

/// Matched messages (`MPI_Message`).
static MESSAGES: Table<Mutex<Option<adi::Message>>> = Table::new(prefix::MESSAGE);

/// A message handle for `m`.
fn message_handle(m: adi::Message) -> R<MPI_Message> {
    if m.is_no_proc() {
        return Ok(MPI_MESSAGE_NO_PROC);
    }
    MESSAGES
        .insert(Mutex::new(Some(m)))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many messages"))
}

/// Takes the message of handle `h` (`None`: `MPI_MESSAGE_NO_PROC`).
fn take_message(h: MPI_Message) -> R<Option<adi::Message>> {
    if h == MPI_MESSAGE_NO_PROC {
        return Ok(None);
    }
    let m = MESSAGES
        .remove(h)
        .ok_or_else(|| err(MPI_ERR_REQUEST, "invalid message"))?;
    let m = m.lock().unwrap_or_else(PoisonError::into_inner).take();
    m.map(Some)
        .ok_or_else(|| err(MPI_ERR_REQUEST, "message already received"))
}

mpi_fn! {
    /// `MPI_Mprobe`.
    fn MPI_Mprobe / PMPI_Mprobe(source: c_int, tag: c_int, c: MPI_Comm, message: *mut MPI_Message, status: *mut MPI_Status) -> c_int {
        run("MPI_Mprobe", On::Comm(c), || {
            let o = comm(c)?;
            let m = o.comm.mprobe(source, tag)?;
            let st = status_of(&m.status());
            let h = message_handle(m)?;
            // SAFETY: MPI: `message` points to a handle, `status` as documented.
            unsafe {
                ffi::put(message, h)?;
                ffi::put_status(status, st);
            }
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Improbe`.
    fn MPI_Improbe / PMPI_Improbe(source: c_int, tag: c_int, c: MPI_Comm, flag: *mut c_int, message: *mut MPI_Message, status: *mut MPI_Status) -> c_int {
        run("MPI_Improbe", On::Comm(c), || {
            let o = comm(c)?;
            let m = o.comm.improbe(source, tag)?;
            // SAFETY: MPI: `flag`, `message` point to ints, `status` as documented.
            unsafe {
                ffi::put(flag, ffi::flag(m.is_some()))?;
                if let Some(m) = m {
                    let st = status_of(&m.status());
                    ffi::put(message, message_handle(m)?)?;
                    ffi::put_status(status, st);
                }
            }
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Mrecv`.
    fn MPI_Mrecv / PMPI_Mrecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, message: *mut MPI_Message, status: *mut MPI_Status) -> c_int {
        run("MPI_Mrecv", On::World, || {
            let t = dtype(datatype)?;
            let n = elems(count)?;
            // SAFETY: MPI: `message` points to a handle.
            let h = unsafe { ffi::get(message) }?;
            let m = take_message(h)?;
            // SAFETY: as above.
            unsafe { ffi::put(message, MPI_MESSAGE_NULL) }?;
            let Some(m) = m else {
                let st = adi::Status::new(MPI_PROC_NULL, MPI_ANY_TAG, 0);
                // SAFETY: MPI: `status` as documented.
                unsafe { ffi::put_status(status, status_of(&st)) };
                return Ok(());
            };
            let w = world()?;
            if let Some((start, len)) = t.contig(n)? {
                // SAFETY: MPI: `buf` has room for `count` elements; a
                // contiguous range of them, written during the call.
                let into = unsafe { ffi::bytes_mut(buf, start, len) };
                let r = w.comm.mrecv(m, into);
                // SAFETY: MPI: `status` as documented.
                return unsafe { finish(r, status) };
            }
            let mut stage = vec![0u8; t.packed(n)?];
            let r = w.comm.mrecv(m, &mut stage);
            let got = match &r {
                Ok(s) => s.count,
                Err(adi::Error::RecvTruncated { status, .. }) => status.count,
                Err(_) => 0,
            };
            // SAFETY: MPI: `buf` has room for `count` elements.
            unsafe { t.unpack_to(buf, n, &stage[..got.min(stage.len())]) }?;
            // SAFETY: MPI: `status` as documented.
            unsafe { finish(r, status) }
        })
    }
}

mpi_fn! {
    /// `MPI_Imrecv`.
    fn MPI_Imrecv / PMPI_Imrecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, message: *mut MPI_Message, request: *mut MPI_Request) -> c_int {
        run("MPI_Imrecv", On::World, || {
            let t = dtype(datatype)?;
            let n = elems(count)?;
            // SAFETY: MPI: `message` points to a handle.
            let h = unsafe { ffi::get(message) }?;
            let m = take_message(h)?;
            // SAFETY: as above.
            unsafe { ffi::put(message, MPI_MESSAGE_NULL) }?;
            let req = match m {
                None => {
                    let st = adi::Status::new(MPI_PROC_NULL, MPI_ANY_TAG, 0);
                    Req::Done((status_of(&st), None))
                }
                Some(m) => {
                    let w = world()?;
                    let r = w.comm.imrecv(m, vec![0u8; t.packed(n)?])?;
                    Req::Recv { r, to: Target { addr: buf as usize, count: n, ty: t } }
                }
            };
            let h = new_request(MPI_COMM_WORLD, req)?;
            // SAFETY: MPI: `request` points to a handle.
            unsafe { ffi::put(request, h) }
        })
    }
}

/// The buffer attached with `MPI_Buffer_attach`: its address and size.
static ATTACHED: Mutex<Option<(usize, c_int)>> = Mutex::new(None);

mpi_fn! {
    /// `MPI_Buffer_attach`: buffered sends may use `size` bytes.
    fn MPI_Buffer_attach / PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
        run("MPI_Buffer_attach", On::World, || {
            let n = ffi::count(size)?;
            let mut a = ATTACHED.lock().unwrap_or_else(PoisonError::into_inner);
            check(a.is_none(), MPI_ERR_BUFFER, "a buffer is already attached")?;
            world()?.comm.attach_buffer(vec![0u8; n])?;
            *a = Some((buffer as usize, size));
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Buffer_detach`: waits until the buffered sends are done;
    /// gives back the address and size attached.
    fn MPI_Buffer_detach / PMPI_Buffer_detach(buffer: *mut c_void, size: *mut c_int) -> c_int {
        run("MPI_Buffer_detach", On::World, || {
            let mut a = ATTACHED.lock().unwrap_or_else(PoisonError::into_inner);
            let (addr, n) = a.take().unwrap_or((0, 0));
            if n > 0 || addr != 0 {
                world()?.comm.detach_buffer()?;
            }
            // SAFETY: MPI: `buffer` points to a `void *`, `size` to an int.
            unsafe {
                ffi::put(buffer.cast::<usize>(), addr)?;
                ffi::put(size, n)
            }
        })
    }
}

/// Starts a persistent request: one nonblocking operation.
pub(crate) fn start_persistent(p: &Persistent) -> R<Req> {
    match p.kind {
        // SAFETY: MPI: the buffer of a persistent request stays valid (and
        // holds the data to send at each start) while the request exists.
        PKind::Send(mode) => unsafe {
            isend(
                p.addr as *const c_void,
                p.count as c_int,
                &p.ty,
                p.peer,
                p.tag,
                &p.comm,
                mode,
            )
        },
        // SAFETY: as above, for receiving.
        PKind::Recv => unsafe {
            irecv(
                p.addr as *mut c_void,
                p.count as c_int,
                &TypeRef::Shared(Arc::clone(&p.ty)),
                p.peer,
                p.tag,
                &p.comm,
            )
        },
    }
}

/// A persistent request handle (`MPI_*_init`).
#[allow(clippy::too_many_arguments)]
fn persistent(
    kind: PKind,
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    c: MPI_Comm,
) -> R<MPI_Request> {
    let o = comm(c)?;
    let t = dtype(datatype)?;
    let n = elems(count)?;
    let size = o.comm.size();
    let peer_ok = peer == MPI_PROC_NULL
        || (0..size).contains(&peer)
        || (kind == PKind::Recv && peer == MPI_ANY_SOURCE);
    check(peer_ok, MPI_ERR_RANK, "invalid rank")?;
    let tag_ok =
        (0..=adi::attr::TAG_UB).contains(&tag) || (kind == PKind::Recv && tag == MPI_ANY_TAG);
    check(tag_ok, MPI_ERR_TAG, "invalid tag")?;
    new_request(
        c,
        Req::Persistent(Box::new(Persistent {
            kind,
            addr: buf as usize,
            count: n,
            ty: t,
            peer,
            tag,
            comm: o,
            active: None,
        })),
    )
}

macro_rules! send_init {
    ($(#[$m:meta])* $mpi:ident / $pmpi:ident, $mode:expr) => {
        mpi_fn! {
            $(#[$m])*
            fn $mpi / $pmpi(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, c: MPI_Comm, request: *mut MPI_Request) -> c_int {
                run(stringify!($mpi), On::Comm(c), || {
                    let h = persistent(PKind::Send($mode), buf, count, datatype, dest, tag, c)?;
                    // SAFETY: MPI: `request` points to a handle.
                    unsafe { ffi::put(request, h) }
                })
            }
        }
    };
}

send_init!(
    /// `MPI_Send_init`.
    MPI_Send_init / PMPI_Send_init, Mode::Standard);
send_init!(
    /// `MPI_Ssend_init`.
    MPI_Ssend_init / PMPI_Ssend_init, Mode::Synchronous);
send_init!(
    /// `MPI_Rsend_init`.
    MPI_Rsend_init / PMPI_Rsend_init, Mode::Ready);
send_init!(
    /// `MPI_Bsend_init`.
    MPI_Bsend_init / PMPI_Bsend_init, Mode::Buffered);

mpi_fn! {
    /// `MPI_Recv_init`.
    fn MPI_Recv_init / PMPI_Recv_init(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int, c: MPI_Comm, request: *mut MPI_Request) -> c_int {
        run("MPI_Recv_init", On::Comm(c), || {
            let h = persistent(PKind::Recv, buf, count, datatype, source, tag, c)?;
            // SAFETY: MPI: `request` points to a handle.
            unsafe { ffi::put(request, h) }
        })
    }
}
