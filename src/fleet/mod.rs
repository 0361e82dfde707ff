//! Fleet preview (`skyhook-run plan --skyhook-cr CR --nodes NODES`, docs/fleet.md): the
//! packages of a Skyhook CR planned read-only on every node its `nodeSelectors` pick,
//! through each node's `skyhook-agent serve` (execution kind `package_plan`,
//! [`crate::serve::plan`]), nodes with the same plan grouped.
//!
//! - this file: the inputs. [`Cr`] (name, selector, packages in `dependsOn` order),
//!   [`Selector`] (a Kubernetes label selector, as the operator's
//!   `metav1.LabelSelectorAsSelector`: an empty one selects every node), [`load_nodes`]
//!   (a node list or `kubectl get nodes -o json`, addresses from a template), and
//!   [`package_body`] (a package directory as the `package` of a plan request);
//! - [`run`]: planning every node (bounded parallelism, a per-node timeout, a byte cap on
//!   each stream), grouping by canonical plan, the text and JSON outputs.

pub mod run;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Bad input: the file or field and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct InputError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong (and where in it).
    pub message: String,
}

fn input_err(path: &Path, message: impl Into<String>) -> InputError {
    InputError {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// One requirement of a label selector (`matchExpressions` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `In`: the label exists and its value is one of these.
    In(String, Vec<String>),
    /// `NotIn`: the label is absent or its value is none of these.
    NotIn(String, Vec<String>),
    /// `Exists`.
    Exists(String),
    /// `DoesNotExist`.
    DoesNotExist(String),
}

/// A Kubernetes label selector: every `matchLabels` pair and every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// `matchLabels`.
    pub labels: BTreeMap<String, String>,
    /// `matchExpressions`.
    pub requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector of `spec.nodeSelectors` (`None` or `{}`: every node), checked as
    /// `LabelSelectorAsSelector` checks it (`In`/`NotIn` need values, `Exists`/
    /// `DoesNotExist` take none, no other operator).
    ///
    /// # Errors
    /// What is wrong, with the field.
    pub fn parse(v: Option<&Value>) -> Result<Selector, String> {
        let mut s = Selector::default();
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(s);
        };
        let obj = v.as_object().ok_or("spec.nodeSelectors: not a mapping")?;
        for k in obj.keys() {
            if k != "matchLabels" && k != "matchExpressions" {
                return Err(format!("spec.nodeSelectors: unknown field {k:?}"));
            }
        }
        if let Some(ml) = obj.get("matchLabels").filter(|v| !v.is_null()) {
            let ml = ml
                .as_object()
                .ok_or("spec.nodeSelectors.matchLabels: not a mapping")?;
            for (k, v) in ml {
                let v = v
                    .as_str()
                    .ok_or_else(|| format!("spec.nodeSelectors.matchLabels.{k}: not a string"))?;
                s.labels.insert(k.clone(), v.to_string());
            }
        }
        if let Some(me) = obj.get("matchExpressions").filter(|v| !v.is_null()) {
            let me = me
                .as_array()
                .ok_or("spec.nodeSelectors.matchExpressions: not a list")?;
            for (i, e) in me.iter().enumerate() {
                let at = format!("spec.nodeSelectors.matchExpressions[{i}]");
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{at}.key: missing"))?
                    .to_string();
                let values: Vec<String> = match e.get("values") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|x| x.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("{at}.values: not a list of strings"))?,
                    Some(_) => return Err(format!("{at}.values: not a list")),
                };
                let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
                let r = match op {
                    "In" | "NotIn" if values.is_empty() => {
                        return Err(format!("{at}: operator {op} needs values"));
                    }
                    "Exists" | "DoesNotExist" if !values.is_empty() => {
                        return Err(format!("{at}: operator {op} takes no values"));
                    }
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::DoesNotExist(key),
                    _ => {
                        return Err(format!(
                            "{at}.operator: {op:?} (expected In, NotIn, Exists or DoesNotExist)"
                        ));
                    }
                };
                s.requirements.push(r);
            }
        }
        Ok(s)
    }

    /// True when `labels` satisfy every pair and requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.requirements.iter().all(|r| match r {
                Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Requirement::Exists(k) => labels.contains_key(k),
                Requirement::DoesNotExist(k) => !labels.contains_key(k),
            })
    }
}

/// One package of the CR.
#[derive(Debug, Clone)]
pub struct CrPackage {
    /// Its key in `spec.packages`.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `env` (`[{name, value}]`).
    pub env: Vec<(String, String)>,
    /// `configMap`: key to content (replaces the directory's configmaps/ file of that key).
    pub configmap: BTreeMap<String, String>,
    /// `dependsOn`: name to version.
    pub depends_on: BTreeMap<String, String>,
    /// The whole entry (its interrupts, sent with the plan).
    pub entry: Value,
}

