//! Planning a CR on every selected node and grouping the answers.
//!
//! Each node gets one `package_plan` execution carrying every package of the CR in
//! `dependsOn` order (the chain form, [`chain_body`]): the node plans each mode of each
//! package against the host as the earlier ones would leave it. At most
//! [`Options::parallel`] nodes are planned at once; each within [`Options::timeout`] and at
//! most [`Options::max_stream`] bytes of events, so a slow, dead or hostile node (dripping output, a huge stream, a wrong
//! certificate) becomes a failure of that node and never holds the others.
//!
//! Nodes whose canonical plans are equal form a group: the canonical plan is each package's
//! `rendered` text under a `package NAME VERSION` line, the node's name replaced by
//! `<node>` (execution ids and times are not in it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use serde_json::{Value, json};

use super::answer::{Answer, ExitLine, ModePlan};
use super::{Cr, Node};
use crate::package::Mode;
use crate::remote::Client;
use crate::serve::http::read_body;

/// How to reach and bound the nodes.
#[derive(Debug, Clone)]
pub struct Options {
    /// Modes planned per package, in order.
    pub modes: Vec<Mode>,
    /// Nodes planned at once.
    pub parallel: usize,
    /// Per node, all its packages.
    pub timeout: Duration,
    /// Bytes of events read from one node (all its packages).
    pub max_stream: usize,
    /// The bearer token (a `plan`-scoped one is enough).
    pub token: String,
    /// CA of the nodes' certificates (`https://` addresses).
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key, when the nodes require one.
    pub tls_client: Option<(PathBuf, PathBuf)>,
}

/// One package's plan on a node.
#[derive(Debug, Clone)]
pub struct PackageResult {
    /// The CR's package name.
    pub package: String,
    /// Its version.
    pub version: String,
    /// The exit event's `plans` (one per mode).
    pub plans: Plans,
    /// The exit event's `rendered`.
    pub rendered: String,
    /// Changes plus actions over every mode.
    pub pending: u64,
}

/// A package's `plans` as its node sent them (`Null` when its entry has none): read as a
/// JSON value by the planning thread ([`preview_with_plans`]), or kept as the node's exit
/// event's line and read when asked for ([`Plans::value`]); only `--output json` needs them.
#[derive(Debug, Clone)]
pub struct Plans(PlansAt);

#[derive(Debug, Clone)]
enum PlansAt {
    /// The line (shared by the node's packages) and the package's place in its `packages`.
    Line(Arc<[u8]>, usize),
    /// Read.
    Read(Value),
}

impl Plans {
    /// The plans (`Null` if a kept line does not read: it did when it was answered).
    pub fn value(&self) -> Value {
        match &self.0 {
            PlansAt::Read(v) => v.clone(),
            PlansAt::Line(line, i) => super::answer::plans(line)
                .ok()
                .and_then(|mut all| all.get_mut(*i).map(Value::take))
                .unwrap_or_default(),
        }
    }
}

/// What a node answered.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Every package planned; `pending` > 0: it would change.
    Planned {
        /// Per package, in order.
        packages: Vec<PackageResult>,
        /// Changes plus actions over every package.
        pending: u64,
        /// The canonical plan (the grouping key).
        canonical: String,
    },
    /// The node could not be planned, or a step of its plan fails.
    Failed(String),
}

/// One node's result.
#[derive(Debug, Clone)]
pub struct NodeResult {
    /// The node's name.
    pub node: String,
    /// What it answered.
    pub outcome: Outcome,
}

/// The start body of `p`'s plan (without its `id`).
///
/// # Errors
/// The package directory cannot be read.
pub fn plan_bodies(
    cr: &Cr,
    dirs: &BTreeMap<String, PathBuf>,
    modes: &[Mode],
) -> Result<Vec<(String, String, Value)>, super::InputError> {
    let mut out = Vec::new();
    for p in &cr.packages {
        let dir = super::package_dir(cr, p, dirs)?;
        let package = super::package_body(&dir, p)?;
        let mut env: serde_json::Map<String, Value> = p
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        env.insert("SKYHOOK_RESOURCE_ID".into(), cr.resource_id(p).into());
        let body = json!({
            "kind": crate::serve::plan::KIND,
            "package": package,
            "modes": modes.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
            "env": env,
            "skyhook_cr": {"spec": {"packages": {p.name.clone(): p.entry.clone()}}},
        });
        out.push((p.name.clone(), p.version.clone(), body));
    }
    Ok(out)
}

