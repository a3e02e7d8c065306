//! A connection of [`super::Live`]: its socket, the bytes received and
//! not yet parsed, the outbox, and its counters.

use std::collections::VecDeque;
use std::io::{ErrorKind, IoSlice, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::super::nic::Frame;
use super::super::nic::{Nic, RegionRef};
use super::super::wire::{self, Wire};
use crate::verbs::{CqId, QpId, Wc, WcStatus};

#[derive(Debug)]
pub(super) enum Phase {
    /// Waiting for the peer's HELLO (acceptor) or HELLO_ACK (initiator).
    Handshake {
        deadline: Instant,
    },
    Bound,
}

/// Small frames are copied into the outbox's open chunk (many frames, one
/// write); payloads larger than this are queued as they are.
const COALESCE: usize = 16 << 10;
/// The largest open chunk of the outbox.
const CHUNK_MAX: usize = 256 << 10;
/// Outbox chunks gathered by one `writev`.
const IOV_MAX: usize = 32;

/// A READ response being received straight into memory: `len` bytes at
/// `off` of region `mr` (key `key`), `got` of them so far; `ok` false once
/// the region went away (the rest is read and dropped).
#[derive(Debug, Clone, Copy)]
pub(super) struct Direct {
    pub(super) id: u64,
    pub(super) mr: u32,
    pub(super) key: u32,
    pub(super) off: usize,
    pub(super) len: usize,
    pub(super) got: usize,
    pub(super) ok: bool,
}

/// Bytes queued on a connection.
#[derive(Debug)]
pub(super) enum Chunk {
    /// Coalesced small frames (reused by the connection).
    Small(Vec<u8>),
    /// One large payload as the device made it (back to the device's pool
    /// once written).
    Payload(Vec<u8>),
    /// A READ response's data, written from the responder's memory region
    /// (no copy); copied out first if the region is deregistered while it
    /// waits ([`Conn::own_region`]). Also a SEND's payload.
    Region(RegionRef),
    /// No bytes: the completion of the in-place SEND before it (its
    /// CQ and work completion), due once everything before it is written.
    Done(CqId, Wc),
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Small(v) | Chunk::Payload(v) => v.len(),
            Chunk::Region(r) => r.len,
            Chunk::Done(..) => 0,
        }
    }
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    /// Received bytes are `rbuf[rpos..rend]`; `rbuf` stays allocated (and
    /// zeroed once) so that a read needs no initialisation. Frames are
    /// parsed and delivered in place.
    pub(super) rbuf: Vec<u8>,
    pub(super) rpos: usize,
    pub(super) rend: usize,
    /// Bytes waiting for the socket, in chunks: coalesced small frames and
    /// large payloads (not copied again), gathered by one `writev`.
    pub(super) out: VecDeque<Chunk>,
    /// Whether the back chunk of `out` takes more small frames.
    pub(super) back_open: bool,
    pub(super) out_off: usize,
    pub(super) out_bytes: usize,
    /// Emptied small chunks, for reuse.
    pub(super) spare: Vec<Vec<u8>>,
    /// Payload buffers written or copied, for the device's pool.
    pub(super) written: Vec<Vec<u8>>,
    pub(super) qp: Option<QpId>,
    pub(super) phase: Phase,
    /// An acceptor's parsed HELLO, waiting for `connect` of its QP.
    pub(super) hello: Option<(u32, u32, u32)>,
    pub(super) saw_close: bool,
    pub(super) dead: bool,
    /// The peer's rank, once known (handshake).
    pub(super) peer: Option<u32>,
    pub(super) stats: WireStats,
    /// A READ response's payload being read straight into memory.
    pub(super) direct: Option<Direct>,
    /// Completions of in-place SENDs whose payload left (or never will:
    /// `WR_FLUSH_ERR`), for the device.
    pub(super) sent: Vec<(CqId, Wc, WcStatus)>,
}

