//! Files and formats: `fs::` (files, directories, lines and blocks, `realpath`, `copy_tree`, `extract`), the format-preserving
//! structured edits `toml::`, `json::`, `ini::` (sharing [`structured`]), the pure `text`
//! helpers (`sha256`, `regex::`), and the step's configMaps and node metadata (`config`).

pub mod archive;
pub mod config;
pub mod copy_tree;
pub mod fs;
pub mod ini;
pub mod json;
pub mod realpath;
pub mod structured;
pub mod text;
pub mod toml;

#[cfg(test)]
mod archive_attack_tests;
#[cfg(test)]
mod archive_tests;
#[cfg(test)]
mod archive_tree_tests;
#[cfg(test)]
pub(crate) mod config_script_tests;
#[cfg(test)]
mod copy_tree_tests;
#[cfg(test)]
pub(crate) mod fs_script_tests;
#[cfg(test)]
mod mkdir_tests;
#[cfg(test)]
pub(crate) mod structured_script_tests;
#[cfg(test)]
mod structured_tests;
