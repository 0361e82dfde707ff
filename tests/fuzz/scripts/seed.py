#!/usr/bin/env python3
"""Write the seed inputs of every fuzz target into seeds/<target>/ (from the repo's examples,
fixtures and stdlib, plus hand-written requests). Run from anywhere; then merge them into
corpus/<target>/ with `cargo fuzz cmin` (README.md)."""
import base64, glob, hashlib, json, os, sys

FUZZ = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(FUZZ))
MAX = 16 << 10  # skip larger files: they slow every run and add little


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX:
        return
    d = os.path.join(FUZZ, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def files(*patterns):
    for p in patterns:
        for f in sorted(glob.glob(os.path.join(REPO, p), recursive=True)):
            if os.path.isfile(f):
                yield f


def read(f):
    with open(f, "rb") as h:
        return h.read()


# config.json
for f in files("examples/*/config.json", "tests/fixtures/*/config.json"):
    put("config_json", read(f))

# interrupt payloads
for p in [{"type": "no_op"}, {"type": "node_restart"}, {"type": "restart_all_services"},
          {"type": "script_interrupt"}, {"type": "service_restart", "services": ["containerd", "kubelet"]},
          {"type": "service_restart"}, {"type": "reboot"}, {"nope": 1}]:
    put("interrupt", b"\x00" + base64.b64encode(json.dumps(p).encode()))
    put("interrupt", b"\x01" + json.dumps(p).encode())
put("interrupt", b"\x00not base64!")

# configMaps: every example configMap as kv text and as grub text
PREFIX = 'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT}'
for f in files("examples/*/configmaps/*", "tests/fixtures/*/configmaps/*"):
    put("configmap_kv", read(f))
put("configmap_kv", "x = 1\n# c\n\n y=2 \nk=v=w\r\n")
put("configmap_kv", "k=v\n# ok\nnovalue\n")
put("configmap_grub", PREFIX + ' hugepagesz=1G hugepages=2"\n')
put("configmap_grub", "# drop-in\n" + PREFIX + '"\n')
put("configmap_grub", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n')

# TOML edit: key line, JSON value line, document
containerd = [read(f).decode() for f in files("examples/**/*.toml", "tests/**/*.toml")]
docs = containerd + [
    'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc"\n',
    "# top\na = 1 # one\n[t]\nb = \"x\"\n[[arr]]\nn = 1\n[[arr]]\nn = 2\n",
    "a = { b = 1, c = [1, 2] }\r\nd.e = true\r\n",
    "",
]
for key, value in [("version", 2), ('plugins."io.containerd.grpc.v1.cri".containerd.default_runtime_name', "nvidia"),
                   ("t", {"c": [1.5, "s"]}), ("a.b", 2), ("arr", [{"n": 3}]), ("d.e", False), ("x.y.z", "new")]:
    for doc in docs:
        put("toml_edit", f"{key}\n{json.dumps(value)}\n{doc}")

# Rhai scripts
for f in files("examples/**/*.rhai", "stdlib/**/*.rhai", "tests/fixtures/**/*.rhai"):
    put("rhai_lint", read(f))
put("rhai_lint", "let x = ;")
put("rhai_lint", 'import "skyhook/containerd" as c;\nfs::write("/etc/x", "y", #{mode: 0o644, bogus: 1});\n')

# serve: start bodies, and whole HTTP requests carrying them
bodies = [
    {"id": "sh-1", "kind": "sh", "command": "true"},
    {"id": "r-1", "kind": "sh", "command": "touch /tmp/x", "workdir": "/tmp", "timeout_s": 5, "env": {"A": "1"}},
    {"id": "r-3", "kind": "sh", "command": "true", "bogus": 1},
    {"id": "bad id!", "kind": "sh", "command": "true"},
    {"id": "r-4", "kind": "rhai", "script": "let x = ;"},
    {"id": "r-5", "kind": "rhai", "mode": "plan", "script": 'fs::write("/etc/x", "y");', "script_name": "x.rhai"},
    {"id": "s-1", "kind": "sh", "command": "echo $PW", "secrets": [{"env": "PW", "name": "db", "key": "password"}]},
    {"id": "s-2", "kind": "sh", "command": "true", "secrets": [{"env": "PW", "name": "other", "key": "k"}]},
    {"id": "w-1", "kind": "sh", "command": "true", "workdir": "/nonexistent-dir"},
]
for b in bodies:
    put("serve_start", json.dumps(b))


def request(method, path, body=None, token="fuzz-token", extra=""):
    head = f"{method} {path} HTTP/1.1\r\nHost: node\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    head += extra
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body.encode())}\r\n"
    return head + "\r\n" + (body or "")


reqs = [request("GET", "/v1/health", token=None), request("POST", "/v1/health"),
        request("GET", "/v1/executions/sh-1"), request("GET", "/v1/executions/sh-1/events?after=3"),
        request("GET", "/v1/executions/sh-1/events?after=-1"),
        request("POST", "/v1/executions/sh-1/cancel", json.dumps({"grace_s": 1})),
        request("DELETE", "/v1/executions"), request("GET", "/v1/executions/sh-1", token="wrong"),
        request("POST", "/v1/executions", "{\"id\":", extra="") ,
        request("POST", "/v1/executions", "x" * 10, extra="Transfer-Encoding: chunked\r\n")]
reqs += [request("POST", "/v1/executions", json.dumps(b)) for b in bodies[:6]]
reqs.append(reqs[0] + reqs[2] + reqs[5])  # pipelined
for r in reqs:
    put("serve_http", r)
