//! The agent image, run the way the operator runs it (issues 12, 21).
//!
//! The image is not built here (static LTO release builds take minutes): `.ci/run` runs
//! `scripts/build-image.sh` first, which writes a multi-architecture OCI layout to
//! `target/image/oci` (index tagged `<version>`, manifests `<version>-amd64`/`-arm64`, SBOM
//! and provenance referrers), and the tests use it, or the layout named by `SKYHOOK_IMAGE`
//! (`PATH[:TAG]` or the script's `oci:PATH:TAG`). Without root, `umoci`, `runc` or the layout,
//! every test here is skipped ([`crate::util::skip`]: it passes, and the test binary's last
//! line names it); so is the arm64 test without `qemu-aarch64-static` or an arm64 manifest.
//! Under `SKYHOOK_REQUIRE_ALL=1` (`.ci/run`) each of those fails instead.
//!
//! Once per test binary and architecture, the manifest is unpacked with `umoci unpack`
//! (digests verified) into an OCI runtime bundle. Each run then gets a `config.json` made from
//! the bundle's, as the kubelet would have runc run the operator's pod
//! (agent-contract.md 1.1): the image's entrypoint and Env, then the pod's arguments
//! (`MODE /root COPY_DIR`, `interrupt /root COPY_DIR PAYLOAD`) and environment (package env,
//! `SKYHOOK_LOG_DIR`, `SKYHOOK_ROOT_DIR`, `COPY_RESOLV=false`, `SKYHOOK_RESOURCE_ID`,
//! `SKYHOOK_NODE_ORDER`); privileged (every capability, no seccomp, no masked paths, every
//! device), hostPID and hostNetwork (no pid or network namespace); the throwaway host root at
//! `/root` as an rbind with HostToContainer (`rslave`) propagation; the node-metadata and
//! configMap volumes, in the kubelet's `..data` layout, under `/skyhook-package`; a read-only
//! image rootfs (the agent must not need a writable image filesystem). The package's init
//! container (`mkdir -p /root/$SKYHOOK_DIR && cp -r /skyhook-package/* /root/$SKYHOOK_DIR`)
//! is reproduced with the machine's `sh` and `cp` beforehand. Every run is bounded by the
//! harness's timeout.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::util::{FakeRoot, Run, copy_tree, run_to_end};

/// The Skyhook resource the runs belong to.
const SKYHOOK: &str = "gpu-init";
const UID: &str = "5e0c2a4f-8d1b-4c2e-9f00-1a2b3c4d5e6f";
const GENERATION: &str = "3";

/// An unpacked image: its rootfs and what a runtime takes from its config.
struct Image {
    _dir: tempfile::TempDir,
    rootfs: PathBuf,
    /// The `config.json` umoci wrote next to the rootfs (OCI runtime spec).
    spec: Value,
    /// Entrypoint followed by Cmd.
    argv: Vec<String>,
    /// `Env` of the image config, `KEY=VALUE`.
    env: Vec<String>,
    /// The image config (`config` object: Labels, Entrypoint, ...).
    config: Value,
    /// Reference unpacked (`PATH:TAG`), for messages.
    reference: String,
    /// The OCI layout and the tag of what the layout's index names (index or manifest).
    layout: PathBuf,
    tag: String,
    /// The layer blobs, in order.
    layers: Vec<PathBuf>,
}

/// The architecture of this machine in OCI terms.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    }
}

/// The unpacked image for this machine's architecture, or why the image tests cannot run here.
fn image() -> Result<&'static Image, &'static str> {
    static IMAGE: OnceLock<Result<Image, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| unpack_image(host_arch()))
        .as_ref()
        .map_err(|e| e.as_str())
}

/// The unpacked arm64 image (its rootfs is what the qemu test runs).
fn image_arm64() -> Result<&'static Image, &'static str> {
    static IMAGE: OnceLock<Result<Image, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| unpack_image("arm64"))
        .as_ref()
        .map_err(|e| e.as_str())
}