/// Start one plan on `client` and read its events to the exit event, at most `max` bytes:
/// what `on_exit` makes of the exit event (read once, [`ExitLine`], and its line).
async fn one_plan<R>(
    client: &Client,
    body: Vec<u8>,
    max: usize,
    on_exit: impl FnOnce(ExitLine, &[u8]) -> R,
) -> Result<R, String> {
    use hyper::body::Body as _;
    let resp = client
        .send(Method::POST, "/v1/executions", Some(body))
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    if status != 200 {
        let b = read_body(resp.into_body(), 64 << 10)
            .await
            .unwrap_or_default();
        let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
        let why = v
            .get("detail")
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        return Err(format!("refused: {status} {why}").trim_end().to_string());
    }
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut total = 0usize;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        let data = match frame {
            None => return Err("the stream ended before the plan did".into()),
            Some(Err(e)) => return Err(format!("stream: {e}")),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        total += data.len();
        if total > max {
            return Err(format!("the stream passed {max} bytes: stopped reading"));
        }
        buf.extend_from_slice(&data);
        // Only the exit event is kept: every other line is checked to be JSON without
        // building it (`IgnoredAny`), and the lines read are dropped once per frame.
        let not_json = |_| "a line of the stream is not JSON".to_string();
        let mut start = 0;
        while let Some(i) = memchr::memchr(b'\n', &buf[start..]) {
            let line = &buf[start..start + i];
            start += i + 1;
            if memchr::memmem::find(line, b"\"exit\"").is_none() {
                serde_json::from_slice::<serde::de::IgnoredAny>(line).map_err(not_json)?;
                continue;
            }
            let exit = ExitLine::parse(line).map_err(not_json)?;
            if exit.exit.is_some() {
                return Ok(on_exit(exit, line));
            }
        }
        buf.drain(..start);
    }
}

/// The failures a plan document lists: `mode M step S: message`.
fn step_failures(plans: &[ModePlan]) -> Vec<String> {
    let mut out = Vec::new();
    for p in plans {
        let mode = p.package_mode.as_str().unwrap_or("?");
        if p.not_planned.is_some() {
            // Not a failure of its own: an earlier mode's (`failed_package` lists it).
            continue;
        }
        if let Some(e) = p.error.as_str() {
            out.push(format!("mode {mode}: {e}"));
            continue;
        }
        for s in &p.steps.0 {
            let name = s.name.as_str().unwrap_or("?");
            let msg = match s.kind.as_str() {
                Some("failed") => s.error.as_str().map(str::to_string),
                Some("rhai") if s.ok == false => Some(
                    s.result_error
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("{} pending change(s)", s.drift)),
                ),
                _ => None,
            };
            if let Some(m) = msg {
                out.push(format!("mode {mode} step {name}: {m}"));
            }
        }
    }
    out
}

/// The one start body (without its `id`) of a node's plan: the chain form of `bodies`
/// (each package's `package`, `env` and `skyhook_cr` under `packages`, in order; the first
/// body's `modes`).
pub fn chain_body(bodies: &[(String, String, Value)]) -> Value {
    let packages: Vec<Value> = bodies
        .iter()
        .map(|(_, _, b)| json!({"package": b["package"], "env": b["env"], "skyhook_cr": b["skyhook_cr"]}))
        .collect();
    let modes = bodies
        .first()
        .map_or(Value::Null, |(_, _, b)| b["modes"].clone());
    json!({"kind": crate::serve::plan::KIND, "modes": modes, "packages": packages})
}

/// What every node of a preview is sent, made once: the packages (name, version, start
/// body), the chain's start body as JSON text without its `id` ([`chain_body`]), and the
/// TLS configuration of `https://` nodes (or why there is none).
pub struct Request {
    bodies: Vec<(String, String, Value)>,
    text: String,
    tls: Option<Result<Arc<tokio_rustls::rustls::ClientConfig>, String>>,
    /// Each node's plans are read as JSON values as it answers ([`Plans`]).
    read_plans: bool,
}

