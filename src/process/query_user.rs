//! Who the commands of a package plan run as (serve's `--plan-query-user`): by default
//! ([`QueryUsers::Auto`]) each running plan has a user and group id of its own, from ids
//! no node gives anyone ([`AUTO_BASE`]), so that
//! - no host daemon's socket or file is that user's (a daemon running as `nobody`, 65534,
//!   does not take a query's connection to its 0600 socket);
//! - what the kernel counts per user (inotify instances, pipe buffer pages,
//!   `RLIMIT_NPROC`) one plan's queries exhaust is their own, not another plan's nor a
//!   host process's.
//!
//! A fixed `UID[:GID]` ([`QueryUsers::Fixed`]) is every plan's: plans then share those
//! per-user counts with each other and with every host process of that user.

/// The first id of `--plan-query-user auto`: 2,147,478,690, that is `0x7FFF0000` (the last
/// 65,536-block below 2^31) + 60578. Why there:
/// - above every range a node's own users come from: system and regular users (< 60001),
///   systemd's dynamic users (61184–65519) and `nobody` (65534), `useradd`'s
///   `/etc/subuid` ranges (100000–600100000), systemd-nspawn's container ranges
///   (524288–1879048191) and systemd's foreign range (`0x7FFE0000`–`0x7FFEFFFF`); below
///   2^31, which tools that keep ids in a signed 32-bit integer take for negative;
/// - no block is safe from the kubelet's user-namespaced pods (by default it maps each pod
///   0–65535 onto a 65,536-block picked at random from all of 65536–2^32), so the ids sit
///   where, in any such block, they are a pod's ids 60578–61183, which systemd leaves
///   unused and no image assigns (unlike 0, 1000 or distroless' 65532): a pod whose block
///   this is would still have no process or file of these ids.
pub const AUTO_BASE: u32 = 0x7FFF_0000 + 60578;

/// How many plan slots `auto` has ids for: `AUTO_BASE ..= AUTO_BASE + 605` (a pod's
/// 60578–61183, where systemd's dynamic users start).
pub const AUTO_SLOTS: usize = 606;

/// The user and group id a plan's commands run as: never 0, so a command has no capability
/// and passes the kernel's permission checks as that unprivileged user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryUser {
    pub(super) uid: u32,
    pub(super) gid: u32,
}

impl QueryUser {
    /// `nobody:nogroup` (65534:65534), the kernel's overflow ids.
    pub const NOBODY: QueryUser = QueryUser {
        uid: 65534,
        gid: 65534,
    };

    /// The user `uid` in group `gid`.
    ///
    /// # Errors
    /// Either is 0 (root's user or group: every host file and socket of root's would be
    /// open to the plan again), or `u32::MAX` (`-1`, "unchanged" to the kernel).
    pub fn new(uid: u32, gid: u32) -> Result<QueryUser, String> {
        for (what, id) in [("user", uid), ("group", gid)] {
            if id == 0 {
                return Err(format!(
                    "the {what} id of plan queries must not be 0 (root's): a query would reach \
                     root's sockets and files on the host"
                ));
            }
            if id == u32::MAX {
                return Err(format!("{id} is no {what} id"));
            }
        }
        Ok(QueryUser { uid, gid })
    }

    /// The user id.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The group id.
    pub fn gid(&self) -> u32 {
        self.gid
    }
}

impl std::str::FromStr for QueryUser {
    type Err = String;

    /// `UID` or `UID:GID`, numbers (the server's user database is not the host's); `UID`
    /// alone takes the same number as its group.
    fn from_str(s: &str) -> Result<Self, String> {
        let (u, g) = s.split_once(':').unwrap_or((s, s));
        let id = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("{s:?}: expected auto, UID or UID:GID, numbers"))
        };
        QueryUser::new(id(u)?, id(g)?)
    }
}

impl std::fmt::Display for QueryUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

