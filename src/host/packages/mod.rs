//! Packages: `pkg::` queries, installs and removals ([`pkg`]), package repositories and
//! holds ([`pkgrepo`]), and version ordering ([`version`]).

pub mod pkg;
pub mod pkgrepo;
pub mod version;

#[cfg(test)]
mod pkgrepo_tests;