/// Skip the current test loudly unless the image can be run here; else the image.
macro_rules! require_image {
    () => {
        require_image!(image())
    };
    ($img:expr) => {{
        require_root!();
        match $img {
            Ok(img) => img,
            Err(why) => skip!("{why}"),
        }
    }};
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// `(layout dir, tag)` of the image to test.
fn locate() -> Result<(PathBuf, Option<String>), String> {
    if let Ok(v) = std::env::var("SKYHOOK_IMAGE")
        && !v.is_empty()
    {
        let v = v.strip_prefix("oci:").unwrap_or(&v);
        let found = match v.rsplit_once(':') {
            Some((p, t)) if !t.contains('/') => (PathBuf::from(p), Some(t.to_string())),
            _ => (PathBuf::from(v), None),
        };
        // Asked for explicitly: a missing layout is an error, not a reason to skip.
        assert!(
            found.0.join("index.json").is_file(),
            "SKYHOOK_IMAGE={v}: no OCI layout (index.json) at {}",
            found.0.display()
        );
        return Ok(found);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/image/oci");
    if !dir.join("index.json").exists() {
        return Err(format!(
            "no image at {} and SKYHOOK_IMAGE is not set (build it with scripts/build-image.sh; .ci/run does)",
            dir.display()
        ));
    }
    Ok((dir, None))
}

fn read_json(p: &Path) -> Result<Value, String> {
    let bytes = fs::read(p).map_err(|e| format!("read {}: {e}", p.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("parse {}: {e}", p.display()))
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let (alg, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
    layout.join("blobs").join(alg).join(hex)
}

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// The descriptors of a layout's index.json.
fn index_manifests(layout: &Path) -> Result<Vec<Value>, String> {
    let index = read_json(&layout.join("index.json"))?;
    Ok(index["manifests"].as_array().cloned().unwrap_or_default())
}

fn ref_name(m: &Value) -> Option<&str> {
    m["annotations"][REF_NAME].as_str()
}

/// The manifest descriptor for `arch` under `tag` (or the first tagged descriptor): the
/// descriptor itself when it is an image manifest, the index's `linux/<arch>` entry when it
/// is an image index. `Ok(None)` when the index has no such platform.
fn resolve(
    layout: &Path,
    tag: Option<&str>,
    arch: &str,
) -> Result<Option<(String, Value)>, String> {
    let manifests = index_manifests(layout)?;
    let top = match tag {
        Some(t) => manifests.iter().find(|m| ref_name(m) == Some(t)),
        None => default_tagged(&manifests),
    }
    .ok_or_else(|| format!("{}: no manifest {tag:?} in index.json", layout.display()))?;
    let top_tag = ref_name(top).unwrap_or_default().to_string();
    if top["mediaType"] != INDEX_TYPE {
        return Ok(Some((top_tag, top.clone())));
    }
    let index = read_json(&blob(layout, top["digest"].as_str().unwrap_or("")))?;
    let Some(m) = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["platform"]["architecture"] == arch && m["platform"]["os"] == "linux")
    else {
        return Ok(None);
    };
    // umoci unpacks by tag: the script tags each platform's manifest too.
    let tagged = manifests
        .iter()
        .find(|d| d["digest"] == m["digest"] && ref_name(d).is_some())
        .and_then(ref_name)
        .ok_or_else(|| {
            format!(
                "{}: the linux/{arch} manifest of {top_tag} has no tag of its own in index.json",
                layout.display()
            )
        })?;
    Ok(Some((tagged.to_string(), m.clone())))
}

/// Without a tag: the tagged image index (the multi-arch image), else the first tagged image.
fn default_tagged(manifests: &[Value]) -> Option<&Value> {
    let tagged = || {
        manifests
            .iter()
            .filter(|m| ref_name(m).is_some() && m["artifactType"].is_null())
    };
    tagged()
        .find(|m| m["mediaType"] == INDEX_TYPE)
        .or_else(|| tagged().next())
}

fn unpack_image(arch: &str) -> Result<Image, String> {
    for tool in ["umoci", "runc"] {
        if !have(tool) {
            return Err(format!(
                "{tool} is not installed (the image tests need umoci and runc; .ci/run installs them)"
            ));
        }
    }
    let (layout, tag) = locate()?;
    let (tag, manifest) = resolve(&layout, tag.as_deref(), arch)?.ok_or_else(|| {
        format!(
            "{}: the image has no linux/{arch} manifest",
            layout.display()
        )
    })?;
    let reference = format!("{}:{tag}", layout.display());
    let top_tag = match locate()?.1 {
        Some(t) => t,
        None => default_tagged(&index_manifests(&layout)?)
            .and_then(ref_name)
            .unwrap_or_default()
            .to_string(),
    };

    // The image config, as a runtime reads it.
    let m = read_json(&blob(&layout, manifest["digest"].as_str().unwrap_or("")))?;
    let cfg = read_json(&blob(&layout, m["config"]["digest"].as_str().unwrap_or("")))?;
    assert_eq!(
        cfg["architecture"], arch,
        "{reference}: the config's architecture"
    );
    let config = cfg["config"].clone();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut argv = strings(&config["Entrypoint"]);
    argv.extend(strings(&config["Cmd"]));
    let env = strings(&config["Env"]);
    let layers = m["layers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|l| blob(&layout, l["digest"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if argv.is_empty() {
        return Err(format!("{reference}: the image has no entrypoint"));
    }

    let dir = tempfile::Builder::new()
        .prefix("image-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .map_err(|e| e.to_string())?;
    let bundle = dir.path().join("bundle");
    let out = Command::new("umoci")
        .args(["unpack", "--image", &reference])
        .arg(&bundle)
        .output()
        .map_err(|e| format!("run umoci: {e}"))?;
    if !out.status.success() {
        // The image exists but is broken: that is a failure, not a skip.
        panic!(
            "umoci unpack {reference} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rootfs = bundle.join("rootfs");
    let spec = read_json(&bundle.join("config.json"))?;
    // Mount points, as the container runtime creates them (the rootfs is read-only in runs).
    for d in [
        "root",
        "proc",
        "dev",
        "sys",
        "skyhook-package/node-metadata",
        "skyhook-package/configmaps",
    ] {
        fs::create_dir_all(rootfs.join(d)).map_err(|e| e.to_string())?;
    }
    if let Some(rev) = config["Labels"]["org.opencontainers.image.revision"].as_str() {
        let head = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if let Some(head) = head
            && rev.trim_end_matches("-dirty") != head
        {
            eprintln!(
                "WARNING: image {reference} was built from revision {rev}, the tree is at {head}: \
                 rebuild it with scripts/build-image.sh"
            );
        }
    }
    eprintln!("image tests: {reference} unpacked at {}", rootfs.display());
    Ok(Image {
        _dir: dir,
        rootfs,
        spec,
        argv,
        env,
        config,
        reference,
        layout,
        tag: top_tag,
        layers,
    })
}

// ---------------------------------------------------------------------------------------
// The operator's pod, reproduced

/// A configMap volume at `dir`: `..<timestamp>/` with the files, `..data` pointing at it,
/// and one `<name> -> ..data/<name>` symlink per file, as the kubelet writes it.
fn configmap_volume(dir: &Path, files: &[(String, Vec<u8>)]) {
    let ts = "..2026_12_01_00_00_00.123456789";
    fs::create_dir_all(dir.join(ts)).expect("configMap dir");
    for (name, content) in files {
        fs::write(dir.join(ts).join(name), content).expect("configMap file");
        symlink(format!("..data/{name}"), dir.join(name)).expect("configMap link");
    }
    symlink(ts, dir.join("..data")).expect("..data");
}

/// The files of a directory, by name.
fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_file())
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        fs::read(e.path()).expect("read"),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One package pod of the operator on one node: the host root, the package volumes and the
/// agent container's arguments and environment.
struct Pod {
    host: FakeRoot,
    /// The volumes of the agent containers (`node-metadata/`, `configmaps/`).
    volumes: tempfile::TempDir,
    has_configmaps: bool,
    copy_dir: String,
    /// The package's `env` from the Skyhook resource, then the operator's variables.
    env: Vec<(String, String)>,
}

impl Pod {
    /// The pod for example package `examples/<example>` with the package `env` given; runs
    /// the package's init container (the copy into the host's copy dir).
    fn new(example: &str, package_env: &[(&str, &str)]) -> Pod {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(example);
        let config = read_json(&src.join("config.json")).expect("example config.json");
        let (pkg, ver) = (
            config["package_name"].as_str().expect("package_name"),
            config["package_version"].as_str().expect("package_version"),
        );
        let host = FakeRoot::with_tools(&["grep", "sed", "rmdir"]);
        // A recording systemctl on the host, for interrupts.
        host.stub("/usr/local/bin", "systemctl", "/var/log/calls", &[]);

        // The volumes: node metadata always, the package's configMap when it has one.
        let volumes = tempfile::Builder::new()
            .prefix("volumes-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("volumes dir");
        configmap_volume(
            &volumes.path().join("node-metadata"),
            &[
                (
                    "annotations.json".into(),
                    br#"{"skyhook.nvidia.com/status_gpu-init":"in_progress"}"#.to_vec(),
                ),
                (
                    "labels.json".into(),
                    br#"{"kubernetes.io/hostname":"node-a","kubernetes.io/arch":"amd64"}"#.to_vec(),
                ),
                ("packages.json".into(), br#"{}"#.to_vec()),
            ],
        );
        let cm_src = src.join("configmaps");
        let has_configmaps = cm_src.is_dir();
        if has_configmaps {
            configmap_volume(&volumes.path().join("configmaps"), &files_of(&cm_src));
        }

        // The init container, in the package image: its /skyhook-package is the package
        // with the two volumes mounted in it.
        let image_pkg = volumes.path().join("package-image");
        fs::create_dir_all(&image_pkg).expect("package image dir");
        for e in fs::read_dir(&src).expect("example dir").flatten() {
            let name = e.file_name();
            if name == "configmaps" || name == "skyhook.yaml" {
                continue;
            }
            let to = image_pkg.join(&name);
            if e.path().is_dir() {
                copy_tree(&e.path(), &to).expect("copy package dir");
            } else {
                fs::copy(e.path(), &to).expect("copy package file");
            }
        }
        copy_tree(
            &volumes.path().join("node-metadata"),
            &image_pkg.join("node-metadata"),
        )
        .expect("metadata");
        if has_configmaps {
            copy_tree(
                &volumes.path().join("configmaps"),
                &image_pkg.join("configmaps"),
            )
            .expect("configmaps");
        }
        let copy_dir = format!("/var/lib/skyhook/{SKYHOOK}/{pkg}-{ver}-{UID}-{GENERATION}");
        let init = Command::new("sh")
            .args([
                "-c",
                r#"mkdir -p "$1/$SKYHOOK_DIR" && cp -r "$2"/* "$1/$SKYHOOK_DIR""#,
                "init",
            ])
            .arg(host.root())
            .arg(&image_pkg)
            .env("SKYHOOK_DIR", &copy_dir)
            .status()
            .expect("run the init container's copy");
        assert!(init.success(), "init container copy failed");

        let mut env: Vec<(String, String)> = package_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.extend(
            [
                ("SKYHOOK_LOG_DIR", format!("/var/log/skyhook/{SKYHOOK}")),
                ("SKYHOOK_ROOT_DIR", format!("/var/lib/skyhook/{SKYHOOK}")),
                ("COPY_RESOLV", "false".into()),
                (
                    "SKYHOOK_RESOURCE_ID",
                    format!("{SKYHOOK}-{UID}-{GENERATION}_{pkg}_{ver}"),
                ),
                ("SKYHOOK_NODE_ORDER", "0".into()),
            ]
            .map(|(k, v)| (k.to_string(), v)),
        );
        Pod {
            host,
            volumes,
            has_configmaps,
            copy_dir,
            env,
        }
    }

    /// Host path under the state root.
    fn state(&self, rel: &str) -> PathBuf {
        self.host.host(&format!("/var/lib/skyhook/{SKYHOOK}/{rel}"))
    }

    /// Run the package container for `mode` (`MODE /root COPY_DIR`).
    fn run(&self, img: &Image, mode: &str) -> Run {
        self.exec(img, &[mode, "/root", &self.copy_dir], true)
    }

    /// Run the interrupt pod's container (`interrupt /root COPY_DIR PAYLOAD`): only the
    /// operator's variables and the `/root` mount.
    fn interrupt(&self, img: &Image, payload_json: &str) -> Run {
        use base64::Engine;
        let payload = base64::engine::general_purpose::STANDARD.encode(payload_json);
        self.exec(
            img,
            &["interrupt", "/root", &self.copy_dir, &payload],
            false,
        )
    }

    /// Run the image's entrypoint binary directly on this machine (no container), with
    /// the host root's path for `/root` and the same environment: the bare binary the
    /// container results are compared with.
    fn run_bare(&self, img: &Image, args: &[&str], package_pod: bool) -> Run {
        let bin = img.rootfs.join(img.argv[0].trim_start_matches('/'));
        let root = self.host.root_str();
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if *a == "/root" {
                    root.clone()
                } else {
                    a.to_string()
                }
            })
            .collect();
        let mut cmd = Command::new(bin);
        cmd.args(&img.argv[1..])
            .args(&args)
            .env_clear()
            .envs(img.env.iter().filter_map(|kv| kv.split_once('=')))
            .envs(
                self.env
                    .iter()
                    .filter(|(k, _)| package_pod || !is_package_env(k))
                    .map(|(k, v)| (k, v)),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_to_end(cmd.spawn().expect("spawn the bare agent"))
    }

    /// Run `argv + args` of the image with runc, as the operator's pod spec has the kubelet
    /// run it (see the module doc).
    fn exec(&self, img: &Image, args: &[&str], package_pod: bool) -> Run {
        self.exec_argv(img, &img.argv, args, package_pod)
    }

    fn exec_argv(&self, img: &Image, argv: &[String], args: &[&str], package_pod: bool) -> Run {
        // The container's environment: the image's Env, then the pod's.
        let mut env: BTreeMap<String, String> = img
            .env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for (k, v) in &self.env {
            if package_pod || !is_package_env(k) {
                env.insert(k.clone(), v.clone());
            }
        }
        let mut process_args: Vec<String> = argv.to_vec();
        process_args.extend(args.iter().map(|a| a.to_string()));
        let mut mounts = vec![json!({
            "destination": "/root", "type": "bind",
            "source": self.host.root(), "options": ["rbind", "rslave"],
        })];
        if package_pod {
            mounts.push(json!({
                "destination": "/skyhook-package/node-metadata", "type": "bind",
                "source": self.volumes.path().join("node-metadata"),
                "options": ["rbind", "ro", "rprivate"],
            }));
            if self.has_configmaps {
                mounts.push(json!({
                    "destination": "/skyhook-package/configmaps", "type": "bind",
                    "source": self.volumes.path().join("configmaps"),
                    "options": ["rbind", "ro", "rprivate"],
                }));
            }
        }
        let spec = pod_spec(img, &process_args, &env, mounts);

        let bundle = tempfile::Builder::new()
            .prefix("bundle-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("bundle dir");
        fs::write(
            bundle.path().join("config.json"),
            serde_json::to_vec_pretty(&spec).expect("spec"),
        )
        .expect("write config.json");
        let state = bundle.path().join("runc");
        let id = format!(
            "skyhook-test-{}-{}",
            std::process::id(),
            NEXT_CONTAINER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut cmd = Command::new("runc");
        cmd.arg("--root")
            .arg(&state)
            .args(["run", "--no-new-keyring", "--bundle"])
            .arg(bundle.path())
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let run = run_to_end(cmd.spawn().expect("spawn runc"));
        // `runc run` deletes the container when its process ends; a run the harness killed
        // leaves it behind.
        let _ = Command::new("runc")
            .arg("--root")
            .arg(&state)
            .args(["delete", "--force", &id])
            .stderr(Stdio::null())
            .status();
        run
    }
}

static NEXT_CONTAINER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The OCI runtime spec of the agent container in the operator's pod: the bundle's
/// `config.json` from `umoci unpack` with the process, mounts and security of a privileged,
/// hostPID, hostNetwork container.
fn pod_spec(
    img: &Image,
    args: &[String],
    env: &BTreeMap<String, String>,
    extra_mounts: Vec<Value>,
) -> Value {
    let mut spec = img.spec.clone();
    // Privileged: every capability the runtime holds (here: this test process's bounding set).
    let bounding = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|st| {
            st.lines()
                .find_map(|l| l.strip_prefix("CapBnd:"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        })
        .unwrap_or(u64::MAX);
    let caps: Vec<&str> = CAPS_BY_BIT
        .iter()
        .enumerate()
        .filter(|(bit, _)| bounding & (1 << bit) != 0)
        .map(|(_, c)| *c)
        .collect();
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(args);
    spec["process"]["env"] = json!(
        env.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    );
    spec["process"]["cwd"] = json!("/");
    spec["process"]["user"] = json!({"uid": 0, "gid": 0});
    spec["process"]["noNewPrivileges"] = json!(false);
    spec["process"]["capabilities"] = json!({
        "bounding": caps, "effective": caps, "permitted": caps, "inheritable": caps,
        "ambient": caps,
    });
    spec["root"] = json!({"path": img.rootfs, "readonly": true});
    // The kubelet's mounts for a privileged container: proc, the host's devices, a writable
    // sysfs; then the pod's volumes.
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "bind", "source": "/dev", "options": ["rbind", "rprivate"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev"]}),
    ];
    mounts.extend(extra_mounts);
    spec["mounts"] = json!(mounts);
    let linux = &mut spec["linux"];
    // hostPID and hostNetwork (which brings the host's UTS namespace): only ipc and mount.
    linux["namespaces"] = json!([{"type": "ipc"}, {"type": "mount"}]);
    linux["rootfsPropagation"] = json!("rslave");
    linux["resources"] = json!({"devices": [{"allow": true, "access": "rwm"}]});
    for k in [
        "maskedPaths",
        "readonlyPaths",
        "seccomp",
        "uidMappings",
        "gidMappings",
    ] {
        if let Some(o) = linux.as_object_mut() {
            o.remove(k);
        }
    }
    if let Some(o) = spec.as_object_mut() {
        o.remove("hostname");
    }
    spec
}

/// The Linux capabilities by bit number (capability.h).
const CAPS_BY_BIT: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// Whether `k` is a package `env` variable (interrupt pods get only the operator's).
fn is_package_env(k: &str) -> bool {
    !matches!(
        k,
        "SKYHOOK_LOG_DIR"
            | "SKYHOOK_ROOT_DIR"
            | "COPY_RESOLV"
            | "SKYHOOK_RESOURCE_ID"
            | "SKYHOOK_NODE_ORDER"
    )
}

// ---------------------------------------------------------------------------------------
// Tests

/// The image holds the two static binaries and the CA bundle, nothing else, and its config is
/// what the operator relies on (entrypoint) and what admins read (labels).
#[test]
fn image_contents_and_config() {
    let img = require_image!();
    let mut files = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).expect("read rootfs").flatten() {
            let p = e.path();
            let rel = format!("/{}", p.strip_prefix(base).expect("under").display());
            let ft = e.file_type().expect("type");
            if ft.is_dir() {
                walk(base, &p, out);
            } else {
                let mode = fs::symlink_metadata(&p).expect("stat").permissions().mode();
                out.push(format!("{rel} {:o}", mode & 0o7777));
            }
        }
    }
    walk(&img.rootfs, &img.rootfs, &mut files);
    files.sort();
    assert_eq!(
        files,
        [
            "/etc/ssl/certs/ca-certificates.crt 644",
            "/skyhook-agent 755",
            "/skyhook-run 755",
        ],
        "files of {}",
        img.reference
    );
    // Every layer is a complete tar (GNU tar rejects a missing end of archive, as layer
    // scanners do; umoci 0.4.7's own `insert` layers had that defect).
    assert!(!img.layers.is_empty());
    for l in &img.layers {
        let out = Command::new("tar")
            .arg("-tzf")
            .arg(l)
            .output()
            .expect("run tar");
        assert!(
            out.status.success(),
            "layer {} is not a valid tar.gz: {}",
            l.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        img.config["Entrypoint"],
        serde_json::json!(["/skyhook-agent"])
    );
    let labels = &img.config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(labels["org.opencontainers.image.source"].is_string());
    let certs = fs::read_to_string(img.rootfs.join("etc/ssl/certs/ca-certificates.crt"))
        .expect("CA bundle");
    assert!(certs.contains("-----BEGIN CERTIFICATE-----"));
    // Static executables: no program interpreter (ELF PT_INTERP) to find in a scratch image.
    for b in ["skyhook-agent", "skyhook-run"] {
        let bytes = fs::read(img.rootfs.join(b)).expect("binary");
        assert_eq!(&bytes[..4], b"\x7fELF", "{b} is not an ELF file");
        assert!(
            !has_interp(&bytes),
            "{b} in the image is dynamically linked (has PT_INTERP)"
        );
    }
}

/// Whether a 64-bit little-endian ELF has a PT_INTERP program header.
fn has_interp(elf: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().expect("8 bytes")) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        u32::from_le_bytes(elf[o..o + 4].try_into().expect("4 bytes")) == 3
    })
}

/// `examples/hello` (bash steps, a configMap, a `root_dir` overlay) through the modes the
/// operator runs, then an interrupt pod, then uninstall.
#[test]
fn image_runs_hello_like_the_operator() {
    let img = require_image!();
    let pod = Pod::new("hello", &[("NODE_NAME", "node-a")]);
    let h = &pod.host;

    let v = pod.exec_argv(img, &img.argv, &["--version"], true);
    v.code(0);
    assert!(
        v.stdout
            .starts_with(&format!("skyhook-agent {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        v.stdout
    );

    let r = pod.run(img, "apply");
    r.code(0)
        .matches(r"^\[out\]{TS} writing /etc/hello/greeting for node node-a$");
    assert_eq!(h.read("/etc/hello/greeting"), "Hello, node-a!\n");
    assert_eq!(
        h.read("/etc/hello/motd"),
        fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello/root_dir/etc/hello/motd")
        )
        .expect("motd")
    );
    assert!(pod.state("flags/START").exists(), "{}", r.all());
    let flags = fs::read_dir(pod.state("flags/hello/1.0.0"))
        .expect("flag dir")
        .count();
    assert_eq!(flags, 1, "one step flag");
    let logs = h.list(&format!("/var/log/skyhook/{SKYHOOK}/hello/1.0.0"));
    assert!(
        logs.iter()
            .any(|l| l.starts_with("greet.sh-") && l.ends_with(".log")),
        "{logs:?}"
    );

    let r = pod.run(img, "apply-check");
    r.code(0)
        .matches(r"^\[out\]{TS} greeting ok: Hello, node-a!$");
    assert!(pod.state("flags/apply-check_ALL_CHECKED").exists());
    // A passed check records the version (Python's history format).
    let history = fs::read_to_string(pod.state("history/hello.json")).expect("history");
    assert!(history.contains("\"1.0.0\""), "{history}");

    // A rerun of apply (a restarted container) skips the done step.
    let r = pod.run(img, "apply");
    r.code(0);
    assert_eq!(
        fs::read_dir(pod.state("flags/hello/1.0.0"))
            .unwrap()
            .count(),
        1
    );

    // hello has no config steps: the mode runs and succeeds.
    pod.run(img, "config").code(0);

    let r = pod.interrupt(
        img,
        r#"{"type":"service_restart","services":["containerd"]}"#,
    );
    r.code(0);
    assert_eq!(
        h.read("/var/log/calls"),
        "systemctl daemon-reload\nsystemctl restart containerd\n",
        "{}",
        r.all()
    );
    let rid = format!("{SKYHOOK}-{UID}-{GENERATION}_hello_1.0.0");
    for i in 0..2 {
        assert!(
            pod.state(&format!(
                "interrupts/flags/{rid}/service_restart_{i}.complete"
            ))
            .exists(),
            "{}",
            r.all()
        );
    }

    let r = pod.run(img, "uninstall");
    r.code(0).matches(r"^\[out\]{TS} removed /etc/hello$");
    assert!(!h.exists("/etc/hello/greeting") && !h.exists("/etc/hello/motd"));
    pod.run(img, "uninstall-check").code(0);
    assert!(pod.state("flags/uninstall-check_ALL_CHECKED").exists());

    // A failing check fails the container (what the operator looks at).
    h.write("/etc/hello/greeting", "tampered\n");
    pod.run(img, "uninstall-check").code(1);
}

/// A `.rhai` package (`examples/shellscript`: the embedded stdlib dispatching to configMap
/// scripts) in the image, and `skyhook-run` from the image on the same host root.
#[test]
fn image_runs_a_rhai_package() {
    let img = require_image!();
    let pod = Pod::new("shellscript", &[("MOTD_TEXT", "Managed by the Rust agent")]);
    let h = &pod.host;

    let r = pod.run(img, "apply");
    r.code(0);
    assert_eq!(
        h.read("/etc/motd.d/10-skyhook"),
        "Managed by the Rust agent\n",
        "{}",
        r.all()
    );
    pod.run(img, "apply-check").code(0);
    assert!(pod.state("flags/apply-check_ALL_CHECKED").exists());
    pod.run(img, "uninstall").code(0);
    assert!(!h.exists("/etc/motd.d/10-skyhook"));
    pod.run(img, "uninstall-check").code(0);

    // skyhook-run in the image: plan then apply examples/motd.rhai against the host root.
    let script = fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/motd.rhai"))
        .expect("motd.rhai");
    h.write("/t/motd.rhai", script);
    let run = ["/skyhook-run".to_string()];
    let plan = pod.exec_argv(img, &run, &["/root/t/motd.rhai", "--root", "/root"], true);
    plan.code(0);
    let applied = pod.exec_argv(
        img,
        &run,
        &["/root/t/motd.rhai", "--root", "/root", "--apply"],
        true,
    );
    applied.code(0);
    let again = pod.exec_argv(img, &run, &["/root/t/motd.rhai", "--root", "/root"], true);
    again.code(0);
    assert!(
        again.stdout.contains("Plan: 0 to change"),
        "{}",
        again.all()
    );
}

// ---------------------------------------------------------------------------------------
// Container against bare binary

/// What a run left on the host, comparable across runs: every path under the host root
/// (timestamps in names replaced by `<TS>`), with the content of the files outside the logs
/// (timestamps in it replaced too).
fn host_results(pod: &Pod) -> Vec<String> {
    // Calendar timestamps, and the epoch seconds of interrupt `.complete` flags.
    let ts =
        crate::util::re(r"\d{4}-\d\d-\d\d[T_ -]?\d\d[:-]?\d\d[:-]?\d\d(?:\.\d+)?|\b\d{10}\.\d+\b");
    let root = pod.host.root();
    pod.host
        .snapshot()
        .into_iter()
        .map(|rel| {
            let p = root.join(&rel);
            let name = ts.replace_all(&rel, "<TS>").into_owned();
            let file = fs::symlink_metadata(&p)
                .map(|m| m.is_file())
                .unwrap_or(false);
            if file && !rel.starts_with("var/log/skyhook") && !rel.starts_with("usr") {
                let text = String::from_utf8_lossy(&fs::read(&p).expect("read")).into_owned();
                format!("{name}: {}", ts.replace_all(&text, "<TS>"))
            } else {
                name
            }
        })
        .collect()
}

/// The same stages (apply, apply-check, config, interrupt) through runc and through the bare
/// binary on two identical host roots leave the same files, flags and history; the step
/// output is the same lines.
#[test]
fn image_matches_the_bare_binary() {
    let img = require_image!();
    let in_pod = Pod::new("hello", &[("NODE_NAME", "node-a")]);
    let bare = Pod::new("hello", &[("NODE_NAME", "node-a")]);
    let interrupt = r#"{"type":"service_restart","services":["containerd"]}"#;
    let payload = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(interrupt)
    };
    for mode in ["apply", "apply-check", "config"] {
        let c = in_pod.run(img, mode);
        let b = bare.run_bare(img, &[mode, "/root", &bare.copy_dir], true);
        c.code(0);
        b.code(0);
        let ts = crate::util::re(crate::util::TS);
        // The bare binary is given the host root's path where the container has /root.
        let b_out = b.stdout.replace(&bare.host.root_str(), "/root");
        assert_eq!(
            ts.replace_all(&c.stdout, "<TS>"),
            ts.replace_all(&b_out, "<TS>"),
            "{mode}: stdout in the container and of the bare binary"
        );
    }
    in_pod.interrupt(img, interrupt).code(0);
    bare.run_bare(
        img,
        &["interrupt", "/root", &bare.copy_dir, &payload],
        false,
    )
    .code(0);
    let (c, b) = (host_results(&in_pod), host_results(&bare));
    assert!(
        c.iter()
            .any(|l| l.starts_with("etc/hello/greeting: Hello, node-a!")),
        "{c:#?}"
    );
    assert!(
        c.iter()
            .any(|l| l == "var/log/calls: systemctl daemon-reload\nsystemctl restart containerd\n"),
        "{c:#?}"
    );
    assert_eq!(
        c, b,
        "host results: runc container (left) and bare binary (right)"
    );
}

// ---------------------------------------------------------------------------------------
// Multi-arch index, crate list, SBOM, provenance

/// The unpacked image of `arch` (this machine's or arm64).
fn arch_image(arch: &str) -> &'static Image {
    let img = if arch == host_arch() {
        image()
    } else {
        assert_eq!(arch, "arm64", "no test image for {arch}");
        image_arm64()
    };
    img.unwrap_or_else(|e| panic!("the {arch} image: {e}"))
}

/// The architectures of the index tagged `img.tag`.
fn image_archs(img: &Image) -> Vec<String> {
    let top = index_manifests(&img.layout)
        .expect("index.json")
        .into_iter()
        .find(|m| ref_name(m) == Some(img.tag.as_str()))
        .expect("tagged index");
    let index =
        read_json(&blob(&img.layout, top["digest"].as_str().expect("digest"))).expect("index");
    index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|m| {
            m["platform"]["architecture"]
                .as_str()
                .expect("arch")
                .to_string()
        })
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(bytes))
}

/// `(name, version)` of every registry package in Cargo.lock, with its checksum.
fn cargo_lock() -> BTreeMap<(String, String), Option<String>> {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"))
        .expect("Cargo.lock");
    let doc: toml_edit::DocumentMut = text.parse().expect("parse Cargo.lock");
    doc["package"]
        .as_array_of_tables()
        .expect("[[package]]")
        .iter()
        .map(|p| {
            (
                (
                    p["name"].as_str().expect("name").to_string(),
                    p["version"].as_str().expect("version").to_string(),
                ),
                p.get("checksum").and_then(|c| c.as_str()).map(String::from),
            )
        })
        .collect()
}

/// The Rust target triple of an image architecture (`amd64`, `arm64`).
fn arch_triple(arch: &str) -> &'static str {
    match arch {
        "amd64" => "x86_64-unknown-linux-gnu",
        "arm64" => "aarch64-unknown-linux-gnu",
        other => panic!("no target triple for {other}"),
    }
}

/// ((package name, version), dependency name) for every dependency a Cargo.lock package of
/// `triple`'s graph declares `optional` (`cargo metadata --offline`: the test build has
/// downloaded every crate).
fn optional_deps(triple: &str) -> std::collections::BTreeSet<((String, String), String)> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--offline", "--locked", "--format-version", "1"])
        .args(["--filter-platform", triple])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata json");
    let mut optional = std::collections::BTreeSet::new();
    for p in meta["packages"].as_array().expect("packages") {
        let key = (
            p["name"].as_str().expect("name").to_string(),
            p["version"].as_str().expect("version").to_string(),
        );
        for d in p["dependencies"].as_array().expect("dependencies") {
            if d["optional"] == true {
                let name = d["name"].as_str().expect("name").to_string();
                optional.insert((key.clone(), name));
            }
        }
    }
    optional
}

