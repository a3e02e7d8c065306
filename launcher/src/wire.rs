//! PMI-1 and PMI-2 wire codecs (no I/O).
//!
//! PMI-1 (as Debian's Hydra 4.0.2 speaks it): one message is one line
//! `cmd=<name> key=value key=value\n`; tokens are separated by runs of spaces and
//! split at their **first** `=`, so values may contain `=` but never a space,
//! `\`, a newline or NUL. A reply is read as an unordered map.
//!
//! PMI-2: after a PMI-1 `cmd=init pmi_version=2 pmi_subversion=0` handshake,
//! each message is a 6-byte ASCII decimal length (left- or right-justified,
//! parsed after trimming) followed by `cmd=<name>;key=value;...;`.
//! `;` is never escaped portably, so it never appears in values.

use crate::error::{Error, Result};

/// Longest PMI-1 line a client may send (`PMIU_MAXLINE`, newline included).
pub const PMI1_MAX_LINE: usize = 1024;
/// Longest key Hydra accepts (`keylen_max`).
pub const KEYLEN_MAX: usize = 64;
/// Longest value Hydra stores (`vallen_max`).
pub const VALLEN_MAX: usize = 1024;
/// Longest KVS name Hydra advertises (`kvsname_max`).
pub const KVSNAME_MAX: usize = 256;
/// Longest value a PMI-1 client can actually send in one line
/// (`1024 - kvsname_max - keylen_max - 30`, as MPICH 4.0.2 clamps it).
pub const PMI1_CLIENT_VALLEN: usize = PMI1_MAX_LINE - KVSNAME_MAX - KEYLEN_MAX - 30;
/// Largest message the server accepts from a rank (Hydra's read buffer, 64 KiB).
pub const SERVER_MAX_MESSAGE: usize = 64 * 1024;

/// Which PMI wire protocol a message uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// Text lines, space-separated tokens.
    V1,
    /// Length-prefixed, `;`-separated tokens.
    V2,
}

/// One PMI message: the command name and its `key=value` tokens, in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The value of the leading `cmd=` token.
    pub cmd: String,
    /// The remaining tokens.
    pub args: Vec<(String, String)>,
}

impl Message {
    /// A message with no arguments.
    pub fn new(cmd: impl Into<String>) -> Self {
        Message {
            cmd: cmd.into(),
            args: Vec::new(),
        }
    }

    /// Adds one `key=value` token (builder style).
    #[must_use]
    pub fn arg(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.args.push((key.into(), value.into()));
        self
    }

