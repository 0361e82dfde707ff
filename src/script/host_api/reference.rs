//! The reference of the host API: the namespace files' rows gathered in reference order
//! ([`FUNCTIONS`], [`NAMESPACES`]), the script layer's own functions ([`SCRIPT_FUNCTIONS`]),
//! and the generators of the script authors' reference (`docs/host-api.md`,
//! [`render_markdown`]) and of the editor definitions file (`docs/skyhook.d.rhai`,
//! [`render_definitions`]), and of the README's list of the functions and namespaces
//! ([`render_readme_list`]).
//!
//! Tests check that the generated files and the README's list are up to date. Regenerate them with
//! `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`.

use std::fmt::Write as _;

use crate::host::api::FnDoc;
use crate::host::api::define::{concat, total};

/// The list of areas: the modules whose table of host functions (`HOST_FNS`, or the script
/// layer's `SCRIPT_FNS` for `changed()`) the reference gathers, in reference order
/// ([`AREAS`]). A module's table left out is dead code, which the build rejects; a test
/// checks that every file with a table is listed.
macro_rules! areas {
    ($($($seg:ident)::+ $([$table:ident])?),+ $(,)?) => {
        /// The areas' tables by module path, in reference order.
        pub(crate) const AREAS: &[(&str, &[FnDoc])] = &[
            $((stringify!($($seg)::+), areas!(@table $($seg)::+ $(, $table)?))),+
        ];
    };
    (@table $($seg:ident)::+) => { $($seg)::+::HOST_FNS };
    (@table $($seg:ident)::+, $table:ident) => { $($seg)::+::$table };
}

areas!(
    crate::host::system::cmd,
    crate::host::secrets,
    crate::script::bindings[SCRIPT_FNS],
    crate::host::files::fs,
    crate::host::files::realpath,
    crate::host::files::copy_tree,
    crate::host::files::archive,
    crate::host::fetch::download,
    crate::host::services::service,
    crate::host::services::tuned,
    crate::host::packages::pkg,
    crate::host::packages::pkgrepo,
    crate::host::system::os,
    crate::host::system::libs,
    crate::host::kernel::tuning,
    crate::host::kernel::sysctl_record,
    crate::host::kernel::interrupt,
    crate::host::files::config,
    crate::host::mounts::mount,
    crate::host::mounts::disk,
    crate::host::mounts::raid,
    crate::host::mounts::unit,
    crate::host::kernel::boot,
    crate::host::kernel::gpu,
    crate::host::kernel::dkms,
    crate::host::kernel::kmod,
    crate::host::files::toml,
    crate::host::files::json,
    crate::host::files::ini,
    crate::host::files::text,
    crate::host::users::user,
    crate::host::users::group,
    crate::host::packages::version,
);

/// The namespace files' sections, in reference order.
const NAMESPACE_PARTS: &[&[(&str, &str, &str)]] = &[
    crate::host::system::cmd::NAMESPACES,
    crate::host::files::fs::NAMESPACES,
    crate::host::services::service::NAMESPACES,
    crate::host::packages::pkg::NAMESPACES,
    crate::host::system::os::NAMESPACES,
    crate::host::kernel::tuning::NAMESPACES,
    crate::host::kernel::interrupt::NAMESPACES,
    crate::host::files::config::NAMESPACES,
    crate::host::mounts::mount::NAMESPACES,
    crate::host::kernel::kmod::NAMESPACES,
    crate::host::files::structured::NAMESPACES,
    crate::host::files::text::NAMESPACES,
    crate::host::users::user::NAMESPACES,
    crate::host::packages::version::NAMESPACES,
];

/// The areas' tables, without their paths.
const FUNCTION_PARTS: [&[FnDoc]; AREAS.len()] = {
    let mut out: [&[FnDoc]; AREAS.len()] = [&[]; AREAS.len()];
    let mut i = 0;
    while i < AREAS.len() {
        out[i] = AREAS[i].1;
        i += 1;
    }
    out
};

static ALL_FUNCTIONS: [FnDoc; total(&FUNCTION_PARTS)] = concat(&FUNCTION_PARTS);
const ALL_NAMESPACES: [(&str, &str, &str); total(NAMESPACE_PARTS)] = concat(NAMESPACE_PARTS);

