//! The `before`/`after` content hashes of a report's file changes, computed once per file
//! per report instead of twice per change.
//!
//! Hashing both sides of every write made N edits of one file cost O(N × file size) in every
//! mode (and in apply mode a read back of the file the session had just written). Instead,
//! for each file (by lexically normalised host path) the changes of one report form a chain:
//!
//! - the **first** change of the file carries `before`: the SHA-256 of the content the
//!   session saw just before it (read once through the session's view; `null` when there was
//!   no regular file);
//! - the **last** change of the file carries `after`: the SHA-256 of the content it wrote
//!   (`null` when the last change is a removal), computed when the report is taken
//!   ([`ContentHashes::fill`], from [`Host::finish`](crate::host::Host::finish) and
//!   [`Host::finish_step`](crate::host::Host::finish_step)) from the bytes the session kept
//!   when it wrote them: never read back from the host;
//! - changes in between carry `null` on the sides that are not the chain's ends.
//!
//! A content that contains a known secret value (the session's [`Redactor`]) is never
//! hashed into a report: its side is [`REDACTED`] instead, since a hash of a mostly known
//! file around a secret can be brute-forced offline.
//!
//! A change that is a file's only change in the report carries both, as before. The chain
//! starts again with each report (a step of a multi-step session). `docs/plan.schema.json`
//! (`hash`) states the same. [`crate::host::Host::report`] taken before the end of the
//! session has no `after` hashes yet.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::host::effects::effect::{Download, Effect};
use crate::host::effects::report::Change;
use crate::host::root::digest::sha256_tag;
use crate::host::root::normalize;
use crate::redact::Redactor;

/// What a report shows instead of the hash of a content that contains a secret value.
pub const REDACTED: &str = "***";

/// `sha256:<hex>` of `content`, or [`REDACTED`] when it contains a value `redactor` knows.
pub(crate) fn content_tag(content: &[u8], redactor: &Redactor) -> String {
    if redactor.taints(content) {
        REDACTED.to_string()
    } else {
        sha256_tag(content)
    }
}

/// Per report: which files have had a change, and the last write of each (module docs).
#[derive(Debug, Default)]
pub(crate) struct ContentHashes {
    /// Files with a change in the current report.
    pub(crate) seen: HashSet<PathBuf>,
    /// Per file: the index of its last change in `Report::changes` when that change is a
    /// write, and the bytes it wrote.
    last_write: HashMap<PathBuf, (usize, bytes::Bytes)>,
}

impl ContentHashes {
    /// After change `index` was recorded for `effect`: remember a write's bytes (moved out
    /// of the effect, shared with the plan's overlay: no copy) as its file's last change; a removal ends the file's chain
    /// without `after`, a fetch with its own (its declared digest, set by `describe`).
    pub(crate) fn note(&mut self, index: usize, effect: Effect) {
        match effect {
            Effect::WriteFile { path, content, .. } => {
                let key = normalize(&path);
                // A file with a last write is seen already (a plan's line edits: one lookup).
                if let Some(w) = self.last_write.get_mut(&key) {
                    *w = (index, content);
                    return;
                }
                self.seen.insert(key.clone());
                self.last_write.insert(key, (index, content));
            }
            Effect::RemoveFile { path } => {
                let key = normalize(&path);
                self.last_write.remove(&key);
                self.seen.insert(key);
            }
            // A fetch carries its own `after` (the verified digest) and ends the chain; so
            // does a streamed copy (its source's digest).
            Effect::Fetch(Download { path, .. }) | Effect::CopyFile { path, .. } => {
                let key = normalize(&path);
                self.last_write.remove(&key);
                self.seen.insert(key);
            }
            _ => {}
        }
    }

    /// A batched write (the session's batch, [`crate::host::effects::session`]) was flushed: change `index` (the batch's
    /// last) wrote `content` to `key`.
    pub(crate) fn set_last_write(&mut self, key: PathBuf, index: usize, content: bytes::Bytes) {
        self.seen.insert(key.clone());
        self.last_write.insert(key, (index, content));
    }

    /// A batched write of `key` failed at its flush: its last change gets no `after`.
    pub(crate) fn forget_last_write(&mut self, key: &Path) {
        self.last_write.remove(key);
    }

    /// Set `after` on the last change of every written file ([`REDACTED`] for a content
    /// holding a value `redactor` knows) and start a new report.
    pub(crate) fn fill(&mut self, changes: &mut [Change], redactor: &Redactor) {
        for (_, (index, content)) in self.last_write.drain() {
            if let Some(c) = changes.get_mut(index) {
                c.after = Some(content_tag(&content, redactor));
            }
        }
        self.seen.clear();
    }
}

#[cfg(test)]
mod tests {
    use crate::host::ExecMode;
    use crate::host::files::fs::{self, LineOptions, WriteOptions};
    use crate::host::root::digest::sha256_tag;
    use crate::host::testutil::TestHost;

    /// `(target, before, after)` of every change.
    fn hashes(r: &crate::host::Report) -> Vec<(String, Option<String>, Option<String>)> {
        r.changes
            .iter()
            .map(|c| (c.target.clone(), c.before.clone(), c.after.clone()))
            .collect()
    }

