//! The local account databases (`/etc/passwd`, `/etc/group`, `/etc/shadow`, `/etc/gshadow`)
//! and `/etc/login.defs`, as `user::` and `group::` ([`crate::host::users::user`],
//! [`crate::host::users::group`]) read and rewrite them.
//!
//! # Formats
//!
//! The colon-separated formats of passwd(5), group(5), shadow(5) and gshadow(5):
//!
//! | file | fields |
//! |---|---|
//! | `/etc/passwd` | `name:password:uid:gid:comment:home:shell` |
//! | `/etc/group` | `name:password:gid:member,member` |
//! | `/etc/shadow` | `name:password:lastchg:min:max:warn:inactive:expire:reserved` |
//! | `/etc/gshadow` | `name:password:admin,admin:member,member` |
//!
//! Each file is kept as its lines, byte for byte: a line this module does not change (other
//! accounts, comments, NIS `+`/`-` lines, malformed lines) is written back unchanged and in
//! its place; new entries are appended at the end. An entry is found by its first field (the
//! first such line wins, as `getpwnam(3)` does).
//!
//! # Writing: one transaction over the four files
//!
//! `transact` reads the four files through the session's view (so a plan sees its own
//! earlier planned accounts, and `fs::chown(p, "gpuops")` resolves a planned user), lets the
//! caller edit them and submits one [`Effect::WriteFile`] of the whole new content per file
//! that changed, keeping each file's mode, owner and extended attributes (`/etc/shadow` is
//! 0640 root:shadow on Debian, 0000 on RHEL). A missing `/etc/passwd` or `/etc/group` is
//! created (0644); a missing `/etc/shadow` or `/etc/gshadow` stays missing (the entries that
//! would go there are skipped, and new passwd/group entries get the password `!` instead of
//! `x`, as `useradd` does without shadow files).
//!
//! In apply mode the read-compare-write of all four files runs under the project's path locks
//! of the four files ([`crate::host::root::pathlock`], taken in the order passwd, group, shadow,
//! gshadow) and then the shadow-utils lock that `lckpwdf(3)` takes: a `fcntl(F_SETLKW)` write
//! lock on `/etc/.pwd.lock` under the root (created 0600 when missing), so neither another
//! session nor `useradd`/`usermod`/`passwd` on the host can interleave. The files are read
//! again under the locks and the edit decided again on what they hold then. POSIX record
//! locks belong to the process, not the thread, so two sessions of one process are kept apart
//! by the path locks, which are taken first and released last. A call that changes nothing
//! takes no lock (and creates no lock file).
//!
//! # Secrets
//!
//! A diff of `/etc/shadow` or `/etc/gshadow` shows other accounts in its context lines: the
//! password fields (of 8 characters or more: hashes, not `!` or `*`) of every line a diff
//! shows are added to the session's redactor before the write is submitted, so plans, drift
//! reports and `--diff` output show `***` instead. Nothing else prints these files.

use std::collections::BTreeSet;
use std::path::Path;

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::effects::session::ToolLock;
use crate::host::root::error::{HostError, Result};
pub use crate::host::root::pwdlock::{GROUP, GSHADOW, PASSWD, PWD_LOCK, SHADOW};

/// `/etc/login.defs` (UID/GID ranges, password aging defaults, `HOME_MODE`, `UMASK`).
pub const LOGIN_DEFS: &str = "/etc/login.defs";

/// The longest account name shadow-utils accepts by default (`LOGIN_NAME_MAX`-bounded, 32).
pub const MAX_NAME_LEN: usize = 32;

/// Check an account name against the shadow-utils rule `[a-z_][a-z0-9_-]*[$]?`, at most
/// [`MAX_NAME_LEN`] characters. `what` is `user name` or `group name`.
///
/// # Errors
/// [`HostError::Invalid`] naming the value and the rule.
pub fn check_name(what: &'static str, name: &str) -> Result<()> {
    let b = name.as_bytes();
    let body = b.strip_suffix(b"$").unwrap_or(b);
    let ok = !body.is_empty()
        && b.len() <= MAX_NAME_LEN
        && (body[0].is_ascii_lowercase() || body[0] == b'_')
        && body
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(HostError::Invalid {
            what,
            message: format!(
                "{name:?} must match [a-z_][a-z0-9_-]*[$]? and have at most {MAX_NAME_LEN} characters"
            ),
        })
    }
}

