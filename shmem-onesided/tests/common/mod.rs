//! Helpers shared by the threads-as-ranks integration tests.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses a subset; tests may unwrap

use shmem_onesided::{Config, Endpoint, Node};
use std::sync::atomic::{AtomicU32, Ordering};

/// A job id unique to this process and call: `<prefix><pid>-<name>-<n>`.
pub fn job(prefix: &str, name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `f(rank, endpoint)` on `size` threads over one real segment of job
/// `j` and checks that nothing is left in `/dev/shm`.
pub fn endpoint_ranks<T: Send + 'static>(
    j: String,
    size: u32,
    cfg: Config,
    f: impl Fn(u32, Endpoint) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let hs: Vec<_> = (0..size)
        .map(|r| {
            let (j, f, c) = (j.clone(), f.clone(), cfg.clone());
            std::thread::spawn(move || f(r, Endpoint::new(Node::init(&j, r, size, c).unwrap())))
        })
        .collect();
    let out = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("tmx-{j}-")))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
    out
}
