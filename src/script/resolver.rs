//! Module resolution: `import "skyhook/<name>"` and imports relative to a base directory.
//!
//! - `skyhook/<name>` is the embedded module `stdlib/<name>.rhai` (table [`STDLIB`]; adding
//!   a module is one line there). Errors inside it report `stdlib/<name>.rhai:line:col`.
//! - Anything else is a path relative to the base directory (the package's `skyhook_dir`;
//!   for `skyhook-run`, the script's directory): `lib/util`, `lib/util.rhai` and
//!   `./lib/util.rhai` all name `<base>/lib/util.rhai` (`.rhai` is added when the last
//!   component has no extension). Every relative import is relative to the base directory,
//!   also from inside another module. Absolute paths and `..` components are refused before
//!   touching the filesystem, and the file is opened through a `pathrs::Root` on the base
//!   directory, so symlinks (absolute or relative) are resolved *inside* it with chroot
//!   semantics and can never reach a file outside. Only regular files are read (a FIFO or
//!   device is refused without blocking), at most [`MAX_SCRIPT_BYTES`].
//!
//! Compiled modules are cached per [`ModuleStore`] (one per package or script directory):
//! [`compile_step`](super::compile_step) compiles every static import ahead of the run, and
//! the run evaluates the cached ASTs. A module is *evaluated* at each `import` executed, in
//! the run's own engine, so its top-level code sees the current step (`step()`) and its
//! output goes to the current step's sink.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::errors::ImportFailure;
use pathrs::Root;
use rhai::{
    AST, ASTNode, Dynamic, Engine, EvalAltResult, Expr, GlobalRuntimeState, Module, ModuleResolver,
    ParseError, Position, Scope, Shared, Stmt,
};

/// Largest script or module file read, in bytes (1 MiB).
pub const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

/// The prefix of embedded module paths.
pub const STDLIB_PREFIX: &str = "skyhook/";

/// The embedded standard library: `(name, source)`, imported as `skyhook/<name>`.
pub const STDLIB: &[(&str, &str)] = &[
    ("hello", include_str!("../../stdlib/hello.rhai")),
    ("kdump", include_str!("../../stdlib/kdump.rhai")),
    ("shellscript", include_str!("../../stdlib/shellscript.rhai")),
    ("tuned", include_str!("../../stdlib/tuned.rhai")),
    ("tuning", include_str!("../../stdlib/tuning.rhai")),
    ("containerd", include_str!("../../stdlib/containerd.rhai")),
];

/// The source of embedded module `name`, if there is one.
pub fn stdlib_source(name: &str) -> Option<&'static str> {
    STDLIB.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// A compiled module, as cached.
#[derive(Debug)]
pub(crate) struct CachedModule {
    /// The file name used in errors (`stdlib/hello.rhai`, `<base>/lib/util.rhai`); also the
    /// AST's source, hence the module's id.
    pub file: String,
    pub ast: AST,
    /// The module's text (the static checker looks at literals in it).
    pub source: String,
}

/// Why a module could not be loaded.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// Not resolvable: the message reads `cannot import "x": reason`.
    NotFound(String),
    /// The module does not parse.
    Syntax { file: String, err: ParseError },
}

/// Which module an import path names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ModuleRef {
    Stdlib(&'static str, &'static str),
    File(PathBuf),
    /// `configmap/<name>`: `<name>.rhai` in the store's configMaps directory.
    ConfigMap(PathBuf),
}

/// Import prefix of a configMap script: `import "configmap/apply" as s;` evaluates
/// `<configmaps>/apply.rhai` (the shellscript compatibility module runs `<stage>.rhai` this way).
pub const CONFIGMAP_PREFIX: &str = "configmap/";

fn parse_spec(spec: &str) -> Result<ModuleRef, String> {
    // No file is meant by such a name, and its path would break the one-line error.
    if spec.contains(char::is_control) {
        return Err("module paths must not contain control characters".to_string());
    }
    if let Some(name) = spec.strip_prefix(CONFIGMAP_PREFIX) {
        if name.is_empty()
            || name.contains('/')
            || name == "."
            || name == ".."
            || name.starts_with('.')
        {
            return Err(format!(
                "a configMap module is one file name of the configMaps folder, got {name:?}"
            ));
        }
        let mut rel = PathBuf::from(name);
        if rel.extension().is_none() {
            rel.set_extension("rhai");
        }
        return Ok(ModuleRef::ConfigMap(rel));
    }
    if let Some(name) = spec.strip_prefix(STDLIB_PREFIX) {
        return STDLIB
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, s)| ModuleRef::Stdlib(n, s))
            .ok_or_else(|| {
                let names: Vec<_> = STDLIB.iter().map(|(n, _)| *n).collect();
                format!(
                    "no embedded module named {name:?} (available: {})",
                    names.join(", ")
                )
            });
    }
    if spec.is_empty() {
        return Err("empty module path".to_string());
    }
    let mut rel = PathBuf::new();
    for c in Path::new(spec).components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err("module paths must not contain `..`".to_string());
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err("module paths must be relative to the package directory".to_string());
            }
        }
    }
    if rel.as_os_str().is_empty() {
        return Err("empty module path".to_string());
    }
    if rel.extension().is_none() {
        rel.set_extension("rhai");
    }
    Ok(ModuleRef::File(rel))
}

