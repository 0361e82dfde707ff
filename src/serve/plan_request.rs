//! The request of a `package_plan` execution (docs/fleet.md, [`super::plan`]): its body
//! ([`PlanRequest`]: one package, or a chain of packages in `dependsOn` order), the checks
//! and caps that make it a [`PlanJob`] (else a [`PlanRefusal`]: 400, 403 or 413), and the
//! job's unpacking into a private directory of the server.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::plan_limits::{PlanLimits, PlanPermit};
use crate::package::Mode;
use crate::process::sandbox;

/// The most bytes a package plan may carry: config.json, every file and configMap, decoded.
pub const MAX_PACKAGE_BYTES: usize = 3 << 20;
/// The most files (files plus configMaps) a package plan may carry.
pub const MAX_PACKAGE_FILES: usize = 2000;

/// The `kind` of a package plan.
pub const KIND: &str = "package_plan";

/// A file of the package: its text, or `{"text"|"base64", "mode"}` (mode: permission bits,
/// default 0644, 0755 for `skyhook_dir/` files).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FileBody {
    /// UTF-8 content.
    Text(String),
    /// Content as text or base64, with permission bits.
    Full {
        /// UTF-8 content.
        #[serde(default)]
        text: Option<String>,
        /// Base64 content (standard alphabet, padded).
        #[serde(default)]
        base64: Option<String>,
        /// Permission bits (e.g. 493 for 0755).
        #[serde(default)]
        mode: Option<u32>,
    },
}

/// The package of a plan request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageBody {
    /// config.json (the object).
    pub config: Value,
    /// Files by package-relative path, each under `skyhook_dir/` or `root_dir/`.
    #[serde(default)]
    pub files: BTreeMap<String, FileBody>,
    /// configMaps: key (a file name) to content.
    #[serde(default)]
    pub configmaps: BTreeMap<String, String>,
}

/// One package of a chain (`packages` of a [`PlanRequest`]): the package, its environment
/// and its entry of the Skyhook CR, as the single form's `package`, `env` and `skyhook_cr`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainEntry {
    /// The package.
    pub package: PackageBody,
    /// The package's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The Skyhook CR or the package's entry of it.
    #[serde(default)]
    pub skyhook_cr: Option<Value>,
}

/// The most packages one chain (`packages`) may carry.
pub const MAX_CHAIN_PACKAGES: usize = 16;

/// The body of a `package_plan` start (unknown fields refused). Either one package
/// (`package`, `env`, `skyhook_cr`) or a chain (`packages`, in `dependsOn` order): each
/// package of a chain, and each mode of a package, is planned against the node as the
/// earlier ones would leave it ([`crate::local::PackageRun::plan_carried`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// `[A-Za-z0-9._-]{1,128}`.
    pub id: String,
    /// `package_plan`.
    pub kind: String,
    /// The package (the single form).
    #[serde(default)]
    pub package: Option<PackageBody>,
    /// The packages in order (the chain form; at most [`MAX_CHAIN_PACKAGES`]; the size
    /// caps count every package together).
    #[serde(default)]
    pub packages: Vec<ChainEntry>,
    /// The modes to plan, in order (default `["apply"]`; `interrupt` is the operator's).
    #[serde(default)]
    pub modes: Vec<String>,
    /// The package's environment (the agent's: `SKYHOOK_RESOURCE_ID`, the CR's `env`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The Skyhook CR, or just `{"spec": {"packages": {NAME: ENTRY}}}`: the declared
    /// interrupts the plan judges each step's requests against.
    #[serde(default)]
    pub skyhook_cr: Option<Value>,
    /// Wall-clock limit in seconds.
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// A validated package plan, ready to run: its modes and its packages in order.
#[derive(Debug, Clone)]
pub struct PlanJob {
    pub(super) modes: Vec<Mode>,
    pub(super) packages: Vec<PackageJob>,
    /// The chain form: the exit event has `packages` (one result each).
    pub(super) chain: bool,
    /// Limits of each command the plan runs (its sandbox).
    pub(super) sandbox: sandbox::Limits,
    /// Bytes of file content the plan may plan ([`PlanLimits::planned_bytes`]).
    pub(super) planned_bytes: u64,
    /// Its place under `--max-plans`, given back when the last clone (the plan's thread's)
    /// is dropped.
    permit: Option<Arc<PlanPermit>>,
}

