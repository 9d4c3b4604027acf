//! The kernbench runtime.
