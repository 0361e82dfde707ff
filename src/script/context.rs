//! The step context scripts see: the `step` constant, `step()` and `env()`
//! (`docs/host-api.md`, section Context).

use std::collections::BTreeMap;
use std::sync::Arc;

use rhai::{Array, Dynamic, Engine, ImmutableString, Map};

use crate::host::api::{host_fns, script_fn};

/// What a script knows about the step it runs as. The runner fills it; [`StepContext::to_map`]
/// is the `step` map scripts see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepContext {
    /// The agent's mode (`apply`, `apply-check`, `config`, ...). `is_check` is derived from
    /// it: true when it ends in `-check`.
    pub mode: String,
    /// The step's name.
    pub name: String,
    /// The step's arguments, after `env:` substitution.
    pub args: Vec<String>,
    /// The package name from config.json.
    pub package_name: String,
    /// The package version from config.json.
    pub package_version: String,
    /// The previously installed version: `None` (script sees `()`) outside the upgrade
    /// modes; in them, from the history file, `"unknown"` when none.
    pub previous_version: Option<String>,
    /// SKYHOOK_DIR (a host path).
    pub skyhook_dir: String,
    /// STEP_ROOT (a host path).
    pub step_root: String,
    /// SKYHOOK_RESOURCE_ID.
    pub resource_id: String,
    /// SKYHOOK_NODE_ORDER, when set.
    pub node_order: Option<i64>,
    /// Plan (dry run) mode.
    pub dry_run: bool,
    /// The step's environment, as a process step would get it; `env(name)` reads it (the
    /// agent's own environment is never consulted).
    pub env: BTreeMap<String, String>,
}

impl StepContext {
    /// True when [`StepContext::mode`] ends in `-check`.
    pub fn is_check(&self) -> bool {
        self.mode.ends_with("-check")
    }

    /// The `step` map: keys `mode`, `is_check`, `name`, `args` (array of strings),
    /// `package_name`, `package_version`, `previous_version` (string or `()`),
    /// `skyhook_dir`, `step_root`, `resource_id`, `node_order` (int or `()`), `dry_run`.
    pub fn to_map(&self) -> Map {
        let mut m = Map::new();
        let s = |v: &str| Dynamic::from(ImmutableString::from(v));
        let opt = |v: &Option<String>| v.as_deref().map_or(Dynamic::UNIT, s);
        m.insert("mode".into(), s(&self.mode));
        m.insert("is_check".into(), Dynamic::from(self.is_check()));
        m.insert("name".into(), s(&self.name));
        let args: Array = self.args.iter().map(|a| s(a)).collect();
        m.insert("args".into(), Dynamic::from_array(args));
        m.insert("package_name".into(), s(&self.package_name));
        m.insert("package_version".into(), s(&self.package_version));
        m.insert("previous_version".into(), opt(&self.previous_version));
        m.insert("skyhook_dir".into(), s(&self.skyhook_dir));
        m.insert("step_root".into(), s(&self.step_root));
        m.insert("resource_id".into(), s(&self.resource_id));
        m.insert(
            "node_order".into(),
            self.node_order.map_or(Dynamic::UNIT, Dynamic::from_int),
        );
        m.insert("dry_run".into(), Dynamic::from(self.dry_run));
        m
    }
}

/// The step environment, as `env()` reads it.
pub(crate) type Env = BTreeMap<String, String>;

script_fn! {
    /// The step context, the same map as the `step` constant; callable from functions and
    /// modules, where the constant is not visible.
    #[script(ns = "", effects = Computes)]
    fn step(step: &Map;) -> Map {
        step.clone()
    }
}

script_fn! {
    /// The step environment's variable `name` (a string), or `()` when it is unset.
    #[script(ns = "", effects = Computes)]
    fn env(env: &Env; name: &str as "String") -> Dynamic {
        env.get(name).map_or(Dynamic::UNIT, |v| {
            Dynamic::from(ImmutableString::from(v.as_str()))
        })
    }
}

script_fn! {
    /// The step environment's variable `name`, or `default` when it is unset.
    #[script(ns = "", name = "env", effects = Computes)]
    fn env_or(env: &Env; name: &str as "String", default: Dynamic) -> Dynamic {
        env.get(name).map_or(default, |v| {
            Dynamic::from(ImmutableString::from(v.as_str()))
        })
    }
}

host_fns!(SCRIPT_FNS: step, env, env_or);

/// Register `step()`, `env(name)` and `env(name, default)` for one run. `step` is the map
/// from [`StepContext::to_map`] (the same value the top-level `step` constant holds).
pub(crate) fn register(engine: &mut Engine, step: Map, env: Arc<Env>) {
    engine.register_fn("step", move || self::step(&step));
    let e = env.clone();
    engine.register_fn("env", move |name: &str| self::env(&e, name));
    engine.register_fn("env", move |name: &str, default: Dynamic| {
        env_or(&env, name, default)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_has_every_key_with_its_type() {
        let ctx = StepContext {
            mode: "apply-check".into(),
            name: "a.rhai".into(),
            args: vec!["x".into()],
            node_order: Some(4),
            ..Default::default()
        };
        let m = ctx.to_map();
        let keys: Vec<&str> = m.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "args",
                "dry_run",
                "is_check",
                "mode",
                "name",
                "node_order",
                "package_name",
                "package_version",
                "previous_version",
                "resource_id",
                "skyhook_dir",
                "step_root"
            ]
        );
        assert!(m["is_check"].as_bool().unwrap());
        assert_eq!(m["node_order"].as_int().unwrap(), 4);
        assert!(m["previous_version"].is_unit());
    }
}