impl Request {
    /// The request for `bodies`; the TLS configuration from `opts` when it names a CA.
    pub fn new(bodies: Vec<(String, String, Value)>, opts: &Options) -> Request {
        let text = chain_body(&bodies).to_string();
        let tls = opts.tls_ca.as_deref().map(|ca| {
            let client = opts.tls_client.as_ref();
            super::tls::preview_config(ca, client.map(|(c, k)| (c.as_path(), k.as_path())))
        });
        Request {
            bodies,
            text,
            tls,
            read_plans: false,
        }
    }

    /// The start body with `id` (`[A-Za-z0-9._-]`, so it needs no escaping) spliced in.
    /// One allocation of the exact size and one copy of the text (the GPU CR's is 60 KiB).
    fn with_id(&self, id: &str) -> Vec<u8> {
        let rest = self.text.strip_prefix('{').unwrap_or(&self.text);
        let mut out = Vec::with_capacity(rest.len() + id.len() + 9);
        out.extend_from_slice(b"{\"id\":\"");
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(b"\",");
        out.extend_from_slice(rest.as_bytes());
        out
    }
}

/// Plan every package on `node` in one execution ([`chain_body`]).
pub async fn plan_node(node: &Node, req: &Request, opts: &Options, run_id: &str) -> Outcome {
    let Some(addr) = &node.address else {
        return Outcome::Failed("no serve address (give one, or --address-template)".into());
    };
    let tls = match (&req.tls, addr.starts_with("https://")) {
        (Some(Err(e)), true) => {
            return Outcome::Failed(
                crate::remote::RemoteError::Url(format!("{addr}: {e}")).to_string(),
            );
        }
        (Some(Ok(cfg)), true) => Some(cfg.clone()),
        _ => None,
    };
    let client = match Client::with_config(addr, &opts.token, tls) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let body = req.with_id(&format!("preview-{run_id}"));
    let on_exit = |exit: ExitLine, line: &[u8]| outcome(&node.name, req, exit, line);
    match one_plan(&client, body, opts.max_stream, on_exit).await {
        Ok(o) => o,
        // The address is the node's (in the JSON record), not part of why it failed.
        Err(e) => {
            let e = e
                .strip_prefix(&format!("{addr}: "))
                .or_else(|| e.strip_prefix(&format!("{}: ", addr.trim_end_matches('/'))))
                .unwrap_or(&e)
                .to_string();
            Outcome::Failed(e)
        }
    }
}

/// What node `node`'s exit event (read as [`ExitLine`] from `line`) says of its plan of
/// `req`'s packages: planned (each package's pending count, rendered text and plans, the
/// canonical plan) or its first failure.
fn outcome(node: &str, req: &Request, exit: ExitLine, line: &[u8]) -> Outcome {
    let bodies = &req.bodies;
    let answers = exit.packages.0;
    if answers.len() != bodies.len() {
        let why = exit
            .exit
            .as_ref()
            .and_then(|e| e.error.as_str())
            .unwrap_or("");
        return Outcome::Failed(
            format!(
                "answered {} of {} packages {why}",
                answers.len(),
                bodies.len()
            )
            .trim_end()
            .to_string(),
        );
    }
    for (i, ((name, _, _), a)) in bodies.iter().zip(&answers).enumerate() {
        let failure = step_failures(&a.plans.0).into_iter().next().or_else(|| {
            (a.exit.code != 0).then(|| {
                let why = a.exit.error.as_str().unwrap_or("the plan failed");
                why.to_string()
            })
        });
        if let Some(f) = failure {
            return Outcome::Failed(failed_package(
                name,
                &f,
                &a.plans.0,
                &bodies[i + 1..],
                &answers[i + 1..],
            ));
        }
    }
    // Every package planned. Its plans are read as values for `--output json` only.
    let mut read = req
        .read_plans
        .then(|| super::answer::plans(line).unwrap_or_default());
    let line: Option<Arc<[u8]>> = read.is_none().then(|| line.into());
    let mut packages = Vec::with_capacity(answers.len());
    let mut pending = 0u64;
    let mut canonical = String::new();
    for (index, ((name, version, _), a)) in bodies.iter().zip(answers).enumerate() {
        let p_pending: u64 = a
            .plans
            .0
            .iter()
            .map(|p| p.changes.as_u64().unwrap_or(0) + p.actions.as_u64().unwrap_or(0))
            .sum();
        let rendered = a.rendered.0.unwrap_or_default();
        let _ = writeln!(canonical, "package {name} {version}");
        push_replaced(&mut canonical, &rendered, node, "<node>");
        pending += p_pending;
        packages.push(PackageResult {
            package: name.clone(),
            version: version.clone(),
            plans: Plans(match (&mut read, &line) {
                (Some(all), _) => {
                    PlansAt::Read(all.get_mut(index).map_or(Value::Null, Value::take))
                }
                (None, Some(line)) => PlansAt::Line(line.clone(), index),
                (None, None) => PlansAt::Read(Value::Null),
            }),
            rendered: rendered.into_owned(),
            pending: p_pending,
        });
    }
    Outcome::Planned {
        packages,
        pending,
        canonical,
    }
}