/// Check a free-text field (comment, home, shell): no `:`, no line break and no NUL, which
/// would corrupt the colon-separated line. `what` names the option.
///
/// # Errors
/// [`HostError::Invalid`].
pub fn check_field(what: &'static str, value: &str) -> Result<()> {
    if value.contains([':', '\n', '\r', '\0']) {
        return Err(HostError::Invalid {
            what,
            message: format!("{value:?} must not contain ':' or a line break"),
        });
    }
    Ok(())
}

/// Check an id: `4294967295` is `(uid_t)-1`, which the kernel reserves.
///
/// # Errors
/// [`HostError::Invalid`].
pub fn check_id(what: &'static str, id: u32) -> Result<()> {
    if id == u32::MAX {
        return Err(HostError::Invalid {
            what,
            message: format!("{id} is reserved ((uid_t)-1)"),
        });
    }
    Ok(())
}

/// One account file as read: its lines without their newlines, byte for byte.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// The host path.
    pub path: &'static str,
    /// The file existed.
    pub exists: bool,
    /// A missing file may be created (passwd, group); shadow files may not.
    creatable: bool,
    lines: Vec<Vec<u8>>,
    trailing_newline: bool,
    dirty: bool,
}

impl Table {
    fn parse(path: &'static str, creatable: bool, content: Option<Vec<u8>>) -> Table {
        let exists = content.is_some();
        let content = content.unwrap_or_default();
        let mut lines: Vec<Vec<u8>> = content.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
        let trailing_newline = content.ends_with(b"\n");
        if trailing_newline || content.is_empty() {
            lines.pop();
        }
        Table {
            path,
            exists,
            creatable,
            lines,
            trailing_newline,
            dirty: false,
        }
    }

    /// The file may be written: it exists, or it may be created.
    pub fn writable(&self) -> bool {
        self.exists || self.creatable
    }

    /// The new content: the lines joined by newlines, with a final newline when the file had
    /// one or this module added a line.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.lines.join(&b'\n');
        if self.trailing_newline && !self.lines.is_empty() {
            out.push(b'\n');
        }
        out
    }

    /// The index of the first line whose first field is `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.lines.iter().position(|l| {
            l.split(|b| *b == b':').next() == Some(name.as_bytes()) && l.contains(&b':')
        })
    }

    /// The fields of line `i`.
    pub fn fields(&self, i: usize) -> Vec<Vec<u8>> {
        self.lines[i]
            .split(|b| *b == b':')
            .map(<[u8]>::to_vec)
            .collect()
    }

    /// Every line split into fields (lines without a `:` are skipped).
    pub fn entries(&self) -> impl Iterator<Item = (usize, Vec<&[u8]>)> {
        self.lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains(&b':'))
            .map(|(i, l)| (i, l.split(|b| *b == b':').collect::<Vec<_>>()))
    }

    /// Replace line `i` by `fields` joined with `:` (unchanged when equal).
    pub fn set(&mut self, i: usize, fields: &[Vec<u8>]) {
        let line = fields.join(&b':');
        if self.lines[i] != line {
            self.lines[i] = line;
            self.dirty = true;
        }
    }

    /// Append a line made of `fields` (nothing when the file may not be written).
    pub fn push(&mut self, fields: &[&[u8]]) {
        if !self.writable() {
            return;
        }
        self.lines.push(fields.join(&b':'));
        self.trailing_newline = true;
        self.dirty = true;
    }

    /// Remove line `i`.
    pub fn remove(&mut self, i: usize) {
        self.lines.remove(i);
        self.dirty = true;
    }
}

