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

use std::collections::{BTreeMap, BTreeSet};

// --- tokens --------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A name, with dotted fields joined (`redis.call`, `table.unpack`).
    Ident(String),
    Str(String),
    Num(String),
    Punct(String),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is_ident(&self, name: &str) -> bool {
        matches!(&self.tok, Tok::Ident(n) if n == name)
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(q) if q == p)
    }
    fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(n) => Some(n),
            _ => None,
        }
    }
}

/// The level of a long bracket opening at `chars[i]` (`[[` is 0, `[==[` is 2), if one does.
fn long_bracket(chars: &[char], i: usize) -> Option<usize> {
    if chars.get(i) != Some(&'[') {
        return None;
    }
    let mut j = i + 1;
    while chars.get(j) == Some(&'=') {
        j += 1;
    }
    (chars.get(j) == Some(&'[')).then_some(j - i - 1)
}

/// Skips a long bracket of `level` whose opening starts at `i`; returns the index after it.
fn skip_long(chars: &[char], i: usize, level: usize, line: &mut usize) -> Result<usize, String> {
    let mut j = i + level + 2;
    let close: Vec<char> = std::iter::once(']')
        .chain(std::iter::repeat_n('=', level))
        .chain(std::iter::once(']'))
        .collect();
    while j < chars.len() {
        if chars[j..].starts_with(&close) {
            return Ok(j + close.len());
        }
        if chars[j] == '\n' {
            *line += 1;
        }
        j += 1;
    }
    Err(format!("line {line}: unterminated long bracket"))
}

fn tokenize(src: &str, first_line: usize) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut tokens = Vec::new();
    let mut line = first_line;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = line;
        let push = |tokens: &mut Vec<Token>, tok: Tok| tokens.push(Token { tok, line: at });
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if chars[i..].starts_with(&['-', '-']) {
            if let Some(level) = long_bracket(&chars, i + 2) {
                i = skip_long(&chars, i + 2, level, &mut line)?;
            } else {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
        } else if let Some(level) = long_bracket(&chars, i) {
            let start = i + level + 2;
            i = skip_long(&chars, i, level, &mut line)?;
            let text: String = chars[start..i - level - 2].iter().collect();
            push(&mut tokens, Tok::Str(text));
        } else if c == '\'' || c == '"' {
            let mut text = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None | Some('\n') => return Err(format!("line {at}: unterminated string")),
                    Some('\\') => {
                        if let Some(&next) = chars.get(i + 1) {
                            text.push(next);
                        }
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&other) => {
                        text.push(other);
                        i += 1;
                    }
                }
            }
            push(&mut tokens, Tok::Str(text));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric()
                    || (chars[i] == '.' && chars.get(i + 1) != Some(&'.')))
            {
                i += 1;
            }
            push(&mut tokens, Tok::Num(chars[start..i].iter().collect()));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() {
                let d = chars[i];
                let dotted_field = d == '.'
                    && chars
                        .get(i + 1)
                        .is_some_and(|n| n.is_alphabetic() || *n == '_');
                if d.is_alphanumeric() || d == '_' || dotted_field {
                    i += 1;
                } else {
                    break;
                }
            }
            push(&mut tokens, Tok::Ident(chars[start..i].iter().collect()));
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let punct = ["...", "..", "==", "~=", "<=", ">=", "//", "::", "<<", ">>"]
                .into_iter()
                .find(|p| rest.starts_with(p))
                .map(str::to_owned)
                .unwrap_or_else(|| c.to_string());
            i += punct.chars().count();
            push(&mut tokens, Tok::Punct(punct));
        }
    }
    Ok(tokens)
}

