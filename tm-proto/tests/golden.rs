//! Golden wire bytes for every message kind.
//!
//! The hex vectors below are what `tests/c/tm_golden.c` prints when built against
//! rdma-core's `infiniband/tm_types.h` (`struct ibv_tmh` / `struct ibv_rvh`, fields
//! written with `htobe32`/`htobe64`). `c_program_agrees` rebuilds and reruns that
//! program, so the vectors cannot drift from the C definitions.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use tm_proto::{Envelope, Error, Limits, Message, Opcode, Rvh, TagLayout, Tmh};

const UCX_PRIV: [u8; 3] = [0x05, 0xa1, 0xb2];

fn rndv_tmh() -> Tmh {
    Tmh {
        opcode: Opcode::Rndv,
        reserved: UCX_PRIV,
        app_ctx: 0xdead_beef,
        tag: 0x0000_abcd_0000_0001,
    }
}

fn rndv_rvh() -> Rvh {
    Rvh {
        va: 0x0000_7fff_dead_b000,
        rkey: 0x1234_5678,
        len: 0x0010_0000,
    }
}

/// (name as printed by the C program, message, expected hex).
fn vectors() -> Vec<(&'static str, Message<'static>, &'static str)> {
    let envelope_tag = TagLayout::DEFAULT
        .encode(Envelope {
            context_id: 0xABCD,
            source: 0x12_3456,
            tag: 0x78_9ABC,
        })
        .unwrap();
    vec![
        (
            "eager",
            Message::Eager {
                tmh: Tmh::new(Opcode::Eager, 0x0102_0304, 0x1122_3344_5566_7788),
                payload: b"abc",
            },
            "03000000010203041122334455667788616263",
        ),
        (
            "eager_empty",
            Message::Eager {
                tmh: Tmh::new(Opcode::Eager, 0, envelope_tag),
                payload: b"",
            },
            "0300000000000000abcd123456789abc",
        ),
        (
            "rndv",
            Message::Rndv {
                tmh: rndv_tmh(),
                rvh: rndv_rvh(),
                metadata: &[0xaa, 0xbb],
            },
            "0105a1b2deadbeef0000abcd0000000100007fffdeadb0001234567800100000aabb",
        ),
        (
            "fin",
            Message::fin_for(&rndv_tmh(), rndv_rvh()),
            "0205a1b2deadbeef0000abcd0000000100007fffdeadb0001234567800100000",
        ),
        (
            "notag",
            Message::NoTag {
                body: &[0x07, 0x42],
            },
            "000742",
        ),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn encode_gives_golden_bytes() {
    for (name, msg, want) in vectors() {
        let mut buf = [0u8; 128];
        let n = msg.encode(&mut buf, Limits::MLX5).unwrap();
        assert_eq!(hex(&buf[..n]), want, "{name}");
        assert_eq!(n, msg.encoded_len(), "{name}");
    }
}

#[test]
fn decode_of_golden_bytes_gives_the_message() {
    for (name, msg, want) in vectors() {
        let bytes = unhex(want);
        assert_eq!(Message::decode(&bytes, Limits::MLX5), Ok(msg), "{name}");
    }
}

#[test]
fn field_offsets_are_rdma_core_offsets() {
    // pyverbs: RNDV_VA_OFFSET=0x10, RNDV_RKEY_OFFSET=0x18, RNDV_LEN_OFFSET=0x1c.
    let bytes = unhex(vectors()[2].2);
    assert_eq!(bytes[0], 1, "opcode at 0");
    assert_eq!(&bytes[4..8], &0xdead_beef_u32.to_be_bytes(), "app_ctx at 4");
    assert_eq!(
        &bytes[8..16],
        &0x0000_abcd_0000_0001_u64.to_be_bytes(),
        "tag at 8"
    );
    assert_eq!(&bytes[0x10..0x18], &0x0000_7fff_dead_b000_u64.to_be_bytes());
    assert_eq!(&bytes[0x18..0x1c], &0x1234_5678_u32.to_be_bytes());
    assert_eq!(&bytes[0x1c..0x20], &0x0010_0000_u32.to_be_bytes());
}

#[test]
fn typed_errors_on_bad_input() {
    let l = Limits::MLX5;
    assert_eq!(
        Message::decode(&[], l),
        Err(Error::Truncated {
            what: "message",
            need: 1,
            got: 0
        })
    );
    assert_eq!(Message::decode(&[4, 0, 0], l), Err(Error::UnknownOpcode(4)));
    assert_eq!(
        Message::decode(&[3; 15], l),
        Err(Error::Truncated {
            what: "TMH",
            need: 16,
            got: 15
        })
    );
    assert_eq!(
        Message::decode(&[1; 31], l),
        Err(Error::Truncated {
            what: "rendezvous request",
            need: 32,
            got: 31
        })
    );
    assert_eq!(
        Message::decode(&[1; 65], l),
        Err(Error::HeaderTooLong { len: 65, max: 64 })
    );
    assert!(Message::decode(&[1; 64], l).is_ok());
    assert_eq!(
        Message::decode(&[2; 33], l),
        Err(Error::BadLength {
            what: "FIN",
            expected: 32,
            got: 33
        })
    );
    let fin = Message::fin_for(&rndv_tmh(), rndv_rvh());
    let mut small = [0u8; 31];
    assert_eq!(
        fin.encode(&mut small, l),
        Err(Error::BufferTooSmall {
            what: "message",
            need: 32,
            got: 31
        })
    );
    let long_meta = [0u8; 33];
    let rndv = Message::Rndv {
        tmh: rndv_tmh(),
        rvh: rndv_rvh(),
        metadata: &long_meta,
    };
    assert_eq!(
        rndv.encode(&mut [0u8; 128], l),
        Err(Error::HeaderTooLong { len: 65, max: 64 })
    );
    let mislabelled = Message::Eager {
        tmh: rndv_tmh(),
        payload: b"",
    };
    assert_eq!(
        mislabelled.encode(&mut [0u8; 16], l),
        Err(Error::OpcodeMismatch {
            expected: Opcode::Eager,
            got: Opcode::Rndv
        })
    );
}

// ---------------------------------------------------------------------------
// Cross-check with a C program built against rdma-core's header.

const HEADER: &str = "/usr/include/infiniband/tm_types.h";

fn require_system_packages() -> bool {
    std::env::var_os("TMX_REQUIRE_SYSTEM_PACKAGES").is_some_and(|v| !v.is_empty() && v != "0")
}

fn c_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/tm_golden.c")
}

#[test]
fn c_program_agrees() {
    if !Path::new(HEADER).is_file() {
        assert!(
            !require_system_packages(),
            "{HEADER} is missing: install Debian's libibverbs-dev (cargo xtask ci does this as root)"
        );
        eprintln!("skipping c_program_agrees: {HEADER} missing (apt-get install libibverbs-dev)");
        return;
    }
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = out_dir.join("tm_golden");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(c_source())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "compiling tm_golden.c failed");
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let printed: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once(' ').expect("name hex"))
        .collect();
    let ours = vectors();
    assert_eq!(printed.len(), ours.len(), "one line per vector");
    for ((cname, chex), (name, msg, golden)) in printed.into_iter().zip(ours) {
        assert_eq!(cname, name);
        assert_eq!(chex, golden, "{name}: C program and golden vector differ");
        let mut buf = [0u8; 128];
        let n = msg.encode(&mut buf, Limits::MLX5).unwrap();
        assert_eq!(
            hex(&buf[..n]),
            chex,
            "{name}: our encoding differs from rdma-core's structs"
        );
    }
}
