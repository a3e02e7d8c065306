//! Property tests: the codecs round-trip, and no byte stream from a rank can
//! make the framer or the server panic.

use launcher::server::{Server, ServerConfig};
use launcher::wire::{self, Framer, Message};
use proptest::prelude::*;

fn token() -> impl Strategy<Value = String> {
    // Printable ASCII without space, ';', '\\' ('=' allowed in values).
    "[!-:<-\\[\\]-~]{0,40}"
}

fn key() -> impl Strategy<Value = String> {
    "[!-:<>-\\[\\]-~]{1,20}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pmi1_and_pmi2_roundtrip(
        cmd in "[a-z_-]{1,12}",
        args in proptest::collection::vec((key(), token()), 0..6),
    ) {
        let mut m = Message::new(cmd.clone());
        for (k, v) in &args {
            m = m.arg(k.clone(), v.clone());
        }
        let one = wire::parse_pmi1(&m.to_pmi1()).unwrap();
        prop_assert_eq!(&one, &m);
        let two = m.to_pmi2();
        prop_assert_eq!(wire::parse_pmi2_len(&two[..6]).unwrap(), two.len() - 6);
        prop_assert_eq!(wire::parse_pmi2_body(&two[6..]).unwrap(), m);
    }

    #[test]
    fn hex_roundtrip(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let h = wire::hex_encode(&bytes);
        prop_assert!(wire::check_value("k", &h).is_ok());
        prop_assert_eq!(wire::hex_decode(&h).unwrap(), bytes);
    }

    #[test]
    fn arbitrary_input_never_panics_the_server(
        chunks in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64),
                Just(b"cmd=barrier_in\n".to_vec()),
                Just(b"cmd=put key=a value=b\n".to_vec()),
                Just(b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec()),
                Just(b"    20cmd=kvs-get;key=a;".to_vec()),
                Just(b"mcmd=spawn\n".to_vec()),
                Just(b"endcmd\n".to_vec()),
            ],
            0..20,
        ),
        rank in 0usize..3,
    ) {
        let mut s = Server::new(ServerConfig {
            size: 2,
            kvsname: "kvs".into(),
            process_mapping: "(vector,(0,1,2))".into(),
            appnum: 0,
        });
        let mut f = Framer::new(256);
        for c in chunks {
            f.push(&c);
            loop {
                match f.next_frame() {
                    Ok(Some(frame)) => {
                        let step = s.handle(rank, frame);
                        for (to, _) in step.replies {
                            prop_assert!(to < 2);
                        }
                    }
                    Ok(None) => break,
                    // Unframeable: the launcher aborts the job; nothing more to feed.
                    Err(_) => return Ok(()),
                }
            }
        }
    }
}
