//! CSV interchange in MiniMalloc's layout: `id,lower,upper,size[,alignment][,offset]`.
//!
//! Lifetimes are half-open `[lower, upper)`. The header names the columns (any order, `align` is
//! accepted for `alignment`); input may carry offsets (a plan to verify) and output adds them.
//! Every malformed line is rejected with [`Error::Malformed`] naming the 1-based line.

use super::verify::verify_named;
use super::{Buffer, Plan};
use crate::{Error, Result};

/// A parsed instance: ids as written, buffers, and offsets when the file had an `offset` column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvInstance {
    /// The `id` column of each row, kept verbatim so output can write it back.
    pub ids: Vec<String>,
    /// One buffer per row, in file order.
    pub buffers: Vec<Buffer>,
    /// The `offset` column, when present.
    pub offsets: Option<Vec<u64>>,
}

impl CsvInstance {
    /// [`super::verify`] of a plan of this instance, naming buffers by their ids as the file
    /// wrote them (the row index means nothing to whoever wrote the file).
    ///
    /// # Errors
    /// Those of [`super::verify`].
    pub fn verify(&self, plan: &Plan, capacity: Option<u64>) -> Result<()> {
        let name = |i: usize| {
            self.ids
                .get(i)
                .map_or(i.to_string(), |id| format!("`{id}`"))
        };
        verify_named(&self.buffers, plan, capacity, &name)
    }
}

const COLUMNS: [&str; 6] = ["id", "lower", "upper", "size", "alignment", "offset"];

