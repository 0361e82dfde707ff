//! The interrupt decoder (`agent::interrupt::Interrupt::decode`): a base64 JSON payload from a
//! step's config or the operator. The first input byte picks the form: odd, the rest is the
//! JSON and the target encodes it (so mutations reach the JSON layer); even, the rest is the
//! payload text as is. Any payload: an interrupt or an error, never a panic; the error is one
//! line.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use skyhook::agent::interrupt::Interrupt;

fuzz_target!(|data: &[u8]| {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    let payload = if form & 1 == 1 {
        base64::engine::general_purpose::STANDARD.encode(rest)
    } else {
        match std::str::from_utf8(rest) {
            Ok(s) => s.to_string(),
            Err(_) => return,
        }
    };
    if let Err(e) = Interrupt::decode(&payload) {
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
    }
});
