//! The tokenizer: Lua lexemes, with comments and strings understood.

use crate::body::*;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// A name, with dotted fields joined (`redis.call`, `table.unpack`).
    Ident(String),
    Str(String),
    Num(String),
    Punct(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

impl Token {
    pub(crate) fn is_ident(&self, name: &str) -> bool {
        matches!(&self.tok, Tok::Ident(n) if n == name)
    }
    pub(crate) fn is_punct(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(q) if q == p)
    }
    pub(crate) fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(n) => Some(n),
            _ => None,
        }
    }
}

/// The level of a long bracket opening at `chars[i]` (`[[` is 0, `[==[` is 2), if one does.
pub(crate) fn long_bracket(chars: &[char], i: usize) -> Option<usize> {
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
pub(crate) fn skip_long(
    chars: &[char],
    i: usize,
    level: usize,
    line: &mut usize,
) -> Result<usize, String> {
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

pub(crate) fn tokenize(src: &str, first_line: usize) -> Result<Vec<Token>, String> {
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
pub(crate) fn matching(tokens: &[Token], open: usize) -> Option<usize> {
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
