//! Running MPI C programs: tmx's MPI library (`mpi-abi`, built as
//! `libmpich.so` with the SONAME `libmpich.so.12`) first on the ranks'
//! loader path, so that a program linked by `mpicc.mpich` runs on tmx
//! unchanged.
//!
//! The library is `$TMX_MPI_LIB` (a path to the file) or, when unset, a
//! `libmpich.so` next to the running executable (where cargo builds it
//! beside `tmrun`). [`MpiLibDir::prepare`] makes a private directory with
//! `libmpich.so.12` and `libmpi.so.12` linked to it (the names programs
//! ask the loader for), prepends that directory to the ranks'
//! `LD_LIBRARY_PATH`, and removes it when dropped. Without a library,
//! nothing changes: Rust programs and programs of other MPIs run as
//! before.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::run::JobSpec;

/// Environment variable naming tmx's MPI library file.
pub const ENV_MPI_LIB: &str = "TMX_MPI_LIB";

/// The library's file name as cargo builds it.
pub const LIB_FILE: &str = "libmpich.so";

/// The names programs ask the loader for.
pub const SONAMES: [&str; 2] = ["libmpich.so.12", "libmpi.so.12"];

/// The library to put first on the loader path: `$TMX_MPI_LIB`, else
/// [`LIB_FILE`] next to the running executable, if it exists.
pub fn find(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env(ENV_MPI_LIB).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let lib = exe.parent()?.join(LIB_FILE);
    lib.is_file().then_some(lib)
}

/// A private directory holding the library under its SONAMEs; removed
/// on drop.
#[derive(Debug)]
pub struct MpiLibDir {
    dir: PathBuf,
}

impl MpiLibDir {
    /// Makes the directory under `parent` (named after this process and a
    /// counter) with
    /// [`SONAMES`] linked to `lib`.
    pub fn create(lib: &Path, parent: &Path) -> Result<MpiLibDir> {
        let lib = lib
            .canonicalize()
            .map_err(|e| Error::io(format!("finding the MPI library {}", lib.display()), e))?;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("tmx-mpilib-{}-{n}", std::process::id()));
        // A directory left by an earlier process with this id: replaced.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let made = MpiLibDir { dir };
        for name in SONAMES {
            let link = made.dir.join(name);
            std::os::unix::fs::symlink(&lib, &link)
                .map_err(|e| Error::io(format!("linking {}", link.display()), e))?;
        }
        Ok(made)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `LD_LIBRARY_PATH` with this directory first, before `current`.
    pub fn ld_library_path(&self, current: Option<&str>) -> String {
        match current.filter(|c| !c.is_empty()) {
            Some(c) => format!("{}:{c}", self.dir.display()),
            None => self.dir.display().to_string(),
        }
    }

    /// If tmx's MPI library is found ([`find`]), makes its directory in
    /// the temporary directory and sets the ranks' `LD_LIBRARY_PATH` in
    /// `spec` (before one given with `--env`, else before the inherited
    /// one). `Ok(None)`: no library, `spec` unchanged.
    pub fn prepare(
        spec: &mut JobSpec,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<MpiLibDir>> {
        let Some(lib) = find(env) else {
            return Ok(None);
        };
        let made = MpiLibDir::create(&lib, &std::env::temp_dir())?;
        const VAR: &str = "LD_LIBRARY_PATH";
        let given = spec.env.iter().position(|(k, _)| k == VAR);
        let current = match given {
            Some(i) => Some(spec.env.remove(i).1),
            None => env(VAR),
        };
        let value = made.ld_library_path(current.as_deref());
        spec.env.push((VAR.to_string(), value));
        tracing::debug!(lib = %lib.display(), dir = %made.dir.display(), "MPI library on the ranks' loader path");
        Ok(Some(made))
    }
}

impl Drop for MpiLibDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_both_sonames_and_cleans_up() {
        let parent = std::env::temp_dir().join(format!("tmx-mpilib-test-{}", std::process::id()));
        std::fs::create_dir_all(&parent).unwrap();
        let lib = parent.join(LIB_FILE);
        std::fs::write(&lib, b"not really a library").unwrap();
        let dir = MpiLibDir::create(&lib, &parent).unwrap();
        for name in SONAMES {
            let target = std::fs::read_link(dir.path().join(name)).unwrap();
            assert_eq!(target, lib.canonicalize().unwrap());
        }
        let p = dir.path().to_path_buf();
        assert_eq!(dir.ld_library_path(None), p.display().to_string());
        assert_eq!(
            dir.ld_library_path(Some("/opt/x")),
            format!("{}:/opt/x", p.display())
        );
        drop(dir);
        assert!(!p.exists());
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn prepare_uses_the_env_library_and_keeps_a_given_path() {
        let parent = std::env::temp_dir().join(format!("tmx-mpilib-prep-{}", std::process::id()));
        std::fs::create_dir_all(&parent).unwrap();
        let lib = parent.join(LIB_FILE);
        std::fs::write(&lib, b"x").unwrap();
        let libs = lib.display().to_string();
        let env = |k: &str| match k {
            ENV_MPI_LIB => Some(libs.clone()),
            "LD_LIBRARY_PATH" => Some("/inherited".to_string()),
            _ => None,
        };
        let mut spec = JobSpec::new(1, "prog", vec![]);
        spec.env.push(("LD_LIBRARY_PATH".into(), "/given".into()));
        let dir = MpiLibDir::prepare(&mut spec, &env).unwrap().unwrap();
        let v: Vec<_> = spec
            .env
            .iter()
            .filter(|(k, _)| k == "LD_LIBRARY_PATH")
            .collect();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].1, format!("{}:/given", dir.path().display()));
        drop(dir);
        let none = |_: &str| None;
        let mut plain = JobSpec::new(1, "prog", vec![]);
        // No TMX_MPI_LIB and no library beside the test binary: unchanged.
        if find(&none).is_none() {
            assert!(MpiLibDir::prepare(&mut plain, &none).unwrap().is_none());
            assert!(plain.env.is_empty());
        }
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
