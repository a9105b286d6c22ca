//! Command-line flags shared by the `mnist` and `minilm` samples.

use tensormem::{Error, Result};

/// Flags common to both samples.
#[derive(Clone, Debug, PartialEq)]
pub struct CommonArgs {
    /// `--backend auto|host|vulkan|wgpu|cuda` (default `auto`).
    pub backend: String,
    /// `--json`: print one JSON object instead of text.
    pub json: bool,
    /// `--runs N`: timed repeated runs for the report (default 10, at least 1).
    pub runs: u32,
    /// Everything that is not a common flag, in order.
    pub rest: Vec<String>,
}

/// Splits the common flags off `args` (without the program name). `--backend=B` and
/// `--backend B` are both accepted; `--` ends flag parsing.
///
/// # Errors
/// [`Error::InvalidArgument`] for a flag missing its value or a bad number.
pub fn parse_common(args: impl IntoIterator<Item = String>) -> Result<CommonArgs> {
    let mut out = CommonArgs {
        backend: "auto".into(),
        json: false,
        runs: 10,
        rest: Vec::new(),
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = |name: &str| -> Result<String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| Error::invalid(format!("{name} needs a value")))
        };
        match flag.as_str() {
            "--backend" => out.backend = value("--backend")?,
            "--json" => out.json = true,
            "--runs" => {
                let v = value("--runs")?;
                out.runs = v.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    Error::invalid(format!("--runs {v:?}: expected a positive integer"))
                })?;
            }
            "--" => {
                out.rest.extend(it);
                break;
            }
            _ => out.rest.push(a),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
