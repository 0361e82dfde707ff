//! Software RAID: `raid::create`, `raid::info`, `raid::scan`, `raid::assemble` over
//! mdadm(8), chrooted into the host root.
//!
//! An array is named: `raid::create("kubernetes", ...)` makes `/dev/md/kubernetes` with
//! `mdadm --create --run --force --verbose /dev/md/<name> --level=<l> --name=<name>
//! --raid-devices=<n> [--metadata=<m>] <devices...>` (the flags of the EKS
//! `setup-local-disks` script nvidia-setup ships, plus `--run`, so mdadm never stops to ask
//! about a member that looks used). An existing array is found at `/dev/md/<name>` (a symlink
//! to `../md127` on a host) and read by [`info`]: sysfs (`/sys/class/block/<md>/md/level`,
//! `md/array_state`, `slaves/`) when the root has it, else `mdadm --detail`.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::effects::exec::{CommandOptions, Guard};
use crate::host::mounts::disk;
use crate::host::mounts::mount::MountError;
use crate::host::root::error::{HostError, Result};

/// What `raid::create` is asked for (`#{level, metadata, force}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidSpec {
    /// The RAID level as mdadm takes it (`0`, `1`, `10`).
    pub level: String,
    /// The superblock format (`1.2`), mdadm's default when `None`.
    pub metadata: Option<String>,
    /// Create the array also over members that hold a filesystem.
    pub force: bool,
}

impl Default for RaidSpec {
    fn default() -> Self {
        RaidSpec {
            level: "0".into(),
            metadata: None,
            force: false,
        }
    }
}

/// An md array (`raid::info(dev)`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RaidInfo {
    /// The device path as given (normalised).
    pub path: String,
    /// `raid0`, `raid1`, ... (empty when unknown).
    pub level: String,
    /// The member device paths (`/dev/nvme1n1`), sorted; empty when they cannot be read.
    pub devices: Vec<String>,
    /// `clean`, `active`, `inactive`, ... (sysfs `array_state` or mdadm's `State`);
    /// `planned` for an array planned in this session.
    pub state: String,
}

/// [`HostError::Invalid`], as the caller's error.
fn invalid<E: From<HostError>>(what: &'static str, message: String) -> E {
    E::from(HostError::Invalid { what, message })
}

/// The array name: letters, digits, `_`, `-`, `.`, not starting with `.` or `-`.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "array name",
            format!("{name:?} (letters, digits, _, - and . only, e.g. \"kubernetes\")"),
        ))
    }
}

