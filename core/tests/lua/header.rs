//! The header: what a script declares it takes.

use std::collections::BTreeMap;

/// The declarations of one group (`KEYS` or `ARGV`).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Declared {
    /// Declared fixed indexes: 1..=count.
    pub(crate) count: usize,
    /// `Some(n)` when the last line is `[n..]`: every index from n on is declared.
    pub(crate) tail_from: Option<usize>,
}

impl Declared {
    pub(crate) fn covers(&self, n: usize) -> bool {
        n >= 1 && (n <= self.count || self.tail_from.is_some_and(|from| n >= from))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Header {
    pub(crate) keys: Declared,
    pub(crate) argv: Declared,
    /// The number of lines in the header.
    pub(crate) lines: usize,
}

/// Parses `-- KEYS[3] text` or `-- KEYS[3..] text` (after the `-- `), for `group`.
pub(crate) fn declaration(rest: &str, group: &str) -> Option<Result<(usize, bool), String>> {
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

pub(crate) fn parse_header(stem: &str, src: &str) -> Result<Header, Vec<String>> {
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
