//! Interrupts a step *requests* (`interrupt::reboot()`, `interrupt::restart_services(..)`,
//! `interrupt::restart_all_services()`) against what the operator will do.
//!
//! A step never interrupts the node itself: the operator cordons and drains a node only for
//! packages whose Skyhook CR declares an `interrupt` (or `configInterrupts`), and runs it in
//! its interrupt stage. So after a step that requested interrupts succeeded, the agent looks
//! the package up in the node metadata the operator mounts
//! (`<copy dir>/node-metadata/packages.json`) — or, for `skyhook-run`, in a Skyhook CR given
//! with `--skyhook-cr` — and for each request:
//!
//! - **covered** (the CR declares that interrupt, a reboot, or a config interrupt that does):
//!   one line saying the operator runs it in its interrupt stage;
//! - **not covered**: the step fails with the CR lines to add, nothing is interrupted;
//! - **no node metadata** (an older operator, a local run): a warning.
//!
//! A requested reboot that is covered (or cannot be judged) is recorded with the boot id at
//! the time (`<state root>/interrupts/requested/<package>.reboot`); `post-interrupt-check`
//! fails while the node still runs that boot id ("the requested reboot has not happened"),
//! and removes the record once the checks pass on a new boot.
//!
//! The package is looked up by the names in [`lookup_names`]: the name the Skyhook CR gives it
//! (the operator keys its node metadata by `spec.packages.<name>`, and that name is the middle
//! field of `SKYHOOK_RESOURCE_ID`), then config.json's `package_name`; `-` and `_` are the
//! same character when no name matches exactly and one entry matches that way.
//!
//! Accepted shapes of `packages.json` (the operator's node metadata): `{"<name>": ENTRY}`, `{"packages": {"<name>": ENTRY}}` or
//! `[{"name": "<name>", ...ENTRY}]`. ENTRY (and a CR's `spec.packages.<name>`) may hold
//! `interrupt: {type, services}` and `configInterrupts: {<configMap key>: {type, services}}`,
//! with `type` one of `reboot`, `service`, `restartAllServices`, `noop` (the CR's names) or
//! the agent's payload names (`node_restart`, `service_restart`, `restart_all_services`,
//! `no_op`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::host::effects::effect::InterruptRequest;
use crate::host::root::HostRoot;

/// One interrupt the CR declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declared {
    /// `type: reboot`.
    Reboot,
    /// `type: service` with these units.
    Services(Vec<String>),
    /// `type: restartAllServices`.
    RestartAllServices,
    /// `type: noop`, or a type this agent does not know.
    Other(String),
}