    /// The value of the first token named `key`, whatever its position.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The `rc=` token as a number: `Ok(None)` if absent, an error if not a number.
    pub fn rc(&self) -> Result<Option<i64>> {
        match self.get("rc") {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| Error::Malformed {
                    reason: format!("rc={v:?} is not a number"),
                    message: self.to_string(),
                }),
        }
    }

    /// Encodes as one PMI-1 line, with the trailing newline.
    pub fn to_pmi1(&self) -> Vec<u8> {
        let mut s = format!("cmd={}", self.cmd);
        for (k, v) in &self.args {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s.push('\n');
        s.into_bytes()
    }

    /// Encodes as one PMI-2 message: a right-justified 6-byte length, then the body.
    pub fn to_pmi2(&self) -> Vec<u8> {
        let mut body = format!("cmd={};", self.cmd);
        for (k, v) in &self.args {
            body.push_str(k);
            body.push('=');
            body.push_str(v);
            body.push(';');
        }
        let mut out = format!("{:>6}", body.len()).into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }

    /// Encodes in the given protocol.
    pub fn encode(&self, proto: Proto) -> Vec<u8> {
        match proto {
            Proto::V1 => self.to_pmi1(),
            Proto::V2 => self.to_pmi2(),
        }
    }
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cmd={}", self.cmd)?;
        for (k, v) in &self.args {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

fn valid_cmd_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn split_token<'a>(tok: &'a str, whole: &[u8]) -> Result<(&'a str, &'a str)> {
    match tok.split_once('=') {
        Some(("", _)) => Err(Error::malformed("empty key", whole)),
        Some(kv) => Ok(kv),
        None => Err(Error::malformed(
            format!("token {tok:?} has no '=' (bare keys are not allowed)"),
            whole,
        )),
    }
}

/// Parses one PMI-1 line (with or without its trailing `\n`).
///
/// Runs of spaces separate tokens; each token splits at its first `=`; the first
/// token must be `cmd=<name>` (or `mcmd=<name>`, reported with `cmd` = `name`).
pub fn parse_pmi1(line: &[u8]) -> Result<Message> {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    if let Some(b) = body
        .iter()
        .find(|b| !(0x20..=0x7e).contains(*b) && **b != b'\t')
    {
        return Err(Error::malformed(
            format!("byte 0x{b:02x} is not printable ASCII"),
            line,
        ));
    }
    let text = std::str::from_utf8(body).map_err(|_| Error::malformed("not ASCII", line))?;
    let mut toks = text.split([' ', '\t']).filter(|t| !t.is_empty());
    let first = toks
        .next()
        .ok_or_else(|| Error::malformed("empty line", line))?;
    let (k, name) = split_token(first, line)?;
    if k != "cmd" && k != "mcmd" {
        return Err(Error::malformed("the first token is not cmd=", line));
    }
    if !valid_cmd_name(name) {
        return Err(Error::malformed(format!("bad command name {name:?}"), line));
    }
    let mut msg = Message::new(name);
    for t in toks {
        let (k, v) = split_token(t, line)?;
        msg.args.push((k.to_string(), v.to_string()));
    }
    Ok(msg)
}

/// Parses one PMI-2 body (without the 6-byte length prefix): `cmd=x;k=v;...;`.
pub fn parse_pmi2_body(body: &[u8]) -> Result<Message> {
    if let Some(b) = body.iter().find(|b| !(0x20..=0x7e).contains(*b)) {
        return Err(Error::malformed(
            format!("byte 0x{b:02x} is not printable ASCII"),
            body,
        ));
    }
    let text = std::str::from_utf8(body).map_err(|_| Error::malformed("not ASCII", body))?;
    let mut toks = text.split(';').filter(|t| !t.is_empty());
    let first = toks
        .next()
        .ok_or_else(|| Error::malformed("empty message", body))?;
    let (k, name) = split_token(first, body)?;
    if k != "cmd" || !valid_cmd_name(name) {
        return Err(Error::malformed("the first token is not cmd=<name>", body));
    }
    let mut msg = Message::new(name);
    for t in toks {
        let (k, v) = split_token(t, body)?;
        msg.args.push((k.to_string(), v.to_string()));
    }
    Ok(msg)
}

/// Parses a PMI-2 length prefix (6 ASCII bytes, decimal, blank-padded on either side).
pub fn parse_pmi2_len(prefix: &[u8]) -> Result<usize> {
    let text = std::str::from_utf8(prefix)
        .map_err(|_| Error::malformed("PMI-2 length prefix is not ASCII", prefix))?;
    text.trim_matches(|c| c == ' ' || c == '\0')
        .parse::<usize>()
        .map_err(|_| Error::malformed("PMI-2 length prefix is not a decimal number", prefix))
}

/// Checks that `key` can be sent as a key: 1..=64 bytes of `%x21-7E`, no `=` or `;`.
pub fn check_key(key: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(Error::InvalidKey {
            key: key.to_string(),
            reason: reason.to_string(),
        })
    };
    if key.is_empty() {
        return bad("empty");
    }
    if key.len() > KEYLEN_MAX {
        return bad("longer than 64 bytes (keylen_max)");
    }
    if !key
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b'=' && b != b';' && b != b'\\')
    {
        return bad("only printable ASCII without space, '=', ';' or '\\' is allowed");
    }
    Ok(())
}

