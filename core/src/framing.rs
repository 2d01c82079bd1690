//! Where the next reply ends in a read buffer, found before it is decoded.
//!
//! `redis-protocol` decodes a reply recursively and from the start of the buffer each time:
//! fine for a complete reply, but a hostile or unlucky stream hurts it in two ways. A reply
//! nested a hundred thousand arrays deep (`*1\r\n` repeated) overflows the stack, and a large
//! reply that arrives in small reads is decoded again from its first byte after every read,
//! which is quadratic in its size. [`FrameScan`] walks the framing only (type bytes, length
//! lines, bulk payloads) with an explicit stack and a depth limit, remembers how far it got
//! between reads, and says where a complete reply ends; the session takes a lone status,
//! integer or bulk string, or an array of those, from there itself and hands any other
//! reply to the decoder, once.
//!
//! The byte cap alone does not bound what a reply costs decoded: `:0\r\n` is 4 bytes on the
//! wire and a few dozen once decoded (the decoder's frame, then the session's [`Value`]).
//! So the scan also counts elements, as their arrays announce them, and refuses a reply that
//! announces more than the session's `max_reply_elements` before a byte of it is decoded.
//!
//! [`Value`]: crate::value::Value

use bytes::{Buf, Bytes, BytesMut};
use redis_protocol::resp2::decode::decode_bytes;

use crate::value::{from_frame, Frame, Value};

/// Arrays nested deeper than this are refused. Redis replies nest a few levels (`CLUSTER
/// SLOTS` three, `EXEC` of those four); 64 leaves room for any command and for scripts.
pub const MAX_DEPTH: usize = 64;

/// The default bound on the elements of one reply (every array element at every depth, and
/// the reply itself): 4 Mi, a few hundred MiB decoded at most, the order of the 512 MiB byte
/// cap. The largest replies the store asks for (a page of 1,000 records, a `SCAN` page of a
/// migration, `CLUSTER SLOTS`) hold a few thousand.
pub const DEFAULT_MAX_REPLY_ELEMENTS: u64 = 4 << 20;

/// What [`FrameScan::scan`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scanned {
    /// A complete reply takes the first `len` bytes of the buffer.
    Complete(usize),
    /// More bytes are needed.
    Incomplete,
    /// The bytes are not RESP2, nest deeper than [`MAX_DEPTH`], or announce more elements
    /// than the scan allows.
    Invalid(String),
}

/// Replies decoded from one connection's bytes, as they arrive, each decoded once. The session
/// keeps one per connection for the bytes it is given ([`Session::handle_read_buf`]); a driver
/// may instead keep one beside each socket, decode where the bytes are read (on the reader's
/// thread, in parallel with the other connections' readers and with the session), and give the
/// session the replies ([`Session::handle_replies`]). Both ways decode alike.
///
/// [`Session::handle_read_buf`]: crate::session::Session::handle_read_buf
/// [`Session::handle_replies`]: crate::session::Session::handle_replies
#[derive(Debug)]
pub struct ReplyDecoder {
    buf: BytesMut,
    scan: FrameScan,
    max_bytes: usize,
    max_elements: u64,
    /// A protocol failure was reported: the stream cannot be framed past it.
    failed: bool,
}

/// What a [`ReplyDecoder`] made of the bytes given so far: complete replies, in order, then
/// the protocol failure that stopped it, if one did.
#[derive(Debug, Default)]
pub struct Decoded {
    /// Complete replies, in wire order.
    pub replies: Vec<Frame>,
    /// Why the bytes after the replies cannot be replies (not RESP2, nested too deep, more
    /// elements or bytes than the caps allow): the connection is useless and must close.
    pub failure: Option<String>,
}

impl Decoded {
    /// Nothing complete yet: no reply and no failure.
    pub fn is_empty(&self) -> bool {
        self.replies.is_empty() && self.failure.is_none()
    }
}

impl ReplyDecoder {
    /// A decoder that refuses a reply longer than `max_bytes` or announcing more than
    /// `max_elements` elements (the session's `max_read_buffer` and `max_reply_elements`).
    pub fn new(max_bytes: usize, max_elements: u64) -> Self {
        ReplyDecoder {
            buf: BytesMut::new(),
            scan: FrameScan::default(),
            max_bytes,
            max_elements,
            failed: false,
        }
    }

    /// Takes the next bytes of the stream: without a copy when they continue the buffer in
    /// memory (the splits of one read buffer).
    pub fn push(&mut self, data: BytesMut) {
        if self.failed {
            return;
        }
        if self.buf.is_empty() {
            self.buf = data;
        } else {
            self.buf.unsplit(data);
        }
    }

