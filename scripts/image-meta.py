#!/usr/bin/env python3
"""image-meta.py — the JSON that scripts/build-image.sh writes around the image.

  image-meta.py sbom TARGET... > sbom.cdx.json
      CycloneDX 1.5 JSON of the crates the build of the shipped binaries compiles for those
      targets: `cargo tree --offline -e normal,build --target TARGET`, which resolves
      features as `cargo build` does and reads only those crates' manifests, so it needs no
      more in CARGO_HOME than the build downloaded (not the dev-dependencies; run it after
      the build). Optional dependencies cargo's resolver keeps but the build does not
      compile (enabled only by weak `dep?/feature`s or dev-dependencies' features) are left
      out; cargo-auditable's `.dep-v0` list, from `cargo metadata`, still names them. Each
      component: name, version, purl (pkg:cargo/NAME@VERSION), license expression (Cargo.toml
      `license`, old `A/B` read as `A OR B`), SHA-256 of the .crate (Cargo.lock `checksum`)
      and the property skyhook:linkage = `linked` (in the binaries) or `build` (build
      scripts, proc macros). Timestamp and serial number derive from SOURCE_DATE_EPOCH and
      the commit, so the file is the same for every build of a commit.
  image-meta.py index LAYOUT TAG ARCH=REF... [KEY=VALUE annotations via ANNOTATE_*]
      Writes an OCI image index blob listing the per-architecture manifests tagged REF in
      LAYOUT/index.json (platform linux/ARCH) and tags it TAG in index.json. Prints its digest.
  image-meta.py attach LAYOUT SUBJECT_TAG FILE ARTIFACT_TYPE TAG
      Writes FILE as a blob and an OCI 1.1 artifact manifest (empty config, one layer of
      ARTIFACT_TYPE, `subject` = the manifest tagged SUBJECT_TAG) and tags it TAG.
  image-meta.py provenance LAYOUT TAG BIN_DIR... > provenance.intoto.json
      in-toto Statement v1, SLSA provenance v1 predicate: subjects = the binaries under each
      BIN_DIR (ARCH:DIR) and the index and manifests of TAG; resolved dependencies = the git
      commit, Cargo.lock, the toolchains (DIR/toolchain.txt); the commands run.

Errors name the file and what is wrong, and exit 1.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
import uuid
from datetime import datetime, timezone

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY = "application/vnd.oci.empty.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


def die(msg):
    print(f"image-meta.py: {msg}", file=sys.stderr)
    sys.exit(1)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def created():
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or 0)
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git(*args):
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


# ------------------------------------------------------------------------------------------
# SBOM


def spdx(expr):
    if not expr:
        return None
    return " OR ".join(p.strip() for p in expr.split("/")) if "/" in expr else expr


def cargo_tree(target, edges):
    """Each line of `cargo tree --no-dedupe -e EDGES --target TARGET` as its path from the
    root: a list of ((name, version), license or "", is_proc_macro). Offline and locked: the
    build fetched every crate of its graph; dies naming the target when cargo fails."""
    cmd = ["cargo", "tree", "--locked", "--offline", "--no-dedupe", "-e", edges,
           "--target", target, "--prefix", "depth", "--charset", "ascii",
           "--format", "{p}|{l}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        die(f"{' '.join(cmd[:-2])} failed (run after the build, which downloads these crates):"
            f" {getattr(e, 'stderr', None) or e}".strip())
    path = []
    for line in out.splitlines():
        # DEPTH NAME vVERSION[ (SOURCE)][ (proc-macro)]|LICENSE
        m = re.fullmatch(r"(\d+)(\S+) v(\S+)(.*)\|(.*)", line)
        if not m or int(m.group(1)) > len(path):
            die(f"cargo tree --target {target}: unexpected line {line!r}")
        depth, name, version, rest, lic = m.groups()
        del path[int(depth):]
        path.append(((name, version), lic.strip(), rest.endswith(" (proc-macro)")))
        yield path


def sbom(targets):
    if not targets:
        die("sbom: name at least one target")
    try:
        with open("Cargo.lock", "rb") as f:
            lock = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        die(f"Cargo.lock: {e}")
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock.get("package", [])}

    # Per target, `cargo tree` resolves the graph as `cargo build --bins` does (normal and
    # build edges, that target's platform, features as the build unifies them) and reads
    # only those crates' manifests, which the build downloaded: `cargo metadata` would need
    # every Cargo.lock crate, dev-dependencies included, in CARGO_HOME (issue 29).
    # `--no-dedupe` prints each path in full, so a line's ancestors are its whole path.
    packages, kinds = {}, {}  # (name, version) -> license; (name, version) -> "linked" | "build"
    edges = {}
    root = None
    for target in targets:
        # Every crate of the build graph, its license, and its dependencies (normal, build).
        for path in cargo_tree(target, "normal,build"):
            key, lic, _ = path[-1]
            if len(path) == 1:
                root = key
                continue
            packages[key] = lic
            kinds.setdefault(key, "build")
            edges.setdefault(path[-2][0], set()).add(key)
        # Linked: reached from the root through normal edges alone, no proc macro on the way
        # (a proc macro and everything below it run inside the compiler).
        for path in cargo_tree(target, "normal"):
            if len(path) > 1 and not any(proc for _, _, proc in path):
                kinds[path[-1][0]] = "linked"

    if root is None:
        die("sbom: cargo tree gave no root package")
    rev = git("rev-parse", "HEAD") or "unknown"
    version = next((p["version"] for p in lock["package"] if p["name"] == "skyhook"), "0.0.0")
    components = []
    for key in sorted(packages):
        name, version_ = key
        purl = f"pkg:cargo/{name}@{version_}"
        c = {
            "type": "library",
            "bom-ref": purl,
            "name": name,
            "version": version_,
            "purl": purl,
            "properties": [{"name": "skyhook:linkage", "value": kinds[key]}],
        }
        lic = spdx(packages[key])
        if lic:
            c["licenses"] = [{"expression": lic}]
        sum_ = checksums.get(key)
        if sum_:
            c["hashes"] = [{"alg": "SHA-256", "content": sum_}]
        components.append(c)
    ref = lambda key: (  # noqa: E731
        f"pkg:cargo/{key[0]}@{key[1]}" if key != root else "skyhook-agent"
    )
    dependencies = [
        {"ref": ref(key), "dependsOn": sorted(ref(c) for c in children if c in packages)}
        for key, children in sorted(edges.items(), key=lambda kv: ref(kv[0]))
        if key == root or key in packages
    ]
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'skyhook-agent sbom ' + rev + ' ' + ' '.join(targets))}",
        "version": 1,
        "metadata": {
            "timestamp": created(),
            "tools": {"components": [{"type": "application", "name": "scripts/image-meta.py"}]},
            "component": {
                "type": "application",
                "bom-ref": "skyhook-agent",
                "name": "skyhook-agent",
                "version": version,
                "purl": f"pkg:cargo/skyhook@{version}",
                "properties": [{"name": "skyhook:targets", "value": " ".join(targets)},
                               {"name": "skyhook:revision", "value": rev}],
            },
        },
        "components": components,
        "dependencies": dependencies,
    }


# ------------------------------------------------------------------------------------------
# OCI layout


def load_index(layout):
    path = os.path.join(layout, "index.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")


def save_index(layout, index):
    path = os.path.join(layout, "index.json")
    with open(path + ".tmp", "w") as f:
        json.dump(index, f, indent=None, separators=(",", ":"))
    os.replace(path + ".tmp", path)


def put_blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return f"sha256:{digest}", len(data)


def tagged(layout, index, tag):
    for m in index.get("manifests", []):
        if m.get("annotations", {}).get(REF_NAME) == tag:
            return m
    die(f"{layout}/index.json: no manifest tagged {tag!r}")


def retag(index, desc, tag):
    index["manifests"] = [
        m for m in index.get("manifests", [])
        if m.get("annotations", {}).get(REF_NAME) != tag
    ] + [dict(desc, annotations=dict(desc.get("annotations", {}), **{REF_NAME: tag}))]


def canonical(obj):
    return json.dumps(obj, indent=None, separators=(",", ":"), sort_keys=True).encode()


def make_index(layout, tag, pairs):
    index = load_index(layout)
    manifests = []
    for pair in pairs:
        arch, _, ref = pair.partition("=")
        if not ref:
            die(f"index: expected ARCH=TAG, got {pair!r}")
        m = tagged(layout, index, ref)
        manifests.append({
            "mediaType": m["mediaType"], "digest": m["digest"], "size": m["size"],
            "platform": {"architecture": arch, "os": "linux"},
        })
    annotations = {
        k[len("ANNOTATE_"):].lower().replace("_", "."): v
        for k, v in sorted(os.environ.items()) if k.startswith("ANNOTATE_")
    }
    body = {"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}
    if annotations:
        body["annotations"] = annotations
    digest, size = put_blob(layout, canonical(body))
    retag(index, {"mediaType": INDEX, "digest": digest, "size": size}, tag)
    save_index(layout, index)
    return digest


def attach(layout, subject_tag, path, artifact_type, tag):
    index = load_index(layout)
    subject = tagged(layout, index, subject_tag)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"attach: {path}: {e}")
    layer, layer_size = put_blob(layout, data)
    empty, empty_size = put_blob(layout, b"{}")
    body = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY, "digest": empty, "size": empty_size},
        "layers": [{
            "mediaType": artifact_type, "digest": layer, "size": layer_size,
            "annotations": {"org.opencontainers.image.title": os.path.basename(path)},
        }],
        "subject": {"mediaType": subject["mediaType"], "digest": subject["digest"],
                    "size": subject["size"]},
        "annotations": {"org.opencontainers.image.created": created()},
    }
    digest, size = put_blob(layout, canonical(body))
    retag(index, {"mediaType": MANIFEST, "digest": digest, "size": size,
                  "artifactType": artifact_type}, tag)
    save_index(layout, index)
    return digest


# ------------------------------------------------------------------------------------------
# Provenance


def provenance(layout, tag, bin_dirs):
    index = load_index(layout)
    top = tagged(layout, index, tag)
    subjects = [{"name": f"image index {tag}", "digest": {"sha256": top["digest"][7:]}}]
    with open(os.path.join(layout, "blobs", "sha256", top["digest"][7:])) as f:
        for m in json.load(f)["manifests"]:
            arch = m["platform"]["architecture"]
            subjects.append({"name": f"image manifest linux/{arch}",
                             "digest": {"sha256": m["digest"][7:]}})
    toolchains = []
    for spec in bin_dirs:
        arch, _, d = spec.partition(":")
        for b in ("skyhook-agent", "skyhook-run"):
            p = os.path.join(d, b)
            if not os.path.isfile(p):
                die(f"provenance: {p} is missing")
            subjects.append({"name": f"linux/{arch}/{b}", "digest": {"sha256": sha256_file(p)}})
        try:
            with open(os.path.join(d, "toolchain.txt")) as f:
                toolchains.append((arch, f.read()))
        except FileNotFoundError:
            # Binaries built elsewhere (PREBUILT_<arch>) without the record: say so.
            toolchains.append((arch, "recorded: no (no toolchain.txt next to the binaries)\n"))
        except OSError as e:
            die(f"provenance: {e}")
    commit = git("rev-parse", "HEAD")
    source = os.environ.get("IMAGE_SOURCE") or git("remote", "get-url", "origin") or "unknown"
    deps = []
    if commit:
        deps.append({"uri": f"git+{source}", "digest": {"gitCommit": commit}})
    deps.append({"name": "Cargo.lock", "digest": {"sha256": sha256_file("Cargo.lock")}})
    deps.append({"name": "Containerfile", "digest": {"sha256": sha256_file("Containerfile")}})
    for arch, text in toolchains:
        tc = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        deps.append({
            "name": f"toolchain linux/{arch}",
            "annotations": {k: v for k, v in tc.items() if k in (
                "release", "commit-hash", "host", "LLVM version", "cargo", "cargo-auditable",
                "linker", "recorded")},
        })
    ca = os.path.realpath("/etc/ssl/certs/ca-certificates.crt")
    if os.path.isfile(ca):
        deps.append({"name": "ca-certificates.crt", "digest": {"sha256": sha256_file(ca)}})
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": subjects,
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": f"{source}#scripts/build-image.sh",
                "externalParameters": {
                    "source": source, "revision": commit, "tag": tag,
                    "platforms": [f"linux/{s.partition(':')[0]}" for s in bin_dirs],
                },
                "internalParameters": {
                    "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", ""),
                    "commands": [
                        "scripts/build-static.sh TARGET  # cargo auditable build --locked "
                        "--release --target TARGET --bins, RUSTFLAGS +crt-static and "
                        "--remap-path-prefix",
                        "umoci init/new/raw add-layer/config (Containerfile, one layer per COPY)",
                        "scripts/image-meta.py index/sbom/attach/provenance",
                    ],
                },
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": os.environ.get(
                    "BUILDER_ID", f"{source}#.ci/run")},
                "metadata": {"invocationId": os.environ.get("BUILD_ID", ""),
                             "finishedOn": datetime.now(timezone.utc).strftime(
                                 "%Y-%m-%dT%H:%M:%SZ")},
            },
        },
    }


def main(argv):
    if len(argv) < 2:
        die("usage: image-meta.py sbom|index|attach|provenance ...")
    cmd, args = argv[1], argv[2:]
    if cmd == "sbom":
        json.dump(sbom(args), sys.stdout, indent=2)
        print()
    elif cmd == "index" and len(args) >= 3:
        print(make_index(args[0], args[1], args[2:]))
    elif cmd == "attach" and len(args) == 5:
        print(attach(*args))
    elif cmd == "provenance" and len(args) >= 3:
        json.dump(provenance(args[0], args[1], args[2:]), sys.stdout, indent=2)
        print()
    else:
        die(f"bad arguments for {cmd!r}: {' '.join(args)}")


if __name__ == "__main__":
    main(sys.argv)