/// Every host function scripts can call, in reference order (namespaces in the order of
/// [`NAMESPACES`]); gathered from the namespace files, each row next to its binding.
pub static FUNCTIONS: &[FnDoc] = &ALL_FUNCTIONS;

/// Namespaces in reference order, with a heading and an introduction.
pub const NAMESPACES: &[(&str, &str, &str)] = &ALL_NAMESPACES;

/// The script layer's own functions besides `changed()` (which is in [`FUNCTIONS`]): the
/// step context, the environment, output and `fail`, each a `script_fn!` item beside its
/// code. Registered by the script runner, not by [`super::HostApi`]; listed in the reference
/// and the editor definitions, and known to the static checker ([`crate::script::lint`]).
/// Tests check each one is registered.
pub static SCRIPT_FUNCTIONS: &[FnDoc] = &ALL_SCRIPT_FUNCTIONS;

const SCRIPT_PARTS: &[&[FnDoc]] = &[
    crate::script::context::SCRIPT_FNS,
    crate::script::errors::SCRIPT_FNS,
    crate::script::output::SCRIPT_FNS,
];
static ALL_SCRIPT_FUNCTIONS: [FnDoc; total(SCRIPT_PARTS)] = concat(SCRIPT_PARTS);

const INTRO: &str = "\
<!-- Generated from the host_fn! rows of src/script/host_api/ (one file per namespace) by
     `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`. Do not edit. -->

# Host API reference for step scripts

Lifecycle steps written in Rhai (`.rhai`) reach the host only through the functions below.
The same script runs in three modes: **apply** (the agent's normal modes and
`skyhook-run --apply`), **plan** (`skyhook-run` without `--apply`: nothing on the host
changes, the report shows what would) and **check** (an agent `*-check` mode running an
apply script: what would change is drift, and the check fails).

## Rules every function follows

- **Paths are host paths.** `/etc/sysctl.d/x.conf` means that file on the node, resolved
  inside the host root as if chrooted: neither `..` nor a symlink can lead outside it. A
  relative path is an error (`paths must be absolute`).
