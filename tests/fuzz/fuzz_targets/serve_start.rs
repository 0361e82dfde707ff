//! serve's start-request validation (`serve::Service::start`, the body of
//! `POST /v1/executions`) on any bytes. Nothing may start (`max_running` 0): every body is
//! refused with a 4xx status and a JSON body naming the error, never a panic; the secret's
//! value never appears in a refusal (unless the body itself holds it).
#![no_main]

#[path = "shared/serve.rs"]
mod serve;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let s = serve::setup();
    match s.svc.start(data, "ci") {
        Ok(e) => panic!("execution {:?} started with max_running 0", e.id),
        Err(r) => {
            assert!(
                matches!(r.status, 400 | 403 | 409 | 422 | 429),
                "status {} {}",
                r.status,
                r.body
            );
            assert!(r.body["error"].is_string(), "{}", r.body);
            if !data.windows(6).any(|w| w == b"s3cret") {
                assert!(!r.body.to_string().contains("s3cret"), "{}", r.body);
            }
        }
    }
});
