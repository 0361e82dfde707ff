//! Benchmark driver for the log relay (used by `benches/log_relay.sh`).
//!
//! `log_relay SIZE_BYTES ROOT_DIR [BUFFER_LIMIT]` runs, through [`ProcessRunner::run_with`],
//! `/bin/sh -c "yes <79 x> | head -c SIZE_BYTES"` (80-byte lines) with the relayed stdout on
//! this process's stdout and the step log under `ROOT_DIR` (a host root) at
//! `/log/gen.sh-<TS>.log`. Prints `elapsed_s=<seconds> log_bytes=<n> status=<s>
//! vmhwm_kb=<peak RSS>` on stderr.

use std::path::Path;
use std::time::Instant;

use skyhook::host::root::HostRoot;
use skyhook::logs::open_step_logs;
use skyhook::process;
use skyhook::step::{ProcessRunner, RelayOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: log_relay SIZE_BYTES ROOT_DIR [BUFFER_LIMIT]".into());
    }
    let size: u64 = args[1].parse()?;
    let root_dir = Path::new(&args[2]);
    let limit: usize = args.get(3).map_or(Ok(8192), |s| s.parse())?;
    std::fs::create_dir_all(root_dir)?;
    let root = HostRoot::open(root_dir)?;
    let line = "x".repeat(79);
    let spec = process::Spec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), format!("yes {line} | head -c {size}").into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        ..process::Spec::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let start = Instant::now();
    let logs = open_step_logs(&root, Path::new("/log"), "gen.sh", chrono::Utc::now())?;
    let log_path = root.display_path(&logs.out_path);
    let (report, output_errors) =
        rt.block_on(ProcessRunner::new(limit).run_with(&spec, Some(logs), RelayOptions::default()));
    for e in &output_errors {
        eprintln!("log_relay: {e}");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let log_bytes = std::fs::metadata(&log_path)?.len();
    // Peak RSS of this process, as the kernel counts it.
    let status = std::fs::read_to_string("/proc/self/status")?;
    let vmhwm_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .map_or("?", |v| v.trim().trim_end_matches(" kB"));
    eprintln!(
        "elapsed_s={elapsed:.3} log_bytes={log_bytes} status={} vmhwm_kb={vmhwm_kb}",
        report.outcome.display_status()
    );
    Ok(())
}
