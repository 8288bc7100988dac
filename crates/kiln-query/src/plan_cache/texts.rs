//! Query texts whose shape is known, so that a query differing from one
//! already planned only in its values is not parsed again.
//!
//! Why: a query sent with its values written in runs through the kept
//! plan of its shape ([`super::literals`]), but finding that shape took
//! a parse, the compatibility rewrites, the lift and printing the lifted
//! statement back to text: at 50 dashboard clients over the simple
//! protocol the tokenizer, parser and rewrites took about 9% of the
//! server's CPU and the printing about 3%.
//!
//! A text's [`Template`] is the text with each plain literal (a number of
//! digits with at most one decimal point, a quoted string) masked. The
//! first time a text runs through a kept shape, its template learns which
//! of its literals became the shape's placeholders and what the others
//! were. A later text of the same template whose other literals are the
//! same runs that shape with its own literals bound, unparsed
//! ([`crate::Engine::run_text`]).
//!
//! Why that is the same answer: two texts of one template differ only
//! inside literals that SQL's tokenizer reads whole, as one literal of
//! the same kind. Anything the scanner cannot be sure of leaves a text
//! without a template: exponents, a number touching a letter or a dot,
//! prefixed strings (`E'...'`, `X'...'`, `U&'...'`), strings with a
//! backslash or written next to each other, dollar quotes, block
//! comments, `$n`, `?`, `#` and backticks. Parsing does not look at
//! literal values, and the lifted ones are values compared in filters,
//! which no rewrite reads; every other literal must be the same text. A
//! placeholder is tied to the literals it may have come from by value
//! (kind, sign and text): the value must be as many placeholders' as it
//! is literals of the text, or the text is not learned. A value written
//! more than once (a range's end, `ts >= CAST('<end>' AS TIMESTAMP) -
//! INTERVAL '1 day' AND ts < '<end>'`) leaves unknown which placeholder
//! came from which of its literals, so the template learns them as
//! equal: a later text hits only if those literals are equal again, and
//! each of the placeholders binds their value. That ties each
//! placeholder right because the scanner sees every literal the
//! tokenizer does: it hides only words of ASCII letters, digits, `_` and
//! `$`, quoted identifiers and line comments, which the tokenizers read
//! the same way (non-ASCII outside quotes, and CR in a comment, which
//! ends it in PostgreSQL's tokenizer, leave a text without a template).
//! A string the query gives a type (`TIMESTAMP '...'`) is masked like
//! any other; its type stays in the key, and the placeholder learns the
//! type the lift gave its value ([`Literal::Typed`]).
//! A door whose parser looks at the text itself first (datafusion-
//! postgres's client query list, `search_path`) keeps those texts off
//! this path ([`Door`] callers check).
//!
//! A text sent with its values apart (HTTP's `params`, for `$1`, `$2`...)
//! has a template too: the whole text, with nothing masked
//! ([`Template::with_params`]). Only the same text hits it, which parses
//! to the same statement, so what it learned is the shape alone. At 50
//! HTTP dashboard clients, parsing such texts again, copying the
//! statement and printing it back to text took about 13% of the server's
//! CPU.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::datatypes::DataType;
use dashmap::DashMap;

use super::literals::Literal;
use crate::shape::labels::Labels;

/// Texts longer than this have no template: what is kept stays small.
const MAX_TEXT_BYTES: usize = 16 * 1024;
/// At most this many learned texts (the variants of every template) are
/// kept; when full, all are forgotten and learned again by use.
const MAX_TEXTS: usize = 1024;
/// At most this many variants of one template are kept.
const MAX_VARIANTS: usize = 8;

/// Which parser a text is read with: the same text may be a different
/// statement under another's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// PostgreSQL's simple protocol (datafusion-postgres's parser).
    Pg,
    /// HTTP (DataFusion's parser).
    Http,
}

impl Door {
    /// The first character of a template's key.
    fn letter(self) -> char {
        match self {
            Door::Pg => 'p',
            Door::Http => 'h',
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Number,
    String,
}

/// One literal of a text.
#[derive(Debug)]
struct Token<'a> {
    kind: Kind,
    /// A number's digits, or a string's text between its quotes (`''`
    /// still doubled).
    raw: &'a str,
    /// Whether a `-` comes before it.
    negative: bool,
}

impl Token<'_> {
    fn value(&self) -> Cow<'_, str> {
        match self.kind {
            Kind::String if self.raw.contains("''") => Cow::Owned(self.raw.replace("''", "'")),
            _ => Cow::Borrowed(self.raw),
        }
    }
}

/// What ties a placeholder to a literal: its kind, sign and text (module
/// docs).
type Value<'a> = (Kind, bool, Cow<'a, str>);

/// A text with its plain literals masked (module docs).
#[derive(Debug)]
pub struct Template<'a> {
    key: String,
    tokens: Vec<Token<'a>>,
}

