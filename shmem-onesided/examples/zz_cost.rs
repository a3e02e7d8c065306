// scratch: per-message endpoint cost of the osu bw pattern, one thread
use shmem_onesided::{CmaMode, Config, Endpoint, Node, SendMode};
use tm_proto::{MatchSpec, Source, Tag};
fn main() {
    let job = format!("zzcost{}", std::process::id());
    let attach = |r: u32| {
        let j = job.clone();
        std::thread::spawn(move || {
            let c = Config {
                cma: CmaMode::Off,
                ..Config::default()
            };
            Endpoint::new(Node::init(&j, r, 2, c).unwrap())
        })
    };
    let (h0, h1) = (attach(0), attach(1));
    let (mut e0, mut e1) = (h0.join().unwrap(), h1.join().unwrap());
    let spec = MatchSpec {
        context_id: 0,
        source: Source::Rank(0),
        tag: Tag::Value(2),
    };
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20000);
    let posted_first = std::env::var("POSTED").is_ok();
    let len = 8;
    let mut pool: Vec<Vec<u8>> = (0..64).map(|_| vec![0u8; len]).collect();
    let mut spool: Vec<Vec<u8>> = (0..64).map(|_| vec![0u8; len]).collect();
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    if std::env::var("TRY").is_ok() {
        let spec1 = MatchSpec {
            context_id: 0,
            source: Source::Rank(1),
            tag: Tag::Value(2),
        };
        let data = [7u8; 8];
        let mut buf = [0u8; 8];
        let t = std::time::Instant::now();
        for _ in 0..reps * 64 {
            assert!(e0
                .send_or_start(1, 2, 0, &data, SendMode::Standard)
                .unwrap()
                .is_none());
            e1.try_recv(spec, &mut buf).unwrap().unwrap();
            assert!(e1
                .send_or_start(0, 2, 0, &data, SendMode::Standard)
                .unwrap()
                .is_none());
            e0.try_recv(spec1, &mut buf).unwrap().unwrap();
        }
        let dt = t.elapsed().as_secs_f64();
        eprintln!("try: {:.1} ns/hop", dt * 1e9 / (reps * 128) as f64);
        e0.finalize().unwrap();
        e1.finalize().unwrap();
        return;
    }
    let t = std::time::Instant::now();
    let mut pending: Vec<shmem_onesided::RecvRequest> = Vec::new();
    for _ in 0..reps {
        let mut post = |e1: &mut Endpoint, pool: &mut Vec<Vec<u8>>, pending: &mut Vec<_>| {
            for _ in 0..64 {
                match e1.irecv_or_done(spec, pool.pop().unwrap()).unwrap() {
                    Ok(r) => pending.push(r),
                    Err((res, b)) => {
                        res.unwrap();
                        pool.push(b);
                    }
                }
            }
        };
        if posted_first {
            post(&mut e1, &mut pool, &mut pending);
        }
        for _ in 0..64 {
            match e0
                .isend_or_done(1, 2, 0, spool.pop().unwrap(), SendMode::Standard)
                .unwrap()
            {
                Ok(_) => panic!("pending send"),
                Err(b) => spool.push(b),
            }
        }
        if !posted_first {
            post(&mut e1, &mut pool, &mut pending);
        }
        while !pending.is_empty() {
            e1.progress().unwrap();
            e1.take_finished(&mut sends, &mut recvs);
            for (_, r) in recvs.drain(..) {
                let (_, b) = r.unwrap();
                pool.push(b);
                pending.pop();
            }
        }
    }
    let dt = t.elapsed().as_secs_f64();
    eprintln!(
        "posted_first={posted_first}: {:.1} ns/msg",
        dt * 1e9 / (reps * 64) as f64
    );
    e0.finalize().unwrap();
    e1.finalize().unwrap();
}
