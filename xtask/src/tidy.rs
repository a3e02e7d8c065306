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
    "mpi-abi",
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

// ---------------------------------------------------------------------
// Project files speak of the software only, and fit in a reader's head.
// ---------------------------------------------------------------------

/// Extensions of the project files the text checks read (plus files
/// without one under `.ci/`).
const TEXT_EXTENSIONS: &[&str] = &["rs", "md", "toml", "c", "h", "sh"];

/// Longest crate README (lines): a manual, not a log.
const CRATE_README_MAX: usize = 300;
/// Longest root README and ARCHITECTURE.md (lines).
const ROOT_README_MAX: usize = 200;
const ARCHITECTURE_MAX: usize = 400;
/// Longest non-test source file (lines before the first `#[cfg(test)]`).
const SOURCE_MAX: usize = 1500;

/// Source files above [`SOURCE_MAX`] lines that are being split into
/// directories of smaller files. An entry is removed when its split lands
/// (the check fails on an entry that is no longer needed, so this list
/// only shrinks). Nothing may be added to it.
const OVERSIZED_ALLOWED: &[&str] = &[];

/// Lines of process talk in source files that are being rewritten (the
/// file and a piece of the line). Each entry is removed when its line goes
/// (the check fails on an entry that no longer matches anything). Nothing
/// may be added to it.
const PROCESS_TALK_ALLOWED: &[(&str, &str)] = &[];

/// Variables the configuration parsers refuse (old names) may still be
/// mentioned in these files (or directories) while their owners rewrite
/// them; each entry is removed once it no longer matches. Nothing may be
/// added to it.
const MOVED_VARS_ALLOWED: &[&str] = &[];

/// Every project text file under `dir` (not `target/`, not `.git/`).
fn project_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if p.is_dir() {
            if name != "target" && name != ".git" {
                project_files(&p, out);
            }
        } else if p
            .extension()
            .is_some_and(|x| TEXT_EXTENSIONS.contains(&x.to_string_lossy().as_ref()))
            || p.parent()
                .and_then(Path::file_name)
                .is_some_and(|d| d == ".ci")
        {
            out.push(p);
        }
    }
}

/// `p` relative to the repository, with `/` separators.
fn rel(p: &Path) -> String {
    p.strip_prefix(root())
        .unwrap_or(p)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Whether `line` (lower-cased) has `word` followed, after spaces (and an
/// optional `#`), by a digit: the way a development session, stop or
/// issue is numbered.
fn word_then_number(lower: &str, word: &str, plural: bool) -> bool {
    let mut from = 0;
    while let Some(i) = lower[from..].find(word) {
        let at = from + i;
        from = at + word.len();
        let starts_word = lower[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric() && c != '_' && c != '-');
        if !starts_word {
            continue;
        }
        let mut rest = &lower[from..];
        if plural {
            rest = rest.strip_prefix('s').unwrap_or(rest);
        }
        let trimmed = rest.trim_start_matches(' ');
        if trimmed.len() == rest.len() {
            continue; // no space: "sessions_of", "issue#"
        }
        let trimmed = trimmed.strip_prefix('#').unwrap_or(trimmed);
        if trimmed.starts_with(|c: char| c.is_ascii_digit()) {
            return true;
        }
    }
    false
}

/// What, if anything, in `line` speaks of how the project was made, or
/// points outside the repository.
fn process_talk(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    if word_then_number(&lower, "session", true) {
        return Some("names a development session");
    }
    if word_then_number(&lower, "issue", true) {
        return Some("names an issue number (history belongs in git and CHANGELOGs)");
    }
    if word_then_number(&lower, "stop", false) {
        return Some("names a development stop");
    }
    let lead = concat!("the ", "lead");
    if let Some(i) = lower.find(lead) {
        let after = lower[i + lead.len()..].chars().next();
        if after.is_none_or(|c| !c.is_alphanumeric()) {
            return Some("speaks of the project's lead");
        }
    }
    for (needle, why) in [
        (concat!("..", "/shared"), "points outside the repository"),
        (
            concat!("shared", "/notes/"),
            "cites private notes, not a public source",
        ),
        (
            concat!("shared", "/seeds/"),
            "cites private notes, not a public source",
        ),
        (concat!("/wo", "rk/"), "points outside the repository"),
        (concat!("notes", "-lead"), "points outside the repository"),
    ] {
        if lower.contains(needle) {
            return Some(why);
        }
    }
    None
}

/// Relative link targets of a Markdown text (`[text](target)`), without
/// web links, mail links and in-page anchors.
fn markdown_links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].trim();
            rest = &rest[end..];
            let target = target.split_whitespace().next().unwrap_or("");
            if target.is_empty()
                || target.starts_with('#')
                || target.contains("://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let path = target.split('#').next().unwrap_or(target);
            out.push((n + 1, path.to_string()));
        }
    }
    out
}