impl<'a> Template<'a> {
    /// `text`'s template as `door` reads it; none where the text holds
    /// something the scanner cannot be sure of (module docs).
    pub fn of(door: Door, text: &'a str) -> Option<Self> {
        if text.len() > MAX_TEXT_BYTES {
            return None;
        }
        let b = text.as_bytes();
        let mut key = String::with_capacity(text.len() + 1);
        key.push(door.letter());
        let mut tokens = vec![];
        let mut copied = 0;
        let mut i = 0;
        let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
        while i < b.len() {
            let c = b[i];
            match c {
                // Beside the masks' own bytes: what tokenizers read in
                // more than one way. Outside quotes, non-ASCII may be a
                // letter or a space (U+00A0) depending on the dialect.
                0..=2 | b'$' | b'?' | b'#' | b'`' | b'\\' | 0x80.. => return None,
                b'&' if next(b, i) == Some(b'\'') => return None,
                b'/' if next(b, i) == Some(b'*') => return None,
                b'-' if next(b, i) == Some(b'-') => {
                    let end = text[i..].find('\n').map_or(b.len(), |n| i + n + 1);
                    // PostgreSQL's tokenizer also ends a comment at CR.
                    if text[i..end].contains('\r') {
                        return None;
                    }
                    i = end;
                }
                b'"' => i = closing(b, i, b'"')?,
                b'.' if next(b, i).is_some_and(|n| n.is_ascii_digit()) => return None,
                c if c.is_ascii_digit() => {
                    let start = i;
                    i = digits(b, i);
                    if b.get(i) == Some(&b'.') {
                        i = digits(b, i + 1);
                        if !b[i - 1].is_ascii_digit() {
                            return None;
                        }
                    }
                    if b.get(i).is_some_and(|&n| is_word(n) || n == b'.') {
                        return None;
                    }
                    let negative = text[..start].trim_end().ends_with('-');
                    key.push_str(&text[copied..start]);
                    key.push('\u{1}');
                    copied = i;
                    tokens.push(Token {
                        kind: Kind::Number,
                        raw: &text[start..i],
                        negative,
                    });
                }
                b'\'' => {
                    let start = i;
                    i = closing(b, i, b'\'')?;
                    let raw = &text[start + 1..i - 1];
                    if raw.contains('\\') || text[i..].trim_start().starts_with('\'') {
                        return None;
                    }
                    key.push_str(&text[copied..start]);
                    key.push('\u{2}');
                    copied = i;
                    tokens.push(Token {
                        kind: Kind::String,
                        raw,
                        negative: false,
                    });
                }
                c if is_word(c) => {
                    while i < b.len() && is_word(b[i]) {
                        i += 1;
                    }
                    // A prefixed string: `E'...'`, `N'...'`, `X'...'`.
                    if b.get(i) == Some(&b'\'') {
                        return None;
                    }
                }
                _ => i += 1,
            }
        }
        key.push_str(&text[copied..]);
        Some(Self { key, tokens })
    }

    /// The template of `text` sent with its values apart: the text
    /// itself (module docs). Its key starts with NUL after the door's
    /// letter, which no template of [`Template::of`] does.
    pub fn with_params(door: Door, text: &'a str) -> Option<Self> {
        if text.len() > MAX_TEXT_BYTES {
            return None;
        }
        Some(Self {
            key: format!("{}\0{text}", door.letter()),
            tokens: vec![],
        })
    }
}

fn next(b: &[u8], i: usize) -> Option<u8> {
    b.get(i + 1).copied()
}

/// The index after the ASCII digits from `i`.
fn digits(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i
}