/// The content of ELF section `name` of a 64-bit little-endian ELF file.
fn elf_section<'a>(elf: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().expect("4")) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().expect("8")) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3A), u16_at(0x3C), u16_at(0x3E));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum).find_map(|i| {
        let h = header(i);
        let n = strtab + u32_at(h);
        let end = n + elf[n..].iter().position(|&b| b == 0)?;
        (&elf[n..end] == name.as_bytes())
            .then(|| &elf[u64_at(h + 0x18)..u64_at(h + 0x18) + u64_at(h + 0x20)])
    })
}

/// The crate list `cargo auditable` linked into a binary: its `.dep-v0` section, zlib
/// decompressed (python3's zlib) and parsed.
fn dep_v0(path: &Path) -> Value {
    let elf = fs::read(path).expect("binary");
    let section = elf_section(&elf, ".dep-v0").unwrap_or_else(|| {
        panic!(
            "{}: no .dep-v0 section (built without cargo-auditable?)",
            path.display()
        )
    });
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(section)
            .expect("write");
    }
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "{}: .dep-v0 is not zlib data",
        path.display()
    );
    serde_json::from_slice(&out.stdout).expect(".dep-v0 JSON")
}

/// The index tagged `<version>` lists linux/amd64 and linux/arm64 manifests, each with the
/// org.opencontainers labels; both binaries of both architectures carry their crate list, and
/// every crate in it is a Cargo.lock crate at the locked version.
#[test]
fn image_index_is_multi_arch_with_crate_lists() {
    let img = require_image!(image().or_else(|_| image_arm64()));
    let layout = &img.layout;
    let top = index_manifests(layout)
        .expect("index.json")
        .into_iter()
        .find(|m| ref_name(m) == Some(img.tag.as_str()))
        .expect("tagged index");
    assert_eq!(top["mediaType"], INDEX_TYPE, "{}: {top}", img.tag);
    let index = read_json(&blob(layout, top["digest"].as_str().expect("digest"))).expect("index");
    let archs: Vec<&str> = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|m| m["platform"]["architecture"].as_str().expect("arch"))
        .collect();
    if archs != ["amd64", "arm64"] {
        // .ci/run builds amd64 only when the arm64 toolchain does not install (and says so).
        eprintln!("WARNING: the image has {archs:?}, not amd64 and arm64: {index}");
    }
    let lock = cargo_lock();
    for m in index["manifests"].as_array().expect("manifests") {
        let arch = m["platform"]["architecture"].as_str().expect("arch");
        let manifest =
            read_json(&blob(layout, m["digest"].as_str().expect("digest"))).expect("manifest");
        let cfg = read_json(&blob(
            layout,
            manifest["config"]["digest"].as_str().expect("config"),
        ))
        .expect("config");
        assert_eq!(cfg["architecture"], arch);
        let labels = &cfg["config"]["Labels"];
        assert_eq!(
            labels["org.opencontainers.image.version"],
            env!("CARGO_PKG_VERSION")
        );
        let rev = labels["org.opencontainers.image.revision"]
            .as_str()
            .expect("revision");
        // The commit built (an older one than HEAD is only warned about, at unpack time).
        assert!(
            crate::util::re_full(r"[0-9a-f]{12}(-dirty)?|unknown").is_match(rev),
            "{arch}: revision label {rev}"
        );
        assert_eq!(
            index["annotations"]["org.opencontainers.image.revision"], rev,
            "{arch}: the index's revision annotation and the manifest's label"
        );
        assert!(
            labels["org.opencontainers.image.source"].is_string(),
            "{labels}"
        );
    }
    for arch in ["amd64", "arm64"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/dist/linux")
            .join(arch);
        for b in ["skyhook-agent", "skyhook-run"] {
            let deps = dep_v0(&dir.join(b));
            let pkgs = deps["packages"].as_array().expect("packages");
            let mut linked = 0;
            for p in pkgs {
                let (n, v) = (
                    p["name"].as_str().expect("name"),
                    p["version"].as_str().expect("version"),
                );
                if p["source"] == "local" {
                    assert_eq!(n, "skyhook", "{arch}/{b}: local package {p}");
                    continue;
                }
                assert!(
                    lock.contains_key(&(n.to_string(), v.to_string())),
                    "{arch}/{b}: {n} {v} is not in Cargo.lock"
                );
                if p["kind"].is_null() || p["kind"] == "runtime" {
                    linked += 1;
                }
            }
            for must in ["rhai", "tokio", "serde_json", "hyper", "rustls"] {
                assert!(
                    pkgs.iter().any(|p| p["name"] == must),
                    "{arch}/{b}: {must} missing from the crate list"
                );
            }
            eprintln!(
                "{arch}/{b}: .dep-v0 lists {} packages ({linked} runtime)",
                pkgs.len()
            );
        }
    }
}

