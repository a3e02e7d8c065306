//! Ping-pong between ranks 0 and 1 with blocking send/recv; checks every
//! payload and prints the half round-trip time per size.
//!
//! ```text
//! cargo build --release -p launcher -p adi --examples --bin tmrun
//! target/release/tmrun -n 2 target/release/examples/pingpong
//! ```
use std::process::ExitCode;

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((seed * 31 + i * 7) % 251) as u8)
        .collect()
}

fn run() -> Result<(), adi::Error> {
    let world = adi::init()?;
    let (me, n) = (world.rank(), world.size());
    if n < 2 {
        eprintln!("pingpong needs 2 ranks (tmrun -n 2)");
        return adi::finalize();
    }
    let peer = 1 - me.min(1);
    let iters = 100;
    if me < 2 {
        let mut buf = vec![0u8; 1 << 20];
        if me == 0 {
            println!("{:>10} {:>12}", "bytes", "half-RTT us");
        }
        for len in [0usize, 1, 8, 64, 512, 4096, 65536, 1 << 20] {
            let ping = pattern(len, len);
            let pong = pattern(len + 1, len);
            let t0 = adi::wtime();
            for it in 0..iters {
                let tag = it % 1000;
                if me == 0 {
                    world.send(&ping, peer, tag)?;
                    let st = world.recv(&mut buf[..len], peer, tag)?;
                    assert_eq!((st.source, st.tag, st.count), (peer, tag, len));
                    assert!(buf[..len] == pong[..], "pong payload of {len} bytes");
                } else {
                    let st = world.recv(&mut buf[..len], peer, tag)?;
                    assert_eq!(st.count, len);
                    assert!(buf[..len] == ping[..], "ping payload of {len} bytes");
                    world.send(&pong, peer, tag)?;
                }
            }
            let dt = adi::wtime() - t0;
            if me == 0 {
                println!("{len:>10} {:>12.2}", dt * 1e6 / (2.0 * iters as f64));
            }
        }
    }
    world.barrier()?;
    adi::finalize()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong: {e} ({})", e.class());
            ExitCode::FAILURE
        }
    }
}
