//! The grub drop-in parser (`host::kernel::tuning::grub::parse`, what `grub::set_cmdline` and
//! `grub::remove` read back from a drop-in): any text gives arguments that are words, and the
//! ones `set_cmdline` would accept (no quote, `\`, `$` or backquote) render and parse back to
//! themselves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skyhook::host::kernel::tuning::grub;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args = grub::parse(text);
    for a in &args {
        assert!(!a.is_empty() && !a.contains(char::is_whitespace), "{a:?}");
    }
    let accepted: Vec<String> = args
        .into_iter()
        .filter(|a| !a.contains(['"', '\\', '$', '`']))
        .collect();
    assert_eq!(
        grub::parse(&grub::render(&accepted)),
        accepted,
        "render/parse of {text:?}"
    );
});