    /// The next complete reply; `None` while more bytes are needed, and for good after a
    /// failure (`Some(Err(why))`, given once).
    pub fn next_reply(&mut self) -> Option<Result<Frame, String>> {
        if self.failed {
            return None;
        }
        let failure = match self.scan.scan(&self.buf, self.max_elements) {
            // The cap holds however the bytes were cut: a reply that arrived whole in one read
            // is refused like one that grew past the cap.
            Scanned::Complete(len) if len > self.max_bytes => self.too_big(),
            Scanned::Complete(len) => {
                if let Some(value) = lone_scalar(&mut self.buf, len) {
                    return Some(Ok(Ok(value)));
                }
                let reply = self.buf.split_to(len).freeze();
                if let Some(value) = plain_array(&reply) {
                    return Some(Ok(Ok(value)));
                }
                match decode_bytes(&reply) {
                    Ok(Some((frame, used))) if used == len => return Some(Ok(from_frame(frame))),
                    Ok(Some((_, used))) => {
                        format!("a reply framed as {len} bytes decoded as {used}")
                    }
                    Ok(None) => format!("a reply framed as {len} bytes did not decode"),
                    Err(e) => e.to_string(),
                }
            }
            Scanned::Incomplete if self.buf.len() > self.max_bytes => self.too_big(),
            Scanned::Incomplete => return None,
            // Nothing after bytes that are not RESP can be framed.
            Scanned::Invalid(detail) => detail,
        };
        self.failed = true;
        self.buf = BytesMut::new();
        Some(Err(failure))
    }

    /// Takes `data` and decodes every reply it completes.
    pub fn decode(&mut self, data: BytesMut) -> Decoded {
        self.push(data);
        let mut decoded = Decoded::default();
        while let Some(next) = self.next_reply() {
            match next {
                Ok(reply) => decoded.replies.push(reply),
                Err(why) => decoded.failure = Some(why),
            }
        }
        decoded
    }

    fn too_big(&self) -> String {
        format!(
            "a reply exceeds the {} byte read buffer cap",
            self.max_bytes
        )
    }
}

/// The reply that takes the first `len` bytes of `buf` when it is a lone status, integer or
/// bulk string, taken off `buf` without the general decoder. The scan has read its framing
/// already, and these are nearly every reply a bot gets (a `GET`'s bulk string, a `SET`'s
/// status, a script's integer): redis-protocol's decoder walked the same bytes again with its
/// parser combinators, which cost a `GET` about as much as encoding it (docs/performance.md,
/// "Exact arguments, lone replies"). `None` leaves the reply to that decoder, which stays the
/// reference (a property test holds the two equal): an array, an error reply, and anything not
/// written the plain way (an integer with a sign other than `-`, a nil other than `$-1`, a
/// bulk payload not followed by CRLF).
fn lone_scalar(buf: &mut BytesMut, len: usize) -> Option<Value> {
    let reply = buf.get(..len)?;
    let lf = reply.iter().position(|&b| b == b'\n')?;
    let line = reply.get(1..lf.checked_sub(1)?)?;
    let value = match reply[0] {
        b'+' if lf + 1 == len => {
            let reply = buf.split_to(len).freeze();
            return Some(Value::Status(reply.slice(1..lf - 1)));
        }
        b':' if lf + 1 == len => Value::Int(plain_integer(line)?),
        b'$' if line == b"-1" && lf + 1 == len => Value::Nil,
        b'$' if lf + 3 <= len && reply[len - 2..] == *b"\r\n" => {
            let reply = buf.split_to(len).freeze();
            return Some(Value::Bulk(reply.slice(lf + 1..len - 2)));
        }
        _ => return None,
    };
    buf.advance(len);
    Some(value)
}

/// The reply `reply` when it is an array of statuses, integers, nils, bulk strings and arrays
/// of those, each written the plain way: what a listing gets (`ZRANGE`, `MGET`, `HGETALL`,
/// `SCAN`, a page of a log, most script replies). Its bulk strings and statuses are slices of
/// `reply`, as the decoder's would be. In a 32-bucket listing (W3), redis-protocol's decoder
/// and the conversion of its frames took two thirds of the client's instructions, walking
/// again the lines the scan had just read (docs/performance.md, "Arrays without the
/// decoder"). `None` leaves the reply to that decoder, as [`lone_scalar`] does: an error
/// element (`EXEC`'s), or any element not written the plain way.
fn plain_array(reply: &Bytes) -> Option<Value> {
    if reply.first() != Some(&b'*') {
        return None;
    }
    let (value, end) = plain_at(reply, 0, 0)?;
    (end == reply.len()).then_some(value)
}

