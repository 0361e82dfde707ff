//! The node list: a file of `{name, labels, address}` or `kubectl get nodes -o json`, each
//! node's `serve` address given or filled from a template.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::error::{InputError, input_err};

/// A node of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its `serve` URL (`https://HOST:PORT`, `http://...`, `unix:/...`).
    pub address: Option<String>,
}

/// `template` with `{name}`, `{InternalIP}`, `{ExternalIP}`, `{Hostname}` replaced (an
/// address kind the node lacks: `None`).
fn fill(template: &str, name: &str, addrs: &BTreeMap<String, String>) -> Option<String> {
    let mut out = template.replace("{name}", name);
    for kind in ["InternalIP", "ExternalIP", "Hostname"] {
        let key = format!("{{{kind}}}");
        if out.contains(&key) {
            out = out.replace(&key, addrs.get(kind)?);
        }
    }
    Some(out)
}

/// `text` read as YAML (JSON is YAML), by serde_json first when it looks like JSON: NODES
/// is mostly JSON (`kubectl get nodes -o json`, a generated list), which serde_json reads
/// many times faster than the YAML parser (a preview of 100 nodes starts 0.8 ms of CPU
/// sooner; one that excludes all of 5,000 nodes took 77 ms of CPU, now 15). What
/// serde_json refuses, and a `\uD800`–`\uDFFF` escape (a surrogate pair, which JSON takes
/// and the YAML parser refuses), goes to the YAML parser, whose answer or error stands:
/// every document reads as the YAML parser alone reads it.
fn parse_document(text: &str) -> Result<Value, serde_yaml_ng::Error> {
    let json = text.trim_start().starts_with(['[', '{'])
        && !memchr::memmem::find_iter(text.as_bytes(), b"\\u").any(|i| {
            let b = text.as_bytes();
            b.get(i + 2).is_some_and(|c| c.eq_ignore_ascii_case(&b'd'))
                && b.get(i + 3).is_some_and(|c| b"89abcdefABCDEF".contains(c))
        });
    if json && let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    serde_yaml_ng::from_str(text)
}

/// Read NODES: a YAML or JSON list of `{name, labels, address}` (or `{nodes: [...]}`), or
/// `kubectl get nodes -o json` output (`items`: `metadata.name`, `metadata.labels`,
/// `status.addresses`). A node without `address` gets `template` filled in
/// (`{name}`, `{InternalIP}`, `{ExternalIP}`, `{Hostname}`).
///
/// # Errors
/// Unreadable, not one of these shapes, a node without a name, a duplicate name, a node
/// without an address when no template gives one.
pub fn load_nodes(path: &Path, template: Option<&str>) -> Result<Vec<Node>, InputError> {
    let text = std::fs::read_to_string(path).map_err(|e| input_err(path, e.to_string()))?;
    let doc: Value = parse_document(&text)
        .map_err(|e| input_err(path, format!("not a YAML or JSON document: {e}")))?;
    let list = doc
        .get("items")
        .or_else(|| doc.get("nodes"))
        .unwrap_or(&doc)
        .as_array()
        .ok_or_else(|| {
            input_err(
                path,
                "expected a list of nodes, {nodes: [...]}, or `kubectl get nodes -o json` output",
            )
        })?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, n) in list.iter().enumerate() {
        let meta = n.get("metadata");
        let name = n
            .get("name")
            .or_else(|| meta.and_then(|m| m.get("name")))
            .and_then(Value::as_str)
            .ok_or_else(|| input_err(path, format!("node {i}: no name")))?
            .to_string();
        let labels_v = n
            .get("labels")
            .or_else(|| meta.and_then(|m| m.get("labels")));
        let mut labels = BTreeMap::new();
        if let Some(l) = labels_v.and_then(Value::as_object) {
            for (k, v) in l {
                let v = v.as_str().ok_or_else(|| {
                    input_err(path, format!("node {name}: label {k}: not a string"))
                })?;
                labels.insert(k.clone(), v.to_string());
            }
        }
        let mut addrs = BTreeMap::new();
        if let Some(a) = n
            .get("status")
            .and_then(|s| s.get("addresses"))
            .and_then(Value::as_array)
        {
            for x in a {
                if let (Some(t), Some(v)) = (
                    x.get("type").and_then(Value::as_str),
                    x.get("address").and_then(Value::as_str),
                ) {
                    addrs.entry(t.to_string()).or_insert_with(|| v.to_string());
                }
            }
        }
        let address = match n.get("address").and_then(Value::as_str) {
            Some(a) => Some(a.to_string()),
            None => template.and_then(|t| fill(t, &name, &addrs)),
        };
        if !names.insert(name.clone()) {
            return Err(input_err(path, format!("node {name} is listed twice")));
        }
        nodes.push(Node {
            name,
            labels,
            address,
        });
    }
    Ok(nodes)
}
