//! Request traces in the Azure LLM inference format: a header `TIMESTAMP,ContextTokens,
//! GeneratedTokens`, then one request a line (`2023-11-16 18:17:03.9799600,4808,10`).

use std::path::Path;

use tensormem::{Error, Result};

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    /// Seconds after the trace's first request.
    pub arrival_s: f64,
    /// Prompt tokens.
    pub prompt: usize,
    /// Tokens to generate (at least 1).
    pub generate: usize,
}

/// Reads a trace file, the first `limit` requests when given.
///
/// # Errors
/// [`Error::Io`] for an unreadable file, [`Error::Malformed`] naming the line of a bad header,
/// timestamp or count, or a file without requests.
pub fn read(path: &Path, limit: Option<usize>) -> Result<Vec<Request>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string(), limit)
}

/// Parses trace text; `name` labels errors.
///
/// # Errors
/// As [`read`].
pub fn parse(text: &str, name: &str, limit: Option<usize>) -> Result<Vec<Request>> {
    let bad = |line: usize, message: String| Error::Malformed {
        source_name: name.to_string(),
        line,
        message,
    };
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or("");
    if header != "TIMESTAMP,ContextTokens,GeneratedTokens" {
        return Err(bad(
            1,
            format!(
                "expected the header `TIMESTAMP,ContextTokens,GeneratedTokens`, found `{header}`"
            ),
        ));
    }
    let mut out = Vec::new();
    let mut first = None;
    for (i, line) in lines {
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        let [ts, ctx, generated] = fields[..] else {
            return Err(bad(
                i + 1,
                format!("expected 3 fields, found {}", fields.len()),
            ));
        };
        let t = seconds(ts).ok_or_else(|| bad(i + 1, format!("bad timestamp `{ts}`")))?;
        let count = |s: &str, what: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0 && n <= 1 << 24)
                .ok_or_else(|| {
                    bad(
                        i + 1,
                        format!("{what} `{s}` is not a count in 1..=16777216"),
                    )
                })
        };
        let prompt = count(ctx, "ContextTokens")?;
        let generate = count(generated, "GeneratedTokens")?;
        let t0 = *first.get_or_insert(t);
        if t < t0 {
            return Err(bad(
                i + 1,
                format!("timestamp `{ts}` is before the first request"),
            ));
        }
        out.push(Request {
            arrival_s: t - t0,
            prompt,
            generate,
        });
    }
    if out.is_empty() {
        return Err(bad(0, "no requests".into()));
    }
    Ok(out)
}

/// Seconds since 1970 of `YYYY-MM-DD hh:mm:ss[.fraction]` (UTC, proleptic Gregorian).
fn seconds(ts: &str) -> Option<f64> {
    let (date, time) = ts.trim().split_once(' ')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || d.next().is_some() {
        return None;
    }
    let mut t = time.split(':');
    let (h, mi, s) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    if !(0..24).contains(&h) || !(0..60).contains(&mi) || !(0.0..61.0).contains(&s) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60) as f64 + s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_parses_and_bad_lines_are_named() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:17:03.5,4808,10\n2023-11-16 18:17:04.0,110,27\n";
        let r = parse(text, "t.csv", None).unwrap();
        assert_eq!(r.len(), 2);
        assert!((r[1].arrival_s - 0.5).abs() < 1e-9);
        assert_eq!((r[0].prompt, r[0].generate), (4808, 10));
        assert_eq!(parse(text, "t.csv", Some(1)).unwrap().len(), 1);
        let err = parse(
            "TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,2\n",
            "t.csv",
            None,
        );
        assert!(
            err.unwrap_err()
                .to_string()
                .starts_with("t.csv:2: bad timestamp")
        );
        let err = parse(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,0,2\n",
            "t.csv",
            None,
        );
        assert!(err.unwrap_err().to_string().contains("ContextTokens `0`"));
        assert!(parse("a,b\n", "t.csv", None).is_err());
        assert!(parse("TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv", None).is_err());
    }

    #[test]
    fn midnight_crossings_count_whole_days() {
        let a = seconds("2023-12-31 23:59:59").unwrap();
        let b = seconds("2024-01-01 00:00:01").unwrap();
        assert_eq!(b - a, 2.0);
        assert_eq!(seconds("1970-01-01 00:00:00"), Some(0.0));
    }
}