/// A member list field (`a,b,c`) as names; empty names are dropped.
pub(crate) fn members(field: &[u8]) -> Vec<Vec<u8>> {
    field
        .split(|b| *b == b',')
        .filter(|m| !m.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// `field` at index `i`, empty when the line is short.
pub(crate) fn field(f: &[Vec<u8>], i: usize) -> &[u8] {
    f.get(i).map_or(&[][..], Vec::as_slice)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A parsed `/etc/passwd` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Comment (GECOS).
    pub comment: String,
    /// Home directory.
    pub home: String,
    /// Login shell.
    pub shell: String,
}

/// `/etc/login.defs` as `KEY value` pairs (`#` comments and blank lines ignored; the last
/// definition of a key wins, as shadow-utils' `getdef` does).
#[derive(Debug, Clone, Default)]
pub(crate) struct LoginDefs {
    pairs: Vec<(String, String)>,
}

/// A number in C's `strtol(.., 0)` form: `0x` hex, a leading `0` octal, else decimal.
fn parse_c_number(v: &str) -> Option<u64> {
    let v = v.trim();
    if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if v.len() > 1 && v.starts_with('0') {
        u64::from_str_radix(&v[1..], 8).ok()
    } else {
        v.parse().ok()
    }
}

impl LoginDefs {
    fn parse(content: &[u8]) -> LoginDefs {
        let mut pairs = Vec::new();
        for line in String::from_utf8_lossy(content).lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut it = line.splitn(2, char::is_whitespace);
            let key = it.next().unwrap_or_default();
            let value = it.next().unwrap_or_default().trim().trim_matches('"');
            pairs.push((key.to_string(), value.to_string()));
        }
        LoginDefs { pairs }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A numeric setting, `None` when unset.
    ///
    /// # Errors
    /// [`HostError::Invalid`] naming the key and `/etc/login.defs` when the value is not a
    /// number.
    pub fn num(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => parse_c_number(v)
                .map(Some)
                .ok_or_else(|| HostError::Invalid {
                    what: "login.defs setting",
                    message: format!("{key} {v:?} in {LOGIN_DEFS} is not a number"),
                }),
        }
    }

    /// A password aging setting (`PASS_MIN_DAYS`, `PASS_MAX_DAYS`, `PASS_WARN_AGE`) for a
    /// new shadow entry: `None` (an empty field) when unset or negative, as useradd writes it.
    ///
    /// # Errors
    /// A value that is not a number.
    pub fn aging(&self, key: &str) -> Result<Option<u64>> {
        if self.get(key).is_some_and(|v| v.trim().starts_with('-')) {
            return Ok(None);
        }
        self.num(key)
    }

    /// An id setting with useradd's default.
    fn id(&self, key: &str, default: u32) -> Result<u32> {
        match self.num(key)? {
            None => Ok(default),
            Some(n) => u32::try_from(n).map_err(|_| HostError::Invalid {
                what: "login.defs setting",
                message: format!("{key} {n} in {LOGIN_DEFS} is out of range"),
            }),
        }
    }

    /// The automatic id range (`min..=max`) for users (`group` false) or groups, system or
    /// not, with useradd's defaults: `UID_MIN` 1000, `UID_MAX` 60000, `SYS_UID_MIN` 101,
    /// `SYS_UID_MAX` `UID_MIN - 1` (the same for `GID_*`).
    ///
    /// # Errors
    /// A value that is not a number; an empty range.
    pub fn range(&self, group: bool, system: bool) -> Result<(u32, u32)> {
        let p = if group { "GID" } else { "UID" };
        let min = self.id(&format!("{p}_MIN"), 1000)?;
        let (lo_key, hi_key) = if system {
            (format!("SYS_{p}_MIN"), format!("SYS_{p}_MAX"))
        } else {
            (format!("{p}_MIN"), format!("{p}_MAX"))
        };
        let (lo, hi) = if system {
            (
                self.id(&lo_key, 101)?,
                self.id(&hi_key, min.saturating_sub(1))?,
            )
        } else {
            (min, self.id(&hi_key, 60000)?)
        };
        if lo > hi {
            return Err(HostError::Invalid {
                what: "login.defs setting",
                message: format!("{lo_key} {lo} is above {hi_key} {hi} in {LOGIN_DEFS}"),
            });
        }
        Ok((lo, hi))
    }

    /// The mode of a new home directory: `HOME_MODE`, else `0777 & !UMASK`, else 0750.
    ///
    /// # Errors
    /// A value that is not a number.
    pub fn home_mode(&self) -> Result<u32> {
        if let Some(m) = self.num("HOME_MODE")? {
            return Ok((m & 0o7777) as u32);
        }
        Ok(self
            .num("UMASK")?
            .map_or(0o750, |u| 0o777 & !(u as u32) & 0o777))
    }
}

/// The first free id for a new account in `min..=max`, as shadow-utils' `find_new_uid` /
/// `find_new_gid` choose it. System accounts: downwards from just below the lowest id in
/// use in the range (from `max` when none is, or when `min` itself is in use), then from
/// `max` down through the gaps. Other accounts: upwards from just above the highest id in
/// use in the range (from `min` when none is, or when `max` itself is in use), then from
/// `min` up through the gaps. `None` when the range is full.
pub(crate) fn allocate(used: &BTreeSet<u32>, min: u32, max: u32, system: bool) -> Option<u32> {
    let in_range: Vec<u32> = used.range(min..=max).copied().collect();
    let free = |id: &u32| !used.contains(id);
    if system {
        let start = match in_range.first() {
            None => max,
            Some(&lowest) if lowest == min => max,
            Some(&lowest) => lowest - 1,
        };
        (min..=start)
            .rev()
            .find(free)
            .or_else(|| (min..=max).rev().find(free))
    } else {
        let start = match in_range.last() {
            None => min,
            Some(&highest) if highest == max => min,
            Some(&highest) => highest + 1,
        };
        (start..=max).find(free).or_else(|| (min..=max).find(free))
    }
}

/// The four account files and login.defs, as one session sees them.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub passwd: Table,
    pub group: Table,
    pub shadow: Table,
    pub gshadow: Table,
    pub defs: LoginDefs,
}

