//! The `cardinal` binary.
fn main() {}
