//! The PMI server as a state machine (no I/O): frames in, replies and events out.
//!
//! It speaks the PMI-1 replies of Hydra 4.0.2 byte for byte (see
//! `pmi-wire-protocol.md` §1.2.3) and the PMI-2 commands MPICH and Slurm use.
//! Puts are cached and become visible only when the next barrier
//! (`barrier_in` or `kvs-fence`) completes, as in Hydra. Bad input never
//! panics: it gets an `rc=-1` reply and a [`ServerEvent::Protocol`] event for
//! the log; the I/O layer decides whether to abort the job.

use std::collections::HashMap;

use crate::wire::{self, Frame, Message, Proto};

/// Job-wide facts the server hands out.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Number of ranks.
    pub size: usize,
    /// KVS name (PMI-2 job id) given to ranks.
    pub kvsname: String,
    /// `PMI_process_mapping` value, e.g. `(vector,(0,1,4))`.
    pub process_mapping: String,
    /// Application number.
    pub appnum: i64,
}

/// Something the launcher must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A rank asked to abort the job.
    Abort {
        /// The rank.
        rank: usize,
        /// The exit code it asked for.
        code: i32,
        /// Its message, if it sent one (PMI-2).
        message: Option<String>,
    },
    /// A rank finalized: its EOF and exit are normal from now on.
    Finalized {
        /// The rank.
        rank: usize,
    },
    /// A barrier completed (all ranks entered it).
    BarrierReleased,
    /// A rank sent something invalid; it got an error reply.
    Protocol {
        /// The rank.
        rank: usize,
        /// What was wrong.
        reason: String,
    },
}

/// What the launcher must do after one frame.
#[derive(Debug, Default)]
pub struct Step {
    /// Bytes to write to each rank's connection, in order.
    pub replies: Vec<(usize, Vec<u8>)>,
    /// Events to act on.
    pub events: Vec<ServerEvent>,
}

#[derive(Debug, Clone, Default)]
struct RankState {
    active: bool,
    finalized: bool,
    proto: Option<Proto>,
    in_barrier: Option<Proto>,
}

/// The PMI server's state for one job.
#[derive(Debug)]
pub struct Server {
    cfg: ServerConfig,
    committed: HashMap<String, String>,
    pending: Vec<(String, String)>,
    ranks: Vec<RankState>,
    in_barrier: usize,
    barriers: u64,
    names: HashMap<String, String>,
    node_attrs: HashMap<String, String>,
}

fn ok1(cmd: &str) -> Message {
    Message::new(cmd)
}

