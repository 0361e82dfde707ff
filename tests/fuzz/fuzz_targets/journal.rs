//! The undo journal's log parser (`host::effects::journal::parse_log`, the reader the
//! replay and recovery use). The first input byte picks the form: even, the rest is the log
//! as is; odd, the rest is cut at each `0xff` into JSON headers, each framed as a whole
//! record (so mutations reach the JSON layer), the last one cut short when bit 1 is set.
//! Any bytes: no panic; the records returned are contiguous from byte 0, lie within the
//! input, and each one's checksums match; the damage, if any, is where the last one ended.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use skyhook::host::effects::journal::parse_log;

/// A whole record: `SKJ2`, lengths, `meta`, `data`, the data's digest, the record's.
fn frame(meta: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = b"SKJ2".to_vec();
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(meta);
    let head_meta = out.clone();
    out.extend_from_slice(data);
    let d: [u8; 32] = Sha256::digest(data).into();
    out.extend_from_slice(&d);
    let mut all = Sha256::new();
    all.update(&head_meta);
    all.update(d);
    out.extend_from_slice(&all.finalize());
    out
}

/// Whether `rec` is one whole record with matching checksums (checked here, apart from
/// the parser).
fn checks(rec: &[u8]) -> bool {
    if rec.len() < 16 + 64 || &rec[..4] != b"SKJ2" {
        return false;
    }
    let meta_len = u32::from_le_bytes(rec[4..8].try_into().unwrap()) as usize;
    let data_len = u64::from_le_bytes(rec[8..16].try_into().unwrap());
    let Some(size) = (16 + 64 + meta_len as u64).checked_add(data_len) else {
        return false;
    };
    if size != rec.len() as u64 {
        return false;
    }
    let data_at = 16 + meta_len;
    let data = &rec[data_at..data_at + data_len as usize];
    let tail = &rec[rec.len() - 64..];
    let d: [u8; 32] = Sha256::digest(data).into();
    let mut all = Sha256::new();
    all.update(&rec[..data_at]);
    all.update(d);
    tail[..32] == d && tail[32..] == all.finalize()[..]
}

fuzz_target!(|input: &[u8]| {
    let Some((&form, rest)) = input.split_first() else {
        return;
    };
    let bytes = if form & 1 == 1 {
        let mut log = Vec::new();
        for (i, piece) in rest.split(|b| *b == 0xff).enumerate() {
            // Every third record carries the piece as content too.
            let data: &[u8] = if i % 3 == 2 { piece } else { &[] };
            log.extend(frame(piece, data));
        }
        if form & 2 == 2 && !log.is_empty() {
            log.truncate(log.len() - 1 - usize::from(form >> 2) % log.len().min(80));
        }
        log
    } else {
        rest.to_vec()
    };
    let (ranges, damage) = parse_log(&bytes);
    let mut pos = 0u64;
    for r in &ranges {
        assert_eq!(r.start, pos, "records not contiguous");
        assert!(r.end > r.start && r.end <= bytes.len() as u64, "record past the input");
        assert!(
            checks(&bytes[r.start as usize..r.end as usize]),
            "a record whose checksum does not match"
        );
        pos = r.end;
    }
    match damage {
        Some(d) => assert_eq!(d.offset, pos, "damage not where the records end"),
        None => assert_eq!(pos, bytes.len() as u64, "input left unread without damage"),
    }
});
