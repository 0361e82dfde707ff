//! The agent image, run the way the operator runs it (issue 12).
//!
//! The image is not built here (a static LTO release takes minutes): `.ci/run` runs
//! `scripts/build-image.sh` first, which writes an OCI layout to `target/image/oci`, and the
//! tests use it, or the layout named by `SKYHOOK_IMAGE` (`PATH[:TAG]` or the script's
//! `oci:PATH:TAG`). Without root, `umoci`, `unshare`, `mount`, `chroot` or the layout, every
//! test here prints `SKIPPED ...` and passes.
//!
//! Once per test binary, the layout is unpacked with `umoci unpack` (digests verified) and the
//! entrypoint and environment are read from the image config, as a container runtime does.
//! Each run then enters a private mount namespace (`unshare -m`, propagation private), makes
//! the image rootfs read-only (the agent must not need a writable image filesystem), mounts
//! what the kubelet mounts for the operator's pod (`/proc`, `/dev`; the throwaway host root
//! at `/root`; the node-metadata and configMap volumes, in the configMap `..data` layout,
//! under `/skyhook-package`) and `chroot`s into the rootfs to exec the entrypoint with the
//! operator's arguments (`MODE /root COPY_DIR`, `interrupt /root COPY_DIR PAYLOAD`) and
//! environment (agent-contract.md 1.1: package env, then `SKYHOOK_LOG_DIR`,
//! `SKYHOOK_ROOT_DIR`, `COPY_RESOLV=false`, `SKYHOOK_RESOURCE_ID`, `SKYHOOK_NODE_ORDER`).
//! The package's init container (`mkdir -p /root/$SKYHOOK_DIR && cp -r /skyhook-package/*
//! /root/$SKYHOOK_DIR`) is reproduced with the machine's `sh` and `cp` beforehand. Every run
//! is bounded by the harness's timeout.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::util::{FakeRoot, Run, copy_tree, run_to_end};

/// The Skyhook resource the runs belong to.
const SKYHOOK: &str = "gpu-init";
const UID: &str = "5e0c2a4f-8d1b-4c2e-9f00-1a2b3c4d5e6f";
const GENERATION: &str = "3";

/// An unpacked image: its rootfs and what a runtime takes from its config.
struct Image {
    _dir: tempfile::TempDir,
    rootfs: PathBuf,
    /// Entrypoint followed by Cmd.
    argv: Vec<String>,
    /// `Env` of the image config, `KEY=VALUE`.
    env: Vec<String>,
    /// The image config (`config` object: Labels, Entrypoint, ...).
    config: Value,
    /// Reference unpacked (`PATH:TAG`), for messages.
    reference: String,
    /// The layer blobs, in order.
    layers: Vec<PathBuf>,
}

/// The unpacked image, or why the image tests cannot run here.
fn image() -> Result<&'static Image, &'static str> {
    static IMAGE: OnceLock<Result<Image, String>> = OnceLock::new();
    IMAGE
        .get_or_init(unpack_image)
        .as_ref()
        .map_err(|e| e.as_str())
}

/// Skip the current test loudly unless the image can be run here; else the image.
macro_rules! require_image {
    () => {{
        require_root!();
        match image() {
            Ok(img) => img,
            Err(why) => {
                eprintln!(
                    "SKIPPED {}: {why}",
                    std::thread::current().name().unwrap_or("?")
                );
                return;
            }
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

fn unpack_image() -> Result<Image, String> {
    for tool in ["umoci", "unshare", "mount", "chroot"] {
        if !have(tool) {
            return Err(format!(
                "{tool} is not installed (the image tests need umoci, unshare, mount and chroot; .ci/run installs them)"
            ));
        }
    }
    let (layout, tag) = locate()?;
    let index = read_json(&layout.join("index.json"))?;
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let name_of = |m: &Value| {
        m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(str::to_string)
    };
    let manifest = match &tag {
        Some(t) => manifests
            .iter()
            .find(|m| name_of(m).as_deref() == Some(t.as_str())),
        None => manifests.first(),
    }
    .ok_or_else(|| format!("{}: no manifest {tag:?} in index.json", layout.display()))?;
    let tag = name_of(manifest).ok_or("the image's manifest has no ref.name")?;
    let reference = format!("{}:{tag}", layout.display());

    // The image config, as a runtime reads it.
    let m = read_json(&blob(&layout, manifest["digest"].as_str().unwrap_or("")))?;
    let cfg = read_json(&blob(&layout, m["config"]["digest"].as_str().unwrap_or("")))?;
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
    // Mount points, as the container runtime creates them.
    for d in [
        "root",
        "proc",
        "dev",
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
        argv,
        env,
        config,
        reference,
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

    /// Exec `argv + args` of the image in a private mount namespace, chrooted into its
    /// read-only rootfs, with the pod's mounts and environment.
    fn exec(&self, img: &Image, args: &[&str], package_pod: bool) -> Run {
        self.exec_argv(img, &img.argv, args, package_pod)
    }

    fn exec_argv(&self, img: &Image, argv: &[String], args: &[&str], package_pod: bool) -> Run {
        let mut setup = String::from(
            r#"set -e
rfs=$1 host=$2 vols=$3 pkg=$4 cm=$5; shift 5
mount --make-rprivate /
mount --bind "$rfs" "$rfs"
mount -o remount,bind,ro "$rfs"
mount -t proc proc "$rfs/proc"
mount --bind /dev "$rfs/dev"
mount --bind "$host" "$rfs/root"
"#,
        );
        setup.push_str(
            r#"if [ "$pkg" = 1 ]; then
  mount --bind -o ro "$vols/node-metadata" "$rfs/skyhook-package/node-metadata"
  if [ "$cm" = 1 ]; then mount --bind -o ro "$vols/configmaps" "$rfs/skyhook-package/configmaps"; fi
fi
exec chroot "$rfs" "$@""#,
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c", &setup, "pod"])
            .arg(&img.rootfs)
            .arg(self.host.root())
            .arg(self.volumes.path())
            .arg(if package_pod { "1" } else { "0" })
            .arg(if self.has_configmaps { "1" } else { "0" })
            .args(argv)
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The container's environment: the image's Env, then the pod's. `sh`, `mount` and
        // `chroot` are the machine's: they run before the chroot with the image PATH
        // extended by the machine's directories.
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
        let image_path = env.get("PATH").cloned();
        cmd.envs(&env);
        if image_path.is_none() {
            cmd.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        }
        run_to_end(cmd.spawn().expect("spawn unshare"))
    }
}

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
