//! The TLS client configuration of one preview: serve's ([`crate::serve::tls::client_config`]:
//! the same CA, client certificate, ALPN and protocol versions, whose errors are the ones
//! reported) with two changes for a fan-out to many nodes, measured in docs/fleet.md
//! "Measured":
//! - AES-128-GCM-SHA256 first among the TLS 1.3 suites (a node takes the client's order):
//!   the key schedule and transcript hash then run on the CPU's SHA-256 instructions, where
//!   SHA-384's (AES-256-GCM-SHA384, rustls's first) have none: 8 % of the client's
//!   instructions a node over TLS went to SHA-384;
//! - [`ChainOnce`]: a certificate chain is verified to the CA once per preview, so nodes
//!   sharing a certificate (a wildcard for the nodes' domain) cost one signature check
//!   each (the node's, over the handshake) instead of two.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::{WebPkiServerVerifier, verify_server_name};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::server::ParsedCertificate;
use tokio_rustls::rustls::{
    self, CipherSuite, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::serve::tls::{certs, client_config, key};

/// The chains [`ChainOnce`] remembers (a fleet with a certificate per node verifies each in
/// full, and the list stays short to compare).
const REMEMBERED: usize = 16;

/// The client configuration of a preview of nodes whose certificates `ca` signed, with
/// `client` (certificate, key) when they require one.
///
/// # Errors
/// serve's: a file is unreadable, holds no certificate, or the key does not match.
pub(super) fn preview_config(
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, String> {
    let base = client_config(ca, client)?;
    let mut provider = (**base.crypto_provider()).clone();
    // stable: the others keep their order
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != CipherSuite::TLS13_AES_128_GCM_SHA256);
    let provider = Arc::new(provider);
    let mut roots = RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("{}: {e}", ca.display()))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnce::new(inner)));
    let mut cfg = match client {
        Some((c, k)) => builder
            .with_client_auth_cert(certs(c)?, key(k)?)
            .map_err(|e| format!("{}: {e}", c.display()))?,
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols.clone_from(&base.alpn_protocols);
    Ok(Arc::new(cfg))
}

/// A server certificate verifier that checks a chain (end entity and intermediates) to the
/// CA once: rustls's [`WebPkiServerVerifier`] the first time, and for the same chain again
/// only the node's name ([`verify_server_name`]). The node's signature over each handshake
/// is always checked. A chain is remembered for the life of the configuration (one
/// preview), as a resumed TLS session skips the whole check for the ticket's lifetime.
#[derive(Debug)]
pub(crate) struct ChainOnce {
    inner: Arc<WebPkiServerVerifier>,
    verified: Mutex<Vec<Vec<Vec<u8>>>>,
}

impl ChainOnce {
    /// Verify with `inner`, each chain once.
    pub(crate) fn new(inner: Arc<WebPkiServerVerifier>) -> ChainOnce {
        ChainOnce {
            inner,
            verified: Mutex::new(Vec::new()),
        }
    }
}

impl ServerCertVerifier for ChainOnce {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chain = || std::iter::once(end_entity).chain(intermediates);
        let same = |known: &Vec<Vec<u8>>| {
            known.len() == intermediates.len() + 1
                && known.iter().zip(chain()).all(|(k, c)| k[..] == c[..])
        };
        let known = self
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(same);
        if known {
            verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        let ok = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.len() < REMEMBERED {
            verified.push(chain().map(|c| c.to_vec()).collect());
        }
        Ok(ok)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
