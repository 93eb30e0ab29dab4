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
