//! Every `lua/*.lua` script declares its interface in a header, and never builds a key name.
//!
//! # The header format
//!
//! A script starts with a block of `--` comment lines (the header ends at the first line that
//! does not start with `--`):
//!
//! ```text
//! -- <file stem>: <what the script does, one sentence>
//! -- <more description lines, optional>
//! -- KEYS[1] <what the first key is, and its type>
//! -- KEYS[2] ...
//! -- KEYS[3..] <optional, last KEYS line only: a variable tail of keys>
//! -- ARGV[1] <what the first argument is>
//! -- ARGV[2..] <optional, last ARGV line only: a variable tail of arguments>
//! -- Returns <what the script returns>
//! -- <continuation lines, optional>
//! ```
//!
//! - The first line names the file stem followed by `:` (`-- save_message: ...`).
//! - `KEYS` lines come first, numbered 1, 2, ... without gaps; at least one (calls are routed
//!   by their first key). `ARGV` lines follow, numbered the same way; there may be none.
//!   Each declaration has a description. Only the last line of each group may be a variable tail
//!   `[n..]`.
//! - One `-- Returns ...` line follows the declarations. Other comment lines between the
//!   declarations are taken as continuations of the line before.
//!
//! # The body rules
//!
//! - Every `KEYS[n]` and `ARGV[n]` in the body is declared. An index that is not a number
//!   literal (`KEYS[i]`) needs a variable tail declaration (`KEYS[n..]`). `KEYS`/`ARGV` are
//!   never assigned to.
//! - No script builds a key name: in every `redis.call(...)` / `redis.pcall(...)` the command
//!   is a string literal, and every key argument is `KEYS[...]`, a local bound only by
//!   `local x = KEYS[...]` (or `for _, x in ipairs(KEYS)`), or a spread `unpack(KEYS, ...)`
//!   where the command takes a variable number of keys. Which arguments are keys depends on the
//!   command (see [`key_positions`]): the first argument by default; both for `RENAME`,
//!   `RENAMENX`, `SMOVE`, `LMOVE`, `RPOPLPUSH`, `COPY`, `ZRANGESTORE`...; the destination and
//!   the `numkeys` sources for `ZUNIONSTORE`/`ZINTERSTORE`/`ZDIFFSTORE`; all of them for `DEL`,
//!   `EXISTS`, `MGET`...; none for the keyless allowlist (`TIME`, `PING`, `ECHO`). A command
//!   that is neither listed nor takes its key first must be added to [`key_positions`], with
//!   its key positions, before a script may use it.
//!
//! The checker is a small tokenizer (comments and strings are understood, so a `redis.call` in
//! a comment or a string is not a call) plus a scan of the token stream; no Lua parser.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod body;
mod header;
mod rejected;
mod scripts;
mod tokens;
