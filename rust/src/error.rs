//! The one error type of the core. Every variant names the field (or id) and the offending
//! value, so a caller can tell exactly which input was refused. Errors are raised before any
//! state changes: a refused call leaves everything as it was.
//!
//! The Python bindings map `InvalidValue` to `ValueError` and `UnknownKey` to `KeyError`,
//! matching the pure-Python reference. (A call refused because of the current state — time
//! going back, a request not running — is an `InvalidValue` of the argument it concerns.)

use std::fmt;

/// Result of every fallible core call.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a core call refused its input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A value out of its domain: displays as "`{field}` must be `{reason}`, got `{value}`".
    InvalidValue {
        /// The argument (or argument and id) refused.
        field: String,
        /// The refused value, as the Python reference prints it.
        value: String,
        /// What the value must be ("in [1, 1024]", ">= 0", "finite").
        reason: String,
    },
    /// An id that is not tracked (a program, a group): displays as "unknown `{field}`: `{key}`".
    UnknownKey {
        /// The id's argument name.
        field: String,
        /// The id, as the Python reference prints it.
        key: String,
    },
}

impl Error {
    /// `field` must be `reason`, but is `value`.
    pub fn invalid(
        field: impl Into<String>,
        value: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        Error::InvalidValue {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// Same as [`Error::invalid`] for a float, formatted as Python's `repr` would
    /// (`nan`, `inf`, `-1.0`), so both backends' messages read alike.
    pub fn invalid_f64(field: impl Into<String>, value: f64, reason: impl Into<String>) -> Self {
        Error::invalid(field, PyFloat(value), reason)
    }

    /// `key` is not tracked under `field`.
    pub fn unknown(field: impl Into<String>, key: impl fmt::Display) -> Self {
        Error::UnknownKey {
            field: field.into(),
            key: key.to_string(),
        }
    }

    /// The field the error names.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::InvalidValue { field, .. } | Error::UnknownKey { field, .. } => Some(field),
        }
    }

    /// What an `InvalidValue`'s value must be (None for an unknown key).
    pub fn reason(&self) -> Option<&str> {
        match self {
            Error::InvalidValue { reason, .. } => Some(reason),
            Error::UnknownKey { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidValue {
                field,
                value,
                reason,
            } => write!(f, "{field} must be {reason}, got {value}"),
            Error::UnknownKey { field, key } => write!(f, "unknown {field}: {key}"),
        }
    }
}

impl std::error::Error for Error {}

/// A float displayed the way Python's `repr` displays it for the common cases.
pub(crate) struct PyFloat(pub f64);

impl fmt::Display for PyFloat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        if x.is_nan() {
            f.write_str("nan")
        } else if x.is_infinite() {
            f.write_str(if x > 0.0 { "inf" } else { "-inf" })
        } else {
            // Rust and Python switch to exponent notation at the same magnitudes (< 1e-4,
            // >= 1e16); Python writes the exponent signed and with at least two digits.
            let text = format!("{x:?}");
            match text.split_once('e') {
                None => f.write_str(&text),
                Some((mantissa, exp)) => {
                    let (sign, digits) = match exp.strip_prefix('-') {
                        Some(d) => ('-', d),
                        None => ('+', exp),
                    };
                    write!(f, "{mantissa}e{sign}{digits:0>2}")
                }
            }
        }
    }
}

/// A str displayed the way Python's `repr` displays it: quoted with `'` (or `"` when it holds
/// a `'` and no `"`), backslash escapes for quotes, `\\`, `\t`, `\n`, `\r` and other
/// non-printable characters. Exact for ASCII; for other characters Python's printable test
/// is approximated (controls, separators and the common format characters are escaped).
pub(crate) struct PyStr<'a>(pub &'a str);

impl fmt::Display for PyStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        let s = self.0;
        let quote = if s.contains('\'') && !s.contains('"') {
            '"'
        } else {
            '\''
        };
        f.write_char(quote)?;
        for c in s.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '\t' => f.write_str("\\t")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                c if c == quote => write!(f, "\\{c}")?,
                c if python_printable(c) => f.write_char(c)?,
                c if (c as u32) < 0x100 => write!(f, "\\x{:02x}", c as u32)?,
                c if (c as u32) < 0x10000 => write!(f, "\\u{:04x}", c as u32)?,
                c => write!(f, "\\U{:08x}", c as u32)?,
            }
        }
        f.write_char(quote)
    }
}

fn python_printable(c: char) -> bool {
    if c.is_ascii() {
        return (' '..='~').contains(&c);
    }
    let n = c as u32;
    let format_char = matches!(
        n,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
            | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
    );
    let private_use = matches!(n, 0xE000..=0xF8FF | 0xF0000..=0x10FFFF);
    !(c.is_control() || c.is_whitespace() || format_char || private_use)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_field_and_value() {
        let e = Error::invalid_f64("duration_s", f64::NAN, "finite");
        assert_eq!(e.to_string(), "duration_s must be finite, got nan");
        assert_eq!(e.field(), Some("duration_s"));
        let e = Error::invalid_f64("delay_s", -1.0, ">= 0");
        assert_eq!(e.to_string(), "delay_s must be >= 0, got -1.0");
        let e = Error::unknown("program_id", 7);
        assert_eq!(e.to_string(), "unknown program_id: 7");
        assert_eq!(
            Error::invalid_f64("x", f64::NEG_INFINITY, "finite").to_string(),
            "x must be finite, got -inf"
        );
    }

    #[test]
    fn floats_display_as_python_repr() {
        let r = |x: f64| PyFloat(x).to_string();
        assert_eq!(r(1.0), "1.0");
        assert_eq!(r(1e16), "1e+16");
        assert_eq!(r(1.5e-5), "1.5e-05");
        assert_eq!(r(-2.5e300), "-2.5e+300");
        assert_eq!(r(0.0001), "0.0001");
        assert_eq!(r(f64::MAX), "1.7976931348623157e+308");
    }

    #[test]
    fn strings_display_as_python_repr() {
        let r = |s: &str| PyStr(s).to_string();
        assert_eq!(r("r0"), "'r0'");
        assert_eq!(r("it's"), "\"it's\"");
        assert_eq!(r("'\""), "'\\'\"'");
        assert_eq!(r("a\\b\n\t\u{1}\u{7f}"), "'a\\\\b\\n\\t\\x01\\x7f'");
        assert_eq!(r("é✓😀"), "'é✓😀'");
        assert_eq!(r("\u{a0}\u{200b}"), "'\\xa0\\u200b'");
    }
}
