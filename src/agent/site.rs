//! Where a package's files are, and the rules that depend only on its files: which steps
//! are scripts, compiling them ahead, the expected configMap files.
//!
//! A [`PackageSite`] is either the agent's copy dir under the host root (every read is
//! root-confined, paths are host paths) or a package directory on this machine
//! (`skyhook-run --package DIR`, a dry run: nothing is copied).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::host::root::{AgentFiles, HostRoot, MAX_PACKAGE_FILE_BYTES, open_local, read_bounded};
use crate::package::{Mode, Package, Step};
use crate::script::compile::{CompiledScript, compile_source};
use crate::script::engine::ScriptEngine;
use crate::script::resolver::ModuleStore;
use crate::step::StepProgram;

use super::error::AgentError;

/// The file name of the shellscript package's dispatcher.
pub const SHELLSCRIPT_DISPATCHER: &str = "shellscript_run.sh";

/// Compiled scripts of one mode, by the step's index in the mode.
pub use crate::mode::StepScripts;

/// Where the package's files are (see the module docs).
#[derive(Debug, Clone)]
pub enum PackageSite<'a> {
    /// The agent's copy dir (a host path) under the host root.
    Copy {
        /// The host root.
        root: &'a HostRoot,
        /// The copy dir, a host path (`COPY_DIR`).
        copy_dir: &'a Path,
    },
    /// A package directory on this machine.
    Local {
        /// The package directory (absolute).
        dir: PathBuf,
        /// Its configMaps folder (absolute; may lie elsewhere).
        configmaps: PathBuf,
        /// Where the package is copied inside the root when it is applied (a host path,
        /// `skyhook-run`'s copy dir). `Some`: a plan puts the package's files there in its
        /// overlay ([`crate::agent::prepare::package_copy`]) and steps see
        /// `SKYHOOK_DIR` and `STEP_ROOT` there, so a script reading its own files
        /// (`fs::list(step().skyhook_dir + ..)`) plans as it applies. `None`: steps see DIR.
        host_dir: Option<PathBuf>,
    },
}