/// The plain element at `at` in `reply`, nested in `depth` arrays, and where the next element
/// starts. The scan refused deeper nesting than [`MAX_DEPTH`] already; the bound is kept for a
/// reply that was not scanned.
fn plain_at(reply: &Bytes, at: usize, depth: usize) -> Option<(Value, usize)> {
    let kind = *reply.get(at)?;
    let (line, next) = line_at(reply, at)?;
    let value = match kind {
        b'+' => Value::Status(reply.slice(at + 1..next - 2)),
        b':' => Value::Int(plain_integer(line)?),
        b'$' | b'*' if line == b"-1" => Value::Nil,
        b'$' => {
            // A length of 19 digits or more is no payload a server sends: the decoder's.
            let end = next.checked_add(usize::try_from(short_digits(line)?).ok()?)?;
            if reply.get(end..end.checked_add(2)?)? != b"\r\n" {
                return None;
            }
            return Some((Value::Bulk(reply.slice(next..end)), end + 2));
        }
        b'*' if depth < MAX_DEPTH => {
            let count = usize::try_from(short_digits(line)?).ok()?;
            // Each element takes at least three bytes (an empty status): a count the bytes
            // cannot hold reserves no more than they could.
            let mut items = Vec::with_capacity(count.min((reply.len() - next) / 3));
            let mut at = next;
            for _ in 0..count {
                let (item, after) = plain_at(reply, at, depth + 1)?;
                items.push(item);
                at = after;
            }
            return Some((Value::Array(items), at));
        }
        _ => return None,
    };
    Some((value, next))
}

/// The line of the element at `at` in `reply`, without its type byte and CRLF, and where
/// what follows the line starts.
fn line_at(reply: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = reply.get(at..)?;
    let lf = rest.iter().position(|&b| b == b'\n')?;
    let line = rest.get(1..lf.checked_sub(1)?)?;
    (rest[lf - 1] == b'\r').then_some((line, at + lf + 1))
}