impl Conn {
    pub(super) fn new(stream: TcpStream, deadline: Instant) -> Self {
        Conn {
            stream,
            rbuf: Vec::new(),
            rpos: 0,
            rend: 0,
            out: VecDeque::new(),
            back_open: false,
            out_off: 0,
            out_bytes: 0,
            spare: Vec::new(),
            written: Vec::new(),
            qp: None,
            phase: Phase::Handshake { deadline },
            hello: None,
            saw_close: false,
            dead: false,
            peer: None,
            stats: WireStats::default(),
            direct: None,
            sent: Vec::new(),
        }
    }

    /// Queues a SEND whose payload `data` is written from the sender's
    /// region when the socket takes it; `done` (its completion) follows it.
    pub(super) fn push_send(
        &mut self,
        imm: Option<u32>,
        data: RegionRef,
        done: Option<(CqId, Wc)>,
    ) {
        let h = wire::send_header(imm, data.len);
        self.stats.frames_out += 1;
        self.stats.bytes_out += (h.len() + data.len) as u64;
        self.append(&h);
        self.out_bytes += data.len;
        self.out.push_back(Chunk::Region(data));
        if let Some((cq, wc)) = done {
            self.out.push_back(Chunk::Done(cq, wc));
        }
        self.back_open = false;
    }

    /// Queues a SEND of `len` bytes, `parts` one after the other, copied
    /// into the outbox with its header (an inline SEND: no completion).
    pub(super) fn push_inline(&mut self, parts: &[&[u8]], len: usize) {
        let h = wire::send_header(None, len);
        self.stats.frames_out += 1;
        self.stats.bytes_out += (h.len() + len) as u64;
        self.append(&h);
        for p in parts {
            self.append(p);
        }
    }