impl Declared {
    fn from_value(v: &Value) -> Option<Declared> {
        let t = v.get("type")?.as_str()?;
        Some(match t {
            "reboot" | "node_restart" => Declared::Reboot,
            "service" | "service_restart" => Declared::Services(
                v.get("services")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            "restartAllServices" | "restart_all_services" => Declared::RestartAllServices,
            other => Declared::Other(other.to_string()),
        })
    }

    fn covers(&self, request: &InterruptRequest) -> bool {
        match (self, request) {
            // A reboot restarts every service too.
            (Declared::Reboot, _) => true,
            (Declared::RestartAllServices, InterruptRequest::RestartServices { .. })
            | (Declared::RestartAllServices, InterruptRequest::RestartAllServices) => true,
            (Declared::Services(have), InterruptRequest::RestartServices { services }) => {
                services.iter().all(|s| {
                    have.iter().any(|h| {
                        h == s || h.trim_end_matches(".service") == s.trim_end_matches(".service")
                    })
                })
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Declared::Reboot => "type: reboot".into(),
            Declared::Services(s) => format!("type: service, services: [{}]", s.join(", ")),
            Declared::RestartAllServices => "type: restartAllServices".into(),
            Declared::Other(t) => format!("type: {t}"),
        }
    }
}

/// What the package's Skyhook CR declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeclaredInterrupts {
    /// `interrupt`.
    pub interrupt: Option<Declared>,
    /// `configInterrupts`, by configMap key.
    pub config: Vec<(String, Declared)>,
}

impl DeclaredInterrupts {
    fn from_entry(entry: &Value) -> DeclaredInterrupts {
        DeclaredInterrupts {
            interrupt: entry.get("interrupt").and_then(Declared::from_value),
            config: entry
                .get("configInterrupts")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Declared::from_value(v).map(|d| (k.clone(), d)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The package's entry of a node metadata `packages.json` document (see the module docs
    /// for the shapes and how `names` are tried); `None` when the package is not listed
    /// (nothing declared: every request is uncovered).
    pub fn from_packages_json(doc: &Value, names: &[String]) -> Option<DeclaredInterrupts> {
        let entries: Vec<(&str, &Value)> = match doc {
            Value::Array(items) => items
                .iter()
                .filter_map(|e| Some((e.get("name")?.as_str()?, e)))
                .collect(),
            Value::Object(m) => match m.get("packages").and_then(Value::as_object) {
                Some(p) => p.iter().map(|(k, v)| (k.as_str(), v)).collect(),
                None => m.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            },
            _ => Vec::new(),
        };
        let entry = find_entry(&entries, names)?;
        Some(DeclaredInterrupts::from_entry(entry))
    }

    /// The package's `spec.packages.<name>` of a Skyhook CR, parsed from YAML or JSON
    /// (`names` tried as the module docs say).
    ///
    /// # Errors
    /// Not YAML, or no such package in the CR (the message lists the CR's packages).
    pub fn from_cr(text: &str, names: &[String]) -> Result<DeclaredInterrupts, String> {
        let doc: Value =
            serde_yaml_ng::from_str(text).map_err(|e| format!("not a YAML document: {e}"))?;
        let entries: Vec<(&str, &Value)> = doc
            .get("spec")
            .and_then(|s| s.get("packages"))
            .and_then(Value::as_object)
            .map(|p| p.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default();
        let entry = find_entry(&entries, names).ok_or_else(|| {
            let have: Vec<&str> = entries.iter().map(|(k, _)| *k).collect();
            format!(
                "the CR has no spec.packages.{} (it has: {}); name the CR's package with SKYHOOK_RESOURCE_ID=<id>_<CR package name>_<version>",
                names.first().map_or("", String::as_str),
                if have.is_empty() { "none".to_string() } else { have.join(", ") }
            )
        })?;
        Ok(DeclaredInterrupts::from_entry(entry))
    }

    /// How (and whether) `request` is covered: the declaration that covers it.
    pub fn covering(&self, request: &InterruptRequest) -> Option<String> {
        if let Some(d) = &self.interrupt
            && d.covers(request)
        {
            return Some(format!("interrupt ({})", d.describe()));
        }
        self.config
            .iter()
            .find(|(_, d)| d.covers(request))
            .map(|(k, d)| format!("configInterrupts.{k} ({})", d.describe()))
    }
}

/// The names a package is looked up by in the CR and node metadata, in order: the middle
/// field of `resource_id` (`<id>_<CR package name>_<version>`, how the operator names it),
/// then `package_name` (config.json's), once each.
pub fn lookup_names(resource_id: &str, package_name: &str) -> Vec<String> {
    let mut names = Vec::new();
    if let (Some(first), Some(last)) = (resource_id.find('_'), resource_id.rfind('_'))
        && first < last
    {
        names.push(resource_id[first + 1..last].to_string());
    }
    if !names.iter().any(|n| n == package_name) {
        names.push(package_name.to_string());
    }
    names
}

/// The entry of the first of `names` among `entries`; else the one entry whose key equals a
/// name with `-` and `_` taken as the same character.
fn find_entry<'v>(entries: &[(&str, &'v Value)], names: &[String]) -> Option<&'v Value> {
    for n in names {
        if let Some((_, v)) = entries.iter().find(|(k, _)| k == n) {
            return Some(v);
        }
    }
    let fold = |s: &str| s.replace('_', "-");
    let loose: Vec<&Value> = entries
        .iter()
        .filter(|(k, _)| names.iter().any(|n| fold(n) == fold(k)))
        .map(|(_, v)| *v)
        .collect();
    match loose.as_slice() {
        [one] => Some(one),
        _ => None,
    }
}

/// The CR lines that would cover `request`, for the failure message.
pub fn cr_lines(request: &InterruptRequest) -> String {
    match request {
        InterruptRequest::Reboot => "interrupt: {type: reboot}".into(),
        InterruptRequest::RestartServices { services } => {
            format!(
                "interrupt: {{type: service, services: [{}]}}",
                services.join(", ")
            )
        }
        InterruptRequest::RestartAllServices => "interrupt: {type: restartAllServices}".into(),
    }
}

/// The request's name in messages (`reboot`, `restart_services [a, b]`, ...).
pub fn request_name(request: &InterruptRequest) -> String {
    match request {
        InterruptRequest::Reboot => "reboot".into(),
        InterruptRequest::RestartServices { services } => {
            format!("restart_services [{}]", services.join(", "))
        }
        InterruptRequest::RestartAllServices => "restart_all_services".into(),
    }
}

/// Where the agent learns what the CR declares.
#[derive(Debug, Clone)]
pub enum Declarations {
    /// Read (or given): the package's entry, `None` when the package is not listed.
    Known(Option<DeclaredInterrupts>),
    /// No node metadata (an older operator, a local run): requests are not judged.
    Unknown,
}

impl Declarations {
    /// Read `<copy dir>/node-metadata/packages.json` under `root` for the package known by
    /// `names` ([`lookup_names`]).
    ///
    /// # Errors
    /// The file exists but cannot be read or is not JSON (the message names it).
    pub fn from_node_metadata(
        root: &HostRoot,
        copy_dir: &Path,
        names: &[String],
    ) -> Result<Declarations, String> {
        let path = copy_dir.join("node-metadata").join("packages.json");
        let bytes = match root.read_opt(&path) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Declarations::Unknown),
            Err(e) => return Err(crate::chain::render(&e)),
        };
        Declarations::from_packages_json_bytes(&bytes, names)
            .map_err(|e| format!("{}: {e}", root.display_path(&path).display()))
    }

    /// The declarations of the package known by `names` from the bytes of a `packages.json`.
    ///
    /// # Errors
    /// `not JSON: ...` when the bytes do not parse.
    pub fn from_packages_json_bytes(
        bytes: &[u8],
        names: &[String],
    ) -> Result<Declarations, String> {
        let doc: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        Ok(Declarations::Known(DeclaredInterrupts::from_packages_json(
            &doc, names,
        )))
    }
}