/// The SBOM and the provenance are next to the layout and attached to the index as OCI 1.1
/// referrers; the SBOM covers the crates of the binaries' lists with Cargo.lock's checksums,
/// the provenance's subjects are the binaries and manifests as built.
#[test]
fn image_sbom_and_provenance_are_attached() {
    let img = require_image!(image().or_else(|_| image_arm64()));
    let layout = &img.layout;
    let manifests = index_manifests(layout).expect("index.json");
    let top = manifests
        .iter()
        .find(|m| ref_name(m) == Some(img.tag.as_str()))
        .expect("tagged index");
    let out_dir = layout.parent().expect("out dir");
    let lock = cargo_lock();
    let mut seen = Vec::new();
    for (tag, artifact_type, file) in [
        ("sbom", "application/vnd.cyclonedx+json", "sbom.cdx.json"),
        (
            "provenance",
            "application/vnd.in-toto+json",
            "provenance.intoto.json",
        ),
    ] {
        let d = manifests
            .iter()
            .find(|m| ref_name(m) == Some(format!("{}.{tag}", img.tag).as_str()))
            .unwrap_or_else(|| panic!("no {}.{tag} in index.json", img.tag));
        let m = read_json(&blob(layout, d["digest"].as_str().expect("digest"))).expect("referrer");
        assert_eq!(m["artifactType"], artifact_type);
        assert_eq!(m["subject"]["digest"], top["digest"], "{tag}: subject");
        assert_eq!(m["subject"]["mediaType"], INDEX_TYPE);
        assert_eq!(
            m["config"]["mediaType"],
            "application/vnd.oci.empty.v1+json"
        );
        let layer = &m["layers"][0];
        let content =
            fs::read(blob(layout, layer["digest"].as_str().expect("layer"))).expect("blob");
        assert_eq!(
            format!("sha256:{}", sha256_hex(&content)),
            layer["digest"].as_str().expect("digest")
        );
        let shipped = fs::read(out_dir.join(file)).expect("file next to the image");
        assert_eq!(
            content, shipped,
            "{file}: attached and shipped copies differ"
        );
        seen.push(serde_json::from_slice::<Value>(&content).expect("json"));
    }
    let (sbom, prov) = (&seen[0], &seen[1]);

    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let comps = sbom["components"].as_array().expect("components");
    let mut in_sbom = std::collections::BTreeSet::new();
    for c in comps {
        let (n, v) = (
            c["name"].as_str().expect("name"),
            c["version"].as_str().expect("version"),
        );
        assert_eq!(c["purl"], format!("pkg:cargo/{n}@{v}"));
        let sum = lock
            .get(&(n.to_string(), v.to_string()))
            .unwrap_or_else(|| panic!("SBOM: {n} {v} not in Cargo.lock"));
        assert_eq!(
            c["hashes"][0]["content"].as_str(),
            sum.as_deref(),
            "{n} {v}"
        );
        assert!(
            c["licenses"][0]["expression"].is_string(),
            "{n} {v}: no license: {c}"
        );
        in_sbom.insert((n.to_string(), v.to_string()));
    }
    // The SBOM and the binaries' own lists (`.dep-v0`) agree, up to one known difference:
    // cargo-auditable walks `cargo metadata`'s resolve, which keeps optional dependencies
    // enabled only through weak features (`dep?/feature`) or dev-dependencies' features, that
    // the build never compiles; the SBOM (`cargo tree`) leaves them out. So every SBOM crate
    // is in a binary's list, and every listed crate the SBOM lacks hangs only off such an
    // optional edge (its parent declares it optional, or is itself such a crate).
    let archs = image_archs(img);
    let mut listed = std::collections::BTreeSet::new();
    for arch in &archs {
        let bin = arch_image(arch).rootfs.join("skyhook-agent");
        let list = dep_v0(&bin);
        let pkgs = list["packages"].as_array().expect("packages");
        let key = |p: &Value| {
            (
                p["name"].as_str().expect("name").to_string(),
                p["version"].as_str().expect("version").to_string(),
            )
        };
        let optional = optional_deps(arch_triple(arch));
        let missing: std::collections::BTreeSet<_> = pkgs
            .iter()
            .filter(|p| p["source"] != "local")
            .map(key)
            .filter(|k| !in_sbom.contains(k))
            .collect();
        for parent in pkgs {
            for child in parent["dependencies"].as_array().into_iter().flatten() {
                let child = key(&pkgs[child.as_u64().expect("index") as usize]);
                let parent = key(parent);
                assert!(
                    !missing.contains(&child)
                        || missing.contains(&parent)
                        || optional.contains(&(parent.clone(), child.0.clone())),
                    "{arch}: {child:?} is in the binary's list, not in the SBOM, and \
                     {parent:?} depends on it unconditionally"
                );
            }
        }
        eprintln!("{arch}: in .dep-v0, not in the SBOM (optional, not built): {missing:?}");
        listed.extend(pkgs.iter().map(key));
    }
    for k in &in_sbom {
        assert!(listed.contains(k), "SBOM: {k:?} is in no binary's list");
    }
    eprintln!(
        "SBOM: {} crates of {} in Cargo.lock",
        comps.len(),
        lock.len()
    );

    assert_eq!(prov["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(prov["predicateType"], "https://slsa.dev/provenance/v1");
    let subjects: BTreeMap<String, String> = prov["subject"]
        .as_array()
        .expect("subject")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().expect("name").to_string(),
                s["digest"]["sha256"].as_str().expect("sha256").to_string(),
            )
        })
        .collect();
    assert_eq!(
        subjects[&format!("image index {}", img.tag)],
        top["digest"]
            .as_str()
            .expect("digest")
            .trim_start_matches("sha256:")
    );
    for arch in &archs {
        for b in ["skyhook-agent", "skyhook-run"] {
            let bin = arch_image(arch).rootfs.join(b);
            assert_eq!(
                subjects[&format!("linux/{arch}/{b}")],
                sha256_hex(&fs::read(&bin).expect("binary")),
                "provenance subject linux/{arch}/{b}"
            );
        }
    }
    let deps = prov["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .expect("resolvedDependencies");
    let lock_digest = sha256_hex(
        &fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).expect("Cargo.lock"),
    );
    assert!(
        deps.iter()
            .any(|d| d["name"] == "Cargo.lock" && d["digest"]["sha256"] == lock_digest),
        "{deps:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// arm64 under qemu

/// The arm64 agent of the image (the binary `.ci/run` built once, unpacked from the
/// `linux/arm64` manifest) runs a package with a bash step and a `.rhai` step under
/// `qemu-aarch64-static`, on a throwaway host root: apply, apply-check and a rerun.
#[test]
fn arm64_agent_runs_under_qemu() {
    require_root!();
    if !have("qemu-aarch64-static") {
        skip!(
            "qemu-aarch64-static is not installed (apt-get install qemu-user-static; .ci/run does)"
        );
    }
    let img = require_image!(image_arm64());
    let agent = img.rootfs.join("skyhook-agent");
    let elf = fs::read(&agent).expect("arm64 agent");
    assert_eq!(
        u16::from_le_bytes([elf[0x12], elf[0x13]]),
        183,
        "EM_AARCH64"
    );

    let host = FakeRoot::with_tools(&["grep"]);
    let copy_dir = "/var/lib/skyhook/qemu/arm-1.0.0";
    let cfg = serde_json::json!({
        "schema_version": "v1", "root_dir": "/", "expected_config_files": [],
        "package_name": "arm", "package_version": "1.0.0",
        "modes": {
            "apply": [
                crate::util::step("bash", "bash.sh", &["env:NODE_NAME"]),
                crate::util::step("rhai", "write.rhai", &[]),
            ],
            "apply-check": [crate::util::step("check", "check.rhai", &[])],
        }
    });
    host.write(
        &format!("{copy_dir}/config.json"),
        serde_json::to_vec_pretty(&cfg).expect("json"),
    );
    host.write_mode(
        &format!("{copy_dir}/skyhook_dir/bash.sh"),
        "#!/bin/bash\nset -e\nmkdir -p /etc/arm\necho \"bash on $1\" > /etc/arm/bash\necho bash step ran\n",
        0o755,
    );
    host.write(
        &format!("{copy_dir}/skyhook_dir/write.rhai"),
        "fs::write(\"/etc/arm/rhai\", \"rhai on \" + env(\"NODE_NAME\", \"?\") + \"\\n\", #{mode: 0o644});\nprint(\"rhai step ran\");\n",
    );
    host.write(
        &format!("{copy_dir}/skyhook_dir/check.rhai"),
        "if fs::read(\"/etc/arm/rhai\") != \"rhai on arm-node\\n\" { throw \"wrong\"; }\nprint(\"check ok\");\n",
    );
    let run = |mode: &str| {
        let mut cmd = Command::new("qemu-aarch64-static");
        cmd.arg(&agent)
            .args([mode, &host.root_str(), copy_dir])
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("NODE_NAME", "arm-node")
            .env("SKYHOOK_RESOURCE_ID", "qemu-0000-1_arm_1.0.0")
            .env("SKYHOOK_ROOT_DIR", "/var/lib/skyhook/qemu")
            .env("SKYHOOK_LOG_DIR", "/var/log/skyhook/qemu")
            .env("COPY_RESOLV", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_to_end(cmd.spawn().expect("spawn qemu-aarch64-static"))
    };
    let version = Command::new("qemu-aarch64-static")
        .arg(&agent)
        .arg("--version")
        .output()
        .expect("qemu --version");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.starts_with(&format!("skyhook-agent {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let r = run("apply");
    eprintln!("arm64 agent under qemu, apply:\n{}", r.all());
    r.code(0);
    assert_eq!(host.read("/etc/arm/bash"), "bash on arm-node\n");
    assert_eq!(host.read("/etc/arm/rhai"), "rhai on arm-node\n");
    assert!(
        r.stdout.contains("bash step ran") && r.stdout.contains("rhai step ran"),
        "{}",
        r.all()
    );
    let r = run("apply-check");
    eprintln!("arm64 agent under qemu, apply-check:\n{}", r.all());
    r.code(0);
    assert!(
        host.host("/var/lib/skyhook/qemu/flags/apply-check_ALL_CHECKED")
            .exists(),
        "{}",
        r.all()
    );
    // A rerun skips the done steps.
    host.write("/etc/arm/bash", "changed\n");
    run("apply").code(0);
    assert_eq!(host.read("/etc/arm/bash"), "changed\n");
}
