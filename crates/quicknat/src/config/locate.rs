//! From a byte offset in the file to what an operator reads: a line number and a
//! field path such as `nat44.rule[2].pool`.
//!
//! Used only to describe errors; it never decides whether a file is valid.

use std::ops::Range;

use toml_edit::{ImDocument, Item, TableLike, Value};

/// The 1-based line holding byte `offset` of `text` (clamped to the end of the text).
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    // Count on bytes: a span may (in theory) end inside a multi-byte character.
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The deepest field path (array-of-tables indexes 1-based) whose key or value holds
/// byte `offset`, or `None` when the text does not parse or nothing matches.
pub(super) fn path_at(text: &str, offset: usize) -> Option<String> {
    let doc = ImDocument::parse(text).ok()?;
    search(doc.as_table(), "", offset)
}

fn holds(span: Option<Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|s| s.contains(&offset) || (s.is_empty() && s.start == offset))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Searches the children of `table` (whose path is `prefix`) for `offset`.
fn search(table: &dyn TableLike, prefix: &str, offset: usize) -> Option<String> {
    for (name, _) in table.iter() {
        let (key, item) = table.get_key_value(name)?;
        let path = join(prefix, name);
        if let Some(found) = search_item(item, &path, offset) {
            return Some(found);
        }
        if holds(key.span(), offset) || holds(item.span(), offset) {
            return Some(path);
        }
    }
    None
}

/// Searches inside `item` (whose path is `path`) for a deeper match.
fn search_item(item: &Item, path: &str, offset: usize) -> Option<String> {
    match item {
        Item::Table(t) => search(t, path, offset),
        Item::ArrayOfTables(a) => a.iter().enumerate().find_map(|(i, t)| {
            let p = format!("{path}[{}]", i + 1);
            search(t, &p, offset).or_else(|| holds(t.span(), offset).then_some(p))
        }),
        Item::Value(Value::InlineTable(t)) => search(t, path, offset),
        Item::Value(Value::Array(a)) => a.iter().enumerate().find_map(|(i, v)| match v {
            Value::InlineTable(t) => {
                let p = format!("{path}[{}]", i + 1);
                search(t, &p, offset).or_else(|| holds(t.span(), offset).then_some(p))
            }
            _ => None,
        }),
        _ => None,
    }
}

/// One step of a field path: a key, or an entry of an array (counted from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seg<'a> {
    /// A key of a table.
    Key(&'a str),
    /// An entry of an array of tables (or of inline tables).
    Index(usize),
}

/// The span of the deepest item along `path` that the text has: the field's value, or
/// the entry, table or section holding it when the field was not written (a default
/// being refused). `None` when the text does not parse or not even the first key is there.
pub(super) fn span_of(text: &str, path: &[Seg<'_>]) -> Option<Range<usize>> {
    let doc = ImDocument::parse(text).ok()?;
    let mut best = None;
    let mut item: Option<&Item> = None;
    let mut table: Option<&dyn TableLike> = Some(doc.as_table());
    for seg in path {
        let (next_item, next_table, span) = match (*seg, table, item) {
            (Seg::Key(k), Some(t), _) => {
                let Some((key, found)) = t.get_key_value(k) else {
                    break;
                };
                (
                    Some(found),
                    found.as_table_like(),
                    found.span().or(key.span()),
                )
            }
            (Seg::Index(i), _, Some(Item::ArrayOfTables(a))) => {
                let Some(t) = a.get(i) else { break };
                (None, Some(t as &dyn TableLike), t.span())
            }
            (Seg::Index(i), _, Some(Item::Value(Value::Array(a)))) => {
                let Some(Value::InlineTable(t)) = a.get(i) else {
                    break;
                };
                (None, Some(t as &dyn TableLike), t.span())
            }
            _ => break,
        };
        best = span.or(best);
        item = next_item;
        table = next_table;
    }
    best
}