/// Append `text` to `out` with each `from` in it replaced by `to` (`str::replace` without
/// its own copy).
fn push_replaced(out: &mut String, text: &str, from: &str, to: &str) {
    if from.is_empty() {
        out.push_str(&text.replace(from, to));
        return;
    }
    let mut last = 0;
    for (at, _) in text.match_indices(from) {
        out.push_str(&text[last..at]);
        out.push_str(to);
        last = at + from.len();
    }
    out.push_str(&text[last..]);
}

/// Why a node failed at package `name` (its first failure `why`), with the later modes of
/// the package (its `plans`) and the later packages the node did not plan because of it
/// (their `not_planned`): `package NAME: WHY; not planned because mode M failed: config,
/// config-check; not planned because package NAME failed: b, c`.
fn failed_package(
    name: &str,
    why: &str,
    plans: &[ModePlan],
    later: &[(String, String, Value)],
    answers: &[Answer],
) -> String {
    let mut out = format!("package {name}: {why}");
    // Every mode after the failed one has the same reason (`mode M failed`).
    let modes: Vec<(&str, &str)> = plans
        .iter()
        .filter_map(|p| Some((p.package_mode.as_str()?, p.not_planned.as_ref()?.as_str()?)))
        .collect();
    if let Some((_, w)) = modes.first() {
        let names: Vec<&str> = modes.iter().map(|(m, _)| *m).collect();
        let _ = write!(out, "; not planned because {w}: {}", names.join(", "));
    }
    let skipped: Vec<&str> = later
        .iter()
        .zip(answers)
        .filter(|(_, a)| a.not_planned)
        .map(|((n, _, _), _)| n.as_str())
        .collect();
    if !skipped.is_empty() {
        let _ = write!(
            out,
            "; not planned because package {name} failed: {}",
            skipped.join(", ")
        );
    }
    out
}

/// Plan `nodes`, at most `opts.parallel` at once, each bounded by `opts.timeout`;
/// `progress` is called after each node ends (done, total). Stops starting nodes once
/// `stop` is aborted; the nodes that finished are returned (sorted by name) with the
/// names of those that did not.
///
/// The nodes are dealt round-robin to a worker thread per core (at most 8, each a
/// single-threaded runtime of its own), so the TLS handshakes and the parsing of many
/// nodes' answers spread over the cores instead of queueing on one thread; the caller's
/// task only collects the results.
pub async fn plan_all(
    nodes: &[Node],
    req: Arc<Request>,
    opts: &Options,
    stop: &crate::process::Cancel,
    progress: &mut dyn FnMut(usize, usize),
) -> (Vec<NodeResult>, Vec<String>) {
    let sem = Arc::new(tokio::sync::Semaphore::new(opts.parallel.max(1)));
    let run_id = format!(
        "{:x}{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    );
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(nodes.len().max(1));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for w in 0..workers {
        let mine: Vec<(usize, Node)> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| i % workers == w)
            .map(|(i, n)| (i, n.clone()))
            .collect();
        let (sem, req, opts, stop, tx) = (
            sem.clone(),
            req.clone(),
            opts.clone(),
            stop.clone(),
            tx.clone(),
        );
        let run_id = run_id.clone();
        let work = move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(plan_some(mine, req, opts, sem, stop, tx, run_id));
        };
        if let Err(e) = std::thread::Builder::new()
            .name("fleet-plan".into())
            .spawn(work)
        {
            tracing::warn!("cannot start a planning thread: {e}");
        }
    }
    drop(tx);
    let mut done = Vec::new();
    let total = nodes.len();
    loop {
        tokio::select! {
            r = rx.recv() => match r {
                None => break,
                Some(r) => {
                    done.push(r);
                    progress(done.len(), total);
                }
            },
            () = stop.aborted() => break,
        }
    }
    done.sort_by(|a, b| a.node.cmp(&b.node));
    // A binary search of the sorted results, not a scan of them per node: a stop with most
    // of a fleet of thousands still out is one search each, not a quadratic walk.
    let mut missing: Vec<String> = nodes
        .iter()
        .filter(|n| done.binary_search_by(|d| d.node.cmp(&n.name)).is_err())
        .map(|n| n.name.clone())
        .collect();
    missing.sort();
    (done, missing)
}