/// Why a link from the Markdown file `from` to `target` is bad, if it is.
fn bad_link(repo: &Path, from: &Path, target: &str) -> Option<String> {
    let base = from.parent()?;
    let joined = base.join(target);
    // Resolve `..` by hand, so that a missing file is still placed.
    let mut parts: Vec<std::path::Component<'_>> = Vec::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other),
        }
    }
    let resolved: PathBuf = parts.iter().collect();
    if target.starts_with('/') || !resolved.starts_with(repo) {
        return Some(format!("{target} points outside the repository"));
    }
    if !resolved.exists() {
        return Some(format!("{target} does not exist"));
    }
    None
}

/// Lines of a source file before its first `#[cfg(test)]`.
fn non_test_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .count()
}

/// The old variable names a configuration module refuses: the first
/// string of each tuple of its `MOVED` table.
fn moved_names(config_rs: &str) -> Vec<String> {
    let Some(start) = config_rs.find("pub const MOVED") else {
        return Vec::new();
    };
    let table = &config_rs[start..];
    let table = &table[..table.find("];").unwrap_or(table.len())];
    table
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix('"')?;
            let name = &l[..l.find('"')?];
            (name.starts_with("TMX_") && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
                .then(|| name.to_string())
        })
        .collect()
}

/// Whether `text` mentions the variable `name` as a whole word
/// (`TMX_SHMEM_PREPOST` is not found in `TMX_SHMEM_PREPOST_MIN`).
fn mentions_var(text: &str, name: &str) -> bool {
    let mut from = 0;
    while let Some(i) = text[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let before = text[..at].chars().next_back();
        let after = text[from..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !word(before) && !word(after) {
            return true;
        }
    }
    false
}

fn all_project_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    project_files(&root(), &mut files);
    files.sort();
    files
}