/// One package of a [`PlanJob`].
#[derive(Debug, Clone)]
pub(super) struct PackageJob {
    pub(super) env: Vec<(String, String)>,
    config: Vec<u8>,
    /// (package-relative path, content, permission bits)
    files: Vec<(PathBuf, Vec<u8>, u32)>,
    configmaps: Vec<(String, Vec<u8>)>,
    cr: Option<Vec<u8>>,
}

#[derive(Deserialize)]
struct KindOnly {
    #[serde(default)]
    kind: Option<String>,
}

/// True when `body` is a start of kind `package_plan` (what a `plan` token may start).
pub fn is_plan_request(body: &[u8]) -> bool {
    serde_json::from_slice::<KindOnly>(body).is_ok_and(|k| k.kind.as_deref() == Some(KIND))
}

/// A refused plan start: the HTTP status and the JSON body (`{"error", ...}`), which the
/// service answers as its `Refusal`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRefusal {
    /// 400, 403 or 413.
    pub status: u16,
    /// `{"error": "...", ...}`.
    pub body: Value,
}

fn refusal(status: u16, body: Value) -> PlanRefusal {
    PlanRefusal { status, body }
}

/// A valid `package_plan` start: what the service registers (id, timeout) and the job.
#[derive(Debug, Clone)]
pub struct PlanStart {
    /// The execution id (checked by the service as any id).
    pub id: String,
    /// Wall-clock limit in seconds (checked by the service).
    pub timeout_s: Option<f64>,
    /// The validated package plan.
    pub job: PlanJob,
}

fn too_large(detail: String) -> PlanRefusal {
    refusal(
        413,
        json!({"error": "package too large", "detail": detail,
               "max_package_bytes": MAX_PACKAGE_BYTES, "max_package_files": MAX_PACKAGE_FILES}),
    )
}