/// One worker's share of [`plan_all`]: its nodes planned on this thread's runtime, each
/// result sent to `tx`; on `stop` what still runs is dropped.
async fn plan_some(
    mine: Vec<(usize, Node)>,
    req: Arc<Request>,
    opts: Options,
    sem: Arc<tokio::sync::Semaphore>,
    stop: crate::process::Cancel,
    tx: tokio::sync::mpsc::UnboundedSender<NodeResult>,
    run_id: String,
) {
    let mut set = tokio::task::JoinSet::new();
    for (i, n) in mine {
        let (sem, req, opts, tx) = (sem.clone(), req.clone(), opts.clone(), tx.clone());
        let rid = format!("{run_id}-{i}");
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let outcome =
                match tokio::time::timeout(opts.timeout, plan_node(&n, &req, &opts, &rid)).await {
                    Ok(o) => o,
                    Err(_) => Outcome::Failed(format!(
                        "no plan within {} s (--node-timeout)",
                        opts.timeout.as_secs_f64()
                    )),
                };
            let _ = tx.send(NodeResult {
                node: n.name,
                outcome,
            });
        });
    }
    tokio::select! {
        () = async { while set.join_next().await.is_some() {} } => {}
        () = stop.aborted() => set.abort_all(),
    }
}

/// Preview the CR on `nodes`: the ones `cr`'s selector picks are planned ([`plan_all`]),
/// the others listed as excluded; the results grouped ([`Preview::new`]).
pub async fn preview(
    cr: &Cr,
    nodes: Vec<Node>,
    bodies: Vec<(String, String, Value)>,
    opts: &Options,
    stop: &crate::process::Cancel,
    progress: &mut dyn FnMut(usize, usize),
) -> Preview {
    preview_with_plans(cr, nodes, bodies, opts, false, stop, progress).await
}

/// As [`preview`]; `read_plans`: each node's plans are read as JSON values by the thread
/// that planned it (for [`Preview::to_json`], which otherwise reads them itself, on the
/// caller's thread once every node answered).
pub async fn preview_with_plans(
    cr: &Cr,
    nodes: Vec<Node>,
    bodies: Vec<(String, String, Value)>,
    opts: &Options,
    read_plans: bool,
    stop: &crate::process::Cancel,
    progress: &mut dyn FnMut(usize, usize),
) -> Preview {
    let (selected, excluded): (Vec<Node>, Vec<Node>) = nodes
        .into_iter()
        .partition(|n| cr.selector.matches(&n.labels));
    let mut excluded: Vec<String> = excluded.into_iter().map(|n| n.name).collect();
    excluded.sort();
    let mut req = Request::new(bodies, opts);
    req.read_plans = read_plans;
    let req = Arc::new(req);
    let (results, unfinished) = plan_all(&selected, req, opts, stop, progress).await;
    Preview::new(results, excluded, unfinished)
}

/// A group of nodes with one canonical plan.
#[derive(Debug, Clone)]
pub struct Group {
    /// Its nodes, sorted.
    pub nodes: Vec<String>,
    /// The plan lines.
    pub canonical: String,
    /// True: it would change something.
    pub changes: bool,
}

/// The result of a preview.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Selected nodes' results, by name.
    pub results: Vec<NodeResult>,
    /// Groups: those that would change first (largest first, then by first node), then
    /// converged ones.
    pub groups: Vec<Group>,
    /// Nodes the selector excluded, sorted.
    pub excluded: Vec<String>,
    /// Selected nodes not planned (interrupted), sorted.
    pub unfinished: Vec<String>,
}

