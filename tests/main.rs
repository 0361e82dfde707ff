//! Integration tests of the `skyhook-agent` binary, one test binary (as ripgrep does).
//!
//! Modules:
//! - `util`: the harness (plus `harness_*` self-tests of it that do not run the agent): `FakeRoot` (throwaway host roots built from a
//!   per-binary template), the standard environment of agent-contract.md section 15, fixture
//!   P, recording stubs, the agent runner, `TS`/`FTS` regex helpers, `require_root!`.
//!   `util::bus`: a running `dbus-daemon` (private, or a host root's system bus) and the
//!   world-writable daemon listeners (the system bus's stand-in among them).
//! - `acceptance`: the 50 acceptance cases of agent-contract.md section 15, one test each,
//!   named `case_NN_<topic>`; assertions are the values the case states.
//! - `skyhook_run`: `skyhook-run SCRIPT` and `--package DIR` (dry run, apply, check, JSON,
//!   exit codes) against tempdir roots.
//! - `cli`: `--version` (git revision, build date), `skyhook-run completions SHELL`, man
//!   pages, the binaries' memory bound (their counting allocator), `skyhook-run new NAME`.
//! - `skyhook_run_check`: `skyhook-run check FILE...` exit codes and `file:line:col` errors.
//! - `rhai_steps`: `.rhai` steps in the agent (compile-ahead, check from apply, interrupts,
//!   shellscript compatibility, redaction).
//! - `engine_parity`: the agent and `skyhook-run --package` decide the same steps on the same
//!   host state; log write failures (a full tmpfs) are reported and change no outcome.
//! - `orphans`: nothing a step starts outlives it (subreaper, pdeathsig, the lock fd kept by
//!   a background child).
//! - `malformed`: a generated corpus of bad inputs: each exits 1 with one line and writes
//!   nothing.
//! - `dbus_filter_attack`: a hostile plan query against `process::dbus_filter` (header fields the
//!   filter and the bus could read differently, split and pipelined messages, the SASL phase,
//!   descriptors, a client that never reads, the connection bound, a claimed uid).
//! - `crash_safety`: faults injected into real runs (SIGKILL between a drop-in and its
//!   reload, two writers of one file, SIGTERM while waiting for the package lock).
//! - `image`: the OCI image of `scripts/build-image.sh` (prebuilt by `.ci/run`), unpacked and
//!   run the way the operator runs it: chrooted into its read-only rootfs in a private mount
//!   namespace, a fake host root at `/root`, the package volumes under `/skyhook-package`.
//! - `fixtures`: realistic packages from `tests/fixtures/` (shaped like the public Skyhook
//!   `shellscript` and `tuning` packages) run through all their modes on a fake root.
//! - `shellscript_compat`: the shellscript compatibility mode (`stdlib/shellscript.rhai`)
//!   against the public-shaped bash package, both run by the agent on the same configMap
//!   scripts (`return`, `$1`, working directory, exit status, a missing script).
//! - `serve`: `skyhook-agent serve` on loopback with raw HTTP requests, and `skyhook-run --remote`
//!   paired with it (plan parity with a local run, resume after a cut connection).
//! - `interrupt_copy_dir`: an interrupt with no copy dir copies `SKYHOOK_DATA_DIR` into it
//!   and runs its commands there (upstream 0d61d428); without a data dir, from `/`.
//! - `log_format`: `SKYHOOK_AGENT_LOG_FORMAT` prefixed (v6, default) and plain (v7) step
//!   logs, byte for byte; `SKYHOOK_AGENT_BUFFER_LIMIT` ignored when plain.
//! - `reboot`: a `node_restart` interrupt and the shutdown's SIGTERM (exit 0 with the pending
//!   marker after the reboot was issued; exit 1 and no marker before).
//! - `layers`: the layering of `src/` read from its source: the allowed imports between
//!   top-level modules (its `LAYERS` table, copied in docs/architecture.md and checked) and no
//!   import cycle between the files of a folder.
//! - `host_root_script`: `scripts/make-host-root.sh` makes `/dev/null` the null device, so a
//!   stub writing there inside the root leaves the root unchanged, run after run.
//! - `gpu_service_user`: the `examples/gpu-service-user` package (user::, group::, fs::write,
//!   sysctl::, mount:: with a recording `mount`) planned, applied, planned again and checked
//!   on a fake root, also after a manual umount and userdel.
//! - `kernel_boot`: `kernel::` on the fake GPU-node hosts: a second kernel installed with
//!   the fake apt, made grub's default, booted by the fake `reboot`; BootLoaderSpec entries
//!   on Amazon Linux; change reports naming in apply the old values the plan named.
//! - `undo_journal`: a `.rhai` step of ten kinds of file change, failing or succeeding,
//!   SIGKILLed at every fsync, fdatasync and rename (its undo included), then rerun: the
//!   host equals a clean run's.
//! - `undo_journal_batch`: a `.rhai` step of `fs::copy_tree` and `fs::extract` over existing
//!   files and a chmod'ed directory removed, SIGKILLed anywhere (its recovery too), then rerun.
//! - `mount_units`: `mount::unit`/`bind`/`remove_unit` in-process on the fake EKS node.
//! - `plan_attack`: a hostile package against `serve`'s read-only `package_plan`: queries that
//!   try to leave the read-only host root; every host file held byte for byte.
//! - `plan_escape`: more of them, with the host's `/proc` in the root as on a node: the
//!   holes known on the branch `sandbox` (ignored, named in their `ignore`) and what holds.
//! - `plan_broker_attack`: attacks on a plan's socket broker (`process::sock_broker`):
//!   odd addresses and ABIs, stacked listeners, other families, floods, stalls, lifetimes.
//! - `plan_bus_attack`: bad input to `serve --plan-bus-user` (root in any spelling, a user
//!   missing, malformed `/etc/passwd` lines, one out of the host root or a fifo).
//! - `plan_old_kernel`: `serve` under a 2.6 `uname` (`UNAME26`): no socket broker, a plan
//!   still plans and its commands make no Unix socket.
//! - `plan_stop`: how a `package_plan` stops: `--plan-max-operations`, a chain at its first
//!   failed package, a failed step's planned changes out of the view, `<package>` in its lines.

/// Counts allocations as the binaries do, for the in-process runs of the library here.
#[global_allocator]
static ALLOCATOR: skyhook::script::memory::CountingAlloc = skyhook::script::memory::CountingAlloc;

#[macro_use]
mod util;

mod acceptance;
mod cli;
mod containerd_example;
mod crash_safety;
mod dbus_filter_attack;
mod durability;
mod engine_parity;
mod fixtures;
mod fleet;
mod full_disk;
mod gpu_service_user;
mod host_root_script;
mod image;
mod interrupt_copy_dir;
mod kernel_boot;
mod kill_anywhere;
mod layers;
mod log_format;
mod malformed;
mod mount_units;
mod nouveau_example;
mod nvidia_ports;
mod nvidia_setup_port;
mod nvidia_tuned_port;
mod orphans;
mod plan_attack;
mod plan_broker_attack;
mod plan_bus_attack;
mod plan_escape;
mod plan_limits_attack;
mod plan_old_kernel;
mod plan_query_attack;
mod plan_stop;
mod preflight;
mod reboot;
mod rhai_steps;
mod serve;
mod shellscript_compat;
mod skyhook_run;
mod skyhook_run_check;
mod undo_journal;
mod undo_journal_batch;