/// Compiled modules of one base directory. Shared by the compile step and every run of
/// scripts from that directory.
pub struct ModuleStore {
    base_dir: PathBuf,
    /// Opened on the first relative import, so a script without any needs no base dir.
    root: OnceLock<Result<Root, String>>,
    /// The configMaps folder `configmap/<name>` imports resolve in (agent: `<copy
    /// dir>/configmaps`; skyhook-run: `--configmaps`), opened on first use.
    configmaps_dir: Option<PathBuf>,
    configmaps_root: OnceLock<Result<Root, String>>,
    /// How the base and configMaps directories are spelled in messages (the agent shows host
    /// paths, not the root mount's); `None`: as opened.
    shown_base: Option<PathBuf>,
    shown_configmaps: Option<PathBuf>,
    /// False: relative imports are refused without touching the filesystem
    /// ([`ModuleStore::stdlib_only`]).
    files: bool,
    cache: Mutex<HashMap<String, Arc<CachedModule>>>,
}

impl std::fmt::Debug for ModuleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleStore")
            .field("base_dir", &self.base_dir)
            .finish_non_exhaustive()
    }
}

impl ModuleStore {
    /// A store resolving relative imports under `base_dir`. Nothing is opened yet.
    pub fn new(base_dir: impl Into<PathBuf>) -> Self {
        ModuleStore {
            base_dir: base_dir.into(),
            root: OnceLock::new(),
            configmaps_dir: None,
            configmaps_root: OnceLock::new(),
            shown_base: None,
            shown_configmaps: None,
            files: true,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A store that resolves only the embedded stdlib (`skyhook/<name>`): a relative import
    /// fails with "only the embedded skyhook/... modules can be imported here", naming no
    /// directory (`skyhook-agent serve`, whose filesystem is not the host root).
    pub fn stdlib_only() -> Self {
        ModuleStore {
            files: false,
            ..ModuleStore::new("")
        }
    }

    /// Let `configmap/<name>` imports resolve in `dir` (confined to it like relative imports
    /// are to the base directory). Without it such imports fail with a clear message.
    pub fn with_configmaps(mut self, dir: impl Into<PathBuf>) -> Self {
        self.configmaps_dir = Some(dir.into());
        self
    }

    /// Spell the base directory `base` and the configMaps directory `configmaps` in error
    /// messages (file:line:col), e.g. as host paths when the directories are opened through
    /// the root mount, so that every script error of a step names files the same way.
    pub fn shown_as(mut self, base: impl Into<PathBuf>, configmaps: Option<PathBuf>) -> Self {
        self.shown_base = Some(base.into());
        self.shown_configmaps = configmaps;
        self
    }

    /// The base directory relative imports resolve in.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// `<base>/<rel>` for messages; just `rel` when the base is the working directory
    /// (empty or `.`), so that `skyhook-run check x.rhai` reports `lib/util.rhai`.
    fn display(&self, rel: &Path) -> String {
        if let Some(shown) = &self.shown_base {
            return shown.join(rel).display().to_string();
        }
        if self.base_dir.as_os_str().is_empty() || self.base_dir == Path::new(".") {
            rel.display().to_string()
        } else {
            self.base_dir.join(rel).display().to_string()
        }
    }

    fn configmaps_root(&self) -> Result<(&Root, &Path), String> {
        let Some(dir) = &self.configmaps_dir else {
            return Err("no configMaps folder is known to this run".to_string());
        };
        self.configmaps_root
            .get_or_init(|| {
                Root::open(dir).map_err(|e| {
                    format!(
                        "cannot open configMaps directory {}: {}",
                        dir.display(),
                        pathrs_message(&e)
                    )
                })
            })
            .as_ref()
            .map(|r| (r, dir.as_path()))
            .map_err(Clone::clone)
    }

    fn root(&self) -> Result<&Root, String> {
        self.root
            .get_or_init(|| {
                let dir = if self.base_dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    &self.base_dir
                };
                Root::open(dir).map_err(|e| {
                    format!(
                        "cannot open module directory {}: {}",
                        dir.display(),
                        pathrs_message(&e)
                    )
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Load (from the cache, or read and compile with `compiler`) the module `spec` names.
    pub(crate) fn load(
        &self,
        compiler: &Engine,
        spec: &str,
    ) -> Result<Arc<CachedModule>, LoadError> {
        let not_found = |why: String| LoadError::NotFound(format!("cannot import {spec:?}: {why}"));
        let module = parse_spec(spec).map_err(not_found)?;
        let key = match &module {
            ModuleRef::Stdlib(name, _) => format!("{STDLIB_PREFIX}{name}"),
            ModuleRef::File(rel) => format!("file:{}", rel.display()),
            ModuleRef::ConfigMap(rel) => format!("configmap:{}", rel.display()),
        };
        if let Some(m) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(m);
        }
        let (file, source) = match module {
            ModuleRef::Stdlib(name, source) => (format!("stdlib/{name}.rhai"), source.to_string()),
            ModuleRef::File(_) if !self.files => {
                return Err(not_found(
                    "only the embedded skyhook/... modules can be imported here".into(),
                ));
            }
            ModuleRef::File(rel) => {
                let file = self.display(&rel);
                let root = self.root().map_err(not_found)?;
                let text =
                    read_confined(root, &rel).map_err(|e| not_found(format!("{file}: {e}")))?;
                (file, text)
            }
            ModuleRef::ConfigMap(rel) => {
                let (root, dir) = self.configmaps_root().map_err(not_found)?;
                let file = self
                    .shown_configmaps
                    .as_deref()
                    .unwrap_or(dir)
                    .join(&rel)
                    .display()
                    .to_string();
                let text =
                    read_confined(root, &rel).map_err(|e| not_found(format!("{file}: {e}")))?;
                (file, text)
            }
        };
        let mut ast = compiler.compile(&source).map_err(|err| LoadError::Syntax {
            file: file.clone(),
            err,
        })?;
        ast.set_source(file.as_str());
        let cached = Arc::new(CachedModule { file, ast, source });
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key, cached.clone());
        }
        Ok(cached)
    }
}

/// Read the module file `rel` beneath `root` (symlinks resolved inside it, never outside; a
/// FIFO or device refused unopened, from the fstat of its `O_PATH` handle).
fn read_confined(root: &Root, rel: &Path) -> Result<String, String> {
    // An O_PATH handle first: only a regular file is then reopened for reading (a FIFO's
    // open could block, a device's act).
    let handle = root.resolve(rel).map_err(|e| pathrs_message(&e))?;
    let file = crate::host::root::reopen_regular(File::from(std::os::fd::OwnedFd::from(handle)))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::IsADirectory => "not a regular file (a directory)".to_string(),
            _ => e.to_string(),
        })?;
    read_regular(file).map_err(|e| e.to_string())
}

/// The OS error behind a pathrs error when there is one (`No such file or directory (os
/// error 2)`), else pathrs' own description.
fn pathrs_message(err: &pathrs::error::Error) -> String {
    match err.kind() {
        pathrs::error::ErrorKind::OsError(Some(errno)) => {
            std::io::Error::from_raw_os_error(errno).to_string()
        }
        _ => err.to_string(),
    }
}

/// Read an opened file, refusing anything but a regular file of at most
/// [`MAX_SCRIPT_BYTES`].
pub(crate) fn read_regular(file: File) -> std::io::Result<String> {
    let bytes = crate::host::root::read_bounded(file, MAX_SCRIPT_BYTES)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not valid UTF-8"))
}

/// The static imports of `ast` (string-literal paths, function bodies included), in source
/// order, with the position of each path literal.
pub(crate) fn static_imports(ast: &AST) -> Vec<(String, Position)> {
    let mut found = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Stmt(Stmt::Import(x, pos))) = path.last()
            && let Expr::StringConstant(s, _) = &x.0
        {
            found.push((s.to_string(), *pos));
        }
        true
    });
    found
}

