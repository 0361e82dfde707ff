//! `config::` (configMaps) and `node::` (node metadata) over [`crate::host::config`]: each
//! function's reference row and binding, and their tests through Rhai.

use rhai::ImmutableString as S;

use super::convert;
use super::docs::Effects::*;
use super::docs::{FnDoc, NAME};
use crate::host::config;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "config",
        "configMaps — `config::`",
        "Files under `SKYHOOK_DIR/configmaps/` (for `skyhook-run`, the `--configmaps` folder). Names starting with `.` are never listed. Like files under the host root, a configMap, node metadata file or secret is read only when it is a regular file of at most 64 MiB.",
    ),
    (
        "node",
        "Node metadata — `node::`",
        "From the operator's `SKYHOOK_DIR/node-metadata/` JSON files.",
    ),
];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "config",
        "has",
        &[NAME],
        "bool",
        ReadsAgent,
        "True when the configMap exists.",
        |h, n: S| Ok(config::has(h, &n)?)
    ),
    host_fn!(
        "config",
        "get",
        &[NAME],
        "?",
        ReadsAgent,
        "The configMap's text, or `()`; a configMap that is not UTF-8 text (binary) is an error naming it (`config::has` still sees it).",
        |h, n: S| Ok(convert::opt(config::get(h, &n)?))
    ),
    host_fn!(
        "config",
        "names",
        &[],
        "Array",
        ReadsAgent,
        "Sorted configMap names.",
        |h| Ok(convert::array(config::names(h)?))
    ),
    host_fn!(
        "config",
        "lines",
        &[NAME],
        "Array",
        ReadsAgent,
        "Lines, trimmed, without blank lines and `#` comments; an error when missing.",
        |h, n: S| Ok(convert::array(config::lines(h, &n)?))
    ),
    host_fn!(
        "config",
        "kv",
        &[NAME],
        "Map",
        ReadsAgent,
        "A map from `key=value` lines; a malformed line is an error naming the configMap and line number.",
        |h, n: S| Ok(convert::map(config::kv(h, &n)?))
    ),
    host_fn!(
        "node",
        "labels",
        &[],
        "Map",
        ReadsAgent,
        "The node's labels (empty when unknown).",
        |h| Ok(convert::json_map(config::labels(h)?))
    ),
    host_fn!(
        "node",
        "annotations",
        &[],
        "Map",
        ReadsAgent,
        "The node's annotations (empty when unknown).",
        |h| Ok(convert::json_map(config::annotations(h)?))
    ),
    host_fn!(
        "node",
        "packages",
        &[],
        "Map",
        ReadsAgent,
        "The operator's packages map for the node (empty when unknown).",
        |h| Ok(convert::json_map(config::packages(h)?))
    ),
];

#[cfg(test)]
pub(super) mod tests {
    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"config::has("a")"#,
        r#"config::get("a")"#,
        r#"config::names()"#,
        r#"config::lines("a")"#,
        r#"config::kv("a")"#,
        r#"node::labels()"#,
        r#"node::annotations()"#,
        r#"node::packages()"#,
    ];
}
