//! Where a TLS handshake's CPU goes, client side and server side (the fleet preview
//! benchmark's breakdown, docs/fleet.md "Measured").
//!
//! `tls_handshakes N CA CERT KEY` makes N TLS 1.3 handshakes in memory (no sockets) between
//! the client configuration `skyhook-run plan --tls-ca CA` uses and the server configuration
//! `skyhook-agent serve --tls-cert CERT --tls-key KEY` uses
//! ([`skyhook::serve::tls::client_config`], [`skyhook::serve::tls::server_config`]), each
//! side's calls timed by this thread's CPU clock, and then N times each of the client's
//! parts alone: the certificate's verification (`WebPkiServerVerifier`, what the
//! configuration's root store does), the key exchange (the first group offered), and the
//! server's signature. The full handshakes use the client configuration with resumption
//! off (a preview's first contact with a node); `resumed_*` are the same with the product's
//! configuration against the same server (its tickets kept: what a second request to one
//! node in one process costs). Prints one line of microseconds per handshake (medians of 5
//! rounds of N): `client_us= server_us= resumed_client_us= resumed_server_us=
//! verify_cert_us= kx_two_starts_one_complete_us= sign_us= kx_group= scheme= version=
//! tickets=` (tickets: how many the server sent after one handshake).

use std::sync::Arc;

use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::ServerCertVerifier as _;
use tokio_rustls::rustls::pki_types::{ServerName, UnixTime};
use tokio_rustls::rustls::{self, ClientConnection, RootCertStore, ServerConnection};

/// This thread's CPU time, in microseconds.
fn cpu_us() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec the call fills.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Moves every pending TLS record of one side to the other; true when something moved.
fn pass(from: &mut dyn FnMut(&mut Vec<u8>), to: &mut dyn FnMut(&[u8]), buf: &mut Vec<u8>) -> bool {
    buf.clear();
    from(buf);
    if buf.is_empty() {
        return false;
    }
    to(buf);
    true
}

/// One handshake and the tickets after it: (client µs, server µs, the client's connection).
fn handshake(
    ccfg: &Arc<rustls::ClientConfig>,
    scfg: &Arc<rustls::ServerConfig>,
    name: &ServerName<'static>,
) -> (f64, f64, ClientConnection) {
    let (mut tc, mut ts) = (0.0, 0.0);
    let t = cpu_us();
    let mut c = ClientConnection::new(ccfg.clone(), name.clone()).expect("client");
    tc += cpu_us() - t;
    let t = cpu_us();
    let mut s = ServerConnection::new(scfg.clone()).expect("server");
    ts += cpu_us() - t;
    let mut buf = Vec::new();
    for _ in 0..20 {
        let c_to_s = pass(
            &mut |b| {
                let t = cpu_us();
                while c.wants_write() {
                    c.write_tls(b).expect("client write");
                }
                tc += cpu_us() - t;
            },
            &mut |b| {
                let t = cpu_us();
                let mut r: &[u8] = b;
                while !r.is_empty() {
                    s.read_tls(&mut r).expect("server read");
                    s.process_new_packets().expect("server process");
                }
                ts += cpu_us() - t;
            },
            &mut buf,
        );
        let s_to_c = pass(
            &mut |b| {
                let t = cpu_us();
                while s.wants_write() {
                    s.write_tls(b).expect("server write");
                }
                ts += cpu_us() - t;
            },
            &mut |b| {
                let t = cpu_us();
                let mut r: &[u8] = b;
                while !r.is_empty() {
                    c.read_tls(&mut r).expect("client read");
                    c.process_new_packets().expect("client process");
                }
                tc += cpu_us() - t;
            },
            &mut buf,
        );
        if !c_to_s && !s_to_c && !c.is_handshaking() && !s.is_handshaking() {
            break;
        }
    }
    assert!(
        !c.is_handshaking() && !s.is_handshaking(),
        "handshake stalled"
    );
    (tc, ts, c)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, n, ca, cert, key] = args.as_slice() else {
        return Err("usage: tls_handshakes N CA CERT KEY".into());
    };
    let n: usize = n.parse()?;
    // A preview's first contact with each node: the client holds no ticket for it (its
    // session cache lives as long as the process), so no handshake here may resume one.
    let first = skyhook::serve::tls::client_config(ca.as_ref(), None)?;
    let mut ccfg = (*first).clone();
    ccfg.resumption = rustls::client::Resumption::disabled();
    let ccfg = Arc::new(ccfg);
    let scfg = skyhook::serve::tls::server_config(cert.as_ref(), key.as_ref(), None)?;
    let name = ServerName::try_from("127.0.0.1")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for c in skyhook::serve::tls::certs(ca.as_ref())? {
        roots.add(c)?;
    }
    let verifier =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?;
    let leaf = skyhook::serve::tls::certs(cert.as_ref())?.remove(0);
    let signing = provider
        .key_provider
        .load_private_key(skyhook::serve::tls::key(key.as_ref())?)?;
    let (_, _, c) = handshake(&first, &scfg, &name);
    let scheme = signing
        .choose_scheme(&[
            rustls::SignatureScheme::ECDSA_NISTP256_SHA256,
            rustls::SignatureScheme::ED25519,
            rustls::SignatureScheme::RSA_PSS_SHA256,
        ])
        .ok_or("no TLS 1.3 scheme for the key")?;
    let (version, group) = (c.protocol_version(), c.negotiated_key_exchange_group());
    let group = group.ok_or("no key exchange group")?;
    let (mut client, mut server, mut verify, mut kx, mut sign) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut resumed: Vec<(f64, f64)> = vec![];
    for _ in 0..5 {
        let (mut tc, mut ts) = (0.0, 0.0);
        for _ in 0..n {
            let (c, s, _) = handshake(&ccfg, &scfg, &name);
            tc += c;
            ts += s;
        }
        client.push(tc / n as f64);
        server.push(ts / n as f64);
        // the same server again with the product's configuration (tickets kept): resumed
        let (mut tc, mut ts) = (0.0, 0.0);
        for _ in 0..n {
            let (c, s, _) = handshake(&first, &scfg, &name);
            tc += c;
            ts += s;
        }
        resumed.push((tc / n as f64, ts / n as f64));
        let t = cpu_us();
        for _ in 0..n {
            verifier.verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())?;
        }
        verify.push((cpu_us() - t) / n as f64);
        let t = cpu_us();
        for _ in 0..n {
            let mine = group.start()?;
            let peer = group.start()?;
            let peer_pub = peer.pub_key().to_vec();
            mine.complete(&peer_pub)?;
        }
        // two starts and one completion: a client's start and completion are about
        // two thirds of it (the base point multiplication is the cheaper one)
        kx.push((cpu_us() - t) / n as f64);
        let t = cpu_us();
        for _ in 0..n {
            scheme.sign(b"a transcript hash of 32 bytes...")?;
        }
        sign.push((cpu_us() - t) / n as f64);
    }
    let resumed_client = median(resumed.iter().map(|r| r.0).collect());
    let resumed_server = median(resumed.iter().map(|r| r.1).collect());
    println!(
        "client_us={:.0} server_us={:.0} resumed_client_us={resumed_client:.0} resumed_server_us={resumed_server:.0} verify_cert_us={:.0} kx_two_starts_one_complete_us={:.0} sign_us={:.0} kx_group={:?} scheme={:?} version={:?} tickets={}",
        median(client),
        median(server),
        median(verify),
        median(kx),
        median(sign),
        group.name(),
        scheme.scheme(),
        version.ok_or("no version")?,
        c.tls13_tickets_received(),
    );
    Ok(())
}
