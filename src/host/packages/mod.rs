//! Packages: `pkg::` queries, installs and removals ([`pkg`]), package repositories and
//! holds ([`pkgrepo`]), and version ordering ([`version`]).

pub mod pkg;
pub mod pkgrepo;
pub mod version;

#[cfg(test)]
pub(crate) mod pkg_script_tests;
#[cfg(test)]
mod pkgrepo_tests;
#[cfg(test)]
mod plan_attack_tests;
#[cfg(test)]
pub(crate) mod version_script_tests;