    fn tag(s: &str) -> Option<String> {
        Some(sha256_tag(s.as_bytes()))
    }

    #[test]
    fn first_change_of_a_file_has_before_last_has_after_in_every_mode() {
        for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
            let t = TestHost::new();
            t.file("/etc/f", "a\n");
            let mut h = t.host(mode);
            let o = LineOptions::default();
            assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o).unwrap());
            assert!(fs::write(&mut h, "/etc/g", "g\n", &WriteOptions::default()).unwrap());
            assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o).unwrap());
            assert!(fs::ensure_line(&mut h, "/etc/f", "d", &o).unwrap());
            let r = h.finish().unwrap();
            let f = || "/etc/f".to_string();
            assert_eq!(
                hashes(&r),
                [
                    (f(), tag("a\n"), None),
                    ("/etc/g".into(), None, tag("g\n")),
                    (f(), None, None),
                    (f(), None, tag("a\nb\nc\nd\n")),
                ],
                "{mode:?}"
            );
            if mode == ExecMode::Apply {
                assert_eq!(t.read("/etc/f"), "a\nb\nc\nd\n");
            }
        }
    }

    #[test]
    fn a_removal_ends_the_chain_without_after() {
        let t = TestHost::new();
        t.file("/etc/f", "a\n");
        let mut h = t.host(ExecMode::Apply);
        assert!(fs::write(&mut h, "/etc/f", "b\n", &WriteOptions::default()).unwrap());
        assert!(fs::remove(&mut h, "/etc/f").unwrap());
        let r = h.finish().unwrap();
        let f = || "/etc/f".to_string();
        assert_eq!(hashes(&r), [(f(), tag("a\n"), None), (f(), None, None)]);
    }

    #[test]
    fn a_fetch_carries_its_digest_and_ends_the_chain() {
        use crate::host::fetch::fetch_tests::{BODY, Reply, Server, sha};
        use crate::host::fetch::{FetchOptions, fetch};
        let srv = Server::plain(|_| Reply::Body(BODY.to_vec()));
        let t = TestHost::new();
        t.file("/opt/tool", "old\n");
        let mut h = t.host(ExecMode::Apply);
        assert!(fs::write(&mut h, "/opt/tool", "mid\n", &WriteOptions::default()).unwrap());
        let o = FetchOptions {
            sha256: Some(sha(BODY)),
            ..FetchOptions::default()
        };
        assert!(fetch(&mut h, &srv.url("/tool"), "/opt/tool", &o).unwrap());
        let r = h.finish().unwrap();
        let p = || "/opt/tool".to_string();
        assert_eq!(
            hashes(&r),
            [
                (p(), tag("old\n"), None),
                (p(), None, Some(format!("sha256:{}", sha(BODY)))),
            ]
        );
        assert_eq!(std::fs::read(t.p("/opt/tool")).unwrap(), BODY);
    }

    #[test]
    fn planned_appends_share_one_buffer_between_view_overlay_and_hashes() {
        use crate::host::effects::overlay::Node;
        use std::path::Path;
        let t = TestHost::new();
        t.file("/etc/f", "a\n");
        let mut h = t.host(ExecMode::Plan);
        let o = LineOptions::default();
        for l in ["b", "c", "d"] {
            assert!(fs::ensure_line(&mut h, "/etc/f", l, &o).unwrap());
        }
        let f = Path::new("/etc/f");
        let Some(Node::File { content, .. }) = h.overlay().unwrap().lookup(f) else {
            panic!("no planned file: {:?}", h.overlay().unwrap().lookup(f));
        };
        let planned = content.bytes().unwrap();
        assert_eq!(&planned[..], b"a\nb\nc\nd\n");
        // The report's last write, the overlay's node and the view's rendering are one
        // buffer: no copy of the content per call.
        let (_, kept) = &h.hashes.last_write[f];
        assert_eq!(
            (kept.as_ptr(), kept.len()),
            (planned.as_ptr(), planned.len())
        );
        let rendered = h.texts.get_mut(f).unwrap().lines.render();
        assert_eq!(rendered.as_ptr(), planned.as_ptr());
        // The next append writes past what was handed out: the planned content stays.
        assert!(fs::ensure_line(&mut h, "/etc/f", "e", &o).unwrap());
        assert_eq!(&planned[..], b"a\nb\nc\nd\n");
        assert_eq!(h.view_read(f).unwrap().unwrap(), b"a\nb\nc\nd\ne\n");
        let r = h.finish().unwrap();
        assert_eq!(r.changes[3].after, tag("a\nb\nc\nd\ne\n"));
    }

    #[test]
    fn each_step_report_starts_its_own_chain() {
        let t = TestHost::new();
        let mut h = t.host(ExecMode::Plan);
        let o = LineOptions::default();
        assert!(fs::ensure_line(&mut h, "/etc/f", "a", &o).unwrap());
        let r1 = h.finish_step().unwrap();
        assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o).unwrap());
        let r2 = h.finish_step().unwrap();
        let f = || "/etc/f".to_string();
        assert_eq!(hashes(&r1), [(f(), None, tag("a\n"))]);
        // The second step sees the first step's planned content as its before.
        assert_eq!(hashes(&r2), [(f(), tag("a\n"), tag("a\nb\n"))]);
    }
}
