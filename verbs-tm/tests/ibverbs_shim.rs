//! The `ibverbs` feature's C shim against a C test double of the verbs
//! context (`csrc/shim_double.c`): dispatch through rdma-core's static
//! inline TM verbs and their error paths, with no NIC. Needs Debian's
//! `libibverbs-dev` (headers and `libibverbs.so`); skips with a reason
//! without it unless `TMX_REQUIRE_SYSTEM_PACKAGES` is set.
#![cfg(feature = "ibverbs")]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn shim_dispatch_and_error_paths_against_a_test_double() {
    let headers = Path::new("/usr/include/infiniband/verbs.h");
    if !headers.exists() {
        assert!(
            std::env::var_os("TMX_REQUIRE_SYSTEM_PACKAGES").is_none(),
            "libibverbs-dev is required (TMX_REQUIRE_SYSTEM_PACKAGES is set)"
        );
        println!("skipped: libibverbs-dev is not installed (apt-get install libibverbs-dev)");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("verbs_tm_shim_double");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args([
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            "-I",
        ])
        .arg(&dir)
        .arg(dir.join("shim.c"))
        .arg(dir.join("shim_double.c"))
        .arg("-libverbs")
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(st.success(), "the shim and its test double do not compile");
    let run = Command::new(&out).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    println!("{text}");
    assert!(
        run.status.success(),
        "the test double found failures:\n{text}"
    );
    let line = text.lines().find(|l| l.ends_with(" failed")).unwrap();
    let passed: u32 = line.split(' ').next().unwrap().parse().unwrap();
    assert!(passed >= 25, "{line}");
    // And the Rust side sees no device here in one line, or a real one.
    match verbs_tm::probe_hardware() {
        Ok(name) => println!("TM device: {name}"),
        Err(verbs_tm::Error::NoDevice { reason }) => {
            assert!(!reason.contains('\n'));
            println!("no device: {reason}");
        }
        Err(e) => panic!("{e}"),
    }
}