/// Parses CSV text. `source_name` (a file name) prefixes error messages.
///
/// # Errors
/// [`Error::Malformed`] with the line number for: no header; an unknown, duplicate or missing
/// required column; a row with the wrong number of fields; a field that is not a non-negative
/// integer; `lower >= upper`; a zero size; an alignment that is not a power of two; a duplicate id.
pub fn parse_csv(text: &str, source_name: &str) -> Result<CsvInstance> {
    let bad = |line: usize, message: String| Error::Malformed {
        source_name: source_name.to_string(),
        line,
        message,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let Some((header_line, header)) = lines.next() else {
        return Err(bad(
            0,
            "empty input: expected a header `id,lower,upper,size`".into(),
        ));
    };
    let mut column = [None::<usize>; 6];
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    for (k, name) in names.iter().enumerate() {
        let lower = name.to_ascii_lowercase();
        let canonical = if lower == "align" {
            "alignment"
        } else {
            lower.as_str()
        };
        let Some(c) = COLUMNS.iter().position(|&c| c == canonical) else {
            return Err(bad(
                header_line,
                format!(
                    "unknown column `{name}` (expected id, lower, upper, size, alignment, offset)"
                ),
            ));
        };
        if column[c].replace(k).is_some() {
            return Err(bad(header_line, format!("duplicate column `{name}`")));
        }
    }
    for (c, name) in COLUMNS.iter().enumerate().take(4) {
        if column[c].is_none() {
            return Err(bad(
                header_line,
                format!("missing column `{name}` (header must name id, lower, upper, size)"),
            ));
        }
    }
    let mut ids = Vec::new();
    let mut buffers = Vec::new();
    let mut offsets = column[5].map(|_| Vec::new());
    // Ids are checked as slices of `text` and the field list is reused: a parse that freed a
    // million small strings left the allocator to consolidate them during the next large
    // allocation, inside the planner's time limit.
    let mut seen = Ids::default();
    let mut fields: Vec<&str> = Vec::new();
    for (line, row) in lines {
        fields.clear();
        fields.extend(row.split(',').map(str::trim));
        if fields.len() != names.len() {
            return Err(bad(
                line,
                format!(
                    "{} fields, but the header has {} columns",
                    fields.len(),
                    names.len()
                ),
            ));
        }
        let num = |c: usize| -> Result<Option<u64>> {
            let Some(k) = column[c] else { return Ok(None) };
            fields[k].parse::<u64>().map(Some).map_err(|_| {
                bad(
                    line,
                    format!(
                        "column `{}`: `{}` is not a non-negative integer",
                        COLUMNS[c], fields[k]
                    ),
                )
            })
        };
        let (lower, upper, size) = (
            num(1)?.unwrap_or(0),
            num(2)?.unwrap_or(0),
            num(3)?.unwrap_or(0),
        );
        let align = num(4)?.unwrap_or(1);
        let id = column[0].map_or("", |k| fields[k]);
        if id.is_empty() {
            return Err(bad(line, "empty id".into()));
        }
        if lower >= upper {
            return Err(bad(
                line,
                format!(
                    "buffer `{id}`: lower {lower} must be below upper {upper} (half-open lifetime)"
                ),
            ));
        }
        if size == 0 {
            return Err(bad(
                line,
                format!("buffer `{id}`: size 0 (every buffer needs at least 1 byte)"),
            ));
        }
        if !align.is_power_of_two() || align > 1 << 62 {
            return Err(bad(
                line,
                format!("buffer `{id}`: alignment {align} is not a power of two up to 2^62"),
            ));
        }
        seen.add(id, line);
        if let (Some(offs), Some(o)) = (offsets.as_mut(), num(5)?) {
            offs.push(o);
        }
        ids.push(id.to_string());
        buffers.push(Buffer {
            lower,
            upper,
            size,
            align,
        });
    }
    if let Some((id, line)) = seen.first_duplicate() {
        return Err(bad(line, format!("duplicate id `{id}`")));
    }
    Ok(CsvInstance {
        ids,
        buffers,
        offsets,
    })
}

/// The ids of a file with their lines, checked for duplicates once all are read. Sorted, not
/// hashed: a set of a million ids spent most of the parse in SipHash, and a faster hash lets a
/// crafted file collide every id (sorting stays n log n whatever the ids). Ids written as plain
/// decimal numbers (the usual case) sort as numbers, 3–4 times faster than as strings; no other
/// id can equal one of them, since "07" and "+7" are not plain.
#[derive(Default)]
struct Ids<'a> {
    numbers: Vec<(u64, usize)>,
    names: Vec<(&'a str, usize)>,
}

impl<'a> Ids<'a> {
    fn add(&mut self, id: &'a str, line: usize) {
        let plain = id.bytes().all(|b| b.is_ascii_digit()) && (id == "0" || !id.starts_with('0'));
        match id.parse::<u64>() {
            Ok(n) if plain => self.numbers.push((n, line)),
            _ => self.names.push((id, line)),
        }
    }

    /// The id that repeats first in file order, with the line where it repeats.
    fn first_duplicate(mut self) -> Option<(String, usize)> {
        self.numbers.sort_unstable();
        self.names.sort_unstable();
        let numbers = self.numbers.windows(2).filter(|w| w[0].0 == w[1].0);
        let names = self.names.windows(2).filter(|w| w[0].0 == w[1].0);
        numbers
            .map(|w| (w[1].0.to_string(), w[1].1))
            .chain(names.map(|w| (w[1].0.to_string(), w[1].1)))
            .min_by_key(|(_, line)| *line)
    }
}

/// Writes an instance as CSV: `id,lower,upper,size`, plus `alignment` when any buffer needs one,
/// plus `offset` when `offsets` is given.
///
/// # Errors
/// [`Error::SizeMismatch`] when `ids` or `offsets` do not have one entry per buffer.
pub fn write_csv(ids: &[String], buffers: &[Buffer], offsets: Option<&[u64]>) -> Result<String> {
    let check = |what: &str, len: usize| {
        if len == buffers.len() {
            Ok(())
        } else {
            Err(Error::SizeMismatch {
                what: format!("CSV {what} (one per buffer)"),
                expected: buffers.len() as u64,
                actual: len as u64,
            })
        }
    };
    check("ids", ids.len())?;
    if let Some(o) = offsets {
        check("offsets", o.len())?;
    }
    let aligned = buffers.iter().any(|b| b.align != 1);
    let mut out = String::from("id,lower,upper,size");
    if aligned {
        out.push_str(",alignment");
    }
    if offsets.is_some() {
        out.push_str(",offset");
    }
    out.push('\n');
    for (i, b) in buffers.iter().enumerate() {
        out.push_str(&format!("{},{},{},{}", ids[i], b.lower, b.upper, b.size));
        if aligned {
            out.push_str(&format!(",{}", b.align));
        }
        if let Some(o) = offsets {
            out.push_str(&format!(",{}", o[i]));
        }
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