/// An integer written the plain way: an optional `-`, then digits; `None` for anything else,
/// and for a value out of range.
fn plain_integer(line: &[u8]) -> Option<i64> {
    let digits = line.strip_prefix(b"-").unwrap_or(line);
    if let Some(n) = short_digits(digits) {
        return Some(if digits.len() < line.len() { -n } else { n });
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(line).ok()?.parse().ok()
}

/// The value of at most 18 decimal digits, which no `i64` overflows: the lengths and integers
/// servers write, without `str::parse`'s UTF-8 check and sign handling.
fn short_digits(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n = 0;
    for &digit in digits {
        let value = digit.wrapping_sub(b'0');
        if value > 9 {
            return None;
        }
        n = n * 10 + i64::from(value);
    }
    Some(n)
}

/// The scan of the reply at the front of a buffer, resumed after each read.
#[derive(Debug, Default)]
pub struct FrameScan {
    /// Bytes of the reply walked so far.
    pos: usize,
    /// Where the search for the current line's CRLF goes on.
    searched: usize,
    /// Bytes of a bulk payload (with its CRLF) still to skip.
    bulk: Option<usize>,
    /// Elements still to come in each open array, outermost first.
    open: Vec<u64>,
    /// Elements the reply announced so far, itself included.
    elements: u64,
}

impl FrameScan {
    /// Scans `buf`, which starts with the reply being scanned and holds at least the bytes
    /// seen by earlier calls. After [`Scanned::Complete`] the scan starts afresh: the caller
    /// removes the reply from the front of its buffer. A reply whose arrays announce more than
    /// `max_elements` elements in all (the reply itself counts as one) is
    /// [`Scanned::Invalid`] as soon as the announcement is read.
    pub fn scan(&mut self, buf: &[u8], max_elements: u64) -> Scanned {
        if self.elements == 0 {
            self.elements = 1;
        }
        loop {
            if let Some(skip) = self.bulk {
                match self.pos.checked_add(skip) {
                    Some(end) if end <= buf.len() => {
                        self.pos = end;
                        self.bulk = None;
                    }
                    _ => return Scanned::Incomplete,
                }
            } else {
                let Some(&kind) = buf.get(self.pos) else {
                    return Scanned::Incomplete;
                };
                let from = self.searched.max(self.pos + 1);
                let Some(lf) = buf[from..].iter().position(|&b| b == b'\n') else {
                    // A CRLF split between reads: look at the `\r` again next time.
                    self.searched = buf.len().saturating_sub(1).max(self.pos + 1);
                    return Scanned::Incomplete;
                };
                let end = from + lf;
                if buf[end - 1] != b'\r' || end - 1 < self.pos + 1 {
                    return Scanned::Invalid("a line not ended by CRLF".into());
                }
                let line = &buf[self.pos + 1..end - 1];
                self.pos = end + 1;
                self.searched = 0;
                match kind {
                    b'+' | b'-' | b':' => {}
                    b'$' => match length(line) {
                        Some(-1) => {}
                        Some(n) if n >= 0 => {
                            self.bulk = usize::try_from(n).ok().and_then(|n| n.checked_add(2));
                            if self.bulk.is_none() {
                                return Scanned::Invalid("a bulk string too long".into());
                            }
                            continue;
                        }
                        _ => return Scanned::Invalid("a bad bulk string length".into()),
                    },
                    b'*' => match length(line) {
                        Some(-1 | 0) => {}
                        Some(n) if n > 0 => {
                            if let Err(invalid) = self.open_array(n.unsigned_abs(), max_elements) {
                                return invalid;
                            }
                            continue;
                        }
                        _ => return Scanned::Invalid("a bad array length".into()),
                    },
                    other => return Scanned::Invalid(format!("an unknown type byte {other:#04x}")),
                }
            }
            // An element ended: it may end its arrays too, and then the reply.
            loop {
                match self.open.last_mut() {
                    Some(left) if *left > 1 => {
                        *left -= 1;
                        break;
                    }
                    Some(_) => {
                        self.open.pop();
                    }
                    None => {
                        let len = self.pos;
                        *self = FrameScan {
                            open: std::mem::take(&mut self.open),
                            ..FrameScan::default()
                        };
                        return Scanned::Complete(len);
                    }
                }
            }
        }
    }
}

impl FrameScan {
    /// An array of `len` elements opens: refused past [`MAX_DEPTH`] or `max_elements`.
    fn open_array(&mut self, len: u64, max_elements: u64) -> Result<(), Scanned> {
        if self.open.len() >= MAX_DEPTH {
            return Err(Scanned::Invalid(format!(
                "a reply nested deeper than {MAX_DEPTH} arrays"
            )));
        }
        self.elements = self.elements.saturating_add(len);
        if self.elements > max_elements {
            return Err(Scanned::Invalid(format!(
                "a reply of more than {max_elements} elements"
            )));
        }
        self.open.push(len);
        Ok(())
    }
}

/// A length line: an optional `-` and at most 19 digits.
fn length(line: &[u8]) -> Option<i64> {
    if line.is_empty() || line.len() > 20 {
        return None;
    }
    short_digits(line).or_else(|| std::str::from_utf8(line).ok()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use redis_protocol::resp2::decode::decode_bytes_mut;

    use super::*;

    fn whole(bytes: &[u8]) -> Scanned {
        FrameScan::default().scan(bytes, DEFAULT_MAX_REPLY_ELEMENTS)
    }

    #[test]
    fn every_kind_of_reply_ends_where_it_ends() {
        for reply in [
            &b"+OK\r\n"[..],
            b"-ERR x\r\n",
            b":-12\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$4\r\nab\r\n\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n$1\r\na\r\n*2\r\n:1\r\n*0\r\n",
        ] {
            let mut buf = reply.to_vec();
            buf.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(whole(&buf), Scanned::Complete(reply.len()), "{reply:?}");
        }
    }

    #[test]
    fn a_scan_resumes_where_it_stopped() {
        let reply = b"*3\r\n$5\r\nhello\r\n:7\r\n*1\r\n+x\r\n";
        let mut scan = FrameScan::default();
        for cut in 0..reply.len() {
            assert_eq!(
                scan.scan(&reply[..cut], 6),
                Scanned::Incomplete,
                "cut {cut}"
            );
        }
        assert_eq!(scan.scan(reply, 6), Scanned::Complete(reply.len()));
        // Afresh for the next reply, its element count too.
        assert_eq!(scan.scan(b":1\r\n", 1), Scanned::Complete(4));
        assert_eq!(scan.scan(reply, 6), Scanned::Complete(reply.len()));
    }

    #[test]
    fn elements_are_counted_at_every_depth_and_refused_when_announced() {
        // The reply, its 3 elements and the 1 of the inner array: 5.
        let reply = b"*3\r\n$5\r\nhello\r\n:7\r\n*1\r\n+x\r\n";
        assert_eq!(
            FrameScan::default().scan(reply, 5),
            Scanned::Complete(reply.len())
        );
        assert_eq!(
            FrameScan::default().scan(reply, 4),
            Scanned::Invalid("a reply of more than 4 elements".into())
        );
        // A header alone is refused: the bytes it announces are never waited for.
        assert_eq!(
            FrameScan::default().scan(b"*100000000\r\n", 1000),
            Scanned::Invalid("a reply of more than 1000 elements".into())
        );
        // Four wire bytes an element, all of them counted.
        let mut flat = b"*1000\r\n".to_vec();
        flat.extend(b":0\r\n".repeat(1000));
        assert_eq!(
            FrameScan::default().scan(&flat, 1001),
            Scanned::Complete(flat.len())
        );
        assert!(matches!(
            FrameScan::default().scan(&flat, 1000),
            Scanned::Invalid(_)
        ));
    }

    #[test]
    fn deep_nesting_is_refused_without_recursion() {
        let hostile = b"*1\r\n".repeat(100_000);
        assert_eq!(
            whole(&hostile),
            Scanned::Invalid("a reply nested deeper than 64 arrays".into())
        );
        let mut deep = b"*1\r\n".repeat(MAX_DEPTH);
        deep.extend_from_slice(b":1\r\n");
        assert_eq!(whole(&deep), Scanned::Complete(deep.len()));
    }

    /// One reply as a server could write it, plain or in the odd forms RESP2 readers accept
    /// (a signed or zero-padded number, a bulk payload not followed by CRLF).
    fn reply() -> impl Strategy<Value = Vec<u8>> {
        let text = || {
            proptest::collection::vec(
                any::<u8>().prop_filter("no CR or LF", |b| *b != b'\r' && *b != b'\n'),
                0..12,
            )
        };
        let scalar = prop_oneof![
            text().prop_map(|t| [&b"+"[..], &t, b"\r\n"].concat()),
            text().prop_map(|t| [&b"-ERR "[..], &t, b"\r\n"].concat()),
            any::<i64>().prop_map(|i| format!(":{i}\r\n").into_bytes()),
            prop_oneof![
                Just("+5"),
                Just("007"),
                Just("-0"),
                Just("99999999999999999999"),
                Just(""),
                Just("1x")
            ]
            .prop_map(|i| format!(":{i}\r\n").into_bytes()),
            Just(b"$-1\r\n".to_vec()),
            (
                proptest::collection::vec(any::<u8>(), 0..40),
                prop_oneof![Just(""), Just("+"), Just("0")]
            )
                .prop_map(|(p, sign)| [
                    format!("${sign}{}\r\n", p.len()).as_bytes(),
                    &p,
                    b"\r\n"
                ]
                .concat()),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(|p| [
                format!("${}\r\n", p.len()).as_bytes(),
                &p,
                b"XY"
            ]
            .concat()),
        ];
        let scalar = prop_oneof![
            8 => scalar,
            1 => Just(b"*-1\r\n".to_vec()),
            1 => Just(b"*0\r\n".to_vec()),
        ];
        scalar.prop_recursive(2, 24, 8, |inner| {
            proptest::collection::vec(inner, 0..8).prop_map(|items| {
                let mut array = format!("*{}\r\n", items.len()).into_bytes();
                items.iter().for_each(|item| array.extend_from_slice(item));
                array
            })
        })
    }

    /// What redis-protocol's decoder makes of `bytes`, reply by reply, as `from_frame` sees it.
    fn reference(bytes: &[u8]) -> Vec<Result<Frame, String>> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while !buf.is_empty() {
            match decode_bytes_mut(&mut buf) {
                Ok(Some((frame, _, _))) => out.push(Ok(from_frame(frame))),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    break;
                }
            }
        }
        out
    }

    proptest! {
        /// The paths around the decoder (lone scalars, plain arrays) decode every reply as
        /// redis-protocol does, however the bytes arrive.
        #[test]
        fn replies_decode_as_the_reference_does(
            replies in proptest::collection::vec(reply(), 1..6),
            cut in any::<proptest::sample::Index>(),
        ) {
            let bytes = replies.concat();
            let cut = cut.index(bytes.len() + 1);
            let mut decoder = ReplyDecoder::new(usize::MAX, DEFAULT_MAX_REPLY_ELEMENTS);
            let mut got = Vec::new();
            for part in [&bytes[..cut], &bytes[cut..]] {
                decoder.push(BytesMut::from(part));
                while let Some(next) = decoder.next_reply() {
                    got.push(next);
                }
            }
            prop_assert_eq!(got, reference(&bytes));
        }
    }

    #[test]
    fn lone_scalars_are_taken_without_the_decoder() {
        for (bytes, value) in [
            (&b"+OK\r\n"[..], Value::Status(Bytes::from_static(b"OK"))),
            (b":-12\r\n", Value::Int(-12)),
            // The payload is where the scan's length put it, however the length was written.
            (b"$+1\r\na\r\n", Value::Bulk(Bytes::from_static(b"a"))),
            (b"$-1\r\n", Value::Nil),
            (b"$0\r\n\r\n", Value::Bulk(Bytes::new())),
            (
                b"$4\r\na\r\nb\r\n",
                Value::Bulk(Bytes::from_static(b"a\r\nb")),
            ),
        ] {
            let mut buf = BytesMut::from(bytes);
            buf.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(lone_scalar(&mut buf, bytes.len()), Some(value), "{bytes:?}");
            assert_eq!(&buf[..], b"+NEXT\r\n");
        }
        for odd in [&b"*0\r\n"[..], b"-ERR x\r\n", b":+5\r\n", b"$1\r\naXY"] {
            let mut buf = BytesMut::from(odd);
            assert_eq!(lone_scalar(&mut buf, odd.len()), None, "{odd:?}");
            assert_eq!(&buf[..], odd, "left for the decoder");
        }
    }

    #[test]
    fn plain_arrays_are_taken_without_the_decoder() {
        let bulk = |b: &'static [u8]| Value::Bulk(Bytes::from_static(b));
        for (bytes, value) in [
            (&b"*-1\r\n"[..], Value::Nil),
            (b"*0\r\n", Value::Array(vec![])),
            (
                b"*6\r\n$1\r\na\r\n$0\r\n\r\n$-1\r\n:-7\r\n+OK\r\n$4\r\na\r\nb\r\n",
                Value::Array(vec![
                    bulk(b"a"),
                    bulk(b""),
                    Value::Nil,
                    Value::Int(-7),
                    Value::Status(Bytes::from_static(b"OK")),
                    bulk(b"a\r\nb"),
                ]),
            ),
            (
                // A `SCAN` page: the cursor, then the keys.
                b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n*-1\r\n",
                Value::Array(vec![bulk(b"0"), Value::Array(vec![bulk(b"a"), Value::Nil])]),
            ),
        ] {
            assert_eq!(
                plain_array(&Bytes::from_static(bytes)),
                Some(value),
                "{bytes:?}"
            );
        }
        for odd in [
            &b"*1\r\n-ERR x\r\n"[..],
            b"*1\r\n*1\r\n-ERR x\r\n",
            b"*1\r\n:+5\r\n",
            b"*1\r\n$+1\r\na\r\n",
            b"*1\r\n$1\r\naXY",
            b"*2\r\n:1\r\n",
            b"*1\r\n:1\r\n:2\r\n",
        ] {
            assert_eq!(plain_array(&Bytes::from_static(odd)), None, "{odd:?}");
        }
    }

    #[test]
    fn lengths_and_integers_read_as_str_parse_does() {
        for line in [
            &b"0"[..],
            b"-0",
            b"007",
            b"-1",
            b"123456789012345678",
            b"1234567890123456789",
            b"-9223372036854775808",
            b"9223372036854775808",
            b"+5",
            b"",
            b"-",
            b"1x",
        ] {
            let parsed = std::str::from_utf8(line).ok().and_then(|s| s.parse().ok());
            assert_eq!(length(line), parsed, "{line:?}");
            let plain = parsed.filter(|_| !line.starts_with(b"+"));
            assert_eq!(plain_integer(line), plain, "{line:?}");
        }
    }

    #[test]
    fn bad_framing_is_invalid() {
        for bytes in [&b"?x\r\n"[..], b"$x\r\n", b"*-2\r\n", b"$-5\r\n", b"+a\n"] {
            assert!(matches!(whole(bytes), Scanned::Invalid(_)), "{bytes:?}");
        }
        // A huge announced length waits for its bytes: the session's buffer cap ends it.
        assert_eq!(whole(b"$9223372036854775807\r\nab"), Scanned::Incomplete);
    }
}