/// The resolver installed in one run's engine: the shared [`ModuleStore`] plus the chain of
/// modules being evaluated (to refuse cyclic imports with a clear error instead of
/// recursing until a limit trips).
pub(crate) struct RunResolver {
    pub store: Arc<ModuleStore>,
    pub stack: Mutex<Vec<String>>,
}

impl RunResolver {
    pub fn new(store: Arc<ModuleStore>) -> Self {
        RunResolver {
            store,
            stack: Mutex::new(Vec::new()),
        }
    }

    fn eval_module(
        &self,
        engine: &Engine,
        global: Option<&mut GlobalRuntimeState>,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        let module = self.store.load(engine, path).map_err(|e| match e {
            LoadError::NotFound(msg) => import_failure(msg, pos),
            LoadError::Syntax { file, err } => Box::new(EvalAltResult::ErrorInModule(
                file,
                Box::new(EvalAltResult::ErrorParsing(*err.0, err.1)),
                pos,
            )),
        })?;
        {
            let mut stack = self.stack.lock().map_err(|_| {
                import_failure(
                    format!("cannot import {path:?}: resolver state poisoned"),
                    pos,
                )
            })?;
            if stack.contains(&module.file) {
                let mut chain: Vec<&str> = stack.iter().map(String::as_str).collect();
                chain.push(&module.file);
                return Err(import_failure(
                    format!(
                        "cannot import {path:?}: cyclic import ({})",
                        chain.join(" -> ")
                    ),
                    pos,
                ));
            }
            stack.push(module.file.clone());
        }
        let result = match global {
            Some(global) => {
                Module::eval_ast_as_new_raw(engine, &mut Scope::new(), global, &module.ast)
            }
            None => Module::eval_ast_as_new(Scope::new(), &module.ast, engine),
        };
        if let Ok(mut stack) = self.stack.lock() {
            stack.pop();
        }
        match result {
            Ok(m) => Ok(m.into()),
            // Limits, fail() and the deadline stay uncatchable and keep the import's position.
            Err(mut err) if err.is_system_exception() => {
                err.set_position(pos);
                Err(err)
            }
            Err(err) => Err(Box::new(EvalAltResult::ErrorInModule(
                module.file.clone(),
                err,
                pos,
            ))),
        }
    }
}

