//! Program-level scheduling state (issue 3): filled in by the scheduler work.