/// A Skyhook CR, as far as a preview needs it.
#[derive(Debug, Clone)]
pub struct Cr {
    /// The file it was read from.
    pub path: PathBuf,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` and `metadata.generation` when present (the resource id's middle).
    pub uid: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<u64>,
    /// `spec.nodeSelectors`.
    pub selector: Selector,
    /// `spec.packages`, dependencies first (ties by name).
    pub packages: Vec<CrPackage>,
}

impl Cr {
    /// Read and check a Skyhook CR (YAML or JSON).
    ///
    /// # Errors
    /// Unreadable, not a Skyhook, a bad selector or package entry, a `dependsOn` naming a
    /// package the CR lacks or another version, a dependency cycle.
    pub fn load(path: &Path) -> Result<Cr, InputError> {
        let text = std::fs::read_to_string(path).map_err(|e| input_err(path, e.to_string()))?;
        let doc: Value = serde_yaml_ng::from_str(&text)
            .map_err(|e| input_err(path, format!("not a YAML document: {e}")))?;
        if doc.get("kind").and_then(Value::as_str) != Some("Skyhook") {
            return Err(input_err(path, "kind is not Skyhook"));
        }
        let meta = doc.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| input_err(path, "metadata.name: missing"))?
            .to_string();
        let spec = doc
            .get("spec")
            .ok_or_else(|| input_err(path, "spec: missing"))?;
        let selector =
            Selector::parse(spec.get("nodeSelectors")).map_err(|m| input_err(path, m))?;
        let pkgs = spec
            .get("packages")
            .and_then(Value::as_object)
            .ok_or_else(|| input_err(path, "spec.packages: missing or not a mapping"))?;
        let mut packages = Vec::new();
        for (pname, e) in pkgs {
            let at = |f: &str| format!("spec.packages.{pname}.{f}");
            let version = e
                .get("version")
                .and_then(Value::as_str)
                .ok_or_else(|| input_err(path, format!("{}: missing", at("version"))))?
                .to_string();
            let mut env = Vec::new();
            if let Some(list) = e.get("env").and_then(Value::as_array) {
                for (i, x) in list.iter().enumerate() {
                    let n = x.get("name").and_then(Value::as_str).ok_or_else(|| {
                        input_err(path, format!("{}[{i}].name: missing", at("env")))
                    })?;
                    let v = x.get("value").and_then(Value::as_str).unwrap_or("");
                    env.push((n.to_string(), v.to_string()));
                }
            }
            let mut configmap = BTreeMap::new();
            if let Some(cm) = e.get("configMap").and_then(Value::as_object) {
                for (k, v) in cm {
                    let v = v.as_str().ok_or_else(|| {
                        input_err(path, format!("{}.{k}: not a string", at("configMap")))
                    })?;
                    configmap.insert(k.clone(), v.to_string());
                }
            }
            let mut depends_on = BTreeMap::new();
            if let Some(d) = e.get("dependsOn").and_then(Value::as_object) {
                for (k, v) in d {
                    let v = v.as_str().filter(|v| !v.is_empty()).ok_or_else(|| {
                        input_err(path, format!("{}.{k}: version is empty", at("dependsOn")))
                    })?;
                    depends_on.insert(k.clone(), v.to_string());
                }
            }
            packages.push(CrPackage {
                name: pname.clone(),
                version,
                env,
                configmap,
                depends_on,
                entry: e.clone(),
            });
        }
        let packages = dependency_order(packages).map_err(|m| input_err(path, m))?;
        Ok(Cr {
            path: path.to_path_buf(),
            name,
            uid: meta
                .and_then(|m| m.get("uid"))
                .and_then(Value::as_str)
                .map(str::to_string),
            generation: meta
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_u64),
            selector,
            packages,
        })
    }

    /// The agent's `SKYHOOK_RESOURCE_ID` for `p`: `<name>-<uid>-<generation>_<pkg>_<version>`
    /// (`preview` and 1 when the CR file has no uid or generation).
    pub fn resource_id(&self, p: &CrPackage) -> String {
        format!(
            "{}-{}-{}_{}_{}",
            self.name,
            self.uid.as_deref().unwrap_or("preview"),
            self.generation.unwrap_or(1),
            p.name,
            p.version
        )
    }
}

/// `packages` with every package after the ones it depends on (ties by name).
fn dependency_order(mut packages: Vec<CrPackage>) -> Result<Vec<CrPackage>, String> {
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    for p in &packages {
        for (d, v) in &p.depends_on {
            match packages.iter().find(|q| &q.name == d) {
                None => {
                    return Err(format!(
                        "spec.packages.{}.dependsOn: {d} is not a package of this Skyhook",
                        p.name
                    ));
                }
                Some(q) if &q.version != v => {
                    return Err(format!(
                        "spec.packages.{}.dependsOn: {d} {v}, but the Skyhook has {d} {}",
                        p.name, q.version
                    ));
                }
                Some(_) => {}
            }
        }
    }
    let mut out: Vec<CrPackage> = Vec::new();
    while !packages.is_empty() {
        let Some(i) = packages.iter().position(|p| {
            p.depends_on
                .keys()
                .all(|d| out.iter().any(|o| &o.name == d))
        }) else {
            let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "spec.packages: dependsOn forms a cycle among {}",
                names.join(", ")
            ));
        };
        out.push(packages.remove(i));
    }
    Ok(out)
}

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
    let doc: Value = serde_yaml_ng::from_str(&text)
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
        if nodes.iter().any(|o| o.name == name) {
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

/// The package directory of `p`: `dirs[p.name]`, else beside the CR: `<cr dir>/<name>`,
/// `<cr dir>` itself or `<cr dir>/../<name>`, the first whose config.json names the
/// package (`package_name`).
///
/// # Errors
/// None of them holds the package.
pub fn package_dir(
    cr: &Cr,
    p: &CrPackage,
    dirs: &BTreeMap<String, PathBuf>,
) -> Result<PathBuf, InputError> {
    if let Some(d) = dirs.get(&p.name) {
        return Ok(d.clone());
    }
    let base = cr.path.parent().unwrap_or(Path::new("."));
    let base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    let candidates = [
        base.join(&p.name),
        base.to_path_buf(),
        base.join("..").join(&p.name),
    ];
    for c in &candidates {
        let named = std::fs::read(c.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| {
                v.get("package_name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
        if named.as_deref() == Some(p.name.as_str()) {
            return Ok(c.clone());
        }
    }
    Err(input_err(
        &cr.path,
        format!(
            "package {}: no directory given (--package {}=DIR) and none beside the CR ({})",
            p.name,
            p.name,
            candidates
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// The `package` of a plan request from directory `dir`: config.json, every regular file
/// under `skyhook_dir/` and `root_dir/` (text, or base64 when not UTF-8, with its mode),
/// `configmaps/` with the CR's `configMap` entries over it.
///
/// # Errors
/// config.json unreadable or not JSON; a symlink or special file in the package; an
/// unreadable file.
pub fn package_body(dir: &Path, p: &CrPackage) -> Result<Value, InputError> {
    use base64::Engine as _;
    use std::os::unix::fs::PermissionsExt;
    let cfg_path = dir.join("config.json");
    let bytes = std::fs::read(&cfg_path).map_err(|e| input_err(&cfg_path, e.to_string()))?;
    let config: Value = serde_json::from_slice(&bytes)
        .map_err(|e| input_err(&cfg_path, format!("not JSON: {e}")))?;
    let mut files = serde_json::Map::new();
    fn walk(
        dir: &Path,
        rel: &Path,
        out: &mut Vec<(PathBuf, PathBuf)>,
        depth: usize,
    ) -> Result<(), InputError> {
        let here = dir.join(rel);
        let Ok(rd) = std::fs::read_dir(&here) else {
            return Ok(());
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let r = rel.join(e.file_name());
            let t = e
                .file_type()
                .map_err(|x| input_err(&e.path(), x.to_string()))?;
            if t.is_dir() && depth < 32 {
                walk(dir, &r, out, depth + 1)?;
            } else if t.is_file() {
                out.push((r, e.path()));
            } else {
                return Err(input_err(
                    &e.path(),
                    "not a regular file or directory: a package sent for a plan holds only those",
                ));
            }
        }
        Ok(())
    }
    let mut found = Vec::new();
    for top in ["skyhook_dir", "root_dir"] {
        walk(dir, Path::new(top), &mut found, 0)?;
    }
    for (rel, full) in found {
        let bytes = std::fs::read(&full).map_err(|e| input_err(&full, e.to_string()))?;
        let mode = std::fs::metadata(&full)
            .map_err(|e| input_err(&full, e.to_string()))?
            .permissions()
            .mode()
            & 0o7777;
        let v = match String::from_utf8(bytes) {
            Ok(text) => json!({"text": text, "mode": mode}),
            Err(e) => {
                json!({"base64": base64::engine::general_purpose::STANDARD.encode(e.as_bytes()), "mode": mode})
            }
        };
        files.insert(rel.to_string_lossy().into_owned(), v);
    }
    let mut configmaps = serde_json::Map::new();
    let cm_dir = dir.join("configmaps");
    if let Ok(rd) = std::fs::read_dir(&cm_dir) {
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !e.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let text = std::fs::read_to_string(e.path())
                .map_err(|x| input_err(&e.path(), x.to_string()))?;
            configmaps.insert(name, text.into());
        }
    }
    for (k, v) in &p.configmap {
        configmaps.insert(k.clone(), v.clone().into());
    }
    Ok(json!({"config": config, "files": files, "configmaps": configmaps}))
}

#[cfg(test)]
mod tests;
