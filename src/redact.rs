//! Secret redaction: the set of secret values hidden as `***` in step output (bash and Rhai
//! steps), log files, plans and error messages.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

/// A shared, thread-safe set of secret values to hide. Clones share the set, so the log sink
/// and the host session hold the same one.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    values: Arc<RwLock<Vec<String>>>,
}

impl Redactor {
    /// An empty redactor.
    pub fn new() -> Self {
        Self::default()
    }

    /// A redactor holding the values of the variables that `SKYHOOK_REDACT_ENV`
    /// (comma-separated names, looked up in `env`) names.
    pub fn from_env(env: &[(String, String)]) -> Self {
        let r = Redactor::new();
        r.add_from_env(env);
        r
    }

    /// Add the values of the variables that `SKYHOOK_REDACT_ENV` in `env` names.
    pub fn add_from_env(&self, env: &[(String, String)]) {
        let lookup = |k: &str| env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v);
        if let Some(names) = lookup("SKYHOOK_REDACT_ENV") {
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if let Some(v) = lookup(name) {
                    self.add(v);
                }
            }
        }
    }

    /// Add a value (ignored when empty or already known). A value ending in a newline is
    /// also added without it, since scripts usually trim what they read.
    pub fn add(&self, value: &str) {
        let mut vals = match self.values.write() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        let trimmed = value.trim_end_matches(['\n', '\r']);
        for v in [value, trimmed] {
            if !v.is_empty() && !vals.iter().any(|x| x == v) {
                vals.push(v.to_string());
            }
        }
        // Longest first, so a value containing another is replaced whole.
        vals.sort_by_key(|v| std::cmp::Reverse(v.len()));
    }

    /// Add every value `other` holds (nothing when both share one set).
    pub fn add_all(&self, other: &Redactor) {
        if Arc::ptr_eq(&self.values, &other.values) {
            return;
        }
        let theirs = match other.values.read() {
            Ok(v) => v.clone(),
            Err(p) => p.into_inner().clone(),
        };
        for v in &theirs {
            self.add(v);
        }
    }

    /// `text` with every known value replaced by `***` (borrowed when nothing matched).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let vals = match self.values.read() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        let mut out = Cow::Borrowed(text);
        for v in vals.iter() {
            if out.contains(v.as_str()) {
                out = Cow::Owned(out.replace(v.as_str(), "***"));
            }
        }
        out
    }

    /// True when `bytes` contains a known value (content derived from a secret, which a
    /// report must not describe by hash or content).
    pub fn taints(&self, bytes: &[u8]) -> bool {
        let vals = match self.values.read() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        vals.iter()
            .any(|v| memchr::memmem::find(bytes, v.as_bytes()).is_some())
    }

    /// How many values are known.
    pub fn len(&self) -> usize {
        self.values.read().map(|v| v.len()).unwrap_or(0)
    }

    /// True when no value is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The known values as bytes, longest first (so a value containing another is hidden
    /// whole).
    fn snapshot(&self) -> Vec<Vec<u8>> {
        let vals = match self.values.read() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        let mut out: Vec<Vec<u8>> = vals.iter().map(|v| v.as_bytes().to_vec()).collect();
        out.sort_by_key(|v| std::cmp::Reverse(v.len()));
        out
    }
}

/// Redaction of a byte stream that arrives in chunks (a step's pipe): a value split across two
/// reads is still hidden. The end of a chunk that could be the start of a value is held back
/// until the next chunk shows whether it is (then `***`) or not (then released as is), or
/// until [`StreamRedactor::finish`]. Nothing is held when no value is known, so output without
/// secrets is never delayed.
#[derive(Debug, Default)]
pub struct StreamRedactor {
    pending: Vec<u8>,
}

impl StreamRedactor {
    /// A redactor with nothing held back.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append the redacted form of `pending + chunk` to `out`, keeping back a tail that is a
    /// proper prefix of a known value.
    pub fn push(&mut self, redactor: &Redactor, chunk: &[u8], out: &mut Vec<u8>) {
        let values = redactor.snapshot();
        if values.is_empty() && self.pending.is_empty() {
            out.extend_from_slice(chunk);
            return;
        }
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(chunk);
        let mut i = 0;
        let mut plain_from = 0;
        while i < buf.len() {
            let rest = &buf[i..];
            if let Some(v) = values.iter().find(|v| rest.starts_with(v)) {
                out.extend_from_slice(&buf[plain_from..i]);
                out.extend_from_slice(b"***");
                i += v.len();
                plain_from = i;
                continue;
            }
            if values
                .iter()
                .any(|v| v.len() > rest.len() && v.starts_with(rest))
            {
                // the tail may be the start of a value: hold it for the next chunk
                out.extend_from_slice(&buf[plain_from..i]);
                self.pending = buf[i..].to_vec();
                return;
            }
            i += 1;
        }
        out.extend_from_slice(&buf[plain_from..]);
    }

    /// Release what is held back (the stream ended: it was not a value).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.pending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(values: &[&str], chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Vec<u8>) {
        let r = Redactor::new();
        for v in values {
            r.add(v);
        }
        let mut s = StreamRedactor::new();
        let mut per_chunk = Vec::new();
        let mut all = Vec::new();
        for c in chunks {
            let mut out = Vec::new();
            s.push(&r, c, &mut out);
            all.extend_from_slice(&out);
            per_chunk.push(out);
        }
        let mut out = Vec::new();
        s.finish(&mut out);
        all.extend_from_slice(&out);
        per_chunk.push(out);
        (per_chunk, all)
    }

    #[test]
    fn value_split_across_chunks_is_hidden() {
        let (per, all) = run(&["topsecretvalue"], &[b"password: topse", b"cretvalue\n"]);
        assert_eq!(all, b"password: ***\n");
        // the possible start was held back, not printed
        assert_eq!(per[0], b"password: ");
        // byte by byte, as with SKYHOOK_AGENT_BUFFER_LIMIT=1
        let bytes: Vec<&[u8]> = b"a topsecretvalue b".chunks(1).collect();
        assert_eq!(run(&["topsecretvalue"], &bytes).1, b"a *** b");
    }

    #[test]
    fn held_tail_that_is_not_a_value_is_released() {
        let (per, all) = run(&["topsecret"], &[b"x top", b"ic\n"]);
        assert_eq!(per[0], b"x ");
        assert_eq!(per[1], b"topic\n");
        assert_eq!(all, b"x topic\n");
        // at the end of the stream
        assert_eq!(run(&["topsecret"], &[b"ends with top"]).1, b"ends with top");
    }

    #[test]
    fn no_values_passes_through_untouched_and_longest_wins() {
        let (per, _) = run(&[], &[b"abc", b"def"]);
        assert_eq!(per[0], b"abc");
        assert_eq!(per[1], b"def");
        assert_eq!(
            run(&["pass", "password1"], &[b"password1 pass"]).1,
            b"*** ***"
        );
    }
}
