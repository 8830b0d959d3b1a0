//! The hand-written parser (the grammar is in the crate docs): a token cursor with one
//! method per production, iterative throughout so no input can exhaust the stack.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::{AtomId, PartitionId, SiteId};
use crate::lexer::{Tok, Token, tokenize};
use crate::partition::PartitionSpec;
use crate::program::{DEFAULT_SIZE_GB, Input, Program, Requirement};
use crate::span::{Brief, Item, SourceMap, Span};
use crate::target::Target;

/// A syntax error: where and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1 (characters).
    pub column: usize,
    /// What was expected and what was found.
    pub message: String,
}

/// Parses a program (syntax only: see [`Program::check`] for the static checks).
pub fn parse(src: &str) -> Result<Program, ParseError> {
    parse_with_spans(src).map(|(p, _)| p)
}

/// Parses a program and records where each item was written, for error messages.
pub fn parse_with_spans(src: &str) -> Result<(Program, SourceMap), ParseError> {
    let mut parser = Parser { toks: tokenize(src)?, pos: 0, program: Program::default(), map: SourceMap::default() };
    parser.program_()?;
    Ok((parser.program, parser.map))
}

impl FromStr for Program {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        parse(s)
    }
}

impl FromStr for Action {
    type Err = ParseError;
    /// One action, e.g. `A+B @ 0 -> 1, 2` (sugar for several actions is refused).
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let program = parse(s)?;
        let at = Span { line: 1, column: 1 };
        if !program.inputs.is_empty()
            || !program.outputs.is_empty()
            || program.gpus.is_some()
            || !program.partitions.is_empty()
        {
            return Err(error(at, "expected a single action, not a program"));
        }
        let mut body = program.body.into_iter();
        match (body.next(), body.next()) {
            (Some(a), None) => Ok(a),
            _ => Err(error(at, "expected exactly one action")),
        }
    }
}

impl FromStr for Aggregate {
    type Err = ParseError;
    /// An aggregate, e.g. `A+B+C`.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let mut parser = Parser { toks: tokenize(s)?, pos: 0, program: Program::default(), map: SourceMap::default() };
        parser.skip_newlines();
        let agg = parser.aggregate()?;
        parser.skip_newlines();
        parser.expect_end("after the aggregate")?;
        Ok(agg)
    }
}

fn error(span: Span, message: impl Into<String>) -> ParseError {
    ParseError { line: span.line, column: span.column, message: message.into() }
}

