//! Commands as they go on the wire: RESP2 arrays of bulk strings, written straight into a
//! connection's buffer.

use bytes::Bytes;

/// Appends one command as a RESP2 array of bulk strings.
pub fn encode_args(args: Vec<Bytes>, buf: &mut bytes::BytesMut) {
    write_command(buf, args.iter().map(|a| &a[..]));
}

/// Appends one command, a RESP2 array of bulk strings, to `buf`: the buffer grows once, to the
/// exact length, and each argument is copied once.
///
/// A command is the one frame a client writes, on every call. redis-protocol decodes every
/// reply and is this writer's reference: a property test checks that the two agree byte for
/// byte on any arguments. Its encoder is not used for commands because it zero-fills the
/// buffer before writing and counts the digits of every length with a floating-point
/// `log10`: about 9% of the client's CPU per script call in the W1 profile
/// (docs/performance.md).
pub(crate) fn write_command<'a, I>(buf: &mut bytes::BytesMut, args: I)
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    let count = args.clone().count();
    let len = header_len(count)
        + args
            .clone()
            .map(|a| header_len(a.len()) + a.len() + 2)
            .sum::<usize>();
    // Headers are copied as fixed-size blocks, hence the room for one more.
    buf.reserve(len + HEADER_ROOM);
    put_header(buf, b'*', count);
    for arg in args {
        put_header(buf, b'$', arg.len());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

/// Room for the longest header: its kind, the 20 digits of `usize::MAX`, `\r\n`.
const HEADER_ROOM: usize = 24;

/// The number of decimal digits of `n`. Argument counts and lengths are nearly always under a
/// thousand, which three comparisons settle; `ilog10`'s general path was a sixth of a `GET`'s
/// encoding instructions under callgrind (docs/performance.md).
const fn digit_count(n: usize) -> usize {
    match n {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        _ => n.ilog10() as usize + 1,
    }
}

/// The length of `*<n>\r\n` or `$<n>\r\n`.
fn header_len(n: usize) -> usize {
    1 + digit_count(n) + 2
}

/// Writes `*<n>\r\n` or `$<n>\r\n`. The header is built in a block of fixed size, which is
/// copied whole and the excess cut off: a copy of a known size is a few register moves, where
/// a copy of the header's own length was a call into `memmove`, several per command (a tenth
/// of the client's CPU per script call went to `memmove` in the W1 profile). Counts and
/// lengths below [`SMALL`], nearly all of them, take their digits from a table.
#[inline(always)]
fn put_header(buf: &mut bytes::BytesMut, kind: u8, n: usize) {
    let start = buf.len();
    if let Some(&small) = SMALL_HEADERS.get(n) {
        let mut block = small;
        block[0] = kind;
        buf.extend_from_slice(&block);
        buf.truncate(start + usize::from(small[SMALL_BLOCK - 1]));
        return;
    }
    let digits = digit_count(n);
    let mut block = [0u8; HEADER_ROOM];
    block[0] = kind;
    fill_digits(&mut block[1..=digits], n);
    block[digits + 1] = b'\r';
    block[digits + 2] = b'\n';
    buf.extend_from_slice(&block);
    buf.truncate(start + digits + 3);
}

/// Counts and lengths with a header in [`SMALL_HEADERS`].
const SMALL: usize = 1000;

/// The size of a block of [`SMALL_HEADERS`]: the kind's place, three digits, `\r\n`, and the
/// header's length in the last byte.
const SMALL_BLOCK: usize = 8;

/// The header of every `n` below [`SMALL`]: a place for the kind, the digits, `\r\n`, and in
/// the last byte the header's length, kind included. In the W1 profile the digits' divisions
/// took a third of a script call's encoding; the table is 8 kB, built at compile time.
static SMALL_HEADERS: [[u8; SMALL_BLOCK]; SMALL] = small_headers();

const fn small_headers() -> [[u8; SMALL_BLOCK]; SMALL] {
    let mut table = [[0u8; SMALL_BLOCK]; SMALL];
    let mut n = 0;
    while n < SMALL {
        let digits = digit_count(n);
        let (_, after_kind) = table[n].split_at_mut(1);
        fill_digits(after_kind.split_at_mut(digits).0, n);
        table[n][digits + 1] = b'\r';
        table[n][digits + 2] = b'\n';
        table[n][SMALL_BLOCK - 1] = (digits + 3) as u8;
        n += 1;
    }
    table
}

/// Writes the decimal digits of `n` into `out`, which is [`digit_count`]`(n)` bytes long.
/// A `const fn`, for [`SMALL_HEADERS`].
const fn fill_digits(out: &mut [u8], n: usize) {
    let mut rest = n;
    let mut place = out.len();
    while place > 0 {
        place -= 1;
        // A remainder below 10 always fits a byte.
        out[place] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
}

/// The decimal digits of a `usize`, on the stack.
pub(crate) struct Decimal {
    digits: [u8; 20],
    len: usize,
}

impl Decimal {
    pub(crate) fn new(n: usize) -> Decimal {
        let len = digit_count(n);
        let mut digits = [0; 20];
        fill_digits(&mut digits[..len], n);
        Decimal { digits, len }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.digits[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_at_the_digit_extremes() {
        let edges = [0, 9, 10, 99, 100, 999, 1000, 9999, 10_000, usize::MAX];
        for (n, text) in edges.map(|n| (n, format!("${n}\r\n"))) {
            let mut buf = bytes::BytesMut::new();
            put_header(&mut buf, b'$', n);
            assert_eq!(&buf[..], text.as_bytes());
            assert_eq!(header_len(n), text.len());
            assert_eq!(Decimal::new(n).as_bytes(), n.to_string().as_bytes());
        }
        // Every header of the table, and the first one past it.
        for n in 0..=SMALL {
            let mut buf = bytes::BytesMut::from(&b"prefix"[..]);
            put_header(&mut buf, b'*', n);
            assert_eq!(&buf[..], format!("prefix*{n}\r\n").as_bytes());
        }
    }
}