/// Serve's `--plan-query-user`: who each plan's commands run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryUsers {
    /// `auto`: the plan in slot `k` (0 ≤ k < `--max-plans`, held for the plan's life,
    /// then reused) runs as `AUTO_BASE + k : AUTO_BASE + k`.
    #[default]
    Auto,
    /// `UID[:GID]`: every plan runs as this user.
    Fixed(QueryUser),
}

impl QueryUsers {
    /// The user of the plan in `slot` (`slot` < [`AUTO_SLOTS`]; `auto` wraps past it).
    pub fn for_slot(&self, slot: usize) -> QueryUser {
        match self {
            QueryUsers::Auto => {
                let id = AUTO_BASE + (slot % AUTO_SLOTS) as u32;
                QueryUser { uid: id, gid: id }
            }
            QueryUsers::Fixed(u) => *u,
        }
    }

    /// `auto` only: refuse `slots` plans (`--max-plans`) past [`AUTO_SLOTS`], or a slot id
    /// that the host root's user database names: a user or group of `passwd` / `group`
    /// (`name:x:uid:gid:...`, `name:x:gid:...`), a subordinate range of `subuid` /
    /// `subgid` (`name:first:count`). Each source is `(path for the error, contents)`;
    /// a missing file is empty. A fixed user is the admin's choice and not checked.
    ///
    /// # Errors
    /// Names the file, line and the id it has in the range.
    pub fn check_host(
        &self,
        slots: usize,
        passwd: (&str, &str),
        group: (&str, &str),
        subuid: (&str, &str),
        subgid: (&str, &str),
    ) -> Result<(), String> {
        if *self != QueryUsers::Auto {
            return Ok(());
        }
        if slots > AUTO_SLOTS {
            return Err(format!(
                "--plan-query-user auto has {AUTO_SLOTS} ids, fewer than --max-plans {slots}"
            ));
        }
        let (lo, hi) = (u64::from(AUTO_BASE), u64::from(AUTO_BASE) + slots as u64);
        let refuse = |path: &str, n: usize, line: &str, what: &str| {
            Err(format!(
                "--plan-query-user auto runs plans as ids {lo}-{} (--max-plans {slots}), \
                 and {path} line {n} gives {what} of them ({line:?}): give that user other ids \
                 or run serve with --plan-query-user UID[:GID]",
                hi - 1
            ))
        };
        // An id field of the database: in the range?
        let hit = |f: Option<&str>| {
            f.and_then(|v| v.trim().parse::<u64>().ok())
                .is_some_and(|v| (lo..hi).contains(&v))
        };
        for (path, text, fields, what) in [
            (passwd.0, passwd.1, &[2usize, 3][..], "a user or its group"),
            (group.0, group.1, &[2][..], "a group"),
        ] {
            for (i, line) in text.lines().enumerate() {
                let f: Vec<&str> = line.split(':').collect();
                if fields.iter().any(|&k| hit(f.get(k).copied())) {
                    return refuse(path, i + 1, line, what);
                }
            }
        }
        for (path, text) in [subuid, subgid] {
            for (i, line) in text.lines().enumerate() {
                let f: Vec<&str> = line.split(':').collect();
                let num = |k: usize| f.get(k).and_then(|v| v.trim().parse::<u64>().ok());
                if let (Some(first), Some(count)) = (num(1), num(2))
                    && first < hi
                    && first + count > lo
                {
                    return refuse(path, i + 1, line, "subordinate ids (for user namespaces)");
                }
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for QueryUsers {
    type Err = String;

    /// `auto`, `UID` or `UID:GID` ([`QueryUser`]'s form).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(QueryUsers::Auto),
            _ => s.parse().map(QueryUsers::Fixed),
        }
    }
}

impl std::fmt::Display for QueryUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryUsers::Auto => f.write_str("auto"),
            QueryUsers::Fixed(u) => u.fmt(f),
        }
    }
}

