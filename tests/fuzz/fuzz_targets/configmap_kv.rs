//! The `config::kv` configMap parser (`host::files::config::parse_kv`): any text gives a map or an
//! error naming the configMap and line; every key is trimmed, non-empty and without `=`, and
//! the map written back as `key=value` lines parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skyhook::host::files::config::parse_kv;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_kv("fuzz", text) {
        Ok(map) => {
            let mut again = String::new();
            for (k, v) in &map {
                assert!(!k.is_empty() && !k.contains('=') && k.trim() == k, "{k:?}");
                assert!(v.trim() == v, "{v:?}");
                again.push_str(&format!("{k}={v}\n"));
            }
            assert_eq!(
                parse_kv("fuzz", &again).ok().as_ref(),
                Some(&map),
                "{text:?}"
            );
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("configMap \"fuzz\" line "), "{msg:?}");
        }
    }
});
