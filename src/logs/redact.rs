//! Secret redaction: the set of secret values hidden as `***` in step output (bash and Rhai
//! steps), log files, plans and error messages.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

/// A shared, thread-safe set of secret values to hide. Clones share the set, so the log sink
/// and the host session hold the same one.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    values: Arc<RwLock<Vec<String>>>,
}

impl Redactor {
    /// An empty redactor.
    pub fn new() -> Self {
        Self::default()
    }

    /// A redactor holding the values of the variables that `SKYHOOK_REDACT_ENV`
    /// (comma-separated names, looked up in `env`) names.
    pub fn from_env(env: &[(String, String)]) -> Self {
        let r = Redactor::new();
        r.add_from_env(env);
        r
    }

    /// Add the values of the variables that `SKYHOOK_REDACT_ENV` in `env` names.
    pub fn add_from_env(&self, env: &[(String, String)]) {
        let lookup = |k: &str| env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v);
        if let Some(names) = lookup("SKYHOOK_REDACT_ENV") {
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if let Some(v) = lookup(name) {
                    self.add(v);
                }
            }
        }
    }

    /// Add a value (ignored when empty or already known). A value ending in a newline is
    /// also added without it, since scripts usually trim what they read.
    pub fn add(&self, value: &str) {
        let mut vals = match self.values.write() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        let trimmed = value.trim_end_matches(['\n', '\r']);
        for v in [value, trimmed] {
            if !v.is_empty() && !vals.iter().any(|x| x == v) {
                vals.push(v.to_string());
            }
        }
        // Longest first, so a value containing another is replaced whole.
        vals.sort_by_key(|v| std::cmp::Reverse(v.len()));
    }

    /// `text` with every known value replaced by `***` (borrowed when nothing matched).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let vals = match self.values.read() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        let mut out = Cow::Borrowed(text);
        for v in vals.iter() {
            if out.contains(v.as_str()) {
                out = Cow::Owned(out.replace(v.as_str(), "***"));
            }
        }
        out
    }

    /// How many values are known.
    pub fn len(&self) -> usize {
        self.values.read().map(|v| v.len()).unwrap_or(0)
    }

    /// True when no value is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
