//! Instruction counts of waits while a message nobody receives stays
//! queued, for before/after comparisons under `valgrind --tool=callgrind`.
//!
//! One process, two endpoints (ranks 0 and 1 of a fresh node segment),
//! both driven from one thread once attached. With the argument `leave`,
//! rank 0 first sends rank 1 one eager message (4000 B) that no receive
//! ever takes. Then `ROUNDS` ping-pongs of 8 B, each preceded on rank 1
//! by `IDLE` tries of its receive that find nothing yet (the spin of a
//! wait before the message comes).
//!
//! ```text
//! cargo build --release -p shmem-onesided --example leftover_cost
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/leftover_cost [leave]
//! callgrind_annotate --inclusive=yes cg.out | grep -E 'phase_|full_pass'
//! ```
use shmem_onesided::{CmaMode, Config, Endpoint, Node};
use tm_proto::{MatchSpec, Source, Tag};

/// Ping-pongs.
const ROUNDS: usize = 1000;
/// Empty tries of rank 1's receive before each ping arrives.
const IDLE: usize = 3;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn spec(source: u32, tag: u32) -> MatchSpec {
    MatchSpec {
        context_id: 0,
        source: Source::Rank(source),
        tag: Tag::Value(tag),
    }
}

/// The ping-pongs, rank 1's empty tries included.
#[inline(never)]
fn phase_pingpong(ep0: &mut Endpoint, ep1: &mut Endpoint) -> Res<()> {
    let data = [7u8; 8];
    let mut buf = [0u8; 8];
    for _ in 0..ROUNDS {
        for _ in 0..IDLE {
            if ep1.try_recv(spec(0, 1), &mut buf)?.is_some() {
                return Err("a ping before it was sent".into());
            }
        }
        ep0.send(1, 1, 0, &data)?;
        if ep1.try_recv(spec(0, 1), &mut buf)?.is_none() {
            return Err("ping not arrived".into());
        }
        ep1.send(0, 2, 0, &data)?;
        if ep0.try_recv(spec(1, 2), &mut buf)?.is_none() {
            return Err("pong not arrived".into());
        }
    }
    Ok(())
}

fn main() -> Res<()> {
    let leave = std::env::args().nth(1).as_deref() == Some("leave");
    let job = format!("leftover{}", std::process::id());
    let init = |r: u32| {
        let job = job.clone();
        std::thread::spawn(move || -> Res<Endpoint> {
            let config = Config {
                cma: CmaMode::Off,
                ..Config::from_env()?
            };
            Ok(Endpoint::new(Node::init(&job, r, 2, config)?))
        })
    };
    let (h0, h1) = (init(0), init(1));
    let mut ep0 = h0.join().map_err(|_| "rank 0 panicked")??;
    let mut ep1 = h1.join().map_err(|_| "rank 1 panicked")??;
    if leave {
        ep0.send(1, 99, 0, &[1u8; 4000])?;
        if ep1.iprobe(spec(0, 99))?.is_none() {
            return Err("the left message did not arrive".into());
        }
    }
    phase_pingpong(&mut ep0, &mut ep1)?;
    println!("{ROUNDS} ping-pongs, {IDLE} empty tries each (left message: {leave})");
    let h = std::thread::spawn(move || ep1.finalize().map(|_| ()));
    ep0.finalize()?;
    h.join().map_err(|_| "rank 1 panicked")??;
    Ok(())
}
