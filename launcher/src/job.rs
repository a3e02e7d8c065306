//! Job ids and the shared-memory naming convention.
//!
//! Every `tmrun` job has an id of lower-case hex digits (`<pid><random>`),
//! exported to ranks as `TMX_JOB_ID`. Transports must name every POSIX
//! shared-memory object (and semaphore) of the job
//! `tmx-<jobid>-<anything>`, i.e. `shm_open("/tmx-<jobid>-...")`, which appears
//! as `/dev/shm/tmx-<jobid>-...` (semaphores as `/dev/shm/sem.tmx-<jobid>-...`).
//! After the job, `tmrun` removes every such object, so even a job whose ranks
//! were all SIGKILLed leaves `/dev/shm` clean.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

/// Directory where Linux exposes POSIX shared memory.
pub const SHM_DIR: &str = "/dev/shm";

/// A fresh job id: the launcher's pid and 32 bits of clock noise, in hex.
pub fn new_job_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mix = (nanos as u64) ^ ((nanos >> 64) as u64).rotate_left(17);
    format!("{:x}{:08x}", std::process::id(), (mix as u32))
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
