//! The one error type of the core. Every variant names the field (or id) and the offending
//! value, so a caller can tell exactly which input was refused. Errors are raised before any
//! state changes: a refused call leaves everything as it was.
//!
//! The Python bindings map `InvalidValue` and `InvalidState` to `ValueError` and `UnknownKey`
//! to `KeyError`, matching the pure-Python reference.

use std::fmt;

/// Result of every fallible core call.
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A value out of its domain: displays as "`{field}` must be `{reason}`, got `{value}`".
    InvalidValue {
        field: String,
        value: String,
        reason: String,
    },
    /// An id that is not tracked (a program, a group): displays as "unknown `{field}`: `{key}`".
    UnknownKey { field: String, key: String },
    /// A call that is valid in itself but not in the current state.
    InvalidState { reason: String },
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

    pub fn unknown(field: impl Into<String>, key: impl fmt::Display) -> Self {
        Error::UnknownKey {
            field: field.into(),
            key: key.to_string(),
        }
    }

    /// The field an `InvalidValue` or `UnknownKey` error names.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::InvalidValue { field, .. } | Error::UnknownKey { field, .. } => Some(field),
            Error::InvalidState { .. } => None,
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
            Error::InvalidState { reason } => f.write_str(reason),
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
            write!(f, "{x:?}")
        }
    }
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
}