impl Db {
    /// Read the files through the session's view (planned writes included in plan and check
    /// mode).
    ///
    /// # Errors
    /// A file that cannot be read (a directory, a FIFO, too large, resolution failures).
    pub fn read(h: &Host) -> Result<Db> {
        let read = |p: &str| h.view_read(Path::new(p));
        let db = Db {
            passwd: Table::parse(PASSWD, true, read(PASSWD)?),
            group: Table::parse(GROUP, true, read(GROUP)?),
            shadow: Table::parse(SHADOW, false, read(SHADOW)?),
            gshadow: Table::parse(GSHADOW, false, read(GSHADOW)?),
            defs: LoginDefs::parse(&read(LOGIN_DEFS)?.unwrap_or_default()),
        };
        Ok(db)
    }

    /// Some table changed.
    pub fn dirty(&self) -> bool {
        [&self.passwd, &self.group, &self.shadow, &self.gshadow]
            .iter()
            .any(|t| t.dirty)
    }

    /// The passwd entry of `name`.
    ///
    /// # Errors
    /// [`HostError::Invalid`] for an entry whose uid or gid is not a number.
    pub fn user(&self, name: &str) -> Result<Option<(usize, PasswdEntry)>> {
        let Some(i) = self.passwd.find(name) else {
            return Ok(None);
        };
        let f = self.passwd.fields(i);
        let num = |k: usize, what: &str| -> Result<u32> {
            std::str::from_utf8(field(&f, k))
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| HostError::Invalid {
                    what: "account database entry",
                    message: format!("line {} of {PASSWD} ({name}) has no numeric {what}", i + 1),
                })
        };
        Ok(Some((
            i,
            PasswdEntry {
                name: name.to_string(),
                uid: num(2, "uid")?,
                gid: num(3, "gid")?,
                comment: text(field(&f, 4)),
                home: text(field(&f, 5)),
                shell: text(field(&f, 6)),
            },
        )))
    }

    /// The gid of group `name`.
    ///
    /// # Errors
    /// [`HostError::Invalid`] for an entry whose gid is not a number.
    pub fn group_gid(&self, name: &str) -> Result<Option<(usize, u32)>> {
        let Some(i) = self.group.find(name) else {
            return Ok(None);
        };
        let f = self.group.fields(i);
        let gid = std::str::from_utf8(field(&f, 2))
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HostError::Invalid {
                what: "account database entry",
                message: format!("line {} of {GROUP} ({name}) has no numeric gid", i + 1),
            })?;
        Ok(Some((i, gid)))
    }

    /// Numeric ids in use in field `idx` of `t`, with the entry names.
    fn ids(t: &Table, idx: usize) -> Vec<(u32, String)> {
        t.entries()
            .filter_map(|(_, f)| {
                let id = std::str::from_utf8(f.get(idx)?).ok()?.parse().ok()?;
                Some((id, text(f[0])))
            })
            .collect()
    }

    /// The user (other than `except`) that has `uid`.
    pub fn uid_owner(&self, uid: u32, except: &str) -> Option<String> {
        Db::ids(&self.passwd, 2)
            .into_iter()
            .find(|(id, n)| *id == uid && n != except)
            .map(|(_, n)| n)
    }

    /// The group (other than `except`) that has `gid`.
    pub fn gid_owner(&self, gid: u32, except: &str) -> Option<String> {
        Db::ids(&self.group, 2)
            .into_iter()
            .find(|(id, n)| *id == gid && n != except)
            .map(|(_, n)| n)
    }

    /// A new id for a user (`group` false) or group from login.defs' range ([`allocate`]).
    ///
    /// # Errors
    /// login.defs errors; [`HostError::Invalid`] when the range is full.
    pub fn new_id(&self, group: bool, system: bool) -> Result<u32> {
        let (min, max) = self.defs.range(group, system)?;
        let used: BTreeSet<u32> = if group {
            Db::ids(&self.group, 2)
        } else {
            Db::ids(&self.passwd, 2)
        }
        .into_iter()
        .map(|(id, _)| id)
        .collect();
        allocate(&used, min, max, system).ok_or_else(|| HostError::Invalid {
            what: if group { "gid" } else { "uid" },
            message: format!(
                "no free {} in {min}..={max} ({} in {LOGIN_DEFS})",
                if group { "gid" } else { "uid" },
                match (group, system) {
                    (false, true) => "SYS_UID_MIN..SYS_UID_MAX",
                    (false, false) => "UID_MIN..UID_MAX",
                    (true, true) => "SYS_GID_MIN..SYS_GID_MAX",
                    (true, false) => "GID_MIN..GID_MAX",
                }
            ),
        })
    }

    /// The supplementary groups `user` is listed in (`/etc/group` member lists), in file
    /// order.
    pub fn groups_of(&self, user: &str) -> Vec<String> {
        self.group
            .entries()
            .filter(|(_, f)| {
                f.get(3)
                    .is_some_and(|m| members(m).iter().any(|x| x == user.as_bytes()))
            })
            .map(|(_, f)| text(f[0]))
            .collect()
    }

    /// Add `user` to the member list (field `idx`) of entry `name` of `t`, when the entry
    /// exists and does not list it yet.
    pub fn add_member(t: &mut Table, name: &str, idx: usize, user: &str) {
        let Some(i) = t.find(name) else { return };
        let mut f = t.fields(i);
        while f.len() <= idx {
            f.push(Vec::new());
        }
        let mut m = members(&f[idx]);
        if m.iter().any(|x| x == user.as_bytes()) {
            return;
        }
        m.push(user.as_bytes().to_vec());
        f[idx] = m.join(&b',');
        t.set(i, &f);
    }

    /// Remove `user` from every member list (field `idx`, and for gshadow also the admin
    /// list, field 2) of `t`.
    pub fn remove_member_everywhere(t: &mut Table, user: &str, idxs: &[usize]) {
        let hits: Vec<usize> = t
            .entries()
            .filter(|(_, f)| {
                idxs.iter().any(|&k| {
                    f.get(k)
                        .is_some_and(|m| members(m).iter().any(|x| x == user.as_bytes()))
                })
            })
            .map(|(i, _)| i)
            .collect();
        for i in hits {
            let mut f = t.fields(i);
            for &k in idxs {
                if let Some(v) = f.get_mut(k) {
                    let m: Vec<Vec<u8>> = members(v)
                        .into_iter()
                        .filter(|x| x != user.as_bytes())
                        .collect();
                    if m.len() != members(v).len() {
                        *v = m.join(&b',');
                    }
                }
            }
            t.set(i, &f);
        }
    }

    /// Remove the first entry `name` of `t`, when present.
    pub fn remove_entry(t: &mut Table, name: &str) {
        if let Some(i) = t.find(name) {
            t.remove(i);
        }
    }

    /// Append group `name` with `gid` to `/etc/group` (`name:x:gid:`, `!` instead of `x`
    /// without `/etc/gshadow`) and, unless it has one already, to `/etc/gshadow`
    /// (`name:!::`), as groupadd writes them.
    pub fn add_group(&mut self, name: &str, gid: u32) {
        let pw: &[u8] = if self.gshadow.exists { b"x" } else { b"!" };
        let gid = gid.to_string();
        self.group.push(&[name.as_bytes(), pw, gid.as_bytes(), b""]);
        if self.gshadow.find(name).is_none() {
            self.gshadow.push(&[name.as_bytes(), b"!", b"", b""]);
        }
    }

    /// The users whose primary group is `gid`, in file order.
    pub fn primary_members(&self, gid: u32) -> Vec<(usize, String)> {
        self.passwd
            .entries()
            .filter(|(_, f)| {
                f.get(3)
                    .and_then(|g| std::str::from_utf8(g).ok())
                    .and_then(|g| g.parse::<u32>().ok())
                    == Some(gid)
            })
            .map(|(i, f)| (i, text(f[0])))
            .collect()
    }

    /// Submit one whole-file write per changed table (mode, owner and attributes kept; a new
    /// passwd or group file is 0644).
    fn write(self, h: &mut Host) -> Result<()> {
        for t in [self.passwd, self.group, self.shadow, self.gshadow] {
            if !t.dirty || !t.writable() {
                continue;
            }
            let content = t.to_bytes();
            if [SHADOW, GSHADOW].contains(&t.path) {
                redact_shown(h, t.path, &content)?;
            }
            // One line per entry: an undo over another package's later entry takes out
            // just this step's lines.
            h.next_write_is_line_edit();
            h.submit(Effect::WriteFile {
                path: t.path.into(),
                content: content.into(),
                mode: (!t.exists).then_some(0o644),
                uid: None,
                gid: None,
            })?;
        }
        Ok(())
    }
}

