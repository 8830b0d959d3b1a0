//! The tokenizer: identifiers, numbers, punctuation and significant newlines.

use std::fmt;

use crate::parser::ParseError;
use crate::span::{Brief, Span};

/// A token kind.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_]*`
    Ident(String),
    /// Digits, an optional fraction and an optional exponent, kept as written.
    Number(String),
    At,
    Arrow,
    Comma,
    Semi,
    Plus,
    Colon,
    LBrace,
    RBrace,
    LParen,
    RParen,
    Newline,
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) | Tok::Number(s) => write!(f, "`{}`", Brief(s.as_str())),
            Tok::At => f.write_str("'@'"),
            Tok::Arrow => f.write_str("'->'"),
            Tok::Comma => f.write_str("','"),
            Tok::Semi => f.write_str("';'"),
            Tok::Plus => f.write_str("'+'"),
            Tok::Colon => f.write_str("':'"),
            Tok::LBrace => f.write_str("'{'"),
            Tok::RBrace => f.write_str("'}'"),
            Tok::LParen => f.write_str("'('"),
            Tok::RParen => f.write_str("')'"),
            Tok::Newline => f.write_str("end of line"),
            Tok::Eof => f.write_str("end of input"),
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Splits `src` into tokens. Comments (`#` or `//` to the end of the line) and spaces vanish;
/// newlines stay (they end header sections and separate actions). Ends with [`Tok::Eof`].
pub(crate) fn tokenize(src: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    while i < chars.len() {
        let c = chars[i];
        let span = Span { line, column: col };
        let next = chars.get(i + 1).copied();
        let advance = |n: usize, i: &mut usize, col: &mut usize| {
            *i += n;
            *col += n;
        };
        match c {
            '\n' => {
                toks.push(Token { tok: Tok::Newline, span });
                i += 1;
                line += 1;
                col = 1;
            }
            ' ' | '\t' | '\r' => advance(1, &mut i, &mut col),
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    advance(1, &mut i, &mut col);
                }
            }
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    advance(1, &mut i, &mut col);
                }
            }
            '-' if next == Some('>') => {
                toks.push(Token { tok: Tok::Arrow, span });
                advance(2, &mut i, &mut col);
            }
            '@' | ',' | ';' | '+' | ':' | '{' | '}' | '(' | ')' => {
                let tok = match c {
                    '@' => Tok::At,
                    ',' => Tok::Comma,
                    ';' => Tok::Semi,
                    '+' => Tok::Plus,
                    ':' => Tok::Colon,
                    '{' => Tok::LBrace,
                    '}' => Tok::RBrace,
                    '(' => Tok::LParen,
                    _ => Tok::RParen,
                };
                toks.push(Token { tok, span });
                advance(1, &mut i, &mut col);
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    advance(1, &mut i, &mut col);
                }
                toks.push(Token { tok: Tok::Ident(chars[start..i].iter().collect()), span });
            }
            c if c.is_ascii_digit() => {
                let start = i;
                let digits = |i: &mut usize, col: &mut usize| {
                    while *i < chars.len() && chars[*i].is_ascii_digit() {
                        *i += 1;
                        *col += 1;
                    }
                };
                digits(&mut i, &mut col);
                if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                    advance(1, &mut i, &mut col);
                    digits(&mut i, &mut col);
                }
                if matches!(chars.get(i), Some('e' | 'E')) {
                    let sign = usize::from(matches!(chars.get(i + 1), Some('+' | '-')));
                    if chars.get(i + 1 + sign).is_some_and(|d| d.is_ascii_digit()) {
                        advance(1 + sign, &mut i, &mut col);
                        digits(&mut i, &mut col);
                    }
                }
                toks.push(Token { tok: Tok::Number(chars[start..i].iter().collect()), span });
            }
            other => {
                let message = if other == '-' {
                    "unexpected '-' (did you mean '->'?)".to_string()
                } else {
                    format!("unexpected character {other:?}")
                };
                return Err(ParseError { line, column: col, message });
            }
        }
    }
    toks.push(Token { tok: Tok::Eof, span: Span { line, column: col } });
    Ok(toks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        tokenize(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn tokens_and_comments() {
        assert_eq!(
            kinds("A+B @ 0 -> 1, 2; # comment\n"),
            vec![
                Tok::Ident("A".into()),
                Tok::Plus,
                Tok::Ident("B".into()),
                Tok::At,
                Tok::Number("0".into()),
                Tok::Arrow,
                Tok::Number("1".into()),
                Tok::Comma,
                Tok::Number("2".into()),
                Tok::Semi,
                Tok::Newline,
                Tok::Eof
            ]
        );
        assert_eq!(kinds("// x"), vec![Tok::Eof]);
    }

    #[test]
    fn numbers() {
        assert_eq!(kinds("1.5e-3"), vec![Tok::Number("1.5e-3".into()), Tok::Eof]);
        assert_eq!(kinds("2e"), vec![Tok::Number("2".into()), Tok::Ident("e".into()), Tok::Eof]);
    }

    #[test]
    fn errors_have_positions() {
        let e = tokenize("A @ 0\nB - 1").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
        let e = tokenize("é").unwrap_err();
        assert_eq!((e.line, e.column), (1, 1));
    }
}