fn import_failure(msg: String, pos: Position) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        Dynamic::from(ImportFailure(msg)),
        pos,
    ))
}

impl ModuleResolver for RunResolver {
    fn resolve(
        &self,
        engine: &Engine,
        _source: Option<&str>,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        self.eval_module(engine, None, path, pos)
    }

    fn resolve_raw(
        &self,
        engine: &Engine,
        global: &mut GlobalRuntimeState,
        _scope: &mut Scope,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        self.eval_module(engine, Some(global), path, pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parsing() {
        assert_eq!(
            parse_spec("lib/util"),
            Ok(ModuleRef::File(PathBuf::from("lib/util.rhai")))
        );
        assert_eq!(
            parse_spec("./lib/util.rhai"),
            Ok(ModuleRef::File(PathBuf::from("lib/util.rhai")))
        );
        assert_eq!(
            parse_spec("../x"),
            Err("module paths must not contain `..`".to_string())
        );
        assert_eq!(
            parse_spec("lib/../../x"),
            Err("module paths must not contain `..`".to_string())
        );
        assert_eq!(
            parse_spec("/etc/x.rhai"),
            Err("module paths must be relative to the package directory".to_string())
        );
        assert!(matches!(
            parse_spec("skyhook/hello"),
            Ok(ModuleRef::Stdlib("hello", _))
        ));
        assert_eq!(
            parse_spec("skyhook/nope"),
            Err("no embedded module named \"nope\" (available: hello, kdump, shellscript, tuned, tuning, containerd)".to_string())
        );
    }

    /// `import "configmap/<name>"` reads only a regular file confined to the configMaps
    /// folder: a device node or FIFO there is named as what it is and never opened (a
    /// device's open can act; major 240 has no driver, its open would be `ENXIO`), an
    /// absolute link resolves inside the folder (pathrs `RESOLVE_IN_ROOT`), never to the
    /// agent's own file.
    #[test]
    fn configmap_modules_are_regular_files_inside_the_folder() {
        use nix::sys::stat::{Mode, SFlag, makedev, mknod};
        let d = tempfile::tempdir().unwrap();
        let cm = d.path().join("configmaps");
        std::fs::create_dir_all(&cm).unwrap();
        mknod(
            &cm.join("dev.rhai"),
            SFlag::S_IFCHR,
            Mode::S_IRUSR,
            makedev(240, 0),
        )
        .unwrap();
        nix::unistd::mkfifo(&cm.join("fifo.rhai"), Mode::S_IRWXU).unwrap();
        std::fs::write(d.path().join("secret.rhai"), "42").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret.rhai"), cm.join("out.rhai")).unwrap();
        let store = ModuleStore::new(d.path()).with_configmaps(&cm);
        let engine = Engine::new_raw();
        let err = |name: &str| match store.load(&engine, &format!("configmap/{name}")) {
            Err(LoadError::NotFound(m)) => m,
            Err(LoadError::Syntax { file, .. }) => format!("syntax error in {file}"),
            Ok(m) => format!("loaded {}: {}", m.file, m.source),
        };
        let at = |n: &str| cm.join(n).display().to_string();
        assert_eq!(
            err("dev"),
            format!(
                "cannot import \"configmap/dev\": {}: not a regular file (a character device)",
                at("dev.rhai")
            )
        );
        assert_eq!(
            err("fifo"),
            format!(
                "cannot import \"configmap/fifo\": {}: not a regular file (a fifo)",
                at("fifo.rhai")
            )
        );
        assert_eq!(
            err("out"),
            format!(
                "cannot import \"configmap/out\": {}: No such file or directory (os error 2)",
                at("out.rhai")
            )
        );
    }
}
