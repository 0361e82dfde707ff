#!/usr/bin/env python3
"""image-meta.py — the JSON that scripts/build-image.sh writes around the image.

  image-meta.py sbom TARGET... > sbom.cdx.json
      CycloneDX 1.5 JSON of the crates in the build graph of the shipped binaries for those
      targets: Cargo.lock entries reached from the package through normal and build
      dependencies (`cargo metadata --locked --offline --filter-platform TARGET`), dev
      dependencies and other platforms' crates left out. Each component: name, version,
      purl (pkg:cargo/NAME@VERSION), license expression (Cargo.toml `license`, old `A/B`
      read as `A OR B`), SHA-256 of the .crate (Cargo.lock `checksum`) and the property
      skyhook:linkage = `linked` (in the binaries) or `build` (build scripts, proc macros).
      Timestamp and serial number derive from SOURCE_DATE_EPOCH and the commit, so the file
      is the same for every build of a commit.
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


def sbom(targets):
    if not targets:
        die("sbom: name at least one target")
    try:
        with open("Cargo.lock", "rb") as f:
            lock = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        die(f"Cargo.lock: {e}")
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock.get("package", [])}

    packages, kinds = {}, {}  # id -> package; id -> "linked" | "build"
    edges = {}
    root = None
    for target in targets:
        try:
            out = subprocess.run(
                ["cargo", "metadata", "--locked", "--offline", "--format-version", "1",
                 "--filter-platform", target],
                capture_output=True, text=True, check=True,
            ).stdout
        except subprocess.CalledProcessError as e:
            die(f"cargo metadata --filter-platform {target} failed: {e.stderr.strip()}")
        meta = json.loads(out)
        root = meta["resolve"]["root"]
        pkgs = {p["id"]: p for p in meta["packages"]}
        nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}

        def is_proc_macro(pid):
            return any("proc-macro" in t["kind"] for t in pkgs[pid]["targets"])

        # Walk: (id, linked?) — a build dependency or a proc macro, and all below it, run at
        # build time only.
        todo, seen = [(root, True)], set()
        while todo:
            pid, linked = todo.pop()
            if (pid, linked) in seen:
                continue
            seen.add((pid, linked))
            if pid != root:
                packages[pid] = pkgs[pid]
                if linked or kinds.get(pid) != "linked":
                    kinds[pid] = "linked" if linked else kinds.get(pid, "build")
            for dep in nodes[pid]["deps"]:
                dk = {k["kind"] for k in dep["dep_kinds"]}
                if dk <= {"dev"}:
                    continue
                child = dep["pkg"]
                edges.setdefault(pid, set()).add(child)
                child_linked = linked and None in dk and not is_proc_macro(child)
                todo.append((child, child_linked))

    if root is None:
        die("sbom: cargo metadata gave no root package")
    rev = git("rev-parse", "HEAD") or "unknown"
    version = next((p["version"] for p in lock["package"] if p["name"] == "skyhook"), "0.0.0")
    components = []
    for pid in sorted(packages, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[pid]
        c = {
            "type": "library",
            "bom-ref": f"pkg:cargo/{p['name']}@{p['version']}",
            "name": p["name"],
            "version": p["version"],
            "purl": f"pkg:cargo/{p['name']}@{p['version']}",
            "properties": [{"name": "skyhook:linkage", "value": kinds[pid]}],
        }
        lic = spdx(p.get("license"))
        if lic:
            c["licenses"] = [{"expression": lic}]
        elif p.get("license_file"):
            c["licenses"] = [{"license": {"name": f"see {p['license_file']}"}}]
        sum_ = checksums.get((p["name"], p["version"]))
        if sum_:
            c["hashes"] = [{"alg": "SHA-256", "content": sum_}]
        if p.get("description"):
            c["description"] = " ".join(p["description"].split())
        components.append(c)
    ref = lambda pid: (  # noqa: E731
        f"pkg:cargo/{packages[pid]['name']}@{packages[pid]['version']}" if pid != root
        else "skyhook-agent"
    )
    dependencies = [
        {"ref": ref(pid), "dependsOn": sorted(ref(c) for c in children if c in packages)}
        for pid, children in sorted(edges.items(), key=lambda kv: ref(kv[0]))
        if pid == root or pid in packages
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
