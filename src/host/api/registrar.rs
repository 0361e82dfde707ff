//! [`Registrar`]: the Rhai modules the host functions are registered into, one per
//! namespace, with the log of what Rhai recorded ([`Registered`], checked by tests), and
//! [`HostModules`], those modules built once and installed into each run's engine.

use std::collections::BTreeMap;

use rhai::{Engine, FuncRegistration, Module, RhaiNativeFunc, Shared};

/// One registered function, as Rhai recorded it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Registered {
    /// Namespace (`""` for global functions).
    pub ns: &'static str,
    /// Name as Rhai stored it.
    pub name: String,
    /// Number of parameters as Rhai counted them (the call context excluded).
    pub params: usize,
    /// Rhai's hash of the function (to check it is in the module).
    pub hash: u64,
}

/// Collects functions into one module per namespace and logs each registration.
#[derive(Default)]
pub(crate) struct Registrar {
    pub log: Vec<Registered>,
    pub modules: BTreeMap<&'static str, Module>,
}

impl Registrar {
    /// Register `func` as `ns::name` (`ns` empty: a global function). Every host function is
    /// volatile (never constant-folded) and pure (never modifies its first argument).
    pub fn add<A: 'static, const N: usize, const X: bool, R, const F: bool, FUNC>(
        &mut self,
        ns: &'static str,
        name: &'static str,
        func: FUNC,
    ) where
        R: rhai::Variant + Clone,
        FUNC: RhaiNativeFunc<A, N, X, R, F> + Send + Sync + 'static,
    {
        let module = self.modules.entry(ns).or_default();
        let reg = FuncRegistration::new(name)
            .with_volatility(true)
            .with_purity(true);
        let reg = if ns.is_empty() {
            reg.in_global_namespace()
        } else {
            reg.in_internal_namespace()
        };
        let meta = reg.set_into_module(module, func);
        self.log.push(Registered {
            ns,
            name: meta.name.to_string(),
            params: meta.num_params,
            hash: meta.hash,
        });
    }

    /// The modules, indexed and shared, ready to install into many engines
    /// ([`HostModules::install`]).
    pub fn into_shared(self) -> HostModules {
        HostModules(
            self.modules
                .into_iter()
                .map(|(ns, mut m)| {
                    // Indexed and named once here: installing an indexed shared module with an
                    // id is an `Arc` clone (Rhai copies one without an id to name it).
                    if !ns.is_empty() {
                        m.set_id(ns);
                    }
                    m.build_index();
                    (ns, Shared::new(m))
                })
                .collect(),
        )
    }
}

/// The host modules built once ([`Registrar::into_shared`]), one per namespace (`""`: the
/// global functions).
pub(crate) struct HostModules(Vec<(&'static str, Shared<Module>)>);

impl HostModules {
    /// Install the modules into one run's engine: global functions as a global module, the
    /// rest as static modules named after their namespace. `Arc` clones, no rebuilding.
    pub fn install(&self, engine: &mut Engine) {
        for (ns, m) in &self.0 {
            if ns.is_empty() {
                engine.register_global_module(m.clone());
            } else {
                engine.register_static_module(*ns, m.clone());
            }
        }
    }
}