const HEADERS: [&str; 4] = ["GPUS", "PARTITIONS", "IN", "OUT"];

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    program: Program,
    map: SourceMap,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos.min(self.toks.len() - 1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn skip_newlines(&mut self) {
        while *self.peek() == Tok::Newline {
            self.bump();
        }
    }

    fn expected(&self, what: &str) -> ParseError {
        error(self.span(), format!("expected {what} (found {})", self.peek()))
    }

    fn expect(&mut self, tok: Tok, what: &str) -> Result<Span, ParseError> {
        if *self.peek() == tok { Ok(self.bump().span) } else { Err(self.expected(what)) }
    }

    fn expect_end(&mut self, context: &str) -> Result<(), ParseError> {
        if *self.peek() == Tok::Eof { Ok(()) } else { Err(self.expected(&format!("end of input {context}"))) }
    }

    /// A header keyword followed by ':' starts here.
    fn at_header(&self) -> bool {
        matches!(self.peek(), Tok::Ident(k) if HEADERS.contains(&k.as_str())) && *self.peek_at(1) == Tok::Colon
    }

    /// The end of a header line: newline, end of input, or the next header.
    fn at_line_end(&self) -> bool {
        matches!(self.peek(), Tok::Newline | Tok::Eof) || self.at_header()
    }

    fn program_(&mut self) -> Result<(), ParseError> {
        let mut seen: BTreeMap<String, Span> = BTreeMap::new();
        let mut body_started = false;
        loop {
            match self.peek() {
                Tok::Eof => {
                    self.map.record(Item::End, self.span());
                    return Ok(());
                }
                Tok::Newline | Tok::Semi => {
                    self.bump();
                }
                _ if self.at_header() => {
                    let kw = match self.peek() {
                        Tok::Ident(k) => k.clone(),
                        _ => String::new(),
                    };
                    let span = self.span();
                    if body_started {
                        return Err(error(span, format!("the {kw} section must come before the body")));
                    }
                    if let Some(first) = seen.insert(kw.clone(), span) {
                        return Err(error(span, format!("{kw} is declared twice (first at {first})")));
                    }
                    self.bump();
                    self.bump();
                    match kw.as_str() {
                        "GPUS" => self.gpus(span)?,
                        "PARTITIONS" => self.partitions()?,
                        "IN" => self.inputs()?,
                        _ => self.outputs()?,
                    }
                }
                _ => {
                    body_started = true;
                    self.action_line()?;
                    match self.peek() {
                        Tok::Semi | Tok::Newline | Tok::Eof => {}
                        _ => return Err(self.expected("';' or a new line after an action")),
                    }
                }
            }
        }
    }

    fn site(&mut self, what: &str) -> Result<SiteId, ParseError> {
        let span = self.span();
        match self.peek().clone() {
            Tok::Number(text) if text.bytes().all(|b| b.is_ascii_digit()) => {
                self.bump();
                text.parse::<u32>()
                    .map(|n| SiteId(n as usize))
                    .map_err(|_| error(span, format!("site number {text} is too large (at most {})", u32::MAX)))
            }
            _ => Err(self.expected(what)),
        }
    }

    fn ident(&mut self, what: &str) -> Result<(String, Span), ParseError> {
        match self.peek().clone() {
            Tok::Ident(name) => Ok((name, self.bump().span)),
            _ => Err(self.expected(what)),
        }
    }

    fn atom(&mut self) -> Result<AtomId, ParseError> {
        let (name, span) = self.ident("an atom name")?;
        AtomId::new(&name).map_err(|e| error(span, e.to_string()))
    }

    fn target(&mut self, what: &str) -> Result<Target, ParseError> {
        let span = self.span();
        match self.peek() {
            Tok::Number(_) => Ok(Target::Site(self.site(what)?)),
            Tok::Ident(_) => {
                let (name, _) = self.ident(what)?;
                PartitionId::new(&name).map(Target::Partition).map_err(|e| error(span, e.to_string()))
            }
            _ => Err(self.expected(what)),
        }
    }

    fn aggregate(&mut self) -> Result<Aggregate, ParseError> {
        let mut atoms = BTreeSet::new();
        loop {
            let span = self.span();
            let atom = self.atom()?;
            if !atoms.insert(atom.clone()) {
                return Err(error(span, format!("atom {} appears twice in the aggregate", Brief(atom.as_str()))));
            }
            if *self.peek() != Tok::Plus {
                break;
            }
            self.bump();
            self.skip_newlines();
        }
        Aggregate::new(atoms).map_err(|e| error(self.span(), e.to_string()))
    }

    fn targets(&mut self, what: &str) -> Result<Vec<Target>, ParseError> {
        let mut targets = vec![self.target(what)?];
        while *self.peek() == Tok::Comma {
            self.bump();
            self.skip_newlines();
            targets.push(self.target(what)?);
        }
        Ok(targets)
    }

    /// After an item of a `;`-separated header list: true to read another item.
    fn more_items(&mut self, section: &str, item: &str) -> Result<bool, ParseError> {
        if *self.peek() == Tok::Semi {
            self.bump();
            return Ok(!self.at_line_end());
        }
        if self.at_line_end() {
            return Ok(false);
        }
        Err(self.expected(&format!("';' or the end of the line after {item} in {section}")))
    }

    fn gpus(&mut self, at: Span) -> Result<(), ParseError> {
        let mut gpus = BTreeSet::new();
        self.map.record(Item::Gpus, at);
        if !self.at_line_end() && *self.peek() != Tok::Semi {
            loop {
                let span = self.span();
                let site = self.site("a site number in GPUS")?;
                if !gpus.insert(site) {
                    return Err(error(span, format!("site {site} is listed twice in GPUS")));
                }
                if *self.peek() != Tok::Comma {
                    break;
                }
                self.bump();
                self.skip_newlines();
            }
        }
        if *self.peek() == Tok::Semi {
            self.bump();
        }
        if !self.at_line_end() {
            return Err(self.expected("',' or the end of the line in GPUS"));
        }
        self.program.gpus = Some(gpus);
        Ok(())
    }

    fn partitions(&mut self) -> Result<(), ParseError> {
        let mut spans: BTreeMap<PartitionId, Span> = BTreeMap::new();
        loop {
            if self.at_line_end() {
                return Ok(());
            }
            if matches!(self.peek(), Tok::Comma | Tok::Semi) {
                self.bump();
                continue;
            }
            let (name, span) = self.ident("a partition name, as in `G1 {size 4}`")?;
            let name = PartitionId::new(&name).map_err(|e| error(span, e.to_string()))?;
            if let Some(first) = spans.get(&name) {
                return Err(error(
                    span,
                    format!("partition {} is declared twice (first at {first})", Brief(name.as_str())),
                ));
            }
            self.expect(Tok::LBrace, &format!("'{{' after partition name {}", Brief(name.as_str())))?;
            self.skip_newlines();
            let spec = self.partition_spec(&name)?;
            spans.insert(name.clone(), span);
            self.map.record(Item::Partition(name.clone()), span);
            self.program.partitions.insert(name, spec);
        }
    }

    fn partition_spec(&mut self, name: &PartitionId) -> Result<PartitionSpec, ParseError> {
        if matches!(self.peek(), Tok::Ident(k) if k == "size") {
            self.bump();
            self.skip_newlines();
            if *self.peek() == Tok::Colon {
                self.bump();
                self.skip_newlines();
            }
            let span = self.span();
            let size = match self.peek().clone() {
                Tok::Number(text) if text.bytes().all(|b| b.is_ascii_digit()) => {
                    self.bump();
                    text.parse::<usize>().map_err(|_| error(span, format!("partition size {text} is too large")))?
                }
                _ => {
                    return Err(
                        self.expected(&format!("a whole number after 'size' in partition {}", Brief(name.as_str())))
                    );
                }
            };
            self.skip_newlines();
            self.expect(Tok::RBrace, &format!("'}}' after the size of partition {}", Brief(name.as_str())))?;
            return Ok(PartitionSpec::Size(size));
        }
        let mut members = BTreeSet::new();
        if *self.peek() != Tok::RBrace {
            loop {
                let span = self.span();
                let site = self.site(&format!("a site number or 'size' in partition {}", Brief(name.as_str())))?;
                if !members.insert(site) {
                    return Err(error(
                        span,
                        format!("site {site} is listed twice in partition {}", Brief(name.as_str())),
                    ));
                }
                self.skip_newlines();
                if *self.peek() != Tok::Comma {
                    break;
                }
                self.bump();
                self.skip_newlines();
            }
        }
        self.expect(Tok::RBrace, &format!("',' or '}}' in partition {}", Brief(name.as_str())))?;
        Ok(PartitionSpec::Members(members))
    }

    fn inputs(&mut self) -> Result<(), ParseError> {
        let mut spans: BTreeMap<AtomId, Span> = BTreeMap::new();
        if self.at_line_end() {
            return Ok(());
        }
        loop {
            let span = self.span();
            let atom = self.atom()?;
            if let Some(first) = spans.get(&atom) {
                return Err(error(
                    span,
                    format!("atom {} is placed twice in IN (first at {first})", Brief(atom.as_str())),
                ));
            }
            self.expect(Tok::At, &format!("'@' after atom {} in IN", Brief(atom.as_str())))?;
            self.skip_newlines();
            let site = self.site(&format!("the site number of atom {}", Brief(atom.as_str())))?;
            let size_gb = if *self.peek() == Tok::LParen { self.size()? } else { DEFAULT_SIZE_GB };
            spans.insert(atom.clone(), span);
            self.map.record(Item::Input(atom.clone()), span);
            self.program.inputs.insert(atom, Input { site, size_gb });
            if !self.more_items("IN", "an entry")? {
                return Ok(());
            }
        }
    }

    /// `(size: 1.0 GB)`, in GB.
    fn size(&mut self) -> Result<f64, ParseError> {
        self.bump();
        self.skip_newlines();
        match self.peek() {
            Tok::Ident(k) if k == "size" => {
                self.bump();
            }
            _ => return Err(self.expected("'size' after '('")),
        }
        self.skip_newlines();
        if *self.peek() == Tok::Colon {
            self.bump();
            self.skip_newlines();
        }
        let span = self.span();
        let Tok::Number(text) = self.peek().clone() else { return Err(self.expected("a number after 'size:'")) };
        self.bump();
        let value: f64 = text.parse().map_err(|_| error(span, format!("`{text}` is not a number")))?;
        self.skip_newlines();
        let unit_span = self.span();
        let scale = match self.peek() {
            Tok::Ident(u) if u == "GB" => 1.0,
            Tok::Ident(u) if u == "MB" => 1e-3,
            Tok::Ident(u) if u == "KB" => 1e-6,
            Tok::Ident(u) if u == "B" => 1e-9,
            _ => return Err(self.expected("a unit (GB, MB, KB or B)")),
        };
        self.bump();
        let size = value * scale;
        if !(size.is_finite() && size > 0.0) {
            return Err(error(unit_span, format!("size {text} must be positive and finite")));
        }
        self.skip_newlines();
        self.expect(Tok::RParen, "')' after the size")?;
        Ok(size)
    }

    fn outputs(&mut self) -> Result<(), ParseError> {
        if self.at_line_end() {
            return Ok(());
        }
        loop {
            let span = self.span();
            let aggregate = self.aggregate()?;
            self.expect(Tok::At, &format!("'@' after aggregate {} in OUT", Brief(&aggregate)))?;
            self.skip_newlines();
            for target in self.targets("a site number or partition name")? {
                let r = Requirement { aggregate: aggregate.clone(), target };
                self.map.record(Item::Output(r.clone()), span);
                self.program.outputs.insert(r);
            }
            if *self.peek() == Tok::Arrow {
                return Err(self.expected("';' or the end of the line: OUT lists requirements, not transfers"));
            }
            if !self.more_items("OUT", "a requirement")? {
                return Ok(());
            }
        }
    }

    /// One body action, with the sugar `X @ s1, s2 [-> D]` expanded to one action per source.
    fn action_line(&mut self) -> Result<(), ParseError> {
        let span = self.span();
        let aggregate = self.aggregate()?;
        self.expect(Tok::At, &format!("'@' after aggregate {}", Brief(&aggregate)))?;
        self.skip_newlines();
        let sources = self.targets("a site number or partition name")?;
        let mut dests = BTreeSet::new();
        if *self.peek() == Tok::Arrow {
            self.bump();
            loop {
                self.skip_newlines();
                if matches!(self.peek(), Tok::Ident(_)) {
                    return Err(self.expected("a site number after '->' (destinations are sites, not partitions)"));
                }
                dests.insert(self.site("a destination site number after '->'")?);
                if *self.peek() != Tok::Comma {
                    break;
                }
                self.bump();
            }
        }
        for source in sources {
            let a = Action { aggregate: aggregate.clone(), source, dests: dests.clone() };
            self.map.record(Item::Action(a.clone()), span);
            self.program.body.insert(a);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        parse(src).unwrap_err().to_string()
    }

    #[test]
    fn example_5_1() {
        let p = parse("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA @ 0 -> 1;\n\nB @ 1 -> 0;\n\nA+B @ 0, 1\n").unwrap();
        assert_eq!(p.inputs.len(), 2);
        assert_eq!(p.outputs.len(), 2);
        assert_eq!(p.body.len(), 4);
        assert!(p.gpus.is_none());
    }

    #[test]
    fn sizes_and_partitions() {
        let p = parse("GPUS: 0, 1, 2, 3\nPARTITIONS: G1 {size 2} G2 {2, 3}\nIN: A @ 0 (size: 2.5 GB); B @ 1 (size 500 MB)\nOUT: A+B @ G1\n")
            .unwrap();
        assert_eq!(p.inputs[&AtomId::new("A").unwrap()].size_gb, 2.5);
        assert_eq!(p.inputs[&AtomId::new("B").unwrap()].size_gb, 0.5);
        assert_eq!(p.partitions[&PartitionId::new("G1").unwrap()], PartitionSpec::Size(2));
        assert_eq!(
            p.partitions[&PartitionId::new("G2").unwrap()],
            PartitionSpec::Members([SiteId(2), SiteId(3)].into())
        );
    }

    #[test]
    fn errors_name_line_and_column() {
        assert_eq!(
            err("IN: A @ 0\nOUT: A @ 0\nA 0 -> 1"),
            "line 3, column 3: expected '@' after aggregate A (found `0`)"
        );
        assert!(err("IN: A @ 0; A @ 1").starts_with("line 1, column 12: atom A is placed twice in IN"));
        assert!(err("A+A @ 0").contains("appears twice"));
        assert!(err("A @ 0 -> G1").contains("destinations are sites"));
        assert!(err("A @ 0\nIN: A @ 0").starts_with("line 2, column 1: the IN section must come before the body"));
        assert!(err("IN: A @ 0 B @ 1").starts_with("line 1, column 11: expected ';' or the end of the line"));
        assert!(err("IN: A @ 0 (size: 0 GB)").contains("positive"));
        assert!(err("IN: A @ 0 (size: 1e999 GB)").contains("positive"));
        assert!(err("A @ 99999999999").contains("too large"));
        assert!(err("GPUS: 0, 0").contains("twice"));
        assert!(err("A @ 0 B @ 1").contains("';' or a new line after an action"));
        assert!(err("OUT: A @ 0 -> 1").contains("not transfers"));
        assert!(err("IN: A @ 0\nIN: B @ 1").contains("declared twice"));
        assert!(err("PARTITIONS: G {size x}").contains("whole number"));
    }

    #[test]
    fn continuation_and_comments() {
        let p = parse("# swap\nA @ 0 ->\n  1,\n  2 // multicast\nB+\nC @ 1").unwrap();
        assert_eq!(p.body.len(), 2);
        assert_eq!("A @ 0 -> 2, 1".parse::<Action>().unwrap(), "A @ 0 -> 1, 2".parse::<Action>().unwrap());
        assert!("A @ 0, 1".parse::<Action>().is_err());
        assert_eq!("B+A".parse::<Aggregate>().unwrap().to_string(), "A+B");
    }
}
