//! Downloads: `fs::fetch(url, path, #{sha256, mode, owner, group, timeout, max_bytes})`.
//!
//! A download is a *change* identified by its SHA-256 digest: the file is unchanged when it
//! already has that digest (its mode and owner are then brought to the requested ones, as
//! `fs::write` does), and downloaded otherwise. The digest of an existing file is computed
//! by streaming it (any size; a FIFO or device is refused without blocking). Without a
//! digest (a vendor's unversioned URL) the download is not verified and an existing regular
//! file counts as downloaded (only its mode and owner are then set); the binding warns on
//! the step's stderr whenever such a download is planned or done ([`unpinned_warning`]).
//!
//! - **Apply**: under the path's lock ([`crate::host::root::pathlock`]) the body is streamed into
//!   a temporary file beside the destination (the host root's temporary names, so a crash
//!   leaves nothing a later write does not sweep), hashed as it arrives, and renamed over the
//!   destination (fsync of file and directory) only when the digest matches. A mismatch,
//!   an HTTP error, the size limit, the timeout or the step's cancel token leave the
//!   destination unchanged and remove the temporary file.
//! - **Plan**: nothing is requested; the change reads `would download <url> (sha256 <hex>)
//!   to <path>`. Later reads in the plan see a file at `path` (`fs::exists`, `fs::stat` with
//!   size 0, a second `fs::fetch` with the same digest is unchanged), but its content is not
//!   known: `fs::read` of it fails with "is downloaded by fs::fetch only when applied".
//! - **Check**: drift when the file is missing or has another digest (or mode/owner).
//!
//! HTTP/1.1 over TCP (`http://`) or TLS (`https://`, rustls on ring) with hyper's client
//! connection, one connection per request, redirects followed up to [`MAX_REDIRECTS`]. HTTPS
//! trusts the **host's** CA bundle, the first of [`CA_BUNDLES`] that exists under the root
//! (the agent image carries none). No proxy support: the agent connects directly.

pub(crate) mod download;
#[cfg(test)]
pub(crate) mod fetch_tests;

pub use download::*;