impl Preview {
    /// Group `results`.
    pub fn new(
        results: Vec<NodeResult>,
        excluded: Vec<String>,
        unfinished: Vec<String>,
    ) -> Preview {
        let mut by: BTreeMap<(bool, &str), Vec<String>> = BTreeMap::new();
        for r in &results {
            if let Outcome::Planned {
                pending, canonical, ..
            } = &r.outcome
            {
                by.entry((*pending == 0, canonical))
                    .or_default()
                    .push(r.node.clone());
            }
        }
        let mut groups: Vec<Group> = by
            .into_iter()
            .map(|((converged, canonical), mut nodes)| {
                nodes.sort();
                Group {
                    nodes,
                    canonical: canonical.to_string(),
                    changes: !converged,
                }
            })
            .collect();
        groups.sort_by(|a, b| {
            b.changes
                .cmp(&a.changes)
                .then(b.nodes.len().cmp(&a.nodes.len()))
                .then(a.nodes[0].cmp(&b.nodes[0]))
        });
        Preview {
            results,
            groups,
            excluded,
            unfinished,
        }
    }

    fn failed(&self) -> Vec<(&str, &str)> {
        self.results
            .iter()
            .filter_map(|r| match &r.outcome {
                Outcome::Failed(e) => Some((r.node.as_str(), e.as_str())),
                Outcome::Planned { .. } => None,
            })
            .collect()
    }

    /// (selected, would change, plans among them, converged, failed).
    pub fn counts(&self) -> (usize, usize, usize, usize, usize) {
        let change: Vec<&Group> = self.groups.iter().filter(|g| g.changes).collect();
        let n_change = change.iter().map(|g| g.nodes.len()).sum();
        let converged = self
            .groups
            .iter()
            .filter(|g| !g.changes)
            .map(|g| g.nodes.len())
            .sum();
        (
            self.results.len() + self.unfinished.len(),
            n_change,
            change.len(),
            converged,
            self.failed().len(),
        )
    }

    /// The summary line: `41 selected: 38 would change (2 plans), 2 converged, 1 failed`
    /// (`, 3 not planned (interrupted)` after a Ctrl-C).
    pub fn summary(&self) -> String {
        let (sel, ch, plans, conv, failed) = self.counts();
        let mut s = format!(
            "{sel} selected: {ch} would change ({plans} plan{}), {conv} converged, {failed} failed",
            if plans == 1 { "" } else { "s" }
        );
        if !self.unfinished.is_empty() {
            let _ = write!(s, ", {} not planned (interrupted)", self.unfinished.len());
        }
        s
    }

