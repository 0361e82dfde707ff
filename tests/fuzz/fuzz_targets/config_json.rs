//! The config.json loader as the agent runs it (`agent::mode::load_package`, in memory):
//! `package::load::parse`, then the step-files rule with every file present, then each step's
//! flag marker. Any bytes: a package or one error line naming the file, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use skyhook::package::load;

fuzz_target!(|data: &[u8]| {
    let shown = Path::new("/skyhook/pkg/config.json");
    match load::parse(shown, data) {
        Ok(loaded) => {
            let p = &loaded.package;
            // Names become path parts of flags and logs.
            assert!(!p.package_name.is_empty() && !p.package_name.contains('/'));
            let _ = load::check_step_files(shown, p, |_| true);
            for (_, step) in p.all_steps() {
                let _ = skyhook::state::flags::marker(step);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
            assert!(
                msg.contains("config.json"),
                "error without the file: {msg:?}"
            );
        }
    }
});