/// Add to the session's redactor the password fields (8 characters or more) of the lines of
/// `path` that the diff of its rewrite to `new` shows: the changed lines and their context
/// (3 lines, as [`crate::host::render_diff`]). Only when diffs are rendered (plan and check
/// mode, apply with `diffs`); a file that is not UTF-8 is rendered without its lines.
///
/// # Errors
/// Reading the current content.
fn redact_shown(h: &Host, path: &str, new: &[u8]) -> Result<()> {
    for line in h.shown_diff_lines(Path::new(path), new)? {
        if let Some(pw) = line.split(':').nth(1).filter(|p| p.len() >= 8) {
            h.redactor().add(pw);
        }
    }
    Ok(())
}

/// Days since the Unix epoch for `lastchg`: from `SOURCE_DATE_EPOCH` in the step's
/// environment when set (as shadow-utils' `gettime()` honours it), else the clock.
///
/// # Errors
/// [`HostError::Invalid`] for a `SOURCE_DATE_EPOCH` that is not a number of seconds.
pub fn days_since_epoch(h: &Host) -> Result<u64> {
    let secs = match h.env("SOURCE_DATE_EPOCH") {
        Some(v) => v.trim().parse::<u64>().map_err(|_| HostError::Invalid {
            what: "SOURCE_DATE_EPOCH",
            message: format!("{v:?} is not a number of seconds"),
        })?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    Ok(secs / 86_400)
}

/// The locks of one apply-mode transaction. Fields drop in declaration order: the
/// shadow-utils lock first, the path locks after it (module docs).
/// One edit of the account files (module docs): `edit` changes the tables of a fresh
/// [`Db`] (given the session for other reads, such as the home directory) and returns a
/// value; every changed file is then written through
/// [`Host::submit`]. Returns whether a file changed, and `edit`'s value. When
/// [`Host::locked_update`] took the locks (apply mode) a change is decided again on the files
/// as they are then, and `edit` runs again (so it must only depend on the tables it is given).
///
/// # Errors
/// Whatever `edit` fails with; reads; locks; the writes.
pub(crate) fn transact<T, E: From<HostError>>(
    h: &mut Host,
    edit: impl Fn(&Host, &mut Db) -> Result<T, E>,
) -> Result<(bool, T), E> {
    let mut db = Db::read(h)?;
    let value = edit(h, &mut db)?;
    if !db.dirty() {
        return Ok((false, value));
    }
    let paths = [PASSWD, GROUP, SHADOW, GSHADOW].map(Path::new);
    h.locked_update(&paths, ToolLock::Pwd, |h, locked| {
        let (db, value) = match locked {
            true => {
                let mut db = Db::read(h)?;
                let value = edit(h, &mut db)?;
                (db, value)
            }
            false => (db, value),
        };
        let dirty = db.dirty();
        if dirty {
            db.write(h)?;
        }
        Ok((dirty, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["gpuops", "_svc", "a-b_c9", "machine$", &"a".repeat(32)] {
            check_name("user name", ok).unwrap();
        }
        for bad in [
            "",
            "Gpu",
            "9a",
            "-a",
            "a:b",
            "a\nb",
            "a$b",
            "$",
            &"a".repeat(33),
        ] {
            assert!(check_name("user name", bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_name("group name", "Ops").unwrap_err().to_string(),
            "invalid group name: \"Ops\" must match [a-z_][a-z0-9_-]*[$]? and have at most 32 characters"
        );
        assert_eq!(
            check_field("shell", "/bin/sh\n").unwrap_err().to_string(),
            "invalid shell: \"/bin/sh\\n\" must not contain ':' or a line break"
        );
    }

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn allocation_follows_shadow_utils() {
        // normal: above the highest used, gaps below it are not reused
        assert_eq!(allocate(&set(&[]), 1000, 60000, false), Some(1000));
        assert_eq!(
            allocate(&set(&[0, 1000, 1002]), 1000, 60000, false),
            Some(1003)
        );
        // the highest is in use at max: the lowest gap
        assert_eq!(
            allocate(&set(&[1000, 1002, 1004]), 1000, 1004, false),
            Some(1001)
        );
        // system: below the lowest used, from the top when none is
        assert_eq!(allocate(&set(&[0, 1000]), 101, 999, true), Some(999));
        assert_eq!(allocate(&set(&[997, 999]), 101, 999, true), Some(996));
        // lowest used is min: from max down through the gaps
        assert_eq!(allocate(&set(&[101, 999]), 101, 999, true), Some(998));
        // below the lowest used is full: from max down
        assert_eq!(allocate(&set(&[101, 102, 104]), 101, 104, true), Some(103));
        assert_eq!(allocate(&set(&[1, 2]), 1, 2, true), None);
        assert_eq!(allocate(&set(&[1, 2]), 1, 2, false), None);
    }

    #[test]
    fn login_defs() {
        let d = LoginDefs::parse(
            b"# comment\nUID_MIN\t\t 2000\nUID_MAX 0x7530\nSYS_UID_MIN 200\nUMASK 027\nUID_MIN 1500\n",
        );
        assert_eq!(d.range(false, false).unwrap(), (1500, 30000));
        assert_eq!(d.range(false, true).unwrap(), (200, 1499));
        assert_eq!(d.range(true, false).unwrap(), (1000, 60000));
        assert_eq!(d.range(true, true).unwrap(), (101, 999));
        assert_eq!(d.home_mode().unwrap(), 0o750);
        assert_eq!(
            LoginDefs::parse(b"HOME_MODE 0700\nUMASK 022\n")
                .home_mode()
                .unwrap(),
            0o700
        );
        assert_eq!(LoginDefs::parse(b"UMASK 022\n").home_mode().unwrap(), 0o755);
        assert_eq!(LoginDefs::default().home_mode().unwrap(), 0o750);
        assert_eq!(
            LoginDefs::parse(b"UID_MIN lots\n")
                .range(false, false)
                .unwrap_err()
                .to_string(),
            "invalid login.defs setting: UID_MIN \"lots\" in /etc/login.defs is not a number"
        );
        assert_eq!(
            LoginDefs::parse(b"SYS_GID_MIN 900\nSYS_GID_MAX 800\n")
                .range(true, true)
                .unwrap_err()
                .to_string(),
            "invalid login.defs setting: SYS_GID_MIN 900 is above SYS_GID_MAX 800 in /etc/login.defs"
        );
    }

    #[test]
    fn tables_keep_bytes() {
        let raw = b"root:x:0:0::/root:/bin/sh\n# a comment\n+nis\nbad line\n".to_vec();
        let t = Table::parse(PASSWD, true, Some(raw.clone()));
        assert_eq!(t.to_bytes(), raw);
        assert_eq!(t.find("root"), Some(0));
        assert_eq!(t.find("bad line"), None);
        // no final newline: kept, and added before an appended line
        let mut t = Table::parse(GROUP, true, Some(b"a:x:1:".to_vec()));
        assert_eq!(t.to_bytes(), b"a:x:1:");
        t.push(&[b"b", b"x", b"2", b""]);
        assert_eq!(t.to_bytes(), b"a:x:1:\nb:x:2:\n");
        // a missing shadow file stays missing
        let mut s = Table::parse(SHADOW, false, None);
        s.push(&[b"a", b"!"]);
        assert!(!s.dirty && !s.writable());
        let mut g = Table::parse(GROUP, true, Some(b"a:x:1:u1,u2\nb:x:2:u2\n".to_vec()));
        Db::remove_member_everywhere(&mut g, "u2", &[3]);
        assert_eq!(g.to_bytes(), b"a:x:1:u1\nb:x:2:\n");
        Db::add_member(&mut g, "b", 3, "u1");
        Db::add_member(&mut g, "b", 3, "u1");
        assert_eq!(g.to_bytes(), b"a:x:1:u1\nb:x:2:u1\n");
    }
}
