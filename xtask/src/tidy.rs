//! Repository policy as tests (`cargo test -p xtask`): the promises of the
//! developers' guide that a grep can check.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    let m = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    m.parent().map(Path::to_path_buf).unwrap_or(m)
}

/// Library crates of the workspace (everything but xtask).
const CRATES: &[&str] = &[
    "tm-proto",
    "tm-match",
    "verbs-tm",
    "shmem-onesided",
    "rma-epoch",
    "adi",
    "launcher",
];

/// Crates that must stay free of I/O, threads and unsafe.
const PURE: &[&str] = &["tm-proto", "tm-match", "rma-epoch"];

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn workspace_members_are_exactly_the_design_card() {
    let manifest = read(&root().join("Cargo.toml"));
    for c in CRATES.iter().chain(&["xtask"]) {
        assert!(
            manifest.contains(&format!("\"{c}\"")),
            "workspace must list member {c}"
        );
    }
}

#[test]
fn every_crate_has_readme_changelog_and_own_version() {
    for c in CRATES {
        let dir = root().join(c);
        assert!(dir.join("README.md").is_file(), "{c} needs a README.md");
        assert!(
            dir.join("CHANGELOG.md").is_file(),
            "{c} needs a CHANGELOG.md"
        );
        let m = read(&dir.join("Cargo.toml"));
        assert!(
            m.lines()
                .any(|l| l.trim_start().starts_with("version = \"")),
            "{c} must carry its own version, not version.workspace"
        );
    }
}

#[test]
fn sibling_dependencies_have_path_and_version() {
    for c in CRATES {
        let m = read(&root().join(c).join("Cargo.toml"));
        for line in m.lines().filter(|l| l.contains("path = \"../")) {
            assert!(
                line.contains("version = \""),
                "{c}: a sibling dependency needs both path and version: {line}"
            );
        }
    }
}

#[test]
fn pure_crates_forbid_unsafe_and_do_no_io() {
    for c in PURE {
        let lib = read(&root().join(c).join("src/lib.rs"));
        assert!(
            lib.contains("#![forbid(unsafe_code)]"),
            "{c} is a pure crate: lib.rs must say #![forbid(unsafe_code)]"
        );
        let mut files = Vec::new();
        rust_files(&root().join(c).join("src"), &mut files);
        for f in files {
            let text = read(&f);
            for banned in [
                "std::net",
                "std::fs",
                "std::thread",
                "std::process",
                "std::time::Instant",
            ] {
                assert!(
                    !text.contains(banned),
                    "{} uses {banned}: pure crates take events, they do no I/O",
                    f.display()
                );
            }
        }
    }
}

#[test]
fn every_unsafe_block_has_a_safety_comment() {
    for c in CRATES {
        let mut files = Vec::new();
        rust_files(&root().join(c), &mut files);
        for f in files {
            let text = read(&f);
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                if l.contains("unsafe {") && !l.trim_start().starts_with("//") {
                    let from = i.saturating_sub(6);
                    assert!(
                        lines[from..=i].iter().any(|p| p.contains("SAFETY:")),
                        "{}:{}: unsafe block without a `// SAFETY:` comment",
                        f.display(),
                        i + 1
                    );
                }
            }
        }
    }
}

#[test]
fn ci_runs_exactly_the_readme_test_command() {
    let readme = read(&root().join("README.md"));
    let ci = read(&root().join(".ci/run"));
    assert!(
        readme.contains("cargo xtask ci"),
        "README must give the test command"
    );
    assert!(
        ci.lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("cargo xtask ci")),
        ".ci/run must call `cargo xtask ci`"
    );
}

#[test]
fn loom_cfgs_are_declared_for_every_loom_crate() {
    let manifest = read(&root().join("Cargo.toml"));
    for (krate, cfg) in crate::ci::LOOM_CRATES {
        assert!(
            manifest.contains(&format!("cfg({cfg})")),
            "{krate}'s loom cfg {cfg} must be declared in [workspace.lints] check-cfg"
        );
    }
}