/// The index after the quote `q` that closes the one at `open` (a doubled
/// quote is one character inside); none if it is never closed.
fn closing(b: &[u8], open: usize, q: u8) -> Option<usize> {
    let mut i = open + 1;
    loop {
        match b.get(i)? {
            c if *c == q && b.get(i + 1) == Some(&q) => i += 2,
            c if *c == q => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// What a template learned from the first of its texts that ran through
/// a kept shape.
#[derive(Debug)]
pub struct Learned {
    /// The shape's text (its key without the session's options).
    pub shape: String,
    /// Each literal of the template: `None` if it is a placeholder's
    /// value, otherwise the text it must be.
    fixed: Vec<Option<Box<str>>>,
    /// The literal of each placeholder, `$1` first, with the type the
    /// text gives it, if any ([`Literal::Typed`]).
    lifted: Vec<(usize, Option<DataType>)>,
    /// Sets of literals that must be equal: each held a value written
    /// more than once, all of them placeholders' (module docs).
    equal: Vec<Box<[usize]>>,
    /// The statement's PostgreSQL column labels, if the door uses them.
    pub labels: Option<Labels>,
}

/// A text whose template was learned: its shape and the values of its
/// placeholders, as its own literals.
#[derive(Debug)]
pub struct TextHit {
    pub learned: Arc<Learned>,
    pub(crate) literals: Vec<Literal>,
}

/// Learned templates, by template (module docs).
#[derive(Default)]
pub struct TextShapes {
    /// A template's variants: texts that differ in a literal that is no
    /// placeholder's (`date_trunc('day', ...)`, `'hour'`), latest last.
    learned: DashMap<String, Vec<Arc<Learned>>>,
    /// Variants kept, of all templates: what [`MAX_TEXTS`] bounds.
    variants: AtomicUsize,
}

impl TextShapes {
    /// What was learned for `template`, if its fixed literals are the
    /// ones of the text it was learned from.
    pub fn get(&self, template: &Template) -> Option<TextHit> {
        let tokens = &template.tokens;
        let learned = self
            .learned
            .get(&template.key)?
            .iter()
            .find(|v| {
                v.fixed.len() == tokens.len()
                    && v.fixed
                        .iter()
                        .zip(tokens)
                        .all(|(f, t)| f.as_deref().is_none_or(|f| f == t.raw))
                    && v.equal.iter().all(|set| {
                        let first = tokens[set[0]].raw;
                        set[1..].iter().all(|&i| tokens[i].raw == first)
                    })
            })?
            .clone();
        let literals = learned
            .lifted
            .iter()
            .map(|(i, typed)| {
                let t = &tokens[*i];
                match (t.kind, t.negative, typed) {
                    (Kind::Number, true, _) => Literal::Number(format!("-{}", t.raw)),
                    (Kind::Number, false, _) => Literal::Number(t.raw.to_string()),
                    (Kind::String, _, None) => Literal::String(t.value().into_owned()),
                    (Kind::String, _, Some(ty)) => {
                        Literal::Typed(t.value().into_owned(), ty.clone())
                    }
                }
            })
            .collect();
        Some(TextHit { learned, literals })
    }

    /// Learns `template` from its text, which ran through the shape
    /// `shape` with `lifted` as its placeholders' values; nothing if a
    /// value is not as many placeholders' as it is literals of the text
    /// (module docs).
    pub(crate) fn learn(
        &self,
        template: &Template,
        shape: &str,
        lifted: &[Literal],
        labels: Option<Labels>,
    ) {
        let tokens = &template.tokens;
        let mut fixed: Vec<Option<Box<str>>> = tokens.iter().map(|t| Some(t.raw.into())).collect();
        // The literals of each value, and how many placeholders it is.
        let mut by_value: HashMap<Value, (Vec<usize>, usize)> = HashMap::new();
        for (i, t) in tokens.iter().enumerate() {
            let value = (t.kind, t.negative, t.value());
            by_value.entry(value).or_default().0.push(i);
        }
        let mut at = Vec::with_capacity(lifted.len());
        for literal in lifted {
            let (kind, value, negative, typed) = match literal {
                Literal::Number(n) => match n.strip_prefix('-') {
                    Some(n) => (Kind::Number, n, true, None),
                    None => (Kind::Number, n.as_str(), false, None),
                },
                Literal::String(s) => (Kind::String, s.as_str(), false, None),
                Literal::Typed(s, t) => (Kind::String, s.as_str(), false, Some(t.clone())),
            };
            let Some((literals, placeholders)) =
                by_value.get_mut(&(kind, negative, Cow::Borrowed(value)))
            else {
                return;
            };
            *placeholders += 1;
            at.push((literals[0], typed));
        }
        let mut equal = vec![];
        for (literals, placeholders) in by_value.into_values() {
            match placeholders {
                0 => continue,
                n if n != literals.len() => return,
                _ => {}
            }
            for &i in &literals {
                fixed[i] = None;
            }
            if literals.len() > 1 {
                equal.push(literals.into_boxed_slice());
            }
        }
        let learned = Arc::new(Learned {
            shape: shape.to_string(),
            fixed,
            lifted: at,
            equal,
            labels,
        });
        // One more variant kept, unless it replaces one.
        let grows = self
            .learned
            .get(&template.key)
            .is_none_or(|v| v.len() < MAX_VARIANTS && v.iter().all(|v| v.fixed != learned.fixed));
        if grows && self.variants.fetch_add(1, Ordering::Relaxed) >= MAX_TEXTS {
            self.learned.clear();
            self.variants.store(1, Ordering::Relaxed);
        }
        let mut variants = self.learned.entry(template.key.clone()).or_default();
        variants.retain(|v| v.fixed != learned.fixed);
        if variants.len() >= MAX_VARIANTS {
            variants.remove(0);
        }
        variants.push(learned);
    }

    /// How many templates are kept.
    pub fn len(&self) -> usize {
        self.learned.len()
    }

    pub fn is_empty(&self) -> bool {
        self.learned.is_empty()
    }
}

#[cfg(test)]
mod tests;