/// Serve's `--plan-bus-user`: whom the D-Bus system bus sees a plan's query as. The
/// reference `dbus-daemon` drops the connection of a uid its user database does not know,
/// which `auto`'s query users are by design; so by default a plan's connections to the
/// system bus are made as a user the host knows (`nobody`), and the read-only filter
/// rewrites the query's `AUTH EXTERNAL` claim of its own uid to that user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusUser {
    /// `query`: as the query user (the bus sees each plan's own uid).
    Query,
    /// A user of the host root's `/etc/passwd`, by name or uid (its group is its
    /// passwd entry's).
    Named(String),
    /// `UID:GID`: these ids, not looked up (a user of another NSS source, e.g. LDAP).
    Ids(QueryUser),
}

impl BusUser {
    /// The bus user's ids, looked up in `passwd` (`(path for the error, contents)`, the host
    /// root's `/etc/passwd`, `name:x:uid:gid:...`; a name is matched before a uid);
    /// `Ok(None)` for [`BusUser::Query`].
    ///
    /// # Errors
    /// No entry names it (`path` named); it is root's user or group (0), or the entry's
    /// ids are not numbers.
    pub fn resolve(&self, passwd: (&str, &str)) -> Result<Option<QueryUser>, String> {
        let key = match self {
            BusUser::Query => return Ok(None),
            BusUser::Ids(u) => return Ok(Some(*u)),
            BusUser::Named(k) => k,
        };
        let entry = passwd_entries(passwd.1)
            .find(|f| f[0] == key)
            .or_else(|| passwd_entries(passwd.1).find(|f| f[2] == key))
            .ok_or_else(|| {
                format!(
                    "--plan-bus-user {key}: no such user in {} (give a user the host's \
                     dbus-daemon knows, UID:GID, or query)",
                    passwd.0
                )
            })?;
        let id = |v: &str| {
            v.parse::<u32>().map_err(|_| {
                format!(
                    "--plan-bus-user {key}: {} gives it ids that are no numbers ({:?})",
                    passwd.0,
                    entry.join(":")
                )
            })
        };
        bus_ids(key, id(entry[2])?, id(entry[3])?).map(Some)
    }
}

impl BusUser {
    /// Whether `passwd` (the text of an `/etc/passwd`) has an entry (4 fields or more)
    /// named `name`, well formed or not.
    pub fn listed(passwd: &str, name: &str) -> bool {
        passwd_entries(passwd).any(|f| f[0] == name)
    }
}

/// The entries of `passwd` (the text of an `/etc/passwd`) with at least the four fields
/// `name:password:uid:gid`, split at `:`.
fn passwd_entries(passwd: &str) -> impl Iterator<Item = Vec<&str>> {
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
}

/// `uid`:`gid` as the bus user `shown`. Errors: either is root's (0: the bus and polkit
/// would take every plan's query for root's) or `u32::MAX`.
fn bus_ids(shown: &str, uid: u32, gid: u32) -> Result<QueryUser, String> {
    if uid == 0 || gid == 0 {
        return Err(format!(
            "--plan-bus-user {shown}: user {uid} group {gid}, root's: the system bus (and \
             polkit) would take a plan's queries for root's; give an unprivileged user"
        ));
    }
    QueryUser::new(uid, gid).map_err(|e| format!("--plan-bus-user {shown}: {e}"))
}

impl std::str::FromStr for BusUser {
    type Err = String;

    /// `query`, `UID:GID` (numbers), or a user's name or uid (looked up later).
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "query" {
            return Ok(BusUser::Query);
        }
        if let Some((u, g)) = s.split_once(':') {
            let id = |v: &str| {
                v.parse::<u32>().map_err(|_| {
                    format!("{s:?}: expected a user's name or uid, UID:GID (numbers), or query")
                })
            };
            return bus_ids(s, id(u)?, id(g)?).map(BusUser::Ids);
        }
        let name = |c: char| c.is_ascii_alphanumeric() || "._-$".contains(c);
        if s.is_empty() || !s.chars().all(name) {
            return Err(format!(
                "{s:?}: expected a user's name or uid, UID:GID, or query"
            ));
        }
        Ok(BusUser::Named(s.to_string()))
    }
}

impl std::fmt::Display for BusUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusUser::Query => f.write_str("query"),
            BusUser::Named(n) => f.write_str(n),
            BusUser::Ids(u) => u.fmt(f),
        }
    }
}