fn query(h: &mut Host, argv: &[&str]) -> Result<Option<crate::host::system::cmd::CmdOutput>> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let opts = CommandOptions {
        read_only: true,
        ..CommandOptions::default()
    };
    match crate::host::system::cmd::run(h, &argv, &opts) {
        Ok(o) => Ok(Some(o)),
        Err(HostError::ProgramNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The fields of `mdadm --detail <dev>`: level, state and the member devices of its table.
fn parse_detail(text: &str) -> (String, String, Vec<String>) {
    let (mut level, mut state, mut devices) = (String::new(), String::new(), Vec::new());
    for line in text.lines() {
        let t = line.trim();
        if let Some((k, v)) = t.split_once(" : ") {
            match k.trim() {
                "Raid Level" => level = v.trim().to_string(),
                "State" => state = v.trim().to_string(),
                _ => {}
            }
            continue;
        }
        // `   0     259        1        0      active sync   /dev/nvme1n1`
        let f: Vec<&str> = t.split_whitespace().collect();
        if f.len() >= 5
            && f[0].parse::<u32>().is_ok()
            && let Some(dev) = f.last().filter(|d| d.starts_with("/dev/"))
        {
            devices.push(dev.to_string());
        }
    }
    devices.sort();
    (level, state, devices)
}

/// `raid::info(dev)`: the md array at `dev`, `None` when `dev` does not exist or is not an
/// array (module docs for the sources).
///
/// # Errors
/// A bad device path; read failures; `mdadm` that cannot run.
pub fn info(h: &mut Host, dev: &str) -> Result<Option<RaidInfo>> {
    let path = disk::device_arg(dev)?;
    let shown = path.to_string_lossy().into_owned();
    if let Some((level, devices)) = disk::planned_array(h, &path)
        && h.view_canonical(&path)?.is_none()
    {
        return Ok(Some(RaidInfo {
            path: shown,
            level: format!("raid{level}"),
            devices,
            state: "planned".into(),
        }));
    }
    let Some(resolved) = h.view_canonical(&path)? else {
        return Ok(None);
    };
    let name = resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let md = Path::new(disk::SYS_BLOCK).join(&name).join("md");
    if h.view_stat(&md, true)?.is_some() {
        let read = |h: &Host, p: PathBuf| {
            h.view_read(&p)
                .ok()
                .flatten()
                .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                .unwrap_or_default()
        };
        let slaves = Path::new(disk::SYS_BLOCK).join(&name).join("slaves");
        let mut devices: Vec<String> = h
            .view_list(&slaves)?
            .unwrap_or_default()
            .into_iter()
            .map(|(n, _)| format!("/dev/{n}"))
            .collect();
        devices.sort();
        return Ok(Some(RaidInfo {
            path: shown,
            level: read(h, md.join("level")),
            devices,
            state: read(h, md.join("array_state")),
        }));
    }
    match query(h, &["mdadm", "--detail", &shown])? {
        Some(o) if o.code == 0 => {
            let (level, state, devices) = parse_detail(&o.stdout);
            Ok(Some(RaidInfo {
                path: shown,
                level,
                devices,
                state,
            }))
        }
        _ => Ok(None),
    }
}

host_fn! {
    /// `#{path, level, devices, state}` of the md array at `dev` (`level` `raid0`; `devices` the
    /// member paths, sorted, `[]` when unreadable; `state` `clean`, `active`, ...; `planned` in a
    /// plan after `raid::create`), or `()` when `dev` is missing or not an array.
    #[host(ns = "raid", effects = RunsReadOnly)]
    fn info(h: &mut Host, dev: S) -> rhai::Dynamic {
        Ok(super::info(h, &dev)?.map_or(Dynamic::UNIT, raid_map))
    }
}

/// `raid::create(name, devices, #{level, metadata, force})`: ensure the md array
/// `/dev/md/<name>` exists with `devices` as its members (module docs for the command).
///
/// - absent: every member must be a block device inside the root's `/dev` that nothing
///   uses (not mounted, no partition of it mounted, no md/dm holder, not refused exclusive
///   access: `disk::in_use`; `force` does not override that) and (unless `force`) hold no
///   filesystem; then mdadm creates it (true). A change: run in apply, recorded in a plan as
///   `raid /dev/md/<name> level <l> from [<devices>]: mdadm ...`, drift in a check; a
///   command, so not undone by the journal.
/// - present with the same members (compared as resolved device paths) and level:
///   unchanged (false). Members that cannot be read (no sysfs, mdadm not listing them)
///   count as the same.
/// - present with other members or another level: an error naming both.
///
/// # Errors
/// A bad name or device path; no devices, or one twice; a member that does not exist,
/// leads out of `/dev`, is not a block device, is in use, or holds a filesystem without
/// `force`; the conflict above; mdadm failing (apply).
pub fn create(
    h: &mut Host,
    name: &str,
    devices: &[String],
    spec: &RaidSpec,
) -> Result<bool, MountError> {
    check_name(name)?;
    if spec.level.is_empty() || !spec.level.chars().all(|c| c.is_ascii_digit()) {
        return Err(invalid(
            "raid level",
            format!("{:?} (a number: 0, 1, 5, 10)", spec.level),
        ));
    }
    if let Some(m) = &spec.metadata
        && (m.is_empty() || !m.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'))
    {
        return Err(invalid("raid metadata", format!("{m:?} (e.g. \"1.2\")")));
    }
    if devices.is_empty() {
        return Err(invalid(
            "raid devices",
            format!("/dev/md/{name} needs at least one member device"),
        ));
    }
    let array = PathBuf::from(format!("/dev/md/{name}"));
    let mut wanted: Vec<(String, PathBuf)> = Vec::new();
    for d in devices {
        let p = disk::device_arg(d)?;
        let Some(r) = h.view_canonical(&p)? else {
            return Err(invalid(
                "raid devices",
                format!(
                    "member {} of {} does not exist",
                    p.display(),
                    array.display()
                ),
            ));
        };
        if let Some((first, _)) = wanted.iter().find(|(_, w)| *w == r) {
            return Err(invalid(
                "raid devices",
                format!("{d} and {first} are the same device {}", r.display()),
            ));
        }
        wanted.push((d.clone(), r));
    }
    let mut want_resolved: Vec<String> = wanted
        .iter()
        .map(|(_, r)| r.to_string_lossy().into_owned())
        .collect();
    want_resolved.sort();

    if disk::device_exists(h, &array) {
        let info = info(h, &array.to_string_lossy())?;
        let (level, members) = match &info {
            Some(i) => (i.level.clone(), i.devices.clone()),
            None => (String::new(), Vec::new()),
        };
        let mut have: Vec<String> = Vec::new();
        for m in &members {
            let r = h.view_canonical(Path::new(m))?;
            have.push(r.map_or(m.clone(), |r| r.to_string_lossy().into_owned()));
        }
        have.sort();
        let level_differs = !level.is_empty()
            && level.trim_start_matches("raid") != spec.level
            && level != spec.level;
        if (!have.is_empty() && have != want_resolved) || level_differs {
            return Err(invalid(
                "raid array",
                format!(
                    "{} exists as {} from [{}], not level {} from [{}] (remove it first)",
                    array.display(),
                    if level.is_empty() { "an array" } else { &level },
                    have.join(", "),
                    spec.level,
                    want_resolved.join(", ")
                ),
            ));
        }
        h.note_unchanged();
        return Ok(false);
    }

    for (given, r) in &wanted {
        let node = disk::block_node(h, &disk::device_arg(given)?, &format!("member {given}"))
            .map_err(|e| match e {
                MountError::Host(HostError::Invalid { message, .. }) => {
                    invalid("raid devices", message)
                }
                e => e,
            })?;
        if let Some(why) = disk::in_use(h, r, &node)? {
            return Err(invalid(
                "raid devices",
                format!("member {given} {why} (force: true does not override that)"),
            ));
        }
        if !spec.force {
            let fs = disk::fstype(h, given)?;
            if !fs.is_empty() {
                return Err(invalid(
                    "raid devices",
                    format!(
                        "member {given} has a filesystem: {fs} (force: true creates {} over it)",
                        array.display()
                    ),
                ));
            }
        }
    }
    let a = array.to_string_lossy().into_owned();
    let mut argv: Vec<String> = [
        "mdadm",
        "--create",
        "--run",
        "--force",
        "--verbose",
        &a,
        &format!("--level={}", spec.level),
        &format!("--name={name}"),
        &format!("--raid-devices={}", devices.len()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(m) = &spec.metadata {
        argv.push(format!("--metadata={m}"));
    }
    argv.extend(devices.iter().cloned());
    let what = format!(
        "raid {a} level {} from [{}]",
        spec.level,
        want_resolved.join(", ")
    );
    h.submit(Effect::GuardedCommand {
        argv,
        opts: CommandOptions {
            check: true,
            guards: vec![Guard::Decided(what)],
            ..CommandOptions::default()
        },
    })?;
    Ok(true)
}

host_fn! {
    /// Ensure the md array `/dev/md/<name>` exists with `devices` as members (`level` default 0,
    /// `metadata` e.g. `"1.2"`): absent: `mdadm --create --run --force --verbose /dev/md/<name>
    /// --level=<l> --name=<name> --raid-devices=<n> <devices>` (a change, `raid /dev/md/<name>
    /// level <l> from [...]` in the plan, drift in a check; a command, not undone); present with
    /// the same members (resolved paths) and level: unchanged; present with others: an error naming
    /// both. A member that is missing, not a block device inside the root's `/dev` (a link out of
    /// `/dev` or to a regular file), in use (mounted, a partition of it mounted, held by an md/dm
    /// device, refused exclusive access by the kernel: the error names the partition and its mount
    /// point or the holder; `force` never overrides that), or holds a filesystem (unless `force:
    /// true`) is an error.
    #[host(ns = "raid", effects = [GuardedCommand], options = RAID_KEYS)]
    fn create(h: &mut Host, name: S, devices: Array, opts: Map) -> bool {
        let spec = raid_spec(&opts)?;
        let devices = convert::strings(&devices, "devices")?;
        Ok(super::create(h, &name, &devices, &spec)?)
    }
}

/// `raid::scan()`: the `ARRAY` lines of `mdadm --detail --scan` (for `mdadm.conf`), as
/// printed; empty when there is no array.
///
/// # Errors
/// mdadm missing from the root, or failing.
pub fn scan(h: &mut Host) -> Result<String> {
    let argv: Vec<String> = ["mdadm", "--detail", "--scan"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let opts = CommandOptions {
        read_only: true,
        check: true,
        ..CommandOptions::default()
    };
    Ok(crate::host::system::cmd::run(h, &argv, &opts)?.stdout)
}

host_fn! {
    /// The `ARRAY` lines of `mdadm --detail --scan` as printed (the content of `mdadm.conf`), `""`
    /// when there is no array.
    #[host(ns = "raid", effects = RunsReadOnly)]
    fn scan(h: &mut Host) -> String {
        Ok(super::scan(h)?)
    }
}

/// `raid::assemble()`: `mdadm --assemble --scan` (an action: run in apply, recorded in plan
/// and check, never drift). True when mdadm exited 0 (it assembled an array) or when
/// planned; false when there was nothing to assemble (mdadm's non-zero exit).
///
/// # Errors
/// mdadm missing from the root (apply).
pub fn assemble(h: &mut Host) -> Result<bool> {
    let argv: Vec<String> = ["mdadm", "--assemble", "--scan"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = h.submit(Effect::Command {
        argv,
        opts: CommandOptions::default(),
    })?;
    Ok(out.is_none_or(|o| o.planned || o.ok))
}

host_fn! {
    /// `mdadm --assemble --scan` (an action): true when mdadm exited 0 or in a plan, false when it
    /// found nothing to assemble.
    #[host(ns = "raid", effects = [Command])]
    fn assemble(h: &mut Host) -> bool {
        Ok(super::assemble(h)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Array, Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `raid::create`.
const RAID_KEYS: &[&str] = &["level", "metadata", "force"];

fn raid_map(r: RaidInfo) -> Dynamic {
    let mut m = Map::new();
    m.insert("path".into(), convert::s(r.path));
    m.insert("level".into(), convert::s(r.level));
    m.insert(
        "devices".into(),
        Dynamic::from_array(convert::array(r.devices)),
    );
    m.insert("state".into(), convert::s(r.state));
    Dynamic::from_map(m)
}

/// `#{level, metadata, force}`: `level` an int (default 0) or a string of digits.
fn raid_spec(m: &Map) -> Result<RaidSpec, String> {
    check_keys(m, RAID_KEYS)?;
    let level = match m.get("level") {
        None => "0".to_string(),
        Some(d) if d.is_unit() => "0".to_string(),
        Some(d) if d.is_int() => {
            let v = d.as_int().unwrap_or(-1);
            if v < 0 {
                return Err(format!("option level must be 0 or more, got {v}"));
            }
            v.to_string()
        }
        Some(d) => convert::string(d, "option level")?,
    };
    Ok(RaidSpec {
        level,
        metadata: opt_string(m, "metadata")?,
        force: convert::opt_bool(m, "force", false)?,
    })
}

host_fns!(create, info, scan, assemble);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mdadm_detail_fields_and_members() {
        let text = "\
/dev/md/kubernetes:
           Version : 1.2
     Creation Time : Tue Dec  1 10:00:00 2026
        Raid Level : raid0
        Array Size : 3749999616 (3.49 TiB 3.84 TB)
      Raid Devices : 2
             State : clean
    Number   Major   Minor   RaidDevice State
       1     259        2        1      active sync   /dev/nvme2n1
       0     259        1        0      active sync   /dev/nvme1n1
";
        assert_eq!(
            parse_detail(text),
            (
                "raid0".into(),
                "clean".into(),
                vec!["/dev/nvme1n1".into(), "/dev/nvme2n1".into()]
            )
        );
    }

    #[test]
    fn array_names() {
        assert!(check_name("kubernetes").is_ok());
        assert!(check_name("k8s_0.a-b").is_ok());
        for bad in ["", "-x", ".x", "a/b", "a b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    /// A failed step puts its files back; the array it created cannot be, and is named
    /// among the `not undone:` lines.
    #[test]
    fn a_failed_step_lists_the_array_as_not_undone() {
        use crate::host::ExecMode;
        use crate::host::testutil::TestHost;
        let t = TestHost::new();
        t.install_sh();
        t.stub(
            "mdadm",
            r#"for a; do case $a in /dev/md/*) : > "$a" ;; esac; done"#,
        );
        t.block_device("/dev/sdb", 16);
        std::fs::create_dir_all(t.p("/dev/md")).unwrap();
        let mut h = t.host_with(ExecMode::Apply, |o| o.undo = Some("demo-disks".into()));
        crate::host::files::fs::write(
            &mut h,
            "/etc/mdadm/mdadm.conf",
            "ARRAY\n",
            &Default::default(),
        )
        .unwrap();
        assert!(create(&mut h, "r0", &["/dev/sdb".into()], &RaidSpec::default()).unwrap());
        let (_, undone, result) = h.fail_with_report();
        result.unwrap();
        assert_eq!(
            undone.not_undone,
            [
                "raid /dev/md/r0 level 0 from [/dev/sdb]: mdadm --create --run --force --verbose /dev/md/r0 --level=0 --name=r0 --raid-devices=1 /dev/sdb"
            ]
        );
        assert!(!t.p("/etc/mdadm/mdadm.conf").exists());
        assert!(t.p("/dev/md/r0").exists());
    }
}
