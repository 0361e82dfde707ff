//! The step environment of a local run: lookups and defaults (later entries win).

/// The value of `name` in `env` (last definition wins).
pub(crate) fn env_get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `env` with `name=value` appended unless `name` is already set.
pub(crate) fn env_default(env: &mut Vec<(String, String)>, name: &str, value: String) {
    if env_get(env, name).is_none() {
        env.push((name.to_string(), value));
    }
}
