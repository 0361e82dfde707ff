//! One `serve` service for the serve targets: a throwaway host root (with `/etc` and `/tmp`),
//! a secrets dir where `db/password` is allowed, engine `ci` with token `fuzz-token`, audit lines
//! dropped, and `max_running` 0 so that a request passing every check is refused with `429`
//! instead of running anything.

// Each target uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use skyhook::serve::auth::{Auth, sha256_hex};
use skyhook::serve::exec::{Config, Service};
use skyhook::serve::secrets::Secrets;

pub struct Setup {
    pub svc: Arc<Service>,
    pub auth: Auth,
}

pub fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let dir: PathBuf = tempfile::tempdir().expect("temp dir").keep();
        let root = dir.join("root");
        for d in ["etc", "tmp"] {
            std::fs::create_dir_all(root.join(d)).expect("root dirs");
        }
        let secrets = dir.join("secrets");
        std::fs::create_dir_all(secrets.join("db")).expect("secrets dir");
        std::fs::write(secrets.join("db/password"), "s3cret").expect("secret");
        let tokens = dir.join("tokens");
        std::fs::write(&tokens, format!("ci {}\n", sha256_hex(b"fuzz-token"))).expect("tokens");
        let mut cfg = Config::new(&root);
        cfg.secrets = Secrets {
            dir: secrets,
            allow: vec!["db".into()],
        };
        cfg.max_running = 0;
        let svc = Service::with_audit(cfg, true, Arc::new(|_: &str| {})).expect("service");
        Setup {
            svc,
            auth: Auth::from_file(&tokens).expect("tokens file"),
        }
    })
}
