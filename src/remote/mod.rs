//! Client of the remote step API (`skyhook-run --remote`): start an execution, follow its
//! NDJSON stream, reconnect and resume from the last sequence number seen when the
//! connection drops, cancel it when asked. HTTP/1.1 over TCP (`http://HOST:PORT`) or a Unix
//! socket (`unix:/path`), or HTTPS (`https://HOST:PORT`, rustls), with hyper's client connection (no pool, one connection per call).

mod client;

pub use client::{Client, RECONNECTS, RemoteError};