fn env_name(k: &str) -> bool {
    let mut b = k.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A package-relative file path: under `skyhook_dir/` or `root_dir/`, plain components only.
fn file_path(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    if p.is_empty() || p.len() > 4096 || p.contains('\0') {
        return None;
    }
    let comps: Vec<Component<'_>> = path.components().collect();
    if comps.len() < 2
        || comps.len() > 64
        || !comps.iter().all(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    matches!(
        comps[0].as_os_str().to_str(),
        Some("skyhook_dir" | "root_dir")
    )
    .then(|| path.to_path_buf())
}

/// Parse a start body of kind `package_plan` (`None` for any other kind, which the service
/// parses itself).
///
/// # Errors
/// `400` for malformed JSON, unknown fields, a bad path, mode, env name or base64; `413`
/// over [`MAX_PACKAGE_BYTES`] or [`MAX_PACKAGE_FILES`].
pub fn parse_plan(body: &[u8]) -> Result<Option<PlanStart>, PlanRefusal> {
    if !is_plan_request(body) {
        return Ok(None);
    }
    let req: PlanRequest = serde_json::from_slice(body).map_err(bad)?;
    let job = validate(&req)?;
    Ok(Some(PlanStart {
        id: req.id,
        timeout_s: req.timeout_s,
        job,
    }))
}

fn bad(detail: impl std::fmt::Display) -> PlanRefusal {
    refusal(
        400,
        json!({"error": "bad request", "detail": detail.to_string()}),
    )
}

fn validate(req: &PlanRequest) -> Result<PlanJob, PlanRefusal> {
    let mut modes = Vec::new();
    let names: Vec<&str> = if req.modes.is_empty() {
        vec!["apply"]
    } else {
        req.modes.iter().map(String::as_str).collect()
    };
    for m in names {
        match Mode::parse(m) {
            Some(Mode::Interrupt) => {
                return Err(bad(
                    "mode interrupt is run by the operator: a plan reports the CR's declared interrupts instead",
                ));
            }
            Some(mode) => modes.push(mode),
            None => return Err(bad(format!("unknown mode {m:?}"))),
        }
    }
    let single = req.package.as_ref().map(|p| (p, &req.env, &req.skyhook_cr));
    let entries: Vec<_> = match single {
        Some(one) if req.packages.is_empty() => vec![one],
        None if !req.packages.is_empty() && req.env.is_empty() && req.skyhook_cr.is_none() => {
            if req.packages.len() > MAX_CHAIN_PACKAGES {
                return Err(bad(format!(
                    "{} packages: at most {MAX_CHAIN_PACKAGES} in one plan",
                    req.packages.len()
                )));
            }
            req.packages
                .iter()
                .map(|e| (&e.package, &e.env, &e.skyhook_cr))
                .collect()
        }
        _ => {
            return Err(bad(
                "give either package (with env, skyhook_cr) or packages (each with its own)",
            ));
        }
    };
    let (mut total, mut count) = (0, 0);
    let mut packages = Vec::new();
    for (package, env, cr) in entries {
        packages.push(validate_package(package, env, cr, &mut total, &mut count)?);
    }
    Ok(PlanJob {
        modes,
        packages,
        chain: !req.packages.is_empty(),
        sandbox: sandbox::Limits::default(),
        planned_bytes: super::plan_limits::DEFAULT_PLANNED_BYTES,
        permit: None,
    })
}

/// One package of a request; `total` and `count` are the bytes and files of the request so
/// far, which the caps apply to.
fn validate_package(
    package: &PackageBody,
    req_env: &BTreeMap<String, String>,
    skyhook_cr: &Option<Value>,
    total: &mut usize,
    count: &mut usize,
) -> Result<PackageJob, PlanRefusal> {
    use base64::Engine as _;
    let mut env = Vec::new();
    for (k, v) in req_env {
        if !env_name(k) || v.contains('\0') {
            return Err(bad(format!("invalid env entry {k:?}")));
        }
        env.push((k.clone(), v.clone()));
    }
    if !package.config.is_object() {
        return Err(bad("package.config must be the config.json object"));
    }
    let config = serde_json::to_vec_pretty(&package.config).map_err(bad)?;
    *total += config.len();
    *count += package.files.len() + package.configmaps.len();
    if *count > MAX_PACKAGE_FILES {
        return Err(too_large(format!("{count} files")));
    }
    let mut files = Vec::new();
    for (p, f) in &package.files {
        let path = file_path(p).ok_or_else(|| {
            bad(format!(
                "package file {p:?}: expected a relative path under skyhook_dir/ or root_dir/ of plain names"
            ))
        })?;
        let default_mode = if p.starts_with("skyhook_dir/") {
            0o755
        } else {
            0o644
        };
        let (bytes, mode) = match f {
            FileBody::Text(t) => (t.clone().into_bytes(), default_mode),
            FileBody::Full {
                text: Some(t),
                base64: None,
                mode,
            } => (t.clone().into_bytes(), mode.unwrap_or(default_mode)),
            FileBody::Full {
                text: None,
                base64: Some(b),
                mode,
            } => (
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| bad(format!("package file {p:?}: base64: {e}")))?,
                mode.unwrap_or(default_mode),
            ),
            FileBody::Full { .. } => {
                return Err(bad(format!("package file {p:?}: give text or base64")));
            }
        };
        *total += bytes.len();
        if *total > MAX_PACKAGE_BYTES {
            return Err(too_large(format!(
                "more than {MAX_PACKAGE_BYTES} bytes at {p:?}"
            )));
        }
        files.push((path, bytes, mode & 0o777));
    }
    let mut configmaps = Vec::new();
    for (k, v) in &package.configmaps {
        if k.is_empty()
            || k.len() > 253
            || k.contains('/')
            || k.starts_with('.')
            || k.contains('\0')
        {
            return Err(bad(format!("configMap key {k:?} is not a plain file name")));
        }
        *total += v.len();
        if *total > MAX_PACKAGE_BYTES {
            return Err(too_large(format!(
                "more than {MAX_PACKAGE_BYTES} bytes at configMap {k:?}"
            )));
        }
        configmaps.push((k.clone(), v.clone().into_bytes()));
    }
    let cr = match skyhook_cr {
        None => None,
        Some(v) if v.is_object() => Some(serde_json::to_vec(v).map_err(bad)?),
        Some(_) => return Err(bad("skyhook_cr must be an object")),
    };
    *total += cr.as_ref().map_or(0, Vec::len);
    if *total > MAX_PACKAGE_BYTES {
        return Err(too_large(format!(
            "more than {MAX_PACKAGE_BYTES} bytes with the CR"
        )));
    }
    Ok(PackageJob {
        env,
        config,
        files,
        configmaps,
        cr,
    })
}

impl PlanJob {
    /// Hold the plan to the server's `limits` ([`PlanLimits`]): its commands' sandbox limits
    /// and query user (its slot's: [`PlanLimits::query_users`]), each package's script
    /// steps' deadline, and `permit`, its place under `--max-plans`.
    pub fn bound(&mut self, limits: &PlanLimits, permit: PlanPermit) {
        self.sandbox = limits.sandbox.clone();
        self.sandbox.query_user = limits.query_users.for_slot(permit.slot());
        self.planned_bytes = limits.planned_bytes;
        for p in &mut self.packages {
            limits.bound_env(&mut p.env);
        }
        self.permit = Some(Arc::new(permit));
    }

    /// Write each package under `dir`: the single form's at `dir/package`, a chain's at
    /// `dir/package-NN` (two digits, so no name is another's prefix). Per package in order:
    /// its directory and its CR file.
    pub(super) fn unpack(&self, dir: &Path) -> std::io::Result<Vec<(PathBuf, Option<PathBuf>)>> {
        let mut out = Vec::new();
        for (i, p) in self.packages.iter().enumerate() {
            let d = match self.chain {
                true => dir.join(format!("package-{i:02}")),
                false => dir.join("package"),
            };
            std::fs::create_dir(&d)?;
            let cr = p.unpack(&d)?;
            out.push((d, cr));
        }
        Ok(out)
    }
}

impl PackageJob {
    /// Write the package under `dir`: `config.json`, its files, `configmaps/`, `cr.json`.
    fn unpack(&self, dir: &Path) -> std::io::Result<Option<PathBuf>> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(dir.join("config.json"), &self.config)?;
        std::fs::create_dir_all(dir.join("skyhook_dir"))?;
        for (p, bytes, mode) in &self.files {
            let to = dir.join(p);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&to, bytes)?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(*mode))?;
        }
        std::fs::create_dir_all(dir.join("configmaps"))?;
        for (k, v) in &self.configmaps {
            std::fs::write(dir.join("configmaps").join(k), v)?;
        }
        match &self.cr {
            Some(cr) => {
                let p = dir.join("cr.json");
                std::fs::write(&p, cr)?;
                Ok(Some(p))
            }
            None => Ok(None),
        }
    }
}

impl PackageJob {
    /// `package_name` and `package_version` of its config.json (empty when absent).
    pub(super) fn name(&self) -> (String, String) {
        let v: Value = serde_json::from_slice(&self.config).unwrap_or(Value::Null);
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        (s("package_name"), s("package_version"))
    }
}

/// `403` when a `plan`-scoped token starts anything but a `package_plan`.
///
/// # Errors
/// The refusal, naming the scope.
pub fn scope_check(plan_only: bool, body: &[u8]) -> Result<(), PlanRefusal> {
    if plan_only && !is_plan_request(body) {
        return Err(refusal(
            403,
            json!({"error": "forbidden",
                   "detail": "a plan-scoped token can start only kind package_plan"}),
        ));
    }
    Ok(())
}
