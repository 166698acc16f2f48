//! The `podpass` command.
fn main() {}
