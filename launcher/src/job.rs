//! Job ids and the shared-memory naming convention.
//!
//! Every `tmrun` job (and every singleton) has an id of 24 lower-case hex
//! digits: 96 bits from the kernel's random generator (`getrandom`, or
//! `/dev/urandom`), so that nobody can guess the names of a job's objects
//! ahead of it. `tmrun` exports it to ranks as `TMX_JOB_ID`. Transports must name every POSIX
//! shared-memory object (and semaphore) of the job
//! `tmx-<jobid>-<anything>`, i.e. `shm_open("/tmx-<jobid>-...")`, which appears
//! as `/dev/shm/tmx-<jobid>-...` (semaphores as `/dev/shm/sem.tmx-<jobid>-...`).
//! After the job, `tmrun` removes every such object, so even a job whose ranks
//! were all SIGKILLed leaves `/dev/shm` clean.

use std::io::Read;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

/// Directory where Linux exposes POSIX shared memory.
pub const SHM_DIR: &str = "/dev/shm";

/// Fills `buf` from the kernel's random generator: `getrandom(2)`, or
/// `/dev/urandom` where that system call is missing.
pub fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`,
        // a live, exclusively borrowed buffer; flags 0 (block until the
        // pool is initialized, which it is long after boot).
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            done += n as usize;
            continue;
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSYS) => {
                return std::fs::File::open("/dev/urandom")?.read_exact(rest);
            }
            _ => return Err(err),
        }
    }
    Ok(())
}

/// A fresh job id: 96 random bits as 24 lower-case hex digits.
pub fn new_job_id() -> String {
    let mut b = [0u8; 12];
    if let Err(e) = random_bytes(&mut b) {
        // No randomness at all (a broken sandbox): still a working id, but
        // a guessable one, so say so.
        warn!(error = %e, "no random bytes for the job id; falling back to the clock and pid");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b[..8].copy_from_slice(&(nanos as u64).to_le_bytes());
        b[8..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The name prefix of the job's shared-memory objects: `tmx-<jobid>-`.
pub fn shm_prefix(job_id: &str) -> String {
    format!("tmx-{job_id}-")
}

/// The `shm_open` name for one object of the job: `/tmx-<jobid>-<suffix>`.
pub fn shm_name(job_id: &str, suffix: &str) -> String {
    format!("/{}{suffix}", shm_prefix(job_id))
}

/// Objects in `dir` that belong to the job (`tmx-<jobid>-*` and `sem.tmx-<jobid>-*`).
pub fn job_shm_objects(dir: &Path, job_id: &str) -> Vec<PathBuf> {
    let prefix = shm_prefix(job_id);
    let sem = format!("sem.{prefix}");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) || name.starts_with(&sem)
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Removes the job's objects from `dir`; returns the ones removed.
pub fn cleanup_shm_in(dir: &Path, job_id: &str) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for path in job_shm_objects(dir, job_id) {
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot remove a shared-memory object of the job")
            }
        }
    }
    if !removed.is_empty() {
        info!(
            job_id,
            count = removed.len(),
            "removed leftover shared-memory objects"
        );
    }
    removed
}

/// Removes the job's objects from `/dev/shm`; returns the ones removed.
pub fn cleanup_shm(job_id: &str) -> Vec<PathBuf> {
    cleanup_shm_in(Path::new(SHM_DIR), job_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_and_distinct() {
        let a = new_job_id();
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_ne!(a, new_job_id());
        assert_eq!(shm_name("ab12", "node"), "/tmx-ab12-node");
    }

    /// Ids carry 96 random bits: not the launcher's pid, not the clock.
    /// Back-to-back ids share no prefix beyond chance, and the pid does
    /// not appear in them.
    #[test]
    fn ids_are_unpredictable() {
        let pid = format!("{:x}", std::process::id());
        let ids: Vec<String> = (0..64).map(|_| new_job_id()).collect();
        for id in &ids {
            assert!(!id.starts_with(&pid), "the pid ({pid}) leads the id: {id}");
            assert_eq!(id.len(), 24, "{id}");
        }
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
        // Ids made within microseconds of each other: a clock-derived id
        // shares most of its digits with the next one.
        let common = ids
            .windows(2)
            .map(|w| {
                w[0].bytes()
                    .zip(w[1].bytes())
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert!(
            common < 8,
            "consecutive ids share {common} leading digits: {ids:?}"
        );
    }

    #[test]
    fn cleanup_removes_only_the_jobs_objects() {
        let dir = std::env::temp_dir().join(format!("tmx-launcher-shm-test-{}", new_job_id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in ["tmx-j1-a", "sem.tmx-j1-b", "tmx-j10-c", "other"] {
            std::fs::write(dir.join(n), b"x").unwrap();
        }
        let removed = cleanup_shm_in(&dir, "j1");
        assert_eq!(removed.len(), 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["other", "tmx-j10-c"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