/// `<state root>/interrupts/requested/<package>.reboot`: the boot id when a step requested a
/// reboot.
pub fn reboot_record(state_root: &Path, package: &str) -> PathBuf {
    state_root
        .join("interrupts")
        .join("requested")
        .join(format!("{package}.reboot"))
}

/// The running boot id (`/proc/sys/kernel/random/boot_id` under the root), if readable.
pub fn boot_id(root: &HostRoot) -> Option<String> {
    root.read_opt(Path::new("/proc/sys/kernel/random/boot_id"))
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn services(s: &[&str]) -> InterruptRequest {
        InterruptRequest::RestartServices {
            services: s.iter().map(|x| x.to_string()).collect(),
        }
    }

    #[test]
    fn coverage_rules() {
        let reboot = DeclaredInterrupts {
            interrupt: Some(Declared::Reboot),
            config: vec![],
        };
        assert!(reboot.covering(&InterruptRequest::Reboot).is_some());
        assert!(reboot.covering(&services(&["containerd"])).is_some());
        let svc = DeclaredInterrupts {
            interrupt: Some(Declared::Services(vec!["containerd.service".into()])),
            config: vec![("sysctl.conf".into(), Declared::Reboot)],
        };
        assert_eq!(
            svc.covering(&services(&["containerd"])).unwrap(),
            "interrupt (type: service, services: [containerd.service])"
        );
        assert!(
            svc.covering(&services(&["containerd", "kubelet"]))
                .is_some(),
            "the config reboot covers it"
        );
        let none = DeclaredInterrupts::default();
        assert!(none.covering(&InterruptRequest::Reboot).is_none());
        assert_eq!(
            cr_lines(&services(&["a", "b"])),
            "interrupt: {type: service, services: [a, b]}"
        );
    }

    /// The example of docs/agent.md ("Declared interrupts") parses and covers what the text
    /// beside it says.
    #[test]
    fn agent_md_packages_json_example() {
        let doc = include_str!("../../docs/agent.md");
        let section = doc
            .split_once("### Declared interrupts: the node metadata `packages.json`")
            .expect("the section")
            .1;
        let json = section
            .split_once("```json\n")
            .and_then(|(_, rest)| rest.split_once("```"))
            .expect("a json block")
            .0;
        let Declarations::Known(Some(d)) =
            Declarations::from_packages_json_bytes(json.as_bytes(), &["tuning".into()]).unwrap()
        else {
            panic!("tuning is not in the example");
        };
        assert_eq!(
            d.covering(&services(&["containerd"])).as_deref(),
            Some("interrupt (type: service, services: [containerd])")
        );
        for request in [InterruptRequest::Reboot, services(&["kubelet"])] {
            assert_eq!(
                d.covering(&request).as_deref(),
                Some("configInterrupts.grub.conf (type: reboot)")
            );
        }
        let without = DeclaredInterrupts {
            config: Vec::new(),
            ..d
        };
        assert!(without.covering(&InterruptRequest::Reboot).is_none());
        assert_eq!(
            cr_lines(&services(&["kubelet"])),
            "interrupt: {type: service, services: [kubelet]}"
        );
    }

    #[test]
    fn packages_json_shapes_and_cr() {
        let entry = json!({"interrupt": {"type": "reboot"}});
        for doc in [
            json!({"tuning": entry}),
            json!({"packages": {"tuning": entry}}),
            json!([{"name": "tuning", "interrupt": {"type": "reboot"}}]),
        ] {
            let d = DeclaredInterrupts::from_packages_json(&doc, &["tuning".into()]).unwrap();
            assert_eq!(d.interrupt, Some(Declared::Reboot), "{doc}");
            assert!(DeclaredInterrupts::from_packages_json(&doc, &["other".into()]).is_none());
        }
        let cr = "apiVersion: skyhook.nvidia.com/v1alpha1\nkind: Skyhook\nspec:\n  packages:\n    tuning:\n      version: 1.0.0\n      configInterrupts:\n        grub.conf:\n          type: reboot\n";
        let d = DeclaredInterrupts::from_cr(cr, &["tuning".into()]).unwrap();
        assert_eq!(d.config, vec![("grub.conf".to_string(), Declared::Reboot)]);
        assert_eq!(
            DeclaredInterrupts::from_cr(cr, &["kdump".into()]).unwrap_err(),
            "the CR has no spec.packages.kdump (it has: tuning); name the CR's package with SKYHOOK_RESOURCE_ID=<id>_<CR package name>_<version>"
        );
    }

    /// The operator keys its node metadata by the CR's package name, which is the middle
    /// field of `SKYHOOK_RESOURCE_ID` and may differ from config.json's `package_name`
    /// (nvidia-setup's CR has `nvidia-setup-kernel` and `nvidia-setup-full`, both
    /// `nvidia_setup`). The package used to be looked up by `package_name` only, so every
    /// request of such a package was refused as undeclared.
    #[test]
    fn the_package_is_found_by_its_cr_name_first() {
        let names = lookup_names("uid-1_nvidia-setup-kernel_0.2.1", "nvidia_setup");
        assert_eq!(names, vec!["nvidia-setup-kernel", "nvidia_setup"]);
        assert_eq!(lookup_names("uid_tuning_1.0", "tuning"), vec!["tuning"]);
        assert_eq!(lookup_names("noid", "tuning"), vec!["tuning"]);
        // The operator's SkyhookMetadata, as skyhook_metadata.go marshals it.
        let doc = json!({"agentVersion": "v6.3.0", "packages": {
            "nvidia-setup-kernel": {"name": "nvidia-setup-kernel", "version": "0.2.1",
                                    "interrupt": {"type": "reboot"}},
            "nvidia-setup-full": {"name": "nvidia-setup-full", "version": "0.2.1"},
        }});
        let d = DeclaredInterrupts::from_packages_json(&doc, &names).unwrap();
        assert_eq!(d.interrupt, Some(Declared::Reboot));
        let full = lookup_names("uid-1_nvidia-setup-full_0.2.1", "nvidia_setup");
        let d = DeclaredInterrupts::from_packages_json(&doc, &full).unwrap();
        assert_eq!(d.interrupt, None);
        // Without a resource id naming it, `-` and `_` are one character when one entry
        // matches that way; two that do are ambiguous.
        let cr = "spec:\n  packages:\n    nvidia-tuned:\n      interrupt: {type: reboot}\n";
        let d = DeclaredInterrupts::from_cr(
            cr,
            &lookup_names("skyhook-run_nvidia_tuned_0.2.3", "nvidia_tuned"),
        )
        .unwrap();
        assert_eq!(d.interrupt, Some(Declared::Reboot));
        let two = "spec:\n  packages:\n    a-b: {}\n    a_b: {}\n";
        assert!(DeclaredInterrupts::from_cr(two, &["a.b".into()]).is_err());
        assert!(DeclaredInterrupts::from_cr(two, &["a_b".into()]).is_ok());
        let loose = json!({"packages": {"a-b": {}, "a_b": {}}});
        assert!(DeclaredInterrupts::from_packages_json(&loose, &["a-b-c".into()]).is_none());
        let err = DeclaredInterrupts::from_cr(
            "spec:\n  packages:\n    nvidia-setup-kernel: {}\n    nvidia-setup-full: {}\n",
            &lookup_names("skyhook-run_nvidia_setup_0.2.1", "nvidia_setup"),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "the CR has no spec.packages.nvidia_setup (it has: nvidia-setup-kernel, nvidia-setup-full); name the CR's package with SKYHOOK_RESOURCE_ID=<id>_<CR package name>_<version>"
        );
    }
}