impl PackageSite<'_> {
    /// The package directory (`SKYHOOK_DIR`'s source): the copy dir (host path) or DIR.
    pub fn dir(&self) -> PathBuf {
        match self {
            PackageSite::Copy { copy_dir, .. } => copy_dir.to_path_buf(),
            PackageSite::Local { dir, .. } => dir.clone(),
        }
    }

    /// `<dir>/skyhook_dir`: where step paths are relative to.
    pub fn step_root(&self) -> PathBuf {
        self.dir().join("skyhook_dir")
    }

    /// The configMaps folder: `<copy dir>/configmaps` or the local one.
    pub fn configmaps_dir(&self) -> PathBuf {
        match self {
            PackageSite::Copy { copy_dir, .. } => copy_dir.join("configmaps"),
            PackageSite::Local { configmaps, .. } => configmaps.clone(),
        }
    }

    /// `config.json`.
    pub fn config_path(&self) -> PathBuf {
        self.dir().join("config.json")
    }

    /// How a path of this site is shown in messages: a host path (Copy) as the agent
    /// displays it under the root mount, a local path as it is.
    pub fn shown(&self, p: &Path) -> PathBuf {
        match self {
            PackageSite::Copy { root, .. } => root.display_path(p),
            PackageSite::Local { .. } => p.to_path_buf(),
        }
    }

    /// True when `p` is a regular file (following symlinks; under the root for Copy).
    ///
    /// # Errors
    /// A lookup failure under the root other than "not found".
    pub fn is_file(&self, p: &Path) -> Result<bool, AgentError> {
        match self {
            PackageSite::Copy { root, .. } => {
                Ok(matches!(root.metadata(p)?, Some(m) if m.is_file()))
            }
            PackageSite::Local { .. } => Ok(p.is_file()),
        }
    }

    /// The bytes of the package file `p` (config.json, a script): a regular file of at most
    /// [`MAX_PACKAGE_FILE_BYTES`], opened without blocking (a FIFO or `/dev/zero` in its
    /// place is an error, not a hang or an exhausted memory).
    ///
    /// # Errors
    /// The file cannot be read, is not a regular file or is too large (the error names it
    /// and the limit).
    pub fn read(&self, p: &Path) -> Result<Vec<u8>, AgentError> {
        self.read_max(p, MAX_PACKAGE_FILE_BYTES)
    }

    fn read_max(&self, p: &Path, max: u64) -> Result<Vec<u8>, AgentError> {
        match self {
            PackageSite::Copy { root, .. } => Ok(root.read_regular(p, max)?),
            PackageSite::Local { .. } => read_local_max(p, max),
        }
    }

    /// `STEP_ROOT` and `SKYHOOK_DIR` as a step sees them (8.3): for the copy dir, host paths
    /// when the step runs chrooted (`on_host`), else paths under the root mount; for a local
    /// directory, the local paths.
    pub fn reserved_dirs(&self, on_host: bool) -> (PathBuf, PathBuf) {
        match self {
            PackageSite::Copy { root, copy_dir } if !on_host => (
                root.display_path(&copy_dir.join("skyhook_dir")),
                root.display_path(copy_dir),
            ),
            PackageSite::Copy { .. } => (self.step_root(), self.dir()),
            PackageSite::Local {
                host_dir: Some(h), ..
            } => (h.join("skyhook_dir"), h.clone()),
            PackageSite::Local { dir, .. } => {
                let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
                (dir.join("skyhook_dir"), dir)
            }
        }
    }

    /// What a process step runs (8.2): the program, chrooted into the root mount with the
    /// copy dir as working directory when `on_host`, else in the agent's filesystem with
    /// the paths under the root mount. A local site gives local paths and no chroot (a dry
    /// run never spawns it).
    pub fn process(&self, step: &Step) -> StepProgram {
        let program = self.step_root().join(&step.path);
        match self {
            PackageSite::Copy { root, copy_dir } => {
                let shown = root.display_path(&program);
                if step.on_host {
                    StepProgram::Process {
                        program,
                        cwd: copy_dir.to_path_buf(),
                        chroot: Some(root.mount().to_path_buf()),
                        shown,
                    }
                } else {
                    StepProgram::Process {
                        program: shown.clone(),
                        cwd: root.display_path(copy_dir),
                        chroot: None,
                        shown,
                    }
                }
            }
            PackageSite::Local { dir, .. } => StepProgram::Process {
                program: program.clone(),
                cwd: dir.clone(),
                chroot: None,
                shown: program,
            },
        }
    }

    /// The module store of the package's scripts: package-relative imports from
    /// `skyhook_dir`, `configmap/<name>` from the configMaps folder (agent-side paths).
    pub fn module_store(&self) -> ModuleStore {
        match self {
            PackageSite::Copy { .. } => ModuleStore::new(self.shown(&self.step_root()))
                .with_configmaps(self.shown(&self.configmaps_dir()))
                .shown_as(self.step_root(), Some(self.configmaps_dir())),
            PackageSite::Local { configmaps, .. } => {
                let step_root = self.step_root();
                ModuleStore::new(std::path::absolute(&step_root).unwrap_or(step_root))
                    .with_configmaps(configmaps.clone())
            }
        }
    }

    /// The script a step runs, if it is a script step: `skyhook_dir/<path>` for a `.rhai`
    /// path; for the shellscript package's dispatcher (`shellscript_run.sh STAGE`)
    /// `configmaps/<STAGE>.rhai` when that file exists (the dispatcher itself then does not
    /// run; without it the dispatcher runs as a process step).
    ///
    /// # Errors
    /// A failure to look the configMap up under the root.
    pub fn script_path(&self, step: &Step) -> Result<Option<PathBuf>, AgentError> {
        if step.path.ends_with(".rhai") {
            return Ok(Some(self.step_root().join(&step.path)));
        }
        let is_dispatcher = Path::new(&step.path)
            .file_name()
            .is_some_and(|n| n == SHELLSCRIPT_DISPATCHER);
        let stage = step.arguments.first().filter(|s| {
            !s.is_empty() && !s.starts_with("env:") && !s.contains('/') && *s != "." && *s != ".."
        });
        if let (true, Some(stage)) = (is_dispatcher, stage) {
            let candidate = self.configmaps_dir().join(format!("{stage}.rhai"));
            if self.is_file(&candidate)? {
                return Ok(Some(candidate));
            }
        }
        Ok(None)
    }

    /// Compile every script step of `mode` (and its imports) on one module store, before
    /// any state is written; also the configMap script of the mode's stage
    /// (`configmaps/<stage>.rhai`, which `skyhook/shellscript` imports) when a script step
    /// exists, so a syntax error there changes nothing either.
    ///
    /// # Errors
    /// [`AgentError::Compile`] (`file:line:col: message`) for the first script that does
    /// not compile; [`AgentError::NotUtf8`]; a read failure.
    pub fn compile_mode_scripts(
        &self,
        engine: &ScriptEngine,
        pkg: &Package,
        mode: Mode,
    ) -> Result<StepScripts, AgentError> {
        let mut out = StepScripts::new();
        let mut store: Option<Arc<ModuleStore>> = None;
        // Steps that run the same script share its compilation (a clone shares the AST).
        let mut compiled: std::collections::HashMap<PathBuf, CompiledScript> =
            std::collections::HashMap::new();
        let mut compile = |path: &Path| -> Result<CompiledScript, AgentError> {
            if let Some(c) = compiled.get(path) {
                return Ok(c.clone());
            }
            let store = store
                .get_or_insert_with(|| Arc::new(self.module_store()))
                .clone();
            let bytes = self.read_max(path, crate::script::resolver::MAX_SCRIPT_BYTES)?;
            let source = String::from_utf8(bytes).map_err(|_| AgentError::NotUtf8 {
                path: path.to_path_buf(),
            })?;
            let c = compile_source(engine, &path.display().to_string(), &source, store)?;
            compiled.insert(path.to_path_buf(), c.clone());
            Ok(c)
        };
        for (index, step) in pkg.steps(mode).iter().enumerate() {
            if let Some(path) = self.script_path(step)? {
                out.insert(index, compile(&path)?);
            }
        }
        let stage_script = self
            .configmaps_dir()
            .join(format!("{}.rhai", mode.as_str().replace('-', "_")));
        let shown = stage_script.display().to_string();
        if !out.is_empty()
            && !out.values().any(|c| c.file() == shown)
            && self.is_file(&stage_script)?
        {
            compile(&stage_script)?;
        }
        Ok(out)
    }

    /// Require every `expected_config_files` name in the configMaps folder (section 4
    /// item 4; not in the uninstall modes, which the caller decides). The copy dir gives
    /// Python's message; a local directory names the folder searched.
    ///
    /// # Errors
    /// [`AgentError::Prepare`] or [`AgentError::ExpectedConfigFile`] naming the first
    /// missing one.
    pub fn check_expected_files(&self, names: &[String]) -> Result<(), AgentError> {
        match self {
            PackageSite::Copy { root, copy_dir } => {
                use super::prepare_error::PrepareError;
                for name in names {
                    let path = copy_dir.join("configmaps").join(name);
                    if !root.exists(&path).map_err(PrepareError::from)? {
                        let name = name.clone();
                        return Err(PrepareError::ExpectedConfigFile { name }.into());
                    }
                }
                Ok(())
            }
            PackageSite::Local { configmaps, .. } => {
                for name in names {
                    if !configmaps.join(name).is_file() {
                        return Err(AgentError::ExpectedConfigFile {
                            name: name.clone(),
                            dir: configmaps.clone(),
                        });
                    }
                }
                Ok(())
            }
        }
    }
}