    /// The text form: per group `== would change on N node(s): a, b` (or `== converged
    /// on ...`) and its plan lines; then `== failed on NODE: why` per failed node, `== not
    /// planned (interrupted): ...`, `== excluded by spec.nodeSelectors: ...`; then the
    /// summary line.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for g in &self.groups {
            let n = g.nodes.len();
            let _ = writeln!(
                out,
                "== {} on {n} node{}: {}",
                if g.changes {
                    "would change"
                } else {
                    "converged"
                },
                if n == 1 { "" } else { "s" },
                g.nodes.join(", ")
            );
            out.push_str(&g.canonical);
            if !g.canonical.ends_with('\n') {
                out.push('\n');
            }
        }
        for (node, why) in self.failed() {
            let _ = writeln!(out, "== failed on {node}: {why}");
        }
        if !self.unfinished.is_empty() {
            let _ = writeln!(
                out,
                "== not planned (interrupted): {}",
                self.unfinished.join(", ")
            );
        }
        if !self.excluded.is_empty() {
            let _ = writeln!(
                out,
                "== excluded by spec.nodeSelectors: {}",
                self.excluded.join(", ")
            );
        }
        out.push_str(&self.summary());
        out.push('\n');
        out
    }

    /// The JSON form (docs/plan.schema.json `fleetPlan`): `nodes` (per selected node, by
    /// name: `node`, `status` `would_change`/`converged`/`failed`/`not_planned`, `group`
    /// (index into `groups`) or null, `error` or null, `packages` with each package's
    /// `plans`), `groups` (`nodes`, `changes`, `plan`: the canonical lines), `excluded`,
    /// and `summary` (counts and the line).
    pub fn to_json(&self) -> Value {
        let group_of = |n: &str| {
            self.groups
                .iter()
                .position(|g| g.nodes.iter().any(|x| x == n))
        };
        let mut nodes: Vec<Value> = self
            .results
            .iter()
            .map(|r| match &r.outcome {
                Outcome::Planned {
                    packages, pending, ..
                } => {
                    // Plans kept in the node's line: the line read once for all its packages.
                    let mut line_plans: Option<Vec<Value>> = None;
                    let mut plans_of = |p: &Plans| match &p.0 {
                        PlansAt::Read(v) => v.clone(),
                        PlansAt::Line(line, i) => line_plans
                            .get_or_insert_with(|| super::answer::plans(line).unwrap_or_default())
                            .get_mut(*i)
                            .map_or(Value::Null, Value::take),
                    };
                    json!({
                        "node": r.node,
                        "status": if *pending > 0 { "would_change" } else { "converged" },
                        "group": group_of(&r.node),
                        "error": null,
                        "packages": packages.iter().map(|p| {
                            let mut v = json!({
                                "package": p.package, "version": p.version, "pending": p.pending,
                            });
                            // Moved in: `json!` would serialize a second copy of it.
                            v["plans"] = plans_of(&p.plans);
                            v
                        }).collect::<Vec<_>>(),
                    })
                }
                Outcome::Failed(e) => json!({
                    "node": r.node, "status": "failed", "group": null,
                    "error": e, "packages": [],
                }),
            })
            .collect();
        for n in &self.unfinished {
            nodes.push(json!({"node": n, "status": "not_planned", "group": null,
                              "error": "interrupted", "packages": []}));
        }
        let (sel, ch, plans, conv, failed) = self.counts();
        json!({
            "nodes": nodes,
            "groups": self.groups.iter().map(|g| json!({
                "nodes": g.nodes, "changes": g.changes, "plan": g.canonical,
            })).collect::<Vec<_>>(),
            "excluded": self.excluded,
            "summary": {
                "selected": sel, "would_change": ch, "plans": plans, "converged": conv,
                "failed": failed, "not_planned": self.unfinished.len(),
                "line": self.summary(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--output json` has the same plans whether the planning thread read them or
    /// `to_json` read them later from the kept line; the canonical plan names no node.
    #[test]
    fn plans_read_early_or_late_are_the_same() {
        let opts = Options {
            modes: vec![Mode::Apply],
            parallel: 1,
            timeout: Duration::from_secs(1),
            max_stream: 1 << 20,
            token: String::new(),
            tls_ca: None,
            tls_client: None,
        };
        let bodies = vec![
            ("a".to_string(), "1".to_string(), json!({})),
            ("b".to_string(), "2".to_string(), json!({})),
        ];
        let line = br#"{"exit":{"code":0},"packages":[{"exit":{"code":0},"plans":[{"package_mode":"apply","counts":{"changes":1,"actions":0},"x":[1,{"y":"n1"}]}],"rendered":"--- mode apply\n+ /etc/n1.conf n1\n"},{"exit":{"code":0},"rendered":"r"}]}"#;
        let json_of = |read_plans| {
            let mut req = Request::new(bodies.clone(), &opts);
            req.read_plans = read_plans;
            let outcome = outcome("n1", &req, ExitLine::parse(line).unwrap(), line);
            let node = "n1".to_string();
            Preview::new(vec![NodeResult { node, outcome }], vec![], vec![]).to_json()
        };
        let late = json_of(false);
        assert_eq!(json_of(true), late);
        let packages = &late["nodes"][0]["packages"];
        assert_eq!(
            packages[0]["plans"],
            json!([{"package_mode": "apply", "counts": {"changes": 1, "actions": 0},
                    "x": [1, {"y": "n1"}]}])
        );
        assert_eq!(packages[0]["pending"], 1);
        assert_eq!(packages[1]["plans"], Value::Null);
        assert_eq!(
            late["groups"][0]["plan"],
            "package a 1\n--- mode apply\n+ /etc/<node>.conf <node>\npackage b 2\nr"
        );
    }
}