    /// Writes a SEND frame of `parts` (`len` bytes) from `parts` themselves,
    /// with one `writev`; what the socket does not take is copied into the
    /// outbox. Only with the outbox empty (nothing to write before it).
    pub(super) fn write_through(&mut self, parts: &[&[u8]], len: usize) -> std::io::Result<()> {
        let h = wire::send_header(None, len);
        self.stats.frames_out += 1;
        self.stats.bytes_out += (h.len() + len) as u64;
        let mut iov = [IoSlice::new(&[]); 4];
        if parts.len() >= iov.len() {
            // Not the driver's shape (header and payload): copied.
            self.append(&h);
            for p in parts {
                self.append(p);
            }
            return Ok(());
        }
        iov[0] = IoSlice::new(&h);
        for (v, p) in iov[1..].iter_mut().zip(parts) {
            *v = IoSlice::new(p);
        }
        let n = loop {
            match (&self.stream).write_vectored(&iov[..=parts.len()]) {
                Ok(n) => break n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break 0,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        self.stats.writes += 1;
        // Payload bytes that left without a copy.
        self.stats.in_place_bytes += n.saturating_sub(h.len()).min(len) as u64;
        let mut skip = n;
        for b in std::iter::once(&h[..]).chain(parts.iter().copied()) {
            if skip >= b.len() {
                skip -= b.len();
            } else {
                self.append(&b[skip..]);
                skip = 0;
            }
        }
        Ok(())
    }

    /// The connection failed: the in-place SENDs still queued are flushed
    /// (their completions say `WR_FLUSH_ERR`).
    pub(super) fn flush_sends(&mut self) {
        for ch in self.out.drain(..) {
            if let Chunk::Done(cq, wc) = ch {
                self.sent.push((cq, wc, WcStatus::WR_FLUSH_ERR));
            }
        }
        self.out_off = 0;
        self.out_bytes = 0;
        self.back_open = false;
    }

    /// Appends bytes to the open chunk (opening one if needed).
    pub(super) fn append(&mut self, b: &[u8]) {
        let open = self.back_open
            && matches!(self.out.back(), Some(Chunk::Small(v)) if v.len() + b.len() <= CHUNK_MAX);
        if !open {
            let mut data = self.spare.pop().unwrap_or_default();
            data.clear();
            self.out.push_back(Chunk::Small(data));
            self.back_open = true;
        }
        if let Some(Chunk::Small(v)) = self.out.back_mut() {
            v.extend_from_slice(b);
        }
        self.out_bytes += b.len();
    }

    /// Queues a successful READ response whose data is `data` of `nic`'s
    /// regions: a small one copied into the open chunk, a large one
    /// written from the region when the socket takes it. A region that is
    /// gone (it cannot be: the device just checked it) answers an access
    /// error.
    pub(super) fn push_read_resp(&mut self, id: u64, data: RegionRef, nic: &Nic) {
        let Some(bytes) = nic.region(&data) else {
            self.push(Wire::Dev(Frame::ReadResp {
                id,
                status: WcStatus::REM_ACCESS_ERR,
                data: Vec::new(),
            }));
            return;
        };
        let h = wire::read_resp_ok_header(id, data.len);
        self.stats.frames_out += 1;
        self.stats.bytes_out += (h.len() + data.len) as u64;
        self.append(&h);
        if data.len <= COALESCE {
            self.append(bytes);
        } else {
            self.out_bytes += data.len;
            self.out.push_back(Chunk::Region(data));
            self.back_open = false;
        }
    }

    /// Copies the queued READ responses that refer to region `mr` (key
    /// `key`) out of it, before it is deregistered.
    pub(super) fn own_region(
        &mut self,
        mr: u32,
        key: u32,
        nic: &mut Nic,
    ) -> Result<(), RegionGone> {
        for ch in self.out.iter_mut() {
            if let Chunk::Region(r) = *ch {
                if r.mr == mr && r.key == key {
                    *ch = Chunk::Payload(nic.staged(r).ok_or(RegionGone)?);
                }
            }
        }
        Ok(())
    }

    /// Queues a frame.
    pub(super) fn push(&mut self, w: Wire) {
        let (h, p) = wire::encode(w);
        self.stats.frames_out += 1;
        self.stats.bytes_out += (h.len() + p.len()) as u64;
        self.append(&h);
        if p.len() <= COALESCE {
            self.append(&p);
            // Copied: the buffer goes back to the device's pool.
            self.written.push(p);
        } else {
            self.out_bytes += p.len();
            self.out.push_back(Chunk::Payload(p));
            self.back_open = false;
        }
    }

    /// Writes as much of the outbox as the socket takes, several chunks
    /// per `writev`, a lone chunk with one `send` (READ responses from
    /// their regions of `nic`). Large
    /// payloads written wait in `written` for reuse.
    pub(super) fn flush(&mut self, nic: &Nic) -> std::io::Result<()> {
        while let Some(front) = self.out.front() {
            let (want, r) = if self.out.len() == 1 {
                // One chunk (an inline SEND on an idle connection): one
                // plain write, no gather list to build.
                let b = &chunk_bytes(front, nic)?[self.out_off..];
                (b.len(), (&self.stream).write(b))
            } else {
                let mut iov = [IoSlice::new(&[]); IOV_MAX];
                let mut k = 0;
                let mut want = 0;
                for (i, ch) in self.out.iter().take(IOV_MAX).enumerate() {
                    let all = chunk_bytes(ch, nic)?;
                    let b = if i == 0 { &all[self.out_off..] } else { all };
                    iov[k] = IoSlice::new(b);
                    want += b.len();
                    k += 1;
                }
                (want, (&self.stream).write_vectored(&iov[..k]))
            };
            self.stats.writes += 1;
            let mut n = match r {
                Ok(0) if want > 0 => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let wrote = n;
            self.out_bytes -= n.min(self.out_bytes);
            while n > 0 {
                let Some(front) = self.out.front() else { break };
                let left = front.len() - self.out_off;
                if n < left {
                    self.out_off += n;
                    n = 0;
                } else {
                    n -= left;
                    self.out_off = 0;
                    if let Some(v) = self.out.pop_front() {
                        self.done_chunk(v);
                    }
                }
            }
            // Empty chunks (a frame without payload never makes one).
            while self.out.front().is_some_and(|c| c.len() == 0) && self.out_off == 0 {
                if let Some(v) = self.out.pop_front() {
                    self.done_chunk(v);
                }
            }
            if self.out.is_empty() {
                self.back_open = false;
            }
            if wrote < want {
                // A short write: the socket is full; a second try would
                // only say so.
                return Ok(());
            }
        }
        Ok(())
    }

    pub(super) fn done_chunk(&mut self, c: Chunk) {
        match c {
            Chunk::Payload(v) => self.written.push(v),
            Chunk::Small(v) if self.spare.len() < 4 => self.spare.push(v),
            Chunk::Small(_) => {}
            Chunk::Region(r) => self.stats.in_place_bytes += r.len as u64,
            Chunk::Done(cq, wc) => self.sent.push((cq, wc, WcStatus::SUCCESS)),
        }
    }
}

/// The bytes of an outbox chunk (a region's from `nic`).
fn chunk_bytes<'a>(ch: &'a Chunk, nic: &'a Nic) -> std::io::Result<&'a [u8]> {
    Ok(match ch {
        Chunk::Small(v) | Chunk::Payload(v) => v,
        Chunk::Done(..) => &[],
        Chunk::Region(r) => nic
            .region(r)
            .ok_or_else(|| std::io::Error::other(RegionGone))?,
    })
}

/// A queued READ response refers to a memory region that is gone: it was
/// deregistered without its responses being copied out first (a bug of
/// the driver). The connection fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the memory region of a queued READ response is gone")]
pub(super) struct RegionGone;

/// Counters of a [`super::Live`] device's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames queued for peers (device frames and connection control).
    pub frames_out: u64,
    /// Frames received and parsed.
    pub frames_in: u64,
    /// Bytes of frames queued (headers included).
    pub bytes_out: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// `writev` (or, for a lone outbox chunk, `send`) calls (each may
    /// carry many frames).
    pub writes: u64,
    /// `read` calls that returned data or end of file.
    pub reads: u64,
    /// `read` calls that found nothing (the socket had been reported ready
    /// by a poll that raced with an earlier read, or it was read directly).
    pub empty_reads: u64,
    /// `epoll_wait` calls of the device (one per run while more than one
    /// socket is open; none with one socket, which is read directly).
    pub polls: u64,
    /// Times a READ request found the connection's unsent bytes at
    /// [`super::LiveConfig::read_backlog`] or more and waited (a request that waits
    /// over several passes counts once per pass).
    pub read_waits: u64,
    /// READ responses received straight into the requester's memory
    /// (64 KiB and more, one scatter entry).
    pub direct: u64,
    /// Bytes written to the socket straight from memory regions: READ
    /// responses over 16 KiB and SEND payloads of 4 KiB and more (smaller
    /// ones are copied into the outbox with their header).
    pub in_place_bytes: u64,
    /// Returns of the helper thread from poll(2): socket readiness, a
    /// deadline, the owner's signal, or the end of an idle-time sleep.
    /// Zero while the device is idle, whether its owner polls or computes.
    pub helper_wakes: u64,
    /// Times the helper thread ran the device (the owner had been idle).
    pub helper_steps: u64,
}

impl std::fmt::Display for WireStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "frames out {} in {}, bytes out {} in {}, writev {}, reads {} (empty {}), epoll_wait {}, READs waited {}, direct {}, in place {} B, helper wakes {} steps {}",
            self.frames_out,
            self.frames_in,
            self.bytes_out,
            self.bytes_in,
            self.writes,
            self.reads,
            self.empty_reads,
            self.polls,
            self.read_waits,
            self.direct,
            self.in_place_bytes,
            self.helper_wakes,
            self.helper_steps
        )
    }
}

impl WireStats {
    pub(super) fn add(&mut self, o: &WireStats) {
        self.frames_out += o.frames_out;
        self.frames_in += o.frames_in;
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.writes += o.writes;
        self.reads += o.reads;
        self.empty_reads += o.empty_reads;
        self.polls += o.polls;
        self.read_waits += o.read_waits;
        self.direct += o.direct;
        self.in_place_bytes += o.in_place_bytes;
        self.helper_wakes += o.helper_wakes;
        self.helper_steps += o.helper_steps;
    }
}