#[test]
fn no_project_file_speaks_of_how_it_was_made() {
    let mut bad = Vec::new();
    let mut used = vec![false; PROCESS_TALK_ALLOWED.len()];
    for f in all_project_files() {
        let r = rel(&f);
        for (n, line) in read(&f).lines().enumerate() {
            let Some(why) = process_talk(line) else {
                continue;
            };
            if let Some(k) = PROCESS_TALK_ALLOWED
                .iter()
                .position(|(p, piece)| *p == r && line.contains(piece))
            {
                used[k] = true;
                continue;
            }
            let shown: String = line.trim().chars().take(100).collect();
            bad.push(format!("{r}:{}: {why}: {shown}", n + 1));
        }
    }
    for (k, (p, piece)) in PROCESS_TALK_ALLOWED.iter().enumerate() {
        if !used[k] {
            bad.push(format!(
                "PROCESS_TALK_ALLOWED entry ({p}, {piece:?}) matches nothing any more: remove it"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "project files speak of the software, never of how it was made, and cite \
         design sources by public names:\n{}",
        bad.join("\n")
    );
}

#[test]
fn markdown_links_stay_inside_the_repository() {
    let repo = root();
    let mut bad = Vec::new();
    for f in all_project_files() {
        if f.extension().is_none_or(|x| x != "md") {
            continue;
        }
        for (n, target) in markdown_links(&read(&f)) {
            if let Some(why) = bad_link(&repo, &f, &target) {
                bad.push(format!("{}:{n}: {why}", rel(&f)));
            }
        }
    }
    assert!(bad.is_empty(), "dangling links:\n{}", bad.join("\n"));
}

#[test]
fn readmes_are_manuals_not_logs() {
    let mut bad = Vec::new();
    let mut check = |p: PathBuf, max: usize| {
        let n = read(&p).lines().count();
        if n > max {
            bad.push(format!("{}: {n} lines, at most {max}", rel(&p)));
        }
    };
    for c in CRATES.iter().chain(&["xtask"]) {
        check(root().join(c).join("README.md"), CRATE_README_MAX);
    }
    check(root().join("README.md"), ROOT_README_MAX);
    check(root().join("ARCHITECTURE.md"), ARCHITECTURE_MAX);
    assert!(
        bad.is_empty(),
        "READMEs say what a crate is, how to use it, its configuration, \
         guarantees and current numbers; history goes to CHANGELOG.md:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_source_file_is_too_long() {
    let mut bad = Vec::new();
    let mut seen = Vec::new();
    for c in CRATES.iter().chain(&["xtask"]) {
        let mut files = Vec::new();
        for dir in ["src", "examples"] {
            rust_files(&root().join(c).join(dir), &mut files);
        }
        for f in files {
            let r = rel(&f);
            let n = non_test_lines(&read(&f));
            if n <= SOURCE_MAX {
                continue;
            }
            if OVERSIZED_ALLOWED.contains(&r.as_str()) {
                seen.push(r);
            } else {
                bad.push(format!(
                    "{r}: {n} lines before #[cfg(test)], at most {SOURCE_MAX}: split it"
                ));
            }
        }
    }
    for a in OVERSIZED_ALLOWED {
        if !seen.iter().any(|s| s == a) {
            bad.push(format!(
                "{a} is in OVERSIZED_ALLOWED but is gone or short now: remove the entry"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn refused_variables_are_not_documented() {
    let configs = ["shmem-onesided/src/config.rs", "rma-epoch/src/config.rs"];
    let mut names = Vec::new();
    for c in configs {
        names.extend(moved_names(&read(&root().join(c))));
    }
    assert!(
        names.len() >= 20,
        "the MOVED tables were not found: {names:?}"
    );
    let mut bad = Vec::new();
    let mut used = vec![false; MOVED_VARS_ALLOWED.len()];
    for f in all_project_files() {
        let r = rel(&f);
        if configs.contains(&r.as_str()) || r.ends_with("CHANGELOG.md") || r == "xtask/src/tidy.rs"
        {
            continue;
        }
        let text = read(&f);
        for name in names.iter().filter(|n| mentions_var(&text, n)) {
            if let Some(k) = MOVED_VARS_ALLOWED.iter().position(|a| r.starts_with(a)) {
                used[k] = true;
                continue;
            }
            bad.push(format!("{r}: mentions {name}, which is no longer read"));
        }
    }
    for (k, a) in MOVED_VARS_ALLOWED.iter().enumerate() {
        if !used[k] {
            bad.push(format!(
                "MOVED_VARS_ALLOWED entry {a} matches nothing any more: remove it"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "use the current names (see the crates' configuration tables):\n{}",
        bad.join("\n")
    );
}

// The checks' own tests: each rule catches what it should and lets the
// rest through.

#[test]
fn process_talk_is_recognized() {
    for talk in [
        concat!("measured in sess", "ion 32"),
        concat!("(Sess", "ions 28–31)"),
        concat!("see iss", "ue #6, part 9"),
        concat!("the iss", "ue 40 plan"),
        concat!("after st", "op 3"),
        concat!("ask the ", "lead."),
        concat!("see `..", "/sha", "red/seeds/x.txt`"),
        concat!("`shared", "/notes/peer-baselines.md`"),
        concat!("output in /wo", "rk/notes"),
    ] {
        assert!(process_talk(talk).is_some(), "{talk}");
    }
    for fine in [
        "fn pmi2_session() {",
        "a PMI session with the server",
        "issues a LOCK before the first op",
        "stops after 3 tries",
        "the leading zeros",
        "non-stop 24 hours",
        "see rdma-core's tag-matching documentation",
        "see `../tm-proto/README.md`",
        "misuse#3 and tissue 4",
    ] {
        assert_eq!(process_talk(fine), None, "{fine}");
    }
}

#[test]
fn markdown_links_are_found_and_judged() {
    let text = "see [a](../tm-proto) and [b](https://x.org/y) and [c](#anchor)\n\
                and [d](src/lib.rs#L3), [e](mailto:a@b), [f](<no>";
    assert_eq!(
        markdown_links(text),
        vec![
            (1, "../tm-proto".to_string()),
            (2, "src/lib.rs".to_string())
        ]
    );
    let repo = root();
    let readme = repo.join("adi").join("README.md");
    assert_eq!(bad_link(&repo, &readme, "../tm-proto"), None);
    assert_eq!(bad_link(&repo, &readme, "src/lib.rs"), None);
    assert!(bad_link(&repo, &readme, "../tm-proto/NOPE.md")
        .is_some_and(|w| w.contains("does not exist")));
    assert!(
        bad_link(&repo, &readme, concat!("../..", "/sha", "red/notes/x.md"))
            .is_some_and(|w| w.contains("outside"))
    );
    assert!(bad_link(&repo, &readme, "/etc/passwd").is_some_and(|w| w.contains("outside")));
}

#[test]
fn non_test_lines_stop_at_the_test_module() {
    assert_eq!(non_test_lines("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(non_test_lines("a\nb\nc\n"), 3);
    assert_eq!(non_test_lines("#[cfg(test)]\n"), 0);
    // An attribute inside a line is not the test module.
    assert_eq!(non_test_lines("x // #[cfg(test)]\ny\n"), 2);
}

#[test]
fn moved_names_are_read_from_the_table() {
    let src = "pub const MOVED: &[(&str, &str)] = &[\n    (\n        \"TMX_A_OLD\",\n        \
               \"no longer read: set TMX_A_TUNE=old=<value>\",\n    ),\n    (\"TMX_A_TWO\", \"renamed TMX_A_2\"),\n];\n\
               const OTHER: &str = \"TMX_A_NOT\";\n";
    assert_eq!(moved_names(src), vec!["TMX_A_OLD".to_string()]);
    assert!(mentions_var("set `TMX_A_OLD=1`", "TMX_A_OLD"));
    assert!(!mentions_var("set TMX_A_OLD_MIN=1", "TMX_A_OLD"));
    assert!(!mentions_var("MY_TMX_A_OLD", "TMX_A_OLD"));
}

/// Headings (`### Added`, `### Changed`, ...) that occur twice inside one version
/// section of a CHANGELOG, as `"<version> / <heading>"`.
fn duplicate_changelog_headings(text: &str) -> Vec<String> {
    let mut version = String::new();
    let mut seen: Vec<String> = Vec::new();
    let mut dups = Vec::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("## ") {
            version = v.trim().to_string();
            seen.clear();
        } else if let Some(h) = line.strip_prefix("### ") {
            let h = h.trim().to_string();
            if seen.contains(&h) {
                dups.push(format!("{version} / {h}"));
            } else {
                seen.push(h);
            }
        }
    }
    dups
}

#[test]
fn changelog_sections_have_each_heading_once() {
    let mut bad = Vec::new();
    for c in CRATES.iter().chain(&["xtask"]) {
        let text = read(&root().join(c).join("CHANGELOG.md"));
        for d in duplicate_changelog_headings(&text) {
            bad.push(format!("{c}/CHANGELOG.md: {d}"));
        }
    }
    assert!(
        bad.is_empty(),
        "merge repeated headings into one per version:\n{}",
        bad.join("\n")
    );
}

#[test]
fn duplicate_changelog_headings_are_found() {
    let text = "## [Unreleased]\n### Changed\n- a\n### Added\n- b\n### Changed\n- c\n\
                ## [0.1.0]\n### Changed\n- d\n";
    assert_eq!(
        duplicate_changelog_headings(text),
        vec!["[Unreleased] / Changed"]
    );
    assert!(duplicate_changelog_headings("## [1]\n### Added\n## [0]\n### Added\n").is_empty());
}
