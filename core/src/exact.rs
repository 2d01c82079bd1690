//! Text formatted on the stack, then copied into a buffer of exactly its length.
//!
//! An argument built with `to_string` or `format!` costs two allocations once it is `Bytes`:
//! the `String`, which formatting sizes by estimate and so leaves longer than its text, and
//! the shared handle `Bytes` allocates beside a buffer whose capacity is not its length.
//! Formatted on the stack and copied once, the same text costs one allocation, of its exact
//! length, which `Bytes` holds without a handle until its first clone. Arguments (a user
//! index's member, written by the store and the migration) are encoded from where they lie and
//! never cloned, so each saves an allocation; integers take the same way through `itoa`
//! (`request::Arg`). Keys are not built this way: most are cloned into a command, and the first
//! clone of an exact buffer allocates the handle after all, after a costlier promotion
//! (docs/performance.md, "Exact arguments, lone replies").

use std::fmt::{self, Write};

use bytes::Bytes;

/// Stack room for one text: a user index's member (a namespace and a key, both encoded) of a
/// few dozen bytes; a longer text moves to the heap once and is still correct.
const ROOM: usize = 192;

/// `args` formatted, as `Bytes` of exactly its length.
pub(crate) fn format_bytes(args: fmt::Arguments<'_>) -> Bytes {
    let mut text = StackText {
        room: [0; ROOM],
        len: 0,
        spilled: None,
    };
    // Writing to a `StackText` never fails; only a `Display` impl that fails could, and the
    // formats given here are of `enc`'s segments.
    let _ = text.write_fmt(args);
    match text.spilled {
        Some(spilled) => Bytes::from(spilled),
        None => Bytes::copy_from_slice(&text.room[..text.len]),
    }
}

/// A text written to the stack while it fits, to the heap past that.
struct StackText {
    room: [u8; ROOM],
    len: usize,
    spilled: Option<Vec<u8>>,
}

impl Write for StackText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Some(spilled) = &mut self.spilled {
            spilled.extend_from_slice(s.as_bytes());
            return Ok(());
        }
        let end = self.len + s.len();
        if let Some(room) = self.room.get_mut(self.len..end) {
            room.copy_from_slice(s.as_bytes());
            self.len = end;
        } else {
            let mut spilled = Vec::with_capacity(end * 2);
            spilled.extend_from_slice(&self.room[..self.len]);
            spilled.extend_from_slice(s.as_bytes());
            self.spilled = Some(spilled);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_exact() {
        let b = format_bytes(format_args!("{}:{{m:{}}}:z", "bot", 42));
        assert_eq!(&b[..], b"bot:{m:42}:z");
        assert_eq!(&format_bytes(format_args!(""))[..], b"");
        assert_eq!(&format_bytes(format_args!("{}", -17_i64))[..], b"-17");
    }

    #[test]
    fn text_at_and_past_the_room_is_whole() {
        for len in [ROOM - 1, ROOM, ROOM + 1, 3 * ROOM] {
            let long = "x".repeat(len);
            // Written in pieces, so the spill happens in the middle of the text.
            let b = format_bytes(format_args!("a{long}b{long}"));
            assert_eq!(b.len(), 2 * len + 2);
            assert_eq!(&b[..], format!("a{long}b{long}").as_bytes());
        }
    }
}
