//! The package layer: the config.json model, the embedded JSON Schema v1 and the step rules
//! (agent contract section 5).
//!
//! [`load::parse`] turns config.json bytes into a [`Package`] (or a [`PackageError`] naming
//! the file); [`load::check_step_files`] applies rule 6 against the package's step root.

mod conform;
pub mod load;
pub mod model;
pub mod schema;

pub use load::{Loaded, PackageError, check_step_files, parse};
pub use model::{Mode, Package, ReturnCode, Step, UnknownMode};
