//! The body: every `redis.call` names only declared keys, and builds none.

use crate::header::*;
use crate::tokens::*;
use std::collections::BTreeSet;

/// Where the keys of a command are, among its arguments after the command name.
#[derive(Debug, PartialEq)]
pub(crate) enum KeyPositions {
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
pub(crate) fn key_positions(command: &str) -> KeyPositions {
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
pub(crate) fn key_locals(tokens: &[Token]) -> BTreeSet<String> {
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
pub(crate) fn is_keys_index(arg: &[Token]) -> bool {
    arg.len() >= 3
        && arg[0].is_ident("KEYS")
        && arg[1].is_punct("[")
        && matching(arg, 1) == Some(arg.len() - 1)
}

/// `unpack(KEYS...)` or `table.unpack(KEYS...)`: a spread of declared keys.
pub(crate) fn is_keys_spread(arg: &[Token]) -> bool {
    arg.len() >= 4
        && (arg[0].is_ident("unpack") || arg[0].is_ident("table.unpack"))
        && arg[1].is_punct("(")
        && arg[2].is_ident("KEYS")
        && (arg[3].is_punct(")") || arg[3].is_punct(","))
        && matching(arg, 1) == Some(arg.len() - 1)
}

pub(crate) fn is_key(arg: &[Token], locals: &BTreeSet<String>) -> bool {
    is_keys_index(arg)
        || matches!(arg, [Token { tok: Tok::Ident(name), .. }] if locals.contains(name))
}

pub(crate) fn show(arg: &[Token]) -> String {
    arg.iter()
        .map(|t| match &t.tok {
            Tok::Ident(s) | Tok::Num(s) | Tok::Punct(s) => s.clone(),
            Tok::Str(s) => format!("{s:?}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits the arguments of a call whose `(` is at `open`, at top-level commas.
pub(crate) fn call_args(tokens: &[Token], open: usize) -> Option<Vec<&[Token]>> {
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
pub(crate) fn check_call(
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

pub(crate) fn check_body(header: &Header, body: &[Token]) -> Vec<String> {
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
pub(crate) fn check_script(stem: &str, src: &str) -> Result<Header, Vec<String>> {
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
