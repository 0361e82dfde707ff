//! Packages: `pkg::` queries, installs and removals ([`pkg`]), and package repositories and
//! holds ([`pkgrepo`]).

pub mod pkg;
pub mod pkgrepo;

#[cfg(test)]
mod pkgrepo_tests;