/// Checks that `value` can travel as is: printable ASCII without space, `\` or `;`.
///
/// `=` is allowed (servers split tokens at the first `=`).
pub fn check_value(key: &str, value: &str) -> Result<()> {
    if let Some(c) = value
        .bytes()
        .find(|b| !(0x21..=0x7e).contains(b) || *b == b'\\' || *b == b';')
    {
        return Err(Error::InvalidValue {
            key: key.to_string(),
            reason: format!(
                "byte 0x{c:02x} cannot travel on the PMI wire (use put_bytes, which hex-encodes)"
            ),
        });
    }
    Ok(())
}

/// Encodes bytes as upper-case hex, the `[0-9A-F]` alphabet MPICH uses for PMI values.
pub fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// Decodes hex (either case); `Err` names the problem.
pub fn hex_decode(text: &str) -> std::result::Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err(format!("odd length {}", text.len()));
    }
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    text.as_bytes()
        .chunks(2)
        .enumerate()
        .map(|(i, pair)| match (nibble(pair[0]), nibble(pair[1])) {
            (Some(h), Some(l)) => Ok((h << 4) | l),
            _ => Err(format!("non-hex character at offset {}", 2 * i)),
        })
        .collect()
}

/// One unit of input a server got from a rank, as cut by [`Framer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A PMI-1 line (without its newline).
    V1(Vec<u8>),
    /// A multi-line `mcmd=...endcmd` command (spawn), raw.
    Mcmd(Vec<u8>),
    /// A PMI-2 body (without its length prefix).
    V2(Vec<u8>),
    /// A message longer than [`SERVER_MAX_MESSAGE`]; its bytes were discarded.
    Oversized {
        /// The protocol of the discarded message.
        proto: Proto,
        /// How many bytes it had (at least).
        len: usize,
    },
}

/// What the framer needs to do with bytes it is skipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    None,
    /// Discard through the next newline (an oversized PMI-1 line).
    Line,
    /// Discard this many more bytes (an oversized PMI-2 body).
    Bytes(usize),
}

/// Cuts a rank's PMI byte stream into messages, the way Hydra's `check_pmi_cmd`
/// does: at a message boundary, text starting with `cmd=` is a PMI-1 line, text
/// starting with `mcmd=` runs to `endcmd\n`, anything else is a PMI-2 message
/// with a 6-byte length prefix. Partial reads and several messages per read are fine.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    skip: Skip,
    max: usize,
}

impl Default for Framer {
    fn default() -> Self {
        Self::new(SERVER_MAX_MESSAGE)
    }
}