impl Server {
    /// A server for a job.
    pub fn new(cfg: ServerConfig) -> Self {
        let ranks = vec![RankState::default(); cfg.size];
        Server {
            cfg,
            committed: HashMap::new(),
            pending: Vec::new(),
            ranks,
            in_barrier: 0,
            barriers: 0,
            names: HashMap::new(),
            node_attrs: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// Whether `rank` has sent at least one PMI message (Hydra's "PMI-active").
    pub fn is_active(&self, rank: usize) -> bool {
        self.ranks.get(rank).is_some_and(|r| r.active)
    }

    /// Whether `rank` has finalized.
    pub fn is_finalized(&self, rank: usize) -> bool {
        self.ranks.get(rank).is_some_and(|r| r.finalized)
    }

    /// How many ranks wait in the current barrier.
    pub fn waiting_in_barrier(&self) -> usize {
        self.in_barrier
    }

    /// How many barriers have completed.
    pub fn barriers_completed(&self) -> u64 {
        self.barriers
    }

    /// Handles one frame from `rank`.
    pub fn handle(&mut self, rank: usize, frame: Frame) -> Step {
        let mut step = Step::default();
        if rank >= self.ranks.len() {
            step.events.push(ServerEvent::Protocol {
                rank,
                reason: format!("rank {rank} is outside the job"),
            });
            return step;
        }
        self.ranks[rank].active = true;
        match frame {
            Frame::V1(line) => match wire::parse_pmi1(&line) {
                Ok(msg) => self.v1(rank, &msg, &mut step),
                Err(e) => self.reject(
                    rank,
                    Proto::V1,
                    "error",
                    "malformed_request",
                    e.to_string(),
                    &mut step,
                ),
            },
            Frame::V2(body) => match wire::parse_pmi2_body(&body) {
                Ok(msg) => self.v2(rank, &msg, &mut step),
                Err(e) => self.reject(
                    rank,
                    Proto::V2,
                    "error",
                    "malformed_request",
                    e.to_string(),
                    &mut step,
                ),
            },
            Frame::Mcmd(raw) => self.reject(
                rank,
                Proto::V1,
                "spawn_result",
                "spawn_not_supported",
                format!("spawn is not supported ({} bytes)", raw.len()),
                &mut step,
            ),
            Frame::Oversized { proto, len } => self.reject(
                rank,
                proto,
                "error",
                "message_too_long",
                format!(
                    "message of {len} bytes exceeds {} bytes",
                    wire::SERVER_MAX_MESSAGE
                ),
                &mut step,
            ),
        }
        step
    }

    fn send(&self, rank: usize, msg: &Message, step: &mut Step) {
        let proto = self.ranks[rank].proto.unwrap_or(Proto::V1);
        step.replies.push((rank, msg.encode(proto)));
    }

    fn reject(
        &self,
        rank: usize,
        proto: Proto,
        reply_cmd: &str,
        code: &str,
        reason: String,
        step: &mut Step,
    ) {
        let reply = match proto {
            Proto::V1 => Message::new(reply_cmd).arg("rc", "-1").arg("msg", code),
            Proto::V2 => Message::new(if reply_cmd == "error" {
                "error-response".to_string()
            } else {
                reply_cmd.to_string()
            })
            .arg("rc", "-1")
            .arg("errmsg", code),
        };
        step.replies.push((rank, reply.encode(proto)));
        step.events.push(ServerEvent::Protocol { rank, reason });
    }

    fn value_ok(key: &str, value: &str) -> Result<(), &'static str> {
        if key.is_empty() || key.len() > wire::KEYLEN_MAX {
            return Err("bad_key_length");
        }
        if value.len() > wire::VALLEN_MAX {
            return Err("value_too_long");
        }
        Ok(())
    }

    fn enter_barrier(&mut self, rank: usize, proto: Proto, step: &mut Step) {
        if self.ranks[rank].in_barrier.is_none() {
            self.ranks[rank].in_barrier = Some(proto);
            self.in_barrier += 1;
        }
        if self.in_barrier < self.cfg.size {
            return;
        }
        for (k, v) in self.pending.drain(..) {
            self.committed.insert(k, v);
        }
        self.in_barrier = 0;
        self.barriers += 1;
        for r in 0..self.ranks.len() {
            match self.ranks[r].in_barrier.take() {
                Some(Proto::V1) => step.replies.push((r, ok1("barrier_out").encode(Proto::V1))),
                Some(Proto::V2) => step.replies.push((
                    r,
                    Message::new("kvs-fence-response")
                        .arg("rc", "0")
                        .encode(Proto::V2),
                )),
                None => {}
            }
        }
        step.events.push(ServerEvent::BarrierReleased);
    }

    fn lookup(&self, key: &str) -> Option<&str> {
        if key == "PMI_process_mapping" {
            return Some(&self.cfg.process_mapping);
        }
        self.committed.get(key).map(String::as_str)
    }

    fn v1(&mut self, rank: usize, m: &Message, step: &mut Step) {
        let size = self.cfg.size;
        match m.cmd.as_str() {
            "init" => {
                let v = m.get("pmi_version").unwrap_or("");
                let s = m.get("pmi_subversion").unwrap_or("");
                let reply = match (v, s.parse::<u32>()) {
                    ("1", Ok(sub)) if sub <= 1 => {
                        self.ranks[rank].proto = Some(Proto::V1);
                        ok1("response_to_init")
                            .arg("pmi_version", "1")
                            .arg("pmi_subversion", "1")
                            .arg("rc", "0")
                    }
                    ("2", Ok(0)) => ok1("response_to_init")
                        .arg("pmi_version", "2")
                        .arg("pmi_subversion", "0")
                        .arg("rc", "0"),
                    _ => {
                        step.events.push(ServerEvent::Protocol {
                            rank,
                            reason: format!("PMI version mismatch: {v}.{s}"),
                        });
                        ok1("response_to_init")
                            .arg("pmi_version", "1")
                            .arg("pmi_subversion", "1")
                            .arg("rc", "-1")
                    }
                };
                // The handshake is always a PMI-1 line; switch afterwards.
                step.replies.push((rank, reply.to_pmi1()));
                if v == "2" && s == "0" {
                    self.ranks[rank].proto = Some(Proto::V2);
                }
            }
            "initack" => {
                let id = m.get("pmiid").and_then(|v| v.parse::<usize>().ok());
                if id != Some(rank) {
                    self.reject(
                        rank,
                        Proto::V1,
                        "initack",
                        "bad_pmiid",
                        format!("initack pmiid={:?} on rank {rank}'s connection", id),
                        step,
                    );
                    return;
                }
                let mut bytes = ok1("initack").to_pmi1();
                bytes.extend(ok1("set").arg("size", size.to_string()).to_pmi1());
                bytes.extend(ok1("set").arg("rank", rank.to_string()).to_pmi1());
                bytes.extend(ok1("set").arg("debug", "0").to_pmi1());
                step.replies.push((rank, bytes));
            }
            "get_maxes" => self.send(
                rank,
                &ok1("maxes")
                    .arg("kvsname_max", wire::KVSNAME_MAX.to_string())
                    .arg("keylen_max", wire::KEYLEN_MAX.to_string())
                    .arg("vallen_max", wire::VALLEN_MAX.to_string()),
                step,
            ),
            "get_appnum" => self.send(
                rank,
                &ok1("appnum").arg("appnum", self.cfg.appnum.to_string()),
                step,
            ),
            "get_my_kvsname" => self.send(
                rank,
                &ok1("my_kvsname").arg("kvsname", self.cfg.kvsname.clone()),
                step,
            ),
            "get_universe_size" => self.send(
                rank,
                &ok1("universe_size").arg("size", size.to_string()),
                step,
            ),
            "put" => {
                let (Some(key), Some(value)) = (m.get("key"), m.get("value")) else {
                    self.reject(
                        rank,
                        Proto::V1,
                        "put_result",
                        "missing_key_or_value",
                        format!("put without key= or value=: {m}"),
                        step,
                    );
                    return;
                };
                if m.get("kvsname").is_some_and(|k| k != self.cfg.kvsname) {
                    self.reject(
                        rank,
                        Proto::V1,
                        "put_result",
                        "unknown_kvsname",
                        format!("put to a foreign kvsname: {m}"),
                        step,
                    );
                    return;
                }
                if let Err(code) = Self::value_ok(key, value) {
                    self.reject(
                        rank,
                        Proto::V1,
                        "put_result",
                        code,
                        format!("put of key {key:?} rejected: {code}"),
                        step,
                    );
                    return;
                }
                self.pending.push((key.to_string(), value.to_string()));
                self.send(
                    rank,
                    &ok1("put_result").arg("rc", "0").arg("msg", "success"),
                    step,
                );
            }
            "get" => {
                let Some(key) = m.get("key") else {
                    self.reject(
                        rank,
                        Proto::V1,
                        "get_result",
                        "missing_key",
                        format!("get without key=: {m}"),
                        step,
                    );
                    return;
                };
                let reply = match self.lookup(key) {
                    Some(v) => ok1("get_result")
                        .arg("rc", "0")
                        .arg("msg", "success")
                        .arg("value", v),
                    None => {
                        let shown: String = key
                            .chars()
                            .filter(|c| c.is_ascii_graphic())
                            .take(wire::KEYLEN_MAX)
                            .collect();
                        ok1("get_result")
                            .arg("rc", "-1")
                            .arg("msg", format!("key_{shown}_not_found"))
                            .arg("value", "unknown")
                    }
                };
                self.send(rank, &reply, step);
            }
            "barrier_in" => self.enter_barrier(rank, Proto::V1, step),
            "finalize" => {
                self.ranks[rank].finalized = true;
                step.events.push(ServerEvent::Finalized { rank });
                self.send(rank, &ok1("finalize_ack"), step);
            }
            "abort" => {
                let code = m
                    .get("exitcode")
                    .and_then(|c| c.parse::<i32>().ok())
                    .unwrap_or(1);
                step.events.push(ServerEvent::Abort {
                    rank,
                    code,
                    message: m.get("message").map(str::to_string),
                });
            }
            "publish_name" => {
                let (Some(s), Some(p)) = (m.get("service"), m.get("port")) else {
                    self.reject(
                        rank,
                        Proto::V1,
                        "publish_result",
                        "missing_service_or_port",
                        format!("bad publish_name: {m}"),
                        step,
                    );
                    return;
                };
                self.names.insert(s.to_string(), p.to_string());
                self.send(
                    rank,
                    &ok1("publish_result")
                        .arg("info", "ok")
                        .arg("rc", "0")
                        .arg("msg", "success"),
                    step,
                );
            }
            "unpublish_name" => {
                let found = m.get("service").and_then(|s| self.names.remove(s));
                let reply = match found {
                    Some(_) => ok1("unpublish_result")
                        .arg("info", "ok")
                        .arg("rc", "0")
                        .arg("msg", "success"),
                    None => ok1("unpublish_result")
                        .arg("info", "unknown_service")
                        .arg("rc", "-1")
                        .arg("msg", "service_not_found"),
                };
                self.send(rank, &reply, step);
            }
            "lookup_name" => {
                let found = m.get("service").and_then(|s| self.names.get(s)).cloned();
                let reply = match found {
                    Some(port) => ok1("lookup_result")
                        .arg("port", port)
                        .arg("info", "ok")
                        .arg("rc", "0")
                        .arg("msg", "success"),
                    None => ok1("lookup_result")
                        .arg("info", "unknown_service")
                        .arg("rc", "-1")
                        .arg("msg", "service_not_found"),
                };
                self.send(rank, &reply, step);
            }
            other => {
                let other = other.to_string();
                self.reject(
                    rank,
                    Proto::V1,
                    "error",
                    &format!("unknown_command_{other}"),
                    format!("unknown PMI-1 command {other:?}"),
                    step,
                );
            }
        }
    }

    fn v2(&mut self, rank: usize, m: &Message, step: &mut Step) {
        self.ranks[rank].proto = Some(Proto::V2);
        let size = self.cfg.size;
        let resp = |cmd: &str| Message::new(format!("{cmd}-response"));
        match m.cmd.as_str() {
            "fullinit" => {
                let claimed = m
                    .get("pmirank")
                    .or_else(|| m.get("pmiid"))
                    .and_then(|v| v.parse::<usize>().ok());
                if claimed.is_some_and(|c| c != rank) {
                    self.reject(
                        rank,
                        Proto::V2,
                        "fullinit-response",
                        "bad_rank",
                        format!("fullinit claims rank {claimed:?} on rank {rank}'s connection"),
                        step,
                    );
                    return;
                }
                self.send(
                    rank,
                    &resp("fullinit")
                        .arg("pmi-version", "2")
                        .arg("pmi-subversion", "0")
                        .arg("rank", rank.to_string())
                        .arg("size", size.to_string())
                        .arg("appnum", self.cfg.appnum.to_string())
                        .arg("debugged", "FALSE")
                        .arg("pmiverbose", "FALSE")
                        .arg("rc", "0"),
                    step,
                );
            }
            "job-getid" => self.send(
                rank,
                &resp("job-getid")
                    .arg("jobid", self.cfg.kvsname.clone())
                    .arg("rc", "0"),
                step,
            ),
            "kvs-put" => {
                let (Some(key), Some(value)) = (m.get("key"), m.get("value")) else {
                    self.reject(
                        rank,
                        Proto::V2,
                        "kvs-put-response",
                        "missing_key_or_value",
                        format!("kvs-put without key or value: {m}"),
                        step,
                    );
                    return;
                };
                if let Err(code) = Self::value_ok(key, value) {
                    self.reject(
                        rank,
                        Proto::V2,
                        "kvs-put-response",
                        code,
                        format!("kvs-put of key {key:?} rejected: {code}"),
                        step,
                    );
                    return;
                }
                self.pending.push((key.to_string(), value.to_string()));
                self.send(rank, &resp("kvs-put").arg("rc", "0"), step);
            }
            "kvs-fence" => self.enter_barrier(rank, Proto::V2, step),
            "kvs-get" => {
                let value = m
                    .get("key")
                    .and_then(|k| self.lookup(k))
                    .map(str::to_string);
                let reply = match value {
                    Some(v) => resp("kvs-get")
                        .arg("found", "TRUE")
                        .arg("value", v)
                        .arg("rc", "0"),
                    None => resp("kvs-get").arg("found", "FALSE").arg("rc", "0"),
                };
                self.send(rank, &reply, step);
            }
            "info-getjobattr" => {
                let reply = match m.get("key") {
                    Some("PMI_process_mapping") => resp("info-getjobattr")
                        .arg("found", "TRUE")
                        .arg("value", self.cfg.process_mapping.clone())
                        .arg("rc", "0"),
                    Some("universeSize") => resp("info-getjobattr")
                        .arg("found", "TRUE")
                        .arg("value", size.to_string())
                        .arg("rc", "0"),
                    _ => resp("info-getjobattr").arg("found", "FALSE").arg("rc", "0"),
                };
                self.send(rank, &reply, step);
            }
            "info-putnodeattr" => {
                let (Some(key), Some(value)) = (m.get("key"), m.get("value")) else {
                    self.reject(
                        rank,
                        Proto::V2,
                        "info-putnodeattr-response",
                        "missing_key_or_value",
                        format!("info-putnodeattr without key or value: {m}"),
                        step,
                    );
                    return;
                };
                if let Err(code) = Self::value_ok(key, value) {
                    self.reject(
                        rank,
                        Proto::V2,
                        "info-putnodeattr-response",
                        code,
                        format!("info-putnodeattr of key {key:?} rejected: {code}"),
                        step,
                    );
                    return;
                }
                self.node_attrs.insert(key.to_string(), value.to_string());
                self.send(rank, &resp("info-putnodeattr").arg("rc", "0"), step);
            }
            "info-getnodeattr" => {
                let value = m.get("key").and_then(|k| self.node_attrs.get(k)).cloned();
                let reply = match value {
                    Some(v) => resp("info-getnodeattr")
                        .arg("found", "TRUE")
                        .arg("value", v)
                        .arg("rc", "0"),
                    None => resp("info-getnodeattr")
                        .arg("found", "FALSE")
                        .arg("rc", "0"),
                };
                self.send(rank, &reply, step);
            }
            "finalize" => {
                self.ranks[rank].finalized = true;
                step.events.push(ServerEvent::Finalized { rank });
                self.send(rank, &resp("finalize").arg("rc", "0"), step);
            }
            "abort" => {
                let code = m
                    .get("exitcode")
                    .and_then(|c| c.parse::<i32>().ok())
                    .unwrap_or(1);
                step.events.push(ServerEvent::Abort {
                    rank,
                    code,
                    message: m.get("msg").map(str::to_string),
                });
            }
            other => {
                let other = other.to_string();
                self.reject(
                    rank,
                    Proto::V2,
                    &format!("{other}-response"),
                    "unknown_command",
                    format!("unknown PMI-2 command {other:?}"),
                    step,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(n: usize) -> Server {
        Server::new(ServerConfig {
            size: n,
            kvsname: "kvs_tmx_test".into(),
            process_mapping: "(vector,(0,1,2))".into(),
            appnum: 0,
        })
    }

    fn v1(s: &mut Server, rank: usize, line: &str) -> Step {
        s.handle(rank, Frame::V1(line.as_bytes().to_vec()))
    }

    fn text(step: &Step) -> Vec<(usize, String)> {
        step.replies
            .iter()
            .map(|(r, b)| (*r, String::from_utf8_lossy(b).into_owned()))
            .collect()
    }

    #[test]
    fn hydra_replies_byte_for_byte() {
        let mut s = server(2);
        let cases = [
            (
                "cmd=init pmi_version=1 pmi_subversion=1",
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
            ),
            (
                "cmd=get_maxes",
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            ),
            ("cmd=get_appnum", "cmd=appnum appnum=0\n"),
            (
                "cmd=get_my_kvsname",
                "cmd=my_kvsname kvsname=kvs_tmx_test\n",
            ),
            (
                "cmd=get kvsname=kvs_tmx_test key=PMI_process_mapping",
                "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n",
            ),
            (
                "cmd=put kvsname=kvs_tmx_test key=k value=a=b",
                "cmd=put_result rc=0 msg=success\n",
            ),
            (
                "cmd=get kvsname=kvs_tmx_test key=k",
                "cmd=get_result rc=-1 msg=key_k_not_found value=unknown\n",
            ),
            ("cmd=finalize", "cmd=finalize_ack\n"),
        ];
        for (req, want) in cases {
            let st = v1(&mut s, 0, req);
            assert_eq!(text(&st), vec![(0, want.to_string())], "{req}");
        }
    }

    #[test]
    fn puts_are_fenced_by_the_barrier() {
        let mut s = server(2);
        v1(&mut s, 0, "cmd=put kvsname=kvs_tmx_test key=k value=1");
        assert!(v1(&mut s, 0, "cmd=barrier_in").replies.is_empty());
        let get = v1(&mut s, 1, "cmd=get kvsname=kvs_tmx_test key=k");
        assert!(text(&get)[0].1.contains("rc=-1"));
        let st = v1(&mut s, 1, "cmd=barrier_in");
        assert_eq!(
            text(&st),
            vec![
                (0, "cmd=barrier_out\n".to_string()),
                (1, "cmd=barrier_out\n".to_string())
            ]
        );
        let get = v1(&mut s, 1, "cmd=get kvsname=kvs_tmx_test key=k");
        assert_eq!(text(&get)[0].1, "cmd=get_result rc=0 msg=success value=1\n");
        assert_eq!(s.barriers_completed(), 1);
    }

    #[test]
    fn pmi2_session() {
        let mut s = server(1);
        let st = v1(&mut s, 0, "cmd=init pmi_version=2 pmi_subversion=0");
        assert_eq!(
            text(&st)[0].1,
            "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n"
        );
        let body = |b: &str| Frame::V2(b.as_bytes().to_vec());
        let st = s.handle(0, body("cmd=fullinit;pmirank=0;threaded=FALSE;"));
        let reply = &st.replies[0].1;
        let m = wire::parse_pmi2_body(&reply[6..]).unwrap();
        assert_eq!(m.get("size"), Some("1"));
        assert_eq!(m.rc().unwrap(), Some(0));
        s.handle(0, body("cmd=kvs-put;key=bc-0;value=ABC;"));
        let st = s.handle(0, body("cmd=kvs-fence;"));
        assert_eq!(st.replies.len(), 1);
        let st = s.handle(0, body("cmd=kvs-get;jobid=;srcid=0;key=bc-0;"));
        let m = wire::parse_pmi2_body(&st.replies[0].1[6..]).unwrap();
        assert_eq!(
            (m.get("found"), m.get("value")),
            (Some("TRUE"), Some("ABC"))
        );
        let st = s.handle(0, body("cmd=abort;isworldabort=TRUE;msg=bye;exitcode=7;"));
        assert_eq!(
            st.events,
            vec![ServerEvent::Abort {
                rank: 0,
                code: 7,
                message: Some("bye".into())
            }]
        );
    }

    #[test]
    fn bad_input_gets_error_replies() {
        let mut s = server(1);
        for bad in ["garbage", "cmd=frobnicate", "cmd=put key", "cmd=put key=k"] {
            let st = v1(&mut s, 0, bad);
            assert_eq!(st.replies.len(), 1, "{bad}");
            assert!(text(&st)[0].1.contains("rc=-1"), "{bad}");
            assert!(matches!(st.events[0], ServerEvent::Protocol { .. }));
        }
        let long = format!(
            "cmd=put kvsname=kvs_tmx_test key=k value={}",
            "x".repeat(2000)
        );
        assert!(text(&v1(&mut s, 0, &long))[0].1.contains("value_too_long"));
        let st = s.handle(
            0,
            Frame::Oversized {
                proto: Proto::V1,
                len: 1 << 20,
            },
        );
        assert!(text(&st)[0].1.contains("message_too_long"));
        let st = s.handle(7, Frame::V1(b"cmd=init".to_vec()));
        assert!(st.replies.is_empty());
    }
}
