//! The step environment (agent-contract.md 8.3): the agent's whole environment, `PATH`
//! defaulted, then the step's `env`, then the reserved variables.

use std::ffi::{OsStr, OsString};

use super::settings::{DEFAULT_PATH, Settings};

/// An environment under construction: later [`EnvBuilder::set`] calls replace earlier values
/// in place (the first definition's position is kept, as Python's `dict` update does).
#[derive(Debug, Clone, Default)]
pub struct EnvBuilder(Vec<(OsString, OsString)>);

impl EnvBuilder {
    /// The agent's environment, in order, with `PATH` set to [`DEFAULT_PATH`] when the
    /// agent has none.
    pub fn from_agent(settings: &Settings) -> Self {
        let mut me = EnvBuilder(Vec::with_capacity(settings.env.len() + 4));
        for (k, v) in &settings.env {
            me.set(k, v);
        }
        if settings.var("PATH").is_none() {
            me.set("PATH", DEFAULT_PATH);
        }
        me
    }

    /// Set `k` to `v`.
    pub fn set(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) {
        let k = k.as_ref();
        if let Some(slot) = self.0.iter_mut().find(|(n, _)| n == k) {
            slot.1 = v.as_ref().to_os_string();
        } else {
            self.0.push((k.to_os_string(), v.as_ref().to_os_string()));
        }
    }

    /// The value of `k`, if set.
    pub fn get(&self, k: &str) -> Option<&OsStr> {
        self.0
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_os_str())
    }

    /// The finished environment.
    pub fn into_vec(self) -> Vec<(OsString, OsString)> {
        self.0
    }
}

/// An environment as UTF-8 strings (invalid sequences replaced), for the script layer.
pub fn lossy_env(env: &[(OsString, OsString)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_set_replaces_in_place_and_path_defaults() {
        let settings = Settings::from_env([
            (OsString::from("A"), OsString::from("1")),
            (OsString::from("B"), OsString::from("2")),
        ])
        .unwrap();
        let mut env = EnvBuilder::from_agent(&settings);
        env.set("A", "3");
        env.set("STEP_ROOT", "/x");
        assert_eq!(env.get("PATH"), Some(OsStr::new(DEFAULT_PATH)));
        let v: Vec<_> = env
            .into_vec()
            .into_iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert_eq!(
            v,
            [
                "A=3",
                "B=2",
                &format!("PATH={DEFAULT_PATH}"),
                "STEP_ROOT=/x"
            ]
        );
    }
}
