//! Placeholder: being written.
pub mod joint;
