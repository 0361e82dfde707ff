//! A Skyhook CR as far as a preview needs it: its name and resource id, its node selector,
//! its packages in `dependsOn` order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{InputError, input_err};
use super::selector::Selector;

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
