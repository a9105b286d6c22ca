//! Checks that turn numbers no model should produce into errors: a NaN or infinity in weights
//! or outputs means broken weights, an overflow, or a faulty device, and printing it (JSON has no
//! NaN, so it became `null`) would hide that.

use tensormem::{Error, Result};

/// Fails on the first NaN or infinity in `values`, naming `what`, the row (`row_len` values per
/// row; 0 for one flat row) and the column.
///
/// # Errors
/// [`Error::Malformed`] naming the first non-finite value.
pub fn finite(what: &str, values: &[f32], row_len: usize) -> Result<()> {
    let Some(i) = values.iter().position(|v| !v.is_finite()) else {
        return Ok(());
    };
    let at = match (i.checked_div(row_len), i.checked_rem(row_len)) {
        (Some(row), Some(col)) => format!("row {row}, column {col}"),
        _ => format!("value {i}"),
    };
    Err(Error::Malformed {
        source_name: what.to_string(),
        line: 0,
        message: format!(
            "{at} is {}: the weights or the device produced a non-number",
            values[i]
        ),
    })
}

#[cfg(test)]
mod tests;
