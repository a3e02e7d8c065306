//! A token passed around all ranks: rank 0 starts it, each rank adds its
//! rank and passes it on with a nonblocking send; after `ROUNDS` rounds
//! rank 0 checks the sum.
//!
//! ```text
//! target/release/tmrun -n 4 target/release/examples/ring
//! ```
use std::process::ExitCode;

const ROUNDS: u64 = 10;

fn run() -> Result<(), adi::Error> {
    let world = adi::init()?;
    let (me, n) = (world.rank(), world.size());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let mut token = [0u8; 8];
    for round in 0..ROUNDS {
        let tag = round as i32;
        if me == 0 {
            let mut s = world.isend(u64::from(round as u32).to_le_bytes().to_vec(), next, tag)?;
            world.recv(&mut token, prev, tag)?;
            world.wait(&mut s)?;
        } else {
            world.recv(&mut token, prev, tag)?;
            let v = u64::from_le_bytes(token) + me as u64;
            let mut s = world.isend(v.to_le_bytes().to_vec(), next, tag)?;
            world.wait(&mut s)?;
        }
        if me == 0 {
            let got = u64::from_le_bytes(token);
            let want = round + (n as u64 - 1) * n as u64 / 2;
            if got != want {
                eprintln!("ring: round {round}: token {got}, expected {want}");
                world.abort(3, "ring token mismatch");
            }
        }
    }
    if me == 0 {
        println!("ring: {ROUNDS} rounds over {n} ranks ok");
    }
    adi::finalize()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ring: {e} ({})", e.class());
            ExitCode::FAILURE
        }
    }
}