impl Framer {
    /// A framer that refuses messages longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        Framer {
            buf: Vec::new(),
            skip: Skip::None,
            max,
        }
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet framed (at EOF these are a truncated message).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or an error
    /// when the stream cannot be re-synchronised (a PMI-2 prefix that is not a number).
    pub fn next_frame(&mut self) -> Result<Option<Frame>> {
        loop {
            match self.skip {
                Skip::None => break,
                Skip::Line => match self.buf.iter().position(|&b| b == b'\n') {
                    Some(p) => {
                        self.buf.drain(..=p);
                        self.skip = Skip::None;
                    }
                    None => {
                        self.buf.clear();
                        return Ok(None);
                    }
                },
                Skip::Bytes(n) => {
                    let take = n.min(self.buf.len());
                    self.buf.drain(..take);
                    if take == n {
                        self.skip = Skip::None;
                    } else {
                        self.skip = Skip::Bytes(n - take);
                        return Ok(None);
                    }
                }
            }
        }
        // Skip blank lines and stray whitespace between messages.
        let lead = self
            .buf
            .iter()
            .take_while(|b| matches!(b, b'\n' | b'\r'))
            .count();
        self.buf.drain(..lead);
        if self.buf.is_empty() {
            return Ok(None);
        }
        let starts = |p: &[u8]| {
            let n = p.len().min(self.buf.len());
            self.buf[..n] == p[..n]
        };
        if self.buf.starts_with(b"mcmd=") {
            const END: &[u8] = b"endcmd\n";
            if let Some(p) = self.buf.windows(END.len()).position(|w| w == END) {
                let frame: Vec<u8> = self.buf.drain(..p + END.len()).collect();
                return Ok(Some(Frame::Mcmd(frame)));
            }
            if self.buf.len() > self.max {
                let len = self.buf.len();
                self.buf.clear();
                self.skip = Skip::Line;
                return Ok(Some(Frame::Oversized {
                    proto: Proto::V1,
                    len,
                }));
            }
            return Ok(None);
        }
        if starts(b"cmd=") || starts(b"mcmd=") {
            if self.buf.len() < 5 && !self.buf.contains(&b'\n') {
                return Ok(None);
            }
            if let Some(p) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=p).collect();
                line.pop();
                if line.len() > self.max {
                    return Ok(Some(Frame::Oversized {
                        proto: Proto::V1,
                        len: line.len(),
                    }));
                }
                return Ok(Some(Frame::V1(line)));
            }
            if self.buf.len() > self.max {
                let len = self.buf.len();
                self.buf.clear();
                self.skip = Skip::Line;
                return Ok(Some(Frame::Oversized {
                    proto: Proto::V1,
                    len,
                }));
            }
            return Ok(None);
        }
        if self.buf.len() < 6 {
            // A PMI-1 line shorter than 6 bytes ("cmd=\n") is caught above; anything
            // else needs the whole prefix before we can tell.
            if self.buf.contains(&b'\n') {
                let p = self.buf.iter().position(|&b| b == b'\n').unwrap_or(0);
                let mut line: Vec<u8> = self.buf.drain(..=p).collect();
                line.pop();
                return Ok(Some(Frame::V1(line)));
            }
            return Ok(None);
        }
        let len = match parse_pmi2_len(&self.buf[..6]) {
            Ok(len) => len,
            Err(e) => {
                // Not a PMI-2 prefix either: hand a PMI-1-style line up if there is
                // one (the server replies with an error), otherwise give up.
                if let Some(p) = self.buf.iter().position(|&b| b == b'\n') {
                    let mut line: Vec<u8> = self.buf.drain(..=p).collect();
                    line.pop();
                    return Ok(Some(Frame::V1(line)));
                }
                return Err(e);
            }
        };
        if len > self.max {
            self.buf.drain(..6);
            self.skip = Skip::Bytes(len);
            return Ok(Some(Frame::Oversized {
                proto: Proto::V2,
                len,
            }));
        }
        if self.buf.len() < 6 + len {
            return Ok(None);
        }
        let frame: Vec<u8> = self.buf.drain(..6 + len).skip(6).collect();
        Ok(Some(Frame::V2(frame)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hydra_replies_in_any_order() {
        let m = parse_pmi1(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n").unwrap();
        assert_eq!(m.cmd, "response_to_init");
        assert_eq!(m.rc().unwrap(), Some(0));
        let s = parse_pmi1(b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1").unwrap();
        assert_eq!(s.get("pmi_version"), Some("1"));
        assert_eq!(s.rc().unwrap(), Some(0));
        let g = parse_pmi1(b"cmd=get  kvsname=K   key=k0 value=a=b=c").unwrap();
        assert_eq!(g.get("value"), Some("a=b=c"));
        assert_eq!(g.get("key"), Some("k0"));
    }

    #[test]
    fn rejects_bare_keys_and_missing_cmd() {
        assert!(parse_pmi1(b"cmd=put key").is_err());
        assert!(parse_pmi1(b"put key=v").is_err());
        assert!(parse_pmi1(b"").is_err());
        assert!(parse_pmi1(b"cmd=").is_err());
        assert!(parse_pmi1(b"cmd=put value=\x01").is_err());
        assert!(parse_pmi1(b"cmd=put =v").is_err());
    }

    #[test]
    fn pmi2_roundtrip_and_both_justifications() {
        let m = Message::new("kvs-get-response")
            .arg("found", "TRUE")
            .arg("value", "x=y")
            .arg("rc", "0");
        let enc = m.to_pmi2();
        assert_eq!(parse_pmi2_len(&enc[..6]).unwrap(), enc.len() - 6);
        assert_eq!(parse_pmi2_body(&enc[6..]).unwrap(), m);
        assert_eq!(parse_pmi2_len(b"38    ").unwrap(), 38);
        assert_eq!(parse_pmi2_len(b"    38").unwrap(), 38);
        assert!(parse_pmi2_len(b"3x    ").is_err());
    }

    #[test]
    fn framer_cuts_mixed_streams() {
        let mut f = Framer::default();
        let v2 = Message::new("fullinit").arg("pmirank", "0").to_pmi2();
        let mut input = b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec();
        input.extend_from_slice(&v2);
        input.extend_from_slice(b"mcmd=spawn\nnprocs=1\nendcmd\ncmd=barrier_in\n");
        // Feed one byte at a time: partial reads must not matter.
        let mut frames = Vec::new();
        for b in &input {
            f.push(std::slice::from_ref(b));
            while let Some(fr) = f.next_frame().unwrap() {
                frames.push(fr);
            }
        }
        assert_eq!(frames.len(), 4, "{frames:?}");
        assert_eq!(
            frames[0],
            Frame::V1(b"cmd=init pmi_version=2 pmi_subversion=0".to_vec())
        );
        assert!(matches!(&frames[1], Frame::V2(b) if b.starts_with(b"cmd=fullinit;")));
        assert!(matches!(&frames[2], Frame::Mcmd(_)));
        assert_eq!(frames[3], Frame::V1(b"cmd=barrier_in".to_vec()));
        assert_eq!(f.pending(), 0);
    }

    #[test]
    fn framer_discards_oversized_and_resyncs() {
        let mut f = Framer::new(16);
        f.push(b"cmd=put value=");
        f.push(&[b'A'; 40]);
        f.push(b"\ncmd=barrier_in\n");
        assert!(matches!(
            f.next_frame().unwrap(),
            Some(Frame::Oversized {
                proto: Proto::V1,
                ..
            })
        ));
        assert_eq!(
            f.next_frame().unwrap(),
            Some(Frame::V1(b"cmd=barrier_in".to_vec()))
        );
        let mut g = Framer::new(16);
        g.push(b"100   ");
        g.push(&[b'x'; 100]);
        g.push(&Message::new("finalize").to_pmi2());
        assert!(matches!(
            g.next_frame().unwrap(),
            Some(Frame::Oversized {
                proto: Proto::V2,
                len: 100
            })
        ));
        assert!(matches!(g.next_frame().unwrap(), Some(Frame::V2(_))));
        let mut h = Framer::default();
        h.push(b"garbage!");
        assert!(h.next_frame().is_err());
    }

    #[test]
    fn hex_roundtrip() {
        assert_eq!(hex_encode(&[0, 0xab, 0x10]), "00AB10");
        assert_eq!(hex_decode("00ab10").unwrap(), vec![0, 0xab, 0x10]);
        assert!(hex_decode("0").is_err());
        assert!(hex_decode("zz").is_err());
    }

    #[test]
    fn key_and_value_checks() {
        assert!(check_key("bc-0").is_ok());
        assert!(check_key("a b").is_err());
        assert!(check_key("a=b").is_err());
        assert!(check_key(&"k".repeat(65)).is_err());
        assert!(check_value("k", "segments=3").is_ok());
        assert!(check_value("k", "a b").is_err());
        assert!(check_value("k", "a;b").is_err());
    }
}