/// The index of the bracket closing the one at `open` (`(`, `[` or `{`).
fn matching(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        if ["(", "[", "{"].iter().any(|p| t.is_punct(p)) {
            depth += 1;
        } else if [")", "]", "}"].iter().any(|p| t.is_punct(p)) {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

// --- the header ----------------------------------------------------------------------------------

/// The declarations of one group (`KEYS` or `ARGV`).
#[derive(Debug, Default, Clone, PartialEq)]
struct Declared {
    /// Declared fixed indexes: 1..=count.
    count: usize,
    /// `Some(n)` when the last line is `[n..]`: every index from n on is declared.
    tail_from: Option<usize>,
}

impl Declared {
    fn covers(&self, n: usize) -> bool {
        n >= 1 && (n <= self.count || self.tail_from.is_some_and(|from| n >= from))
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Header {
    keys: Declared,
    argv: Declared,
    /// The number of lines in the header.
    lines: usize,
}

/// Parses `-- KEYS[3] text` or `-- KEYS[3..] text` (after the `-- `), for `group`.
fn declaration(rest: &str, group: &str) -> Option<Result<(usize, bool), String>> {
    let after = rest.strip_prefix(group)?.strip_prefix('[')?;
    let Some((index, text)) = after.split_once(']') else {
        return Some(Err(format!("unclosed {group}[ declaration")));
    };
    let (number, tail) = match index.strip_suffix("..") {
        Some(n) => (n, true),
        None => (index, false),
    };
    let Ok(n) = number.parse::<usize>() else {
        return Some(Err(format!("{group}[{index}] is not a number")));
    };
    if text.trim().is_empty() || !text.starts_with(' ') {
        return Some(Err(format!("{group}[{index}] has no description")));
    }
    Some(Ok((n, tail)))
}

fn parse_header(stem: &str, src: &str) -> Result<Header, Vec<String>> {
    let lines: Vec<&str> = src.lines().take_while(|l| l.starts_with("--")).collect();
    let mut problems = Vec::new();
    match lines.first() {
        Some(first) if first.starts_with(&format!("-- {stem}: ")) => {}
        Some(first) => problems.push(format!("line 1 must be `-- {stem}: ...`, is {first:?}")),
        None => problems.push("no header: the script must start with `--` lines".to_owned()),
    }
    #[derive(PartialEq, PartialOrd)]
    enum Stage {
        Description,
        Keys,
        Argv,
        Returns,
    }
    let mut stage = Stage::Description;
    let mut groups: BTreeMap<&str, Declared> = BTreeMap::new();
    let mut returns = 0;
    for (i, line) in lines.iter().enumerate().skip(1) {
        let n = i + 1;
        let rest = line.trim_start_matches('-').trim_start();
        for (group, group_stage) in [("KEYS", Stage::Keys), ("ARGV", Stage::Argv)] {
            let Some(parsed) = declaration(rest, group) else {
                continue;
            };
            match parsed {
                Err(e) => problems.push(format!("line {n}: {e}")),
                Ok((index, tail)) => {
                    if stage > group_stage {
                        problems.push(format!("line {n}: {group}[{index}] is out of order"));
                    }
                    stage = group_stage;
                    let declared = groups.entry(group).or_default();
                    if declared.tail_from.is_some() {
                        problems.push(format!("line {n}: {group} line after a variable tail"));
                    }
                    if index != declared.count + 1 {
                        problems.push(format!(
                            "line {n}: expected {group}[{}], found {group}[{index}]",
                            declared.count + 1
                        ));
                    }
                    if tail {
                        declared.tail_from = Some(index);
                    } else {
                        declared.count = index;
                    }
                }
            }
        }
        if rest.starts_with("Returns") {
            if stage == Stage::Description {
                problems.push(format!("line {n}: Returns before any KEYS line"));
            }
            stage = Stage::Returns;
            returns += 1;
        }
    }
    let keys = groups.remove("KEYS").unwrap_or_default();
    if keys.count == 0 && keys.tail_from.is_none() {
        problems.push("no `-- KEYS[1] ...` line".to_owned());
    }
    if returns != 1 {
        problems.push(format!(
            "expected one `-- Returns ...` line, found {returns}"
        ));
    }
    if problems.is_empty() {
        Ok(Header {
            keys,
            argv: groups.remove("ARGV").unwrap_or_default(),
            lines: lines.len(),
        })
    } else {
        Err(problems)
    }
}

// --- the body ------------------------------------------------------------------------------------

/// Where the keys of a command are, among its arguments after the command name.
#[derive(Debug, PartialEq)]
enum KeyPositions {
    /// No key (`TIME`).
    None,
    /// The arguments at these 0-based positions.
    At(&'static [usize]),
    /// Every argument.
    All,
    /// Every other argument from the first (`MSET k v k v`).
    Alternate,
    /// `numkeys key...` starting at this position (preceded by that many keys, e.g. a
    /// destination).
    NumKeys { keys_before: usize },
}

/// The key positions of `command` (upper case). Extend this table to use a new command whose
/// keys are not simply its first argument.
fn key_positions(command: &str) -> KeyPositions {
    use KeyPositions::*;
    match command {
        "TIME" | "PING" | "ECHO" => None,
        "DEL" | "UNLINK" | "EXISTS" | "TOUCH" | "MGET" | "SINTER" | "SUNION" | "SDIFF"
        | "SINTERSTORE" | "SUNIONSTORE" | "SDIFFSTORE" | "PFCOUNT" | "PFMERGE" => All,
        "MSET" | "MSETNX" => Alternate,
        "RENAME" | "RENAMENX" | "SMOVE" | "LMOVE" | "BLMOVE" | "RPOPLPUSH" | "BRPOPLPUSH"
        | "COPY" | "ZRANGESTORE" | "GEOSEARCHSTORE" | "LCS" => At(&[0, 1]),
        "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" => NumKeys { keys_before: 1 },
        "ZUNION" | "ZINTER" | "ZDIFF" | "ZINTERCARD" | "SINTERCARD" | "LMPOP" | "ZMPOP" => {
            NumKeys { keys_before: 0 }
        }
        "OBJECT" | "MEMORY" | "XINFO" => At(&[1]),
        _ => At(&[0]),
    }
}

/// Names bound only to declared keys: `local a, b = KEYS[1], KEYS[2]` and
/// `for _, k in ipairs(KEYS)`. A name assigned anything else anywhere is not a key local.
fn key_locals(tokens: &[Token]) -> BTreeSet<String> {
    let mut good: BTreeSet<String> = BTreeSet::new();
    let mut bad: BTreeSet<String> = BTreeSet::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_punct("=") {
            // The assigned names: `a, b, c =`.
            let mut names = Vec::new();
            let mut j = i;
            while j > 0 {
                match tokens[j - 1].ident() {
                    Some(name) if name != "local" => names.push(name.to_owned()),
                    _ => break,
                }
                if j >= 2 && tokens[j - 2].is_punct(",") {
                    j -= 2;
                } else {
                    break;
                }
            }
            names.reverse();
            let is_local = j >= 2 && tokens[j - 2].is_ident("local");
            // The values: `KEYS[..], KEYS[..]`, each ending where a `,` or a statement starts.
            let mut k = i + 1;
            let mut pure = 0;
            while k + 1 < tokens.len() && tokens[k].is_ident("KEYS") && tokens[k + 1].is_punct("[")
            {
                let Some(close) = matching(tokens, k + 1) else {
                    break;
                };
                let next = tokens.get(close + 1);
                let ends_value = next.is_none_or(|n| n.is_punct(",") || n.ident().is_some());
                if !ends_value {
                    break;
                }
                pure += 1;
                k = close + 1;
                if next.is_some_and(|n| n.is_punct(",")) && pure < names.len() {
                    k += 1;
                } else {
                    break;
                }
            }
            let target = if is_local && pure == names.len() {
                &mut good
            } else {
                &mut bad
            };
            target.extend(names);
        } else if t.is_ident("for") {
            // `for a, b in ipairs(KEYS) do`: b is a key, a an index.
            let pattern = tokens.get(i + 1..i + 9);
            if let Some(
                [Token {
                    tok: Tok::Ident(_), ..
                }, comma, Token {
                    tok: Tok::Ident(value),
                    ..
                }, kw_in, ipairs, open, keys, close],
            ) = pattern
            {
                if comma.is_punct(",")
                    && kw_in.is_ident("in")
                    && ipairs.is_ident("ipairs")
                    && open.is_punct("(")
                    && keys.is_ident("KEYS")
                    && close.is_punct(")")
                {
                    good.insert(value.clone());
                    continue;
                }
            }
            // Any other loop variable is not a key.
            let mut j = i + 1;
            while let Some(name) = tokens.get(j).and_then(Token::ident) {
                if name == "in" {
                    break;
                }
                bad.insert(name.to_owned());
                j += 1;
                if tokens.get(j).is_some_and(|t| t.is_punct(",")) {
                    j += 1;
                } else {
                    break;
                }
            }
        } else if t.is_ident("function") {
            // Parameters are not keys.
            if let Some(open) = (i + 1..tokens.len().min(i + 4)).find(|&j| tokens[j].is_punct("("))
            {
                let close = matching(tokens, open).unwrap_or(open);
                bad.extend(
                    tokens[open..close]
                        .iter()
                        .filter_map(Token::ident)
                        .map(str::to_owned),
                );
            }
        }
    }
    good.retain(|name| !bad.contains(name));
    good
}

/// `KEYS[...]` exactly.
fn is_keys_index(arg: &[Token]) -> bool {
    arg.len() >= 3
        && arg[0].is_ident("KEYS")
        && arg[1].is_punct("[")
        && matching(arg, 1) == Some(arg.len() - 1)
}

/// `unpack(KEYS...)` or `table.unpack(KEYS...)`: a spread of declared keys.
fn is_keys_spread(arg: &[Token]) -> bool {
    arg.len() >= 4
        && (arg[0].is_ident("unpack") || arg[0].is_ident("table.unpack"))
        && arg[1].is_punct("(")
        && arg[2].is_ident("KEYS")
        && (arg[3].is_punct(")") || arg[3].is_punct(","))
        && matching(arg, 1) == Some(arg.len() - 1)
}

fn is_key(arg: &[Token], locals: &BTreeSet<String>) -> bool {
    is_keys_index(arg)
        || matches!(arg, [Token { tok: Tok::Ident(name), .. }] if locals.contains(name))
}

fn show(arg: &[Token]) -> String {
    arg.iter()
        .map(|t| match &t.tok {
            Tok::Ident(s) | Tok::Num(s) | Tok::Punct(s) => s.clone(),
            Tok::Str(s) => format!("{s:?}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits the arguments of a call whose `(` is at `open`, at top-level commas.
fn call_args(tokens: &[Token], open: usize) -> Option<Vec<&[Token]>> {
    let close = matching(tokens, open)?;
    let mut args = Vec::new();
    let mut start = open + 1;
    let mut depth = 0usize;
    for i in open + 1..close {
        let t = &tokens[i];
        if ["(", "[", "{"].iter().any(|p| t.is_punct(p)) {
            depth += 1;
        } else if [")", "]", "}"].iter().any(|p| t.is_punct(p)) {
            depth -= 1;
        } else if depth == 0 && t.is_punct(",") {
            args.push(&tokens[start..i]);
            start = i + 1;
        }
    }
    if start < close {
        args.push(&tokens[start..close]);
    }
    Some(args)
}

/// Checks the key arguments of one `redis.call`/`redis.pcall`; `args` excludes the command.
fn check_call(
    command: &str,
    args: &[&[Token]],
    locals: &BTreeSet<String>,
    line: usize,
    problems: &mut Vec<String>,
) {
    // The argument positions that must be keys, each with whether a spread of KEYS may stand
    // there (the last argument of a command taking any number of keys).
    let mut positions: Vec<(usize, bool)> = Vec::new();
    match key_positions(command) {
        KeyPositions::None => {}
        KeyPositions::At(at) => positions.extend(at.iter().map(|&i| (i, false))),
        KeyPositions::All => {
            positions.push((0, args.len() <= 1));
            positions.extend((1..args.len()).map(|i| (i, i + 1 == args.len())));
        }
        KeyPositions::Alternate => positions.extend((0..args.len()).step_by(2).map(|i| (i, false))),
        KeyPositions::NumKeys { keys_before } => {
            positions.extend((0..keys_before).map(|i| (i, false)));
            let count = args.get(keys_before);
            let literal = match count {
                Some(
                    [Token {
                        tok: Tok::Num(n), ..
                    }],
                ) => n.parse::<usize>().ok(),
                _ => None,
            };
            match literal {
                Some(n) => {
                    positions.extend((keys_before + 1..keys_before + 1 + n).map(|i| (i, false)))
                }
                None if args.get(keys_before + 1).is_some_and(|a| is_keys_spread(a)) => {}
                None => problems.push(format!(
                    "line {line}: {command}: numkeys `{}` is not a number literal and no \
                     unpack(KEYS) follows",
                    count.map(|a| show(a)).unwrap_or_default()
                )),
            }
        }
    }
    for (i, spread_allowed) in positions {
        match args.get(i) {
            Some(arg) if is_key(arg, locals) || (spread_allowed && is_keys_spread(arg)) => {}
            Some(arg) => problems.push(format!(
                "line {}: {command}: key argument {} is `{}`, not KEYS[n] or a local bound to one",
                arg.first().map_or(line, |t| t.line),
                i + 1,
                show(arg)
            )),
            None => problems.push(format!(
                "line {line}: {command}: missing key argument {}",
                i + 1
            )),
        }
    }
}

fn check_body(header: &Header, body: &[Token]) -> Vec<String> {
    let mut problems = Vec::new();
    let locals = key_locals(body);
    for (i, t) in body.iter().enumerate() {
        // KEYS[n] and ARGV[n] are declared; neither table is assigned to.
        for (group, declared) in [("KEYS", &header.keys), ("ARGV", &header.argv)] {
            if !t.is_ident(group) {
                continue;
            }
            if body.get(i + 1).is_some_and(|n| n.is_punct("=")) {
                problems.push(format!("line {}: {group} is assigned to", t.line));
            }
            if !body.get(i + 1).is_some_and(|n| n.is_punct("[")) {
                continue;
            }
            let Some(close) = matching(body, i + 1) else {
                problems.push(format!("line {}: unclosed {group}[", t.line));
                continue;
            };
            let index = &body[i + 2..close];
            match index {
                [Token {
                    tok: Tok::Num(n), ..
                }] => match n.parse::<usize>() {
                    Ok(n) if declared.covers(n) => {}
                    _ => problems.push(format!(
                        "line {}: {group}[{n}] is not declared in the header",
                        t.line
                    )),
                },
                _ if declared.tail_from.is_some() => {}
                _ => problems.push(format!(
                    "line {}: {group}[{}] has a computed index but the header declares no \
                     {group}[n..] tail",
                    t.line,
                    show(index)
                )),
            }
            if body.get(close + 1).is_some_and(|n| n.is_punct("=")) {
                problems.push(format!("line {}: {group}[...] is assigned to", t.line));
            }
        }
        // Every call names its command literally and passes only declared keys.
        if t.is_ident("redis.call") || t.is_ident("redis.pcall") {
            let opens = body.get(i + 1).is_some_and(|n| n.is_punct("("));
            let Some(args) = opens.then(|| call_args(body, i + 1)).flatten() else {
                problems.push(format!(
                    "line {}: cannot read the arguments of this call",
                    t.line
                ));
                continue;
            };
            let command = match args.first() {
                Some(
                    [Token {
                        tok: Tok::Str(name),
                        ..
                    }],
                ) => name.to_ascii_uppercase(),
                other => {
                    problems.push(format!(
                        "line {}: the command `{}` is not a string literal",
                        t.line,
                        other.map(|a| show(a)).unwrap_or_default()
                    ));
                    continue;
                }
            };
            check_call(&command, &args[1..], &locals, t.line, &mut problems);
        }
    }
    problems
}

/// Checks one script: `stem` is its file name without `.lua`.
fn check_script(stem: &str, src: &str) -> Result<Header, Vec<String>> {
    let header = parse_header(stem, src)?;
    let body_src: String = src
        .lines()
        .skip(header.lines)
        .map(|l| format!("{l}\n"))
        .collect();
    let body = tokenize(&body_src, header.lines + 1).map_err(|e| vec![e])?;
    let problems = check_body(&header, &body);
    if problems.is_empty() {
        Ok(header)
    } else {
        Err(problems)
    }
}

// --- the real scripts ----------------------------------------------------------------------------

fn lua_files() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .map(|path| {
            let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
            (stem, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_lua_script_has_a_header_and_builds_no_key() {
    let files = lua_files();
    assert!(
        files.iter().any(|(stem, _)| stem == "save_message"),
        "lua/ was not found or is missing save_message.lua: {:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    let mut failures = Vec::new();
    for (stem, src) in &files {
        if let Err(problems) = check_script(stem, src) {
            failures.push(format!("lua/{stem}.lua:\n  {}", problems.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn save_message_header_matches_its_call() {
    use botmesh_redis_core::driver::{store::messages, Plan, Step};
    use botmesh_redis_core::{Keyspace, Layout};
    let src = include_str!("../lua/save_message.lua");
    let header = check_script("save_message", src).unwrap();
    assert_eq!(
        header.keys,
        Declared {
            count: 2,
            tail_from: None
        }
    );
    assert_eq!(
        header.argv,
        Declared {
            count: 3,
            tail_from: None
        }
    );
    let ks = Keyspace::new(Layout::Cluster, "bot").unwrap();
    let mut plan =
        messages::save_message(&ks, "c", "m", 1, bytes::Bytes::from_static(b"p")).unwrap();
    let Step::Send(batch) = plan.start() else {
        panic!("save_message must start by sending")
    };
    let wire = batch[0].wire_args(false);
    // EVALSHA sha numkeys keys... args...
    assert_eq!(&wire[0][..], b"EVALSHA");
    assert_eq!(&wire[2][..], b"2", "numkeys");
    assert_eq!(wire.len(), 3 + header.keys.count + header.argv.count);
    assert_eq!(batch[0].script_ref().unwrap().name(), "save_message");
}

// --- the checker can fail ------------------------------------------------------------------------

const HEADER: &str = "\
-- t: a test script.
-- KEYS[1] a key
-- KEYS[2] another key
-- ARGV[1] a value
-- Returns something
";

fn body(code: &str) -> String {
    format!("{HEADER}{code}\n")
}

fn rejected(stem: &str, src: &str) -> String {
    match check_script(stem, src) {
        Ok(h) => panic!("accepted a bad script ({h:?}):\n{src}"),
        Err(problems) => problems.join("\n"),
    }
}

/// Each script body (under a valid header) is rejected, with a problem that names its case.
fn assert_bodies_rejected(cases: &[(&str, &str)]) {
    for &(code, expected) in cases {
        let problems = rejected("t", &body(code));
        assert!(
            problems.contains(expected),
            "{code}: expected {expected:?} in\n{problems}"
        );
    }
}

#[test]
fn a_good_script_is_accepted() {
    let src = body(
        "local log = KEYS[1]\n\
         local a, b = KEYS[1], KEYS[2]\n\
         -- redis.call('GET', 'in a comment ' .. ARGV[1])\n\
         --[[ redis.call('GET', 'in a long comment') ]]\n\
         local s = \"redis.call('GET', 'in a string')\"\n\
         local t = redis.call('TIME')\n\
         redis.call('ZADD', log, ARGV[1], 'm')\n\
         redis.call('RENAME', a, b)\n\
         redis.call(\n  'SET',\n  KEYS[2],\n  ARGV[1]\n)\n\
         redis.call('ZUNIONSTORE', KEYS[1], 1, KEYS[2])\n\
         redis.pcall('DEL', KEYS[1], b)\n\
         return redis.call('exists', KEYS[2])",
    );
    let header = check_script("t", &src).unwrap();
    assert_eq!(header.keys.count, 2);
    assert_eq!(header.argv.count, 1);
    assert_eq!(header.lines, 5);
}

#[test]
fn variable_tails_allow_computed_indexes_and_spreads() {
    let src = "\
-- t: deletes a chunk.
-- KEYS[1] the log
-- KEYS[2..] the items
-- ARGV[1..] the members
-- Returns the number deleted
for i = 2, #KEYS do redis.call('UNLINK', KEYS[i]) end
for _, item in ipairs(KEYS) do redis.call('TOUCH', item) end
redis.call('ZREM', KEYS[1], unpack(ARGV))
redis.call('ZUNIONSTORE', KEYS[1], #KEYS - 1, unpack(KEYS, 2))
return redis.call('DEL', KEYS[1], unpack(KEYS, 2))
";
    let header = check_script("t", src).unwrap();
    assert_eq!(
        header.keys,
        Declared {
            count: 1,
            tail_from: Some(2)
        }
    );
    assert_eq!(
        header.argv,
        Declared {
            count: 0,
            tail_from: Some(1)
        }
    );
}

#[test]
fn a_key_built_from_argv_is_rejected() {
    let problems = rejected("t", &body("return redis.call('GET', 'bot:' .. ARGV[1])"));
    assert_eq!(
        problems,
        "line 6: GET: key argument 1 is `\"bot:\" .. ARGV [ 1 ]`, not KEYS[n] or a local bound to one"
    );
}

#[test]
fn keys_that_are_not_declared_keys_are_rejected() {
    let cases = [
        ("redis.call('GET', ARGV[1])", "GET: key argument 1"),
        ("redis.call('SET', 'bot:meta', 1)", "SET: key argument 1"),
        ("redis.call('GET', KEYS[1] .. ':x')", "GET: key argument 1"),
        (
            "redis.call('GET', KEYS[1] .. KEYS[2])",
            "GET: key argument 1",
        ),
        ("redis.call('GET')", "GET: missing key argument 1"),
        (
            "redis.call('RENAME', KEYS[1], KEYS[1] .. ':old')",
            "RENAME: key argument 2",
        ),
        ("redis.call('COPY', 'x', KEYS[2])", "COPY: key argument 1"),
        (
            "redis.call('LMOVE', KEYS[1], ARGV[1], 'LEFT', 'RIGHT')",
            "LMOVE: key argument 2",
        ),
        (
            "redis.call('RPOPLPUSH', KEYS[1], 'x')",
            "RPOPLPUSH: key argument 2",
        ),
        (
            "redis.call('SMOVE', KEYS[1], 'x', 'm')",
            "SMOVE: key argument 2",
        ),
        (
            "redis.call('ZRANGESTORE', KEYS[1], 'x', 0, -1)",
            "ZRANGESTORE: key argument 2",
        ),
        (
            "redis.call('ZUNIONSTORE', KEYS[1], 2, KEYS[2], 'x')",
            "ZUNIONSTORE: key argument 4",
        ),
        (
            "redis.call('ZINTERSTORE', 'x', 1, KEYS[2])",
            "ZINTERSTORE: key argument 1",
        ),
        (
            "redis.call('ZUNIONSTORE', KEYS[1], n, KEYS[2])",
            "ZUNIONSTORE: numkeys `n`",
        ),
        ("redis.call('DEL', KEYS[1], 'x')", "DEL: key argument 2"),
        ("redis.call('DEL', unpack(ARGV))", "DEL: key argument 1"),
        (
            "redis.call('MSET', KEYS[1], 1, 'x', 2)",
            "MSET: key argument 3",
        ),
        (
            "redis.call(cmd, KEYS[1])",
            "the command `cmd` is not a string literal",
        ),
        (
            "redis.call(\n'SET',\n'multi' .. 'line',\n1)",
            "line 8: SET: key argument 1",
        ),
    ];
    assert_bodies_rejected(&cases);
}

#[test]
fn locals_that_are_not_pure_keys_are_rejected() {
    let cases = [
        "local k = KEYS[1] .. ':x'\nredis.call('GET', k)",
        "local k = KEYS[1]\nk = 'bot:' .. ARGV[1]\nredis.call('GET', k)",
        "local k = KEYS[1]\nif ARGV[1] then local k = 'x' end\nredis.call('GET', k)",
        "local k, j = KEYS[1], 'x'\nredis.call('GET', j)",
        "local k = ARGV[1]\nredis.call('GET', k)",
        "local function get(k) return redis.call('GET', k) end",
        "for k = 1, 2 do redis.call('GET', k) end",
        "for _, k in ipairs(ARGV) do redis.call('GET', k) end",
    ];
    assert_bodies_rejected(&cases.map(|code| (code, "GET: key argument 1")));
}

#[test]
fn undeclared_keys_and_argv_are_rejected() {
    let cases = [
        (
            "return KEYS[3]",
            "line 6: KEYS[3] is not declared in the header",
        ),
        (
            "return ARGV[2]",
            "line 6: ARGV[2] is not declared in the header",
        ),
        ("return KEYS[0]", "KEYS[0] is not declared"),
        ("return KEYS[i]", "KEYS[i] has a computed index"),
        ("return ARGV[#ARGV]", "ARGV[# ARGV] has a computed index"),
        ("KEYS[1] = 'bot:x'", "KEYS[...] is assigned to"),
        ("KEYS = {'bot:x'}", "KEYS is assigned to"),
    ];
    assert_bodies_rejected(&cases);
}

#[test]
fn bad_headers_are_rejected() {
    let cases = [
        ("return 1", "no header"),
        (
            "-- other: wrong stem.\n-- KEYS[1] k\n-- Returns x\nreturn 1",
            "line 1 must be `-- t: ...`",
        ),
        (
            "-- t: no keys.\n-- ARGV[1] a\n-- Returns x\nreturn 1",
            "no `-- KEYS[1] ...` line",
        ),
        (
            "-- t: no returns.\n-- KEYS[1] k\nreturn 1",
            "expected one `-- Returns ...` line, found 0",
        ),
        (
            "-- t: gap.\n-- KEYS[1] k\n-- KEYS[3] k\n-- Returns x\nreturn 1",
            "line 3: expected KEYS[2], found KEYS[3]",
        ),
        (
            "-- t: order.\n-- ARGV[1] a\n-- KEYS[1] k\n-- Returns x\nreturn 1",
            "line 3: KEYS[1] is out of order",
        ),
        (
            "-- t: late.\n-- KEYS[1] k\n-- Returns x\n-- ARGV[1] a\nreturn 1",
            "line 4: ARGV[1] is out of order",
        ),
        (
            "-- t: bare.\n-- KEYS[1]\n-- Returns x\nreturn 1",
            "KEYS[1] has no description",
        ),
        (
            "-- t: tail.\n-- KEYS[1..] k\n-- KEYS[2] k\n-- Returns x\nreturn 1",
            "line 3: KEYS line after a variable tail",
        ),
        (
            "-- t: two returns.\n-- KEYS[1] k\n-- Returns x\n-- Returns y\nreturn 1",
            "found 2",
        ),
        (
            "-- t: blank line.\n\n-- KEYS[1] k\n-- Returns x\nreturn 1",
            "no `-- KEYS[1]",
        ),
    ];
    for (src, expected) in cases {
        let problems = rejected("t", src);
        assert!(
            problems.contains(expected),
            "{src}: expected {expected:?} in\n{problems}"
        );
    }
}

#[test]
fn the_tokenizer_reads_lua_lexemes() {
    let tokens = tokenize(
        "local x = redis.call('a\\'b', [[long\n]], 1.5, t..u) --[==[ c\n]==] y",
        1,
    )
    .unwrap();
    let shown: Vec<String> = tokens
        .iter()
        .map(|t| format!("{}:{}", t.line, show(std::slice::from_ref(t))))
        .collect();
    assert_eq!(
        shown,
        [
            "1:local",
            "1:x",
            "1:=",
            "1:redis.call",
            "1:(",
            "1:\"a'b\"",
            "1:,",
            "1:\"long\\n\"",
            "2:,",
            "2:1.5",
            "2:,",
            "2:t",
            "2:..",
            "2:u",
            "2:)",
            "3:y",
        ]
    );
    assert!(tokenize("x = 'open", 1).is_err());
}
