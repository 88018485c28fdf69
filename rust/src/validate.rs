//! Input checks, mirroring `python/ttlpolicy/_validate.py`: the same domains, the same
//! messages, raised before any state changes. Types are Rust's business here; the bindings
//! turn wrong Python types into `TypeError` before these run.

use crate::error::{Error, Result};

/// Tool names come from model output: they are cut to this many code points.
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// `x`, refused unless finite.
pub fn finite(field: &str, x: f64) -> Result<f64> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(Error::invalid_f64(field, x, "finite"))
    }
}

/// `x`, refused unless finite and >= 0.
pub fn non_negative(field: &str, x: f64) -> Result<f64> {
    let x = finite(field, x)?;
    // `x < 0.0` (not `!(x >= 0.0)`): -0.0 is accepted, as in the reference.
    if x < 0.0 {
        Err(Error::invalid_f64(field, x, ">= 0"))
    } else {
        Ok(x)
    }
}

/// `x`, refused unless finite and > 0.
pub fn positive(field: &str, x: f64) -> Result<f64> {
    let x = finite(field, x)?;
    if x > 0.0 {
        Ok(x)
    } else {
        Err(Error::invalid_f64(field, x, "> 0"))
    }
}

/// `n`, refused outside [`low`, `high`].
pub fn int_in(field: &str, n: i64, low: i64, high: i64) -> Result<i64> {
    if (low..=high).contains(&n) {
        Ok(n)
    } else {
        Err(Error::invalid(field, n, format!("in [{low}, {high}]")))
    }
}

/// A tenant of tool names: at most [`MAX_ID_BYTES`](crate::scheduler::MAX_ID_BYTES) bytes,
/// `""` the shared one.
pub fn check_tenant(tenant: &str) -> Result<&str> {
    let max = crate::scheduler::MAX_ID_BYTES;
    if tenant.len() > max {
        return Err(Error::invalid(
            "tenant",
            format!("{} bytes", tenant.len()),
            format!("0 to {max} bytes of UTF-8"),
        ));
    }
    Ok(tenant)
}

/// An untrusted tool name cut to [`MAX_TOOL_NAME_CHARS`] code points. Borrowing, never
/// allocating: the hot path looks tools up with it. (Lone surrogates cannot occur in a Rust
/// `&str`; the bindings replace them with U+FFFD before calling in, like the reference.)
pub fn tool_key(tool: &str) -> &str {
    // ASCII fast path: one byte per code point.
    if tool.len() <= MAX_TOOL_NAME_CHARS {
        return tool;
    }
    match tool.char_indices().nth(MAX_TOOL_NAME_CHARS) {
        Some((cut, _)) => &tool[..cut],
        None => tool,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_domains() {
        assert!(finite("x", f64::NAN).is_err());
        assert!(finite("x", f64::INFINITY).is_err());
        assert_eq!(non_negative("x", -0.0).unwrap(), 0.0);
        assert!(non_negative("x", -1e-300).is_err());
        assert!(positive("x", 0.0).is_err());
        assert_eq!(positive("x", 1e-300).unwrap(), 1e-300);
    }

    #[test]
    fn int_range_message() {
        let e = int_in("window", 0, 1, 10).unwrap_err();
        assert_eq!(e.to_string(), "window must be in [1, 10], got 0");
        assert_eq!(int_in("window", 10, 1, 10).unwrap(), 10);
    }

    #[test]
    fn tool_names_are_cut_to_code_points() {
        let long = "é".repeat(300);
        let key = tool_key(&long);
        assert_eq!(key.chars().count(), MAX_TOOL_NAME_CHARS);
        assert_eq!(tool_key("short"), "short");
        let ascii = "a".repeat(129);
        assert_eq!(tool_key(&ascii).len(), 128);
        // 128 two-byte chars: 256 bytes but exactly the limit, kept whole.
        let exact = "é".repeat(128);
        assert_eq!(tool_key(&exact), exact);
    }
}
