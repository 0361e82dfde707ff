//! Fleet preview (`skyhook-run plan --skyhook-cr CR --nodes NODES`, docs/fleet.md): the
//! packages of a Skyhook CR planned read-only on every node its `nodeSelectors` pick,
//! through each node's `skyhook-agent serve` (execution kind `package_plan`,
//! [`crate::serve::plan`]), nodes with the same plan grouped.
//!
//! The inputs, each in a file of its own:
//! - `cr.rs`: [`Cr`] (name, resource id, selector, packages in `dependsOn` order);
//! - `selector.rs`: [`Selector`] (a Kubernetes label selector, as the operator's
//!   `metav1.LabelSelectorAsSelector`: an empty one selects every node);
//! - `nodes.rs`: [`load_nodes`] (a node list or `kubectl get nodes -o json`, addresses from
//!   a template);
//! - `body.rs`: [`package_dir`] and [`package_body`] (a package directory as the `package`
//!   of a plan request);
//! - `error.rs`: [`InputError`] (the file and what is wrong);
//! - `tls.rs`: the TLS client configuration of a preview (serve's, with each certificate
//!   chain verified once and the SHA-256 suite first).
//!
//! And the preview itself:
//! - `answer.rs`: a node's exit event read for what the preview uses of it (failures,
//!   pending counts, rendered text), without building it as a JSON value;
//! - [`run`]: planning every node (bounded parallelism, a per-node timeout, a byte cap on
//!   each stream), grouping by canonical plan, the text and JSON outputs.

mod answer;
mod body;
mod cr;
mod error;
mod nodes;
pub mod run;
mod selector;
mod tls;

pub use body::{package_body, package_dir};
pub use cr::{Cr, CrPackage};
pub use error::InputError;
pub use nodes::{Node, load_nodes};
pub use selector::{Requirement, Selector};

#[cfg(test)]
mod tests;
