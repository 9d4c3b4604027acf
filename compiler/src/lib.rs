//! The `tl` front end: syntax, checking and diagnostics.
//!
//! `source → syntax::parse → sema::check → (typed, specialized kernels)`.
//! See `docs/architecture.md` for the map of the whole pipeline.
//!
//! **Architecture invariant:** this crate knows nothing of the runtime or the
//! simulated machine; it turns text into checked programs and diagnostics.

pub mod datapath;
pub mod diag;
pub mod ir;
pub mod sema;
pub mod span;
pub mod syntax;
pub mod text;