/// One entry of a `root_dir/` folder as the overlay sees it (symlinks followed): a folder
/// or a regular file, with its permission bits (and a file's modification time), or a
/// dangling symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlayEntry {
    /// A folder and its mode.
    Dir(u32),
    /// A regular file, its mode and its modification time.
    File(u32, std::time::SystemTime),
    /// A symlink whose target does not exist.
    Dangling,
}

impl PackageSite<'_> {
    /// The text of the script at `p` (as [`PackageSite::compile_mode_scripts`] reads it).
    ///
    /// # Errors
    /// Unreadable, too large, not UTF-8.
    pub fn read_script(&self, p: &Path) -> Result<String, AgentError> {
        let bytes = self.read_max(p, crate::script::resolver::MAX_SCRIPT_BYTES)?;
        String::from_utf8(bytes).map_err(|_| AgentError::NotUtf8 {
            path: p.to_path_buf(),
        })
    }

    /// True when `p` is a folder (following symlinks; under the root for Copy).
    ///
    /// # Errors
    /// A lookup failure under the root other than "not found".
    pub fn is_dir(&self, p: &Path) -> Result<bool, AgentError> {
        match self {
            PackageSite::Copy { root, .. } => {
                Ok(matches!(root.metadata(p)?, Some(m) if m.is_dir()))
            }
            PackageSite::Local { .. } => Ok(p.is_dir()),
        }
    }

    /// The folders, regular files and dangling symlinks in the overlay folder `dir`, by
    /// name, symlinks followed; other kinds (FIFOs, sockets, devices) are left out.
    ///
    /// # Errors
    /// `dir` cannot be listed or an entry cannot be looked up.
    pub fn overlay_entries(
        &self,
        dir: &Path,
    ) -> Result<Vec<(std::ffi::OsString, OverlayEntry)>, AgentError> {
        use std::os::unix::fs::MetadataExt;
        let mut out = Vec::new();
        match self {
            PackageSite::Copy { root, .. } => {
                for e in root.read_dir(dir)? {
                    let Some(m) = root.metadata(&dir.join(&e.name))? else {
                        out.push((e.name, OverlayEntry::Dangling));
                        continue;
                    };
                    let mode = m.mode() & 0o7777;
                    if m.is_dir() {
                        out.push((e.name, OverlayEntry::Dir(mode)));
                    } else if e.kind != crate::host::root::EntryKind::Other && m.is_file() {
                        let mtime = m.modified().unwrap_or(std::time::UNIX_EPOCH);
                        out.push((e.name, OverlayEntry::File(mode, mtime)));
                    }
                }
            }
            PackageSite::Local { .. } => {
                let read_err = |source| AgentError::Read {
                    path: dir.to_path_buf(),
                    source,
                };
                for e in std::fs::read_dir(dir).map_err(read_err)? {
                    let e = e.map_err(read_err)?;
                    let m = match std::fs::metadata(e.path()) {
                        Ok(m) => m,
                        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                            out.push((e.file_name(), OverlayEntry::Dangling));
                            continue;
                        }
                        Err(source) => {
                            return Err(AgentError::Read {
                                path: e.path(),
                                source,
                            });
                        }
                    };
                    let mode = m.mode() & 0o7777;
                    if m.is_dir() {
                        out.push((e.file_name(), OverlayEntry::Dir(mode)));
                    } else if m.is_file() {
                        let mtime = m.modified().unwrap_or(std::time::UNIX_EPOCH);
                        out.push((e.file_name(), OverlayEntry::File(mode, mtime)));
                    }
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The bytes of the overlay file `p`.
    ///
    /// # Errors
    /// It cannot be read.
    pub fn read_overlay_file(&self, p: &Path) -> Result<Vec<u8>, AgentError> {
        match self {
            PackageSite::Copy { root, .. } => Ok(root.read(p)?),
            PackageSite::Local { .. } => std::fs::read(p).map_err(|source| AgentError::Read {
                path: p.to_path_buf(),
                source,
            }),
        }
    }
}

/// Read a package file on this machine as [`PackageSite::read`] does.
///
/// # Errors
/// [`AgentError::Read`] naming the file (not found, not a regular file, too large).
pub fn read_local(p: &Path) -> Result<Vec<u8>, AgentError> {
    read_local_max(p, MAX_PACKAGE_FILE_BYTES)
}

fn read_local_max(p: &Path, max: u64) -> Result<Vec<u8>, AgentError> {
    open_local(p)
        .and_then(|f| read_bounded(f, max))
        .map_err(|source| AgentError::Read {
            path: p.to_path_buf(),
            source,
        })
}

impl crate::mode::StepSite for PackageSite<'_> {
    fn process(&self, step: &Step) -> StepProgram {
        PackageSite::process(self, step)
    }

    fn reserved_dirs(&self, on_host: bool) -> (PathBuf, PathBuf) {
        PackageSite::reserved_dirs(self, on_host)
    }

    fn configmaps_dir_shown(&self) -> PathBuf {
        self.shown(&self.configmaps_dir())
    }

    /// Add the execute bits (8.2): `mode | 0o111` on the permission bits, dropping
    /// set-uid/set-gid/sticky when a chmod is needed \[fix\]. Follows symlinks inside the
    /// root. Nothing on a local site.
    fn make_executable(&self, step: &Step) -> Result<(), crate::host::root::RootError> {
        let PackageSite::Copy { root, .. } = self else {
            return Ok(());
        };
        let host = self.step_root().join(&step.path);
        if let Some(m) = root.metadata(&host)? {
            let mode = std::os::unix::fs::MetadataExt::mode(&m) & 0o7777;
            if mode & 0o111 != 0o111 {
                AgentFiles::new(root).set_mode(&host, (mode & 0o777) | 0o111)?;
            }
        }
        Ok(())
    }
}
