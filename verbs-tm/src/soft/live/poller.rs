//! The readiness set of [`super::Live`]: every open connection and every
//! lingering socket is registered once (when it opens, or when its QP is
//! destroyed) in an epoll set, and deregistered once it is of no more
//! interest. A run of the device then asks the kernel once which sockets
//! have bytes (`epoll_wait` with timeout 0) and reads only those, instead
//! of one `read` per socket per run: an idle run costs one system call
//! however many peers there are. With a single socket registered the
//! device reads it directly (one call per run either way, and a frame
//! that arrived is found by that one call).

use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

/// Token bit of a lingering socket (the rest of the token is its index in
/// the device's lingering list); without it, a token is a connection's
/// index.
pub(super) const LINGER: u64 = 1 << 63;
/// Ready sockets taken per `epoll_wait` (more wait for the next run).
const EVENTS: usize = 64;

/// A socket that has bytes (or an end of file, or an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ready {
    Conn(usize),
    Linger(usize),
}

#[derive(Debug)]
pub(super) struct Poller {
    ep: Epoll,
    events: Vec<EpollEvent>,
    /// Sockets registered.
    watched: usize,
    /// `epoll_wait` calls.
    pub(super) waits: u64,
}

impl Poller {
    pub(super) fn new() -> std::io::Result<Self> {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        Ok(Poller {
            ep,
            events: vec![EpollEvent::empty(); EVENTS],
            watched: 0,
            waits: 0,
        })
    }

    /// Sockets registered.
    pub(super) fn watched(&self) -> usize {
        self.watched
    }

    /// Registers a socket for input (level-triggered: a socket with bytes
    /// left after a run is reported again in the next).
    pub(super) fn add(&mut self, fd: impl AsFd, token: u64) -> std::io::Result<()> {
        self.ep
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, token))
            .map_err(std::io::Error::from)?;
        self.watched += 1;
        Ok(())
    }

    /// Deregisters a socket registered with [`Poller::add`] (explicitly:
    /// the helper thread holds duplicates of the descriptors, which would
    /// keep the registration alive after the device's own was closed).
    pub(super) fn remove(&mut self, fd: impl AsFd) {
        if self.ep.delete(fd).is_ok() {
            self.watched = self.watched.saturating_sub(1);
        }
    }

    /// The sockets that are ready now, without waiting, into `out`
    /// (cleared first). `Err` only if the set cannot be asked (the device
    /// then reads every socket).
    pub(super) fn ready(&mut self, out: &mut Vec<Ready>) -> std::io::Result<()> {
        out.clear();
        self.waits += 1;
        let n = loop {
            match self.ep.wait(&mut self.events, EpollTimeout::ZERO) {
                Ok(n) => break n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        out.extend(self.events[..n].iter().map(|e| {
            let t = e.data();
            // Indices fit: they were tokens made from `usize` values.
            let i = usize::try_from(t & !LINGER).unwrap_or(usize::MAX);
            if t & LINGER != 0 {
                Ready::Linger(i)
            } else {
                Ready::Conn(i)
            }
        }));
        Ok(())
    }
}
