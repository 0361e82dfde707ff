//! Print `src/script/lint/rhai_functions.rs` (see Cargo.toml).

use rhai::packages::*;
use std::collections::{BTreeMap, BTreeSet};

fn main() {
    let mut e = rhai::Engine::new_raw();
    for p in [
        CorePackage::new().as_shared_module(),
        LogicPackage::new().as_shared_module(),
        MoreStringPackage::new().as_shared_module(),
        BasicArrayPackage::new().as_shared_module(),
        BasicMapPackage::new().as_shared_module(),
        BasicMathPackage::new().as_shared_module(),
        BasicTimePackage::new().as_shared_module(),
    ] {
        e.register_global_module(p);
    }
    let json = e.gen_fn_metadata_to_json(true).expect("metadata");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("json");
    let mut fns: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for f in doc["functions"].as_array().expect("functions") {
        let name = f["name"].as_str().expect("name");
        // Operators are not called by name.
        if f["access"] == "private" || !name.starts_with(|c: char| c.is_alphabetic() || c == '_') {
            continue;
        }
        fns.entry(name.to_string())
            .or_default()
            .insert(f["numParams"].as_u64().expect("numParams"));
    }
    println!("// Generated: the functions (name, argument counts) of the Rhai packages the engine loads");
    println!("// (src/script/engine.rs), from Rhai {} built with its `metadata` feature by", rhai_version());
    println!("// scripts/rhai-functions/ (`cargo run --manifest-path scripts/rhai-functions/Cargo.toml`).");
    println!("// Regenerate on a Rhai upgrade; a test pins the Rhai version.");
    println!();
    println!("/// The functions of the Rhai packages the [`ScriptEngine`] loads: `(name, argument counts)`,");
    println!("/// operators excluded. Generated (see `scripts/rhai-functions/`) for the Rhai version");
    println!("/// [`RHAI_VERSION`].");
    println!("pub const RHAI_FUNCTIONS: &[(&str, &[usize])] = &[");
    for (name, arities) in fns {
        let a: Vec<String> = arities.iter().map(u64::to_string).collect();
        println!("    ({name:?}, &[{}]),", a.join(", "));
    }
    println!("];");
    println!();
    println!("/// The Rhai version [`RHAI_FUNCTIONS`] was generated from.");
    println!("pub const RHAI_VERSION: &str = \"{}\";", rhai_version());
}

fn rhai_version() -> &'static str {
    "1.27.0"
}