- **Trees are written through a handle, never by path text.** `fs::extract` and
  `fs::copy_tree` open their destination (and `copy_tree`'s source, and the extract's
  staging directory) once, before checking anything, and every read and write below it goes
  through that handle, following no symlink below it (pathrs, `openat2` with
  `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS`). So a symlink placed
  before or during the call, by the archive itself or by a racing user, never redirects a
  write: a directory swapped for a symlink fails the write naming it, and a destination
  renamed away and replaced by a symlink still gets the entries in the directory that was
  checked. A destination the call creates is opened right after it is made, and a
  symlink found in its place then (a racing user's) is refused, not followed: the call
  fails naming it and nothing is written below it. Until then its nearest existing
  ancestor (other than `/`) is held the same way, so the directories the call makes on the
  way follow no symlink swapped in meanwhile either.
- **Mutations report whether they changed something.** `true` means the host was not yet
  in the desired state and now is (or, in plan mode, would be); `false` means nothing had to
  be done. Running a script twice changes nothing the second time, and `changed()` counts
  the changes of the step so far.
- **Changes and actions.** A *change* brings the host to a desired state and happens only
  when the state differs. An *action* (`service::restart`, `run`, `sh`, ...) happens every
  time it is called; it is never drift. Make an action depend on a change:
  `if fs::write(p, text) { service::restart(\"x\"); }`. A command with a guard is a change:
  `run([\"useradd\", \"gpuops\"], #{unless: [\"id\", \"gpuops\"]})` runs only while
  `id gpuops` fails, and a check reports it as drift until then.
- **A plan is the same code path.** In plan and check mode mutations are recorded instead of
  performed, and later reads see them, so a script that writes and then reads behaves the
  same. Commands are recorded, not run, unless marked `read_only` (or run with `query`).
  What a recorded command would change is unknown: in a plan (not a check), the first
  later call, in that step or a later one of the same dry run or preflight, that reads
  what the command may have touched (a path its arguments or a shell script's text name,
  or under it, a directory listed above one, its `creates`/`removes` path, and any path
  that does not exist: the command may have made it) is listed as unknown (`? unknown:
  fs::chmod: /etc/x is unknown in the plan: the command ... is only run by the apply and
  may change it`) and the plan of that step ends there, not as a failure: the rest of the
  step is only checked statically. An existing path the command does not name is planned
  as it is now, but after any command the plan did not run (`run`, `sh`, and the package,
  service, mount, module, grub and tuned functions, whose programs the plan does not run
  either) a later call of the plan that fails in a way that depends on the host (a missing
  or wrong-kind path, an unknown user, a program not found, ...) is unknown the same way
  (`? unknown: fs::write: unknown in the plan: <its error>, as the host is before <the
  first such command> (planned at file:line), which only the apply runs ...`), not a
  failure: the apply runs the command first. A bad argument, a script error or `fail()`
  still fails. After a package install or removal or a `run`/`sh` command the plan did not
  run, a query of package or service state (`pkg::installed`, `pkg::version`,
  `service::is_active`, `is_enabled`, `show`, and the ones `pkg::install`, `pkg::remove` and
  the `service::` changes make to decide; after a `pkg::upgrade`, a query of a version:
  `pkg::version`, a pinned install) is not run and is unknown the same way (`?
  unknown: service::enable: the answer of systemctl is-enabled tuned is unknown in the plan:
  install packages tuned (apt) (planned at apply.rhai:4) is only run by the apply and may
  change it`), unless the plan itself planned that package's or unit's state, which then
  answers: an install's maintainer scripts enable and start units and pull in other
  packages, and a plan that followed the host's answer from before would plan, or `fail()`
  on, a branch the apply does not take. Planned file content past
  64 MiB in all is kept in an unlinked temporary file, and a diff over 1 MiB is shown as a
  one-line note, so a plan's memory stays bounded however many files it writes.
  A plan lists, per step and in the order they happened, the changes (with the directories
  a write creates, `+ mkdir /etc/motd.d`), actions, interrupts, unknown calls and the
  script's output, each change and action with the `file:line` of the call that made it;
  `--output json` follows `docs/plan.schema.json`.
- **Errors are script errors** at the call's `file:line:col`, naming the path or command,
  and they can be caught with `try`/`catch`. An uncaught one fails the step.
- **A failing command fails the step.** `run` and `sh` throw when the command exits with a
  code the script did not list in `ok` (0 when it lists none): `#{ok: [0, 1]}` for
  `grep -q`. A probe whose code the script reads is a `query`, which returns any code.
- **A failed step changes no file, and undoes only its own changes.** In apply mode every
  file a step changes (writes and line edits, drop-ins, directories, removals, trees, mode
  and owner, symlinks, downloads, the user and group databases, `/etc/fstab`) and every live
  `sysctl::set` value is first journaled with its state before (content, mode, owner,
  extended attributes, existence) and, for a content write, the digest of what the step
  writes, in `/var/lib/skyhook/.undo/`, made durable before the change. A removed file,
  symlink, FIFO, socket or tree is moved aside into the journal's directory, not copied: a
  removal needs no free space and has no size limit (where the removed path is on another
  filesystem than `/var/lib/skyhook`, a file's content is copied into the journal instead,
  a FIFO or device is recorded as what it is). When the step fails (an uncaught error, a
  failed command, the deadline, a cancel, a return code the step does not accept) the
  journal is replayed backwards: the files are as they were before the step, and its
  deferred work (below) does not run. A file is put back only while it holds exactly what
  the step wrote (compared by digest under the file's lock): when another package or
  script changed it since (its content, or the mode or owner the step left), a line or block edit (`fs::ensure_line`, `fs::remove_line`, the
  block edits, users and groups) is undone alone on the file as it is now, and any other
  change is left with a `not undone: <path> changed by another writer since this step wrote
  it` line; a removed path comes back only where nothing is now. Each journal record
  carries its length and checksums: a journal write that fails (a full disk) fails the step
  at once, whatever the script catches (every later call fails too), and a journal that
  cannot be read whole is replayed up to its last whole record, with a `not undone:` line
  saying from where. What cannot be undone is listed in the step's error, one `not undone:
  <what>` line each: the commands that ran, packages installed, removed or held, services
  started, stopped or restarted (and a daemon-reload a `service::` call ran first), modules
  loaded, mounts, a removed socket put back on another filesystem, and any file that could
  not be put back. A step the agent did not live to end (SIGKILL, power loss) is undone by
  the next run before it changes anything, newest journal first (`undid N file change
  record(s) of <package>-<step>...` on its output). No lock file is left behind
  (`/var/lib/skyhook/.locks/*` live while held; an `/etc/.pwd.lock` the edit made is
  removed with its lock). A directory the step created is removed only if empty once the
  step's own entries are (else `not undone: <dir> holds entries this step did not make`),
  and the undo follows no symlink inside the root: one swapped in on the way since the step
  wrote is never acted through (`not undone: <path>: a symlink on the way since this step
  wrote it`). Plans and checks journal nothing; bash
  steps are not journaled.
- **Deferred work is never lost.** A changed `service::drop_in` schedules one
  `systemctl daemon-reload` (run before the step's next `service::` call, else at its end), a
  changed `grub::` drop-in one grub regeneration at the end of the step (a changed `kmod::`
  blacklist or options file one initramfs regeneration, `initramfs.json`); none runs when
  the step fails (its files are put back). In apply mode it is recorded on the host in
  `/var/lib/skyhook/.deferred/` (`daemon-reload.json`, `grub.json` with the pending grubby
  arguments) *before* the drop-in is written, and the record is removed only once the work succeeded; when the work fails or
  the agent dies in between, the next script step on the node runs it (a plan or check lists
  it as an action, never drift), then removes the record.
- **Concurrent edits are not lost.** In apply mode a call that rewrites a file
  (`fs::ensure_line`, `fs::ensure_block`, `fs::append`, `fs::write`, ...) reads, compares
  and writes it holding an exclusive lock (`flock` on
  `/var/lib/skyhook/.locks/<hash of the path>.lock`), so two agents or scripts editing the
  same file keep each other's lines.
- **Line edits of one file are written once.** In apply mode, consecutive `fs::ensure_line`,
  `fs::remove_line`, `fs::ensure_block` and `fs::remove_block` calls on one file write it
  once (atomically), when anything else happens: another file's line edit, any other write
  or command, any read (`fs::read`, `fs::exists`, `fs::list`, `fs::stat`, `toml::get`, ...)
  or the end of the step (a failed step's are then put back). Every call still counts and reports its own
  change, and reads always see the edits made before them. The file's lock is held until
  then; if another writer that does not take it changes the file meanwhile, the step fails
  naming the file and that writer's content is kept.
- **Secrets are redacted.** Values read with `secret()` or `secret_env()` (and variables
  named in `SKYHOOK_REDACT_ENV`) are replaced by `***` wherever they appear verbatim in
  output, logs, plans and error messages, also when a step's output splits them across
  reads. A value the script transforms (a substring, upper-cased, split into characters) is no
  longer that value and is not recognised: do not print derived forms of a secret.
- **Unset is `()`.** Functions documented to return a value or `()` return `()` when there is
  nothing (`config::get` of a missing configMap, `pkg::version` of a missing package).

## Context, output and modules

- `step` (a constant map) and `step()` (the same map from anywhere, functions and modules
  included): `mode`, `is_check`, `name`, `args`, `package_name`, `package_version`,
  `previous_version`, `skyhook_dir`, `step_root`, `resource_id`, `node_order`, `dry_run`.
  `env(name)` / `env(name, default)` read the step's environment.
- `print(x)` and `log::info(msg)` write to the step's stdout, `debug(x)`, `log::warn(msg)` and
  `log::error(msg)` to its stderr: the same log files, labels and timestamps as a bash step.
  `fail(msg)` ends the step as failed (it cannot be caught). The script's value, when it is an
  integer, is the step's return code (checked against `returncodes`).
- `import \"skyhook/<name>\" as m;` loads a shipped module (below); `import \"lib/util\" as u;`
  a file of the package's `skyhook_dir` (never outside it); `import \"configmap/<name>\" as c;`
  evaluates configMap `<name>.rhai` (confined to the configMaps folder).
- Limits: operations (5,000,000 per run: well under a second of script work; the shipped
  modules need under 20,000), call depth (64), expression depth, string size (32 MiB), array
  size (50,000 elements), map size (100,000 properties), modules and variables are bounded;
  so are the memory a run holds, all values together (256 MiB as the allocator counts it: a
  string stored in many places counts once; map keys, variables and host call results count
  too), and what it writes with `print`, `debug` and `log::` (64 MiB, both streams together;
  the output of a `stream: true` command is not counted); and a step has a wall-clock
  deadline (`SKYHOOK_SCRIPT_TIMEOUT`, default 600 s). Hitting one fails the step with a
  message naming the limit (`memory limit exceeded: the script holds more than 256 MiB
  (max_memory)`). Rhai checks a map's size when it is built or merged, not when `m[k] = v`
  adds a key, so a map grown key by key in a loop is stopped by the operations limit (at
  about 450,000 keys) or the memory limit, whichever comes first. Growing an array by `push`
  in a loop gets slower as it grows (Rhai re-measures it on every push); build large lists
  with `split` or `map` instead. `eval` does not exist.

Types below are Rhai's: `String`, `int`, `bool`, `Map` (`#{...}`), `Array` (`[...]`), `()`;
`?` means several types are accepted (see the description). Editor completion:
`docs/skyhook.d.rhai`.
";

/// The markers around the README's list of the host API (`README.md`, "What is in the box");
/// the list is checked and regenerated by a test only.
#[cfg(test)]
pub const README_LIST_BEGIN: &str = "<!-- the host API's functions and namespaces: generated from \
     the registered functions by `SKYHOOK_UPDATE_DOCS=1 cargo test --lib \
     script::host_api::tests::docs`; a test fails when stale -->";
/// The end of the README's generated list.
#[cfg(test)]
pub const README_LIST_END: &str = "<!-- end of the generated list -->";

/// The README's list of the host API: the global functions, then every namespace in reference
/// order (`fs::`, `service::`, ...), as Markdown lines of at most 100 characters.
#[cfg(test)]
pub fn render_readme_list() -> String {
    let mut globals: Vec<&str> = Vec::new();
    for d in FUNCTIONS.iter().filter(|d| d.ns.is_empty()) {
        if !globals.contains(&d.name) {
            globals.push(d.name);
        }
    }
    let namespaces: Vec<String> = NAMESPACES
        .iter()
        .filter(|(ns, _, _)| !ns.is_empty())
        .map(|(ns, _, _)| format!("{ns}::"))
        .collect();
    // "`a`, `b`, `c`" with `last` after the final item.
    let list = |items: &[String], last: &str| -> Vec<String> {
        let n = items.len();
        (0..n)
            .map(|i| format!("`{}`{}", items[i], if i + 1 == n { last } else { "," }))
            .collect()
    };
    let globals: Vec<String> = globals.iter().map(|g| g.to_string()).collect();
    let mut words: Vec<String> = ["Global", "functions"].map(String::from).to_vec();
    words.extend(list(&globals, ""));
    words.extend(["and", "the", "namespaces"].map(String::from));
    words.extend(list(&namespaces, "."));
    let mut out = String::new();
    let mut line = String::new();
    for w in words {
        if !line.is_empty() && line.len() + 1 + w.len() > 100 {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&w);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The reference for script authors (`docs/host-api.md`).
pub fn render_markdown() -> String {
    let mut out = String::from(INTRO);
    out.push_str(
        "\n## Script functions\n\n\
         Registered by the script runner itself, the same in every mode (`changed()` is listed \
         with the commands below).\n\n\
         | function | returns | description |\n|---|---|---|\n",
    );
    for d in SCRIPT_FUNCTIONS {
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {} |",
            d.call(),
            d.returns,
            md_cell(d.doc)
        );
    }
    for (ns, title, intro) in NAMESPACES {
        let _ = write!(out, "\n## {title}\n\n");
        if !intro.is_empty() {
            let _ = write!(out, "{intro}\n\n");
        }
        out.push_str("| function | returns | modes | description |\n|---|---|---|---|\n");
        for d in FUNCTIONS.iter().filter(|d| d.ns == *ns) {
            let _ = writeln!(
                out,
                "| `{}` | `{}` | {} | {} |",
                d.call(),
                d.returns,
                md_cell(d.modes().text()),
                md_cell(d.doc)
            );
        }
    }
    out.push_str(&render_stdlib());
    out.push_str(GUIDE);
    out
}

/// The "Shipped modules" section: for each module of the embedded standard library
/// ([`STDLIB`](crate::script::resolver::STDLIB)), its opening comment block (what it reads,
/// what it writes, which interrupts it needs) and its functions, taken from the module source
/// itself so the list cannot drift from what ships.
fn render_stdlib() -> String {
    let mut out = String::from(
        "\n## Shipped modules: `import \"skyhook/<name>\" as m;`\n\n\
         Rhai modules embedded in the binary (`stdlib/`). Each stage function is named after \
         the mode with `_` (`config()`, `config_check()`, `uninstall()`, ...); the smaller \
         functions they are made of can be called one by one. More in `docs/stdlib.md`.\n",
    );
    for (name, source) in crate::script::resolver::STDLIB {
        let header: Vec<&str> = source
            .lines()
            .take_while(|l| l.starts_with("//") && !l.starts_with("///"))
            .map(|l| l.strip_prefix("// ").unwrap_or(l.trim_start_matches('/')))
            .collect();
        let functions: Vec<String> = source
            .lines()
            .filter_map(|l| l.strip_prefix("fn "))
            .filter_map(|l| l.split_once(')').map(|(sig, _)| format!("`{sig})`")))
            .collect();
        let _ = write!(
            out,
            "\n### `skyhook/{name}`\n\n```text\n{}\n```\n\nFunctions: {}\n",
            header.join("\n").trim_end(),
            functions.join(", ")
        );
    }
    out
}

/// The closing sections of the reference: checking scripts, Rhai pitfalls, editor use.
const GUIDE: &str = r#"
## Checking scripts: `skyhook-run check`

`skyhook-run check FILE...` compiles each script with its imports and checks it without
running anything; `skyhook-agent validate CONFIG_JSON` runs the same check over every `.rhai`
step of a package. It reports, at `file:line:col`:

- errors: an unknown function or module, with the closest name (`t.rhai:1:1: error: unknown
  function fs::wrte (did you mean fs::write?)`, `unknown module servcie (did you mean
  service?)`); a function called with an argument count it does not take (`fs::write expects
  2 or 3 arguments, got 1`); a function of an imported module (`import "skyhook/tuning" as
  t; t::confg()`) that the module does not export; a key of a literal options map the
  function does not accept (`fs::write: unknown option mod (did you mean mode? accepted:
  mode, owner, group)`);
- warnings: the traps below, and a method name no function has (it may still be a function
  stored in a map).

The package modules a script imports (`import "lib/util" as u;`) are checked too, each in its
own file. `check` prints `OK FILE` for each file without errors and exits 0 when no file has an error
(warnings allowed), 1 otherwise. Not checked: argument types, calls through function pointers
(`Fn("name")`, `f.call(..)`), modules imported by a computed path or from `configmap/`,
options maps built at run time.

## Rhai pitfalls

- **A missing map property is an error.** `s.hugepages` (or `s["hugepages"]`) on a map
  without that key fails the step at its position (`Property not found: hugepages (the map
  has no such key: ...)`), so a typo never plans an empty file. Test first with `"hugepages" in s`, or read an optional
  key with `s.get("hugepages") ?? "default"` (`get` returns `()` for a missing key).
- **Backtick strings have no escapes.** In `` `a\nb` `` the `\n` stays a backslash and an
  `n`. Break the line inside the backtick string itself, or use `"a\nb"` (double quotes
  know escapes) and `+`. `check` warns about it.
- **In-place methods return `()`.** `trim`, `replace`, `make_upper`, `make_lower`, `pad`,
  `truncate`, `crop`, `clear`, `sort` and `reverse` change the variable they are called on:
  `let t = s.trim();` makes `t` equal to `()`. Write `s.trim();` and use `s`. `check` warns
  when such a result is assigned, passed, returned or compared.
- **A thrown-away result of a command that accepts any code hides a failure.** `run` and `sh`
  fail the step on an exit code not listed in `ok`, so they are safe as statements; but
  `query(argv);` or `run(argv, #{check: false});` alone drops the only sign the command
  failed. Read the result (`if query(argv).ok { .. }`), or let the call check the code
  (`#{check: true}`, `#{ok: [0, 1]}`). `check` warns about it.
- **`()` is not `false`.** `if config::get("x") { .. }` is a type error when the configMap is
  missing (`()` is not a bool); test with `config::has("x")` or `!= ()`.
- **Functions do not see the script's variables.** A `fn` sees its parameters and, through
  `step()`, the step context; the top-level `step` constant and `let` variables are not
  visible inside it. Pass what it needs as arguments.

## Using the definitions in an editor

`docs/skyhook.d.rhai` declares everything a script can call: the `step` constant, the script
functions (`step`, `env`, `fail`, `print`, `debug`), `log::`, every host namespace, and one
module per shipped module, named after the last part of its import path (`import
"skyhook/tuning" as tuning;` then `tuning::config()`). It is written in the syntax of Rhai's
definition files (`module static;`, `module name { fn f(a: T) -> R; }`, the format of Rhai's
`Engine::definitions()`), which the Rhai language server (`rhaiscript/lsp`, experimental,
with a VS Code extension) reads from the workspace:

1. install the Rhai language server or its editor extension;
2. copy `docs/skyhook.d.rhai` into the folder you open in the editor (the package directory,
   next to `skyhook_dir/`), so the server loads it with the scripts;
3. completion, signatures and hover text then cover `fs::`, `service::`, ... and the shipped
   modules.

Without a language server the file is still a one-page index of every signature and its
modes. Either way, `skyhook-run check` is the authority on what resolves.
"#;

/// The Rhai definitions file for editors (`docs/skyhook.d.rhai`), in the layout of Rhai's
/// `Engine::definitions().single_file()`: the `step` constant and the global functions
/// (script functions and host API) after `module static;`, then one `module <ns> { ... }`
/// block per namespace (`log` and the host API), each function with its description as a doc
/// comment, then one module per shipped module of the stdlib, named after its import path's
/// last part, with its exported functions and their own doc comments.
pub fn render_definitions() -> String {
    let mut out = String::from(
        "// Generated from the host_fn! rows of src/script/host_api/; do not edit.\n\
         // Rhai definitions of everything a skyhook step script can call, for editor\n\
         // completion (see \"Using the definitions in an editor\" in docs/host-api.md).\n\
         \nmodule static;\n\
         \n/// The step context: mode, is_check, name, args, package_name, package_version,\n\
         /// previous_version, skyhook_dir, step_root, resource_id, node_order, dry_run.\n\
         const step: Map;\n",
    );
    let all: Vec<&FnDoc> = SCRIPT_FUNCTIONS.iter().chain(FUNCTIONS).collect();
    let mut namespaces: Vec<&str> = vec![""];
    for d in &all {
        if !namespaces.contains(&d.ns) {
            namespaces.push(d.ns);
        }
    }
    for ns in namespaces {
        let indent = if ns.is_empty() { "" } else { "    " };
        if !ns.is_empty() {
            let _ = write!(out, "\nmodule {ns} {{\n");
        }
        for d in all.iter().filter(|d| d.ns == ns) {
            let _ = write!(
                out,
                "\n{indent}/// {}\n{indent}/// Modes: {}\n{indent}{}\n",
                d.doc,
                d.modes().text(),
                d.definition()
            );
        }
        if !ns.is_empty() {
            out.push_str("}\n");
        }
    }
    for (name, source) in crate::script::resolver::STDLIB {
        let _ = write!(
            out,
            "\n/// Shipped module: `import \"skyhook/{name}\" as {name};`\nmodule {name} {{\n"
        );
        let mut doc: Vec<&str> = Vec::new();
        for line in source.lines() {
            if let Some(d) = line.strip_prefix("///") {
                doc.push(d.strip_prefix(' ').unwrap_or(d));
                continue;
            }
            if let Some(sig) = line.strip_prefix("fn ")
                && let Some((head, _)) = sig.split_once(')')
                && let Some((fname, params)) = head.split_once('(')
            {
                let params: Vec<String> = params
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(|p| format!("{p}: ?"))
                    .collect();
                out.push('\n');
                for d in &doc {
                    let _ = writeln!(out, "    /// {d}");
                }
                let _ = writeln!(out, "    fn {fname}({}) -> ?;", params.join(", "));
            }
            doc.clear();
        }
        out.push_str("}\n");
    }
    out
}
