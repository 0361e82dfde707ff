//! A CR package's directory, found beside the CR or given, read as the `package` body of a
//! plan request (config, `skyhook_dir/` and `root_dir/` files, configmaps).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::cr::{Cr, CrPackage};
use super::error::{InputError, input_err};

/// The package directory of `p`: `dirs[p.name]`, else beside the CR: `<cr dir>/<name>`,
/// `<cr dir>` itself or `<cr dir>/../<name>`, the first whose config.json names the
/// package (`package_name`).
///
/// # Errors
/// None of them holds the package.
pub fn package_dir(
    cr: &Cr,
    p: &CrPackage,
    dirs: &BTreeMap<String, PathBuf>,
) -> Result<PathBuf, InputError> {
    if let Some(d) = dirs.get(&p.name) {
        return Ok(d.clone());
    }
    let base = cr.path.parent().unwrap_or(Path::new("."));
    let base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    let candidates = [
        base.join(&p.name),
        base.to_path_buf(),
        base.join("..").join(&p.name),
    ];
    for c in &candidates {
        let named = std::fs::read(c.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| {
                v.get("package_name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
        if named.as_deref() == Some(p.name.as_str()) {
            return Ok(c.clone());
        }
    }
    Err(input_err(
        &cr.path,
        format!(
            "package {}: no directory given (--package {}=DIR) and none beside the CR ({})",
            p.name,
            p.name,
            candidates
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// The `package` of a plan request from directory `dir`: config.json, every regular file
/// under `skyhook_dir/` and `root_dir/` (text, or base64 when not UTF-8, with its mode),
/// `configmaps/` with the CR's `configMap` entries over it.
///
/// # Errors
/// config.json unreadable or not JSON; a symlink or special file in the package; an
/// unreadable file.
pub fn package_body(dir: &Path, p: &CrPackage) -> Result<Value, InputError> {
    use base64::Engine as _;
    use std::os::unix::fs::PermissionsExt;
    let cfg_path = dir.join("config.json");
    let bytes = std::fs::read(&cfg_path).map_err(|e| input_err(&cfg_path, e.to_string()))?;
    let config: Value = serde_json::from_slice(&bytes)
        .map_err(|e| input_err(&cfg_path, format!("not JSON: {e}")))?;
    let mut files = serde_json::Map::new();
    fn walk(
        dir: &Path,
        rel: &Path,
        out: &mut Vec<(PathBuf, PathBuf)>,
        depth: usize,
    ) -> Result<(), InputError> {
        let here = dir.join(rel);
        let Ok(rd) = std::fs::read_dir(&here) else {
            return Ok(());
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let r = rel.join(e.file_name());
            let t = e
                .file_type()
                .map_err(|x| input_err(&e.path(), x.to_string()))?;
            if t.is_dir() && depth < 32 {
                walk(dir, &r, out, depth + 1)?;
            } else if t.is_file() {
                out.push((r, e.path()));
            } else {
                return Err(input_err(
                    &e.path(),
                    "not a regular file or directory: a package sent for a plan holds only those",
                ));
            }
        }
        Ok(())
    }
    let mut found = Vec::new();
    for top in ["skyhook_dir", "root_dir"] {
        walk(dir, Path::new(top), &mut found, 0)?;
    }
    for (rel, full) in found {
        let bytes = std::fs::read(&full).map_err(|e| input_err(&full, e.to_string()))?;
        let mode = std::fs::metadata(&full)
            .map_err(|e| input_err(&full, e.to_string()))?
            .permissions()
            .mode()
            & 0o7777;
        let v = match String::from_utf8(bytes) {
            Ok(text) => json!({"text": text, "mode": mode}),
            Err(e) => {
                json!({"base64": base64::engine::general_purpose::STANDARD.encode(e.as_bytes()), "mode": mode})
            }
        };
        files.insert(rel.to_string_lossy().into_owned(), v);
    }
    let mut configmaps = serde_json::Map::new();
    let cm_dir = dir.join("configmaps");
    if let Ok(rd) = std::fs::read_dir(&cm_dir) {
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !e.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let text = std::fs::read_to_string(e.path())
                .map_err(|x| input_err(&e.path(), x.to_string()))?;
            configmaps.insert(name, text.into());
        }
    }
    for (k, v) in &p.configmap {
        configmaps.insert(k.clone(), v.clone().into());
    }
    Ok(json!({"config": config, "files": files, "configmaps": configmaps}))
}
