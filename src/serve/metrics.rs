//! Counters of `skyhook-agent serve` and their Prometheus text exposition (format 0.0.4),
//! answered on `GET /v1/metrics` (bearer token, as every route but health). Written by hand:
//! a dozen series of atomics do not need a metrics crate.
//!
//! Every metric is documented in docs/remote.md "Metrics".

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;

/// Upper bounds (seconds) of the execution duration histogram buckets (`+Inf` follows).
pub const DURATION_BUCKETS: [f64; 10] =
    [0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 1800.0, 3600.0];

/// The counters. All are monotonic but `connections_open`; the gauges of executions and
/// ring bytes come from the service when rendering.
#[derive(Debug, Default)]
pub struct Metrics {
    started: AtomicU64,
    /// `(kind, outcome)` → executions ended.
    ended: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// Cumulative per bucket of [`DURATION_BUCKETS`], then the count; the sum in µs.
    duration_buckets: [AtomicU64; DURATION_BUCKETS.len()],
    duration_count: AtomicU64,
    duration_sum_us: AtomicU64,
    /// Refused requests by reason.
    refusals: Mutex<BTreeMap<&'static str, u64>>,
    /// Connections accepted, open now, closed by the server by reason.
    connections_accepted: AtomicU64,
    connections_open: AtomicU64,
    connections_closed: Mutex<BTreeMap<&'static str, u64>>,
    accept_errors: AtomicU64,
    ring_evicted: AtomicU64,
    lost_events: AtomicU64,
    lost_notices: AtomicU64,
}

fn bump(m: &Mutex<BTreeMap<&'static str, u64>>, k: &'static str) {
    *m.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(k)
        .or_default() += 1;
}

/// The `outcome` label of an exit object: `success` (code 0), `failure` (another code),
/// `signal`, `timeout`, `cancelled`, `error`.
pub fn outcome(exit: &Value) -> &'static str {
    if let Some(e) = exit.get("error").and_then(Value::as_str) {
        return match e {
            "timeout" => "timeout",
            "cancelled" => "cancelled",
            _ if exit.get("code").is_some() => "failure",
            _ => "error",
        };
    }
    match exit.get("code").and_then(Value::as_i64) {
        Some(0) => "success",
        Some(_) => "failure",
        None if exit.get("signal").is_some() => "signal",
        None => "error",
    }
}

/// The `reason` label of a refused request's status.
pub fn refusal_reason(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        409 => "conflict",
        410 => "gap",
        413 => "too_large",
        422 => "unprocessable",
        429 => "too_many_running",
        503 => "shutting_down",
        _ => "other",
    }
}

impl Metrics {
    /// An execution was started.
    pub fn started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// An execution of `kind` ended with `exit` after `took`.
    pub fn ended(&self, kind: &'static str, exit: &Value, took: Duration) {
        *self
            .ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((kind, outcome(exit)))
            .or_default() += 1;
        let s = took.as_secs_f64();
        for (b, le) in self.duration_buckets.iter().zip(DURATION_BUCKETS) {
            if s <= le {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.duration_count.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.duration_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// A request was answered with the error `status` (>= 400).
    pub fn refused(&self, status: u16) {
        bump(&self.refusals, refusal_reason(status));
    }

    /// A connection was accepted (it is open until [`Metrics::connection_ended`]).
    pub fn connection_accepted(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// An accepted connection is gone.
    pub fn connection_ended(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// The server closed a connection: `idle_timeout`, `header_timeout`, `over_cap` (shed
    /// to make room), `refused` (over the cap with none idle), `tls_handshake`.
    pub fn connection_closed(&self, reason: &'static str) {
        bump(&self.connections_closed, reason);
    }

    /// Connections open now.
    pub fn connections_open(&self) -> u64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// `accept` failed (EMFILE and the like).
    pub fn accept_error(&self) {
        self.accept_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` events were dropped from rings (line bound, byte budget, ended executions evicted).
    pub fn evicted(&self, n: u64) {
        if n > 0 {
            self.ring_evicted.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A connected reader was told it lost `n` events.
    pub fn lost(&self, n: u64) {
        self.lost_notices.fetch_add(1, Ordering::Relaxed);
        self.lost_events.fetch_add(n, Ordering::Relaxed);
    }

    /// The exposition, given the gauges the service owns: executions running and ended
    /// (kept), ring bytes held and their budget.
    pub fn render(
        &self,
        running: usize,
        exited: usize,
        ring_bytes: usize,
        budget: usize,
    ) -> String {
        let mut o = String::new();
        let head = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP skyhook_serve_{name} {help}");
            let _ = writeln!(o, "# TYPE skyhook_serve_{name} {kind}");
        };
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);

        head(&mut o, "executions", "gauge", "Executions known, by state.");
        let _ = writeln!(o, "skyhook_serve_executions{{state=\"running\"}} {running}");
        let _ = writeln!(o, "skyhook_serve_executions{{state=\"exited\"}} {exited}");
        head(
            &mut o,
            "executions_started_total",
            "counter",
            "Executions started.",
        );
        let _ = writeln!(
            o,
            "skyhook_serve_executions_started_total {}",
            ld(&self.started)
        );
        head(
            &mut o,
            "executions_ended_total",
            "counter",
            "Executions ended, by kind and outcome.",
        );
        for ((kind, out), n) in self.ended.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                o,
                "skyhook_serve_executions_ended_total{{kind=\"{kind}\",outcome=\"{out}\"}} {n}"
            );
        }
        head(
            &mut o,
            "execution_duration_seconds",
            "histogram",
            "Wall time from start to exit of ended executions.",
        );
        for (b, le) in self.duration_buckets.iter().zip(DURATION_BUCKETS) {
            let _ = writeln!(
                o,
                "skyhook_serve_execution_duration_seconds_bucket{{le=\"{le}\"}} {}",
                ld(b)
            );
        }
        let count = ld(&self.duration_count);
        let _ = writeln!(
            o,
            "skyhook_serve_execution_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            o,
            "skyhook_serve_execution_duration_seconds_sum {}",
            ld(&self.duration_sum_us) as f64 / 1e6
        );
        let _ = writeln!(o, "skyhook_serve_execution_duration_seconds_count {count}");
        head(
            &mut o,
            "refusals_total",
            "counter",
            "Requests answered with an error status, by reason.",
        );
        for (r, n) in self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(o, "skyhook_serve_refusals_total{{reason=\"{r}\"}} {n}");
        }
        head(&mut o, "connections_open", "gauge", "Connections open now.");
        let _ = writeln!(
            o,
            "skyhook_serve_connections_open {}",
            ld(&self.connections_open)
        );
        head(
            &mut o,
            "connections_accepted_total",
            "counter",
            "Connections accepted.",
        );
        let _ = writeln!(
            o,
            "skyhook_serve_connections_accepted_total {}",
            ld(&self.connections_accepted)
        );
        head(
            &mut o,
            "connections_closed_total",
            "counter",
            "Connections the server closed, by reason.",
        );
        for (r, n) in self
            .connections_closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                o,
                "skyhook_serve_connections_closed_total{{reason=\"{r}\"}} {n}"
            );
        }
        head(
            &mut o,
            "accept_errors_total",
            "counter",
            "Failed accepts (EMFILE and the like); the server backs off and goes on.",
        );
        let _ = writeln!(
            o,
            "skyhook_serve_accept_errors_total {}",
            ld(&self.accept_errors)
        );
        head(
            &mut o,
            "ring_bytes",
            "gauge",
            "Bytes of events held in all rings.",
        );
        let _ = writeln!(o, "skyhook_serve_ring_bytes {ring_bytes}");
        head(&mut o, "ring_bytes_budget", "gauge", "--ring-bytes.");
        let _ = writeln!(o, "skyhook_serve_ring_bytes_budget {budget}");
        head(
            &mut o,
            "ring_evicted_events_total",
            "counter",
            "Events dropped from rings (--ring-lines, --ring-bytes, ended executions evicted).",
        );
        let _ = writeln!(
            o,
            "skyhook_serve_ring_evicted_events_total {}",
            ld(&self.ring_evicted)
        );
        head(
            &mut o,
            "stream_lost_events_total",
            "counter",
            "Events connected readers never received (each told by a lost event).",
        );
        let _ = writeln!(
            o,
            "skyhook_serve_stream_lost_events_total {}",
            ld(&self.lost_events)
        );
        head(
            &mut o,
            "stream_lost_notices_total",
            "counter",
            "Lost events sent to connected readers.",
        );
        let _ = writeln!(
            o,
            "skyhook_serve_stream_lost_notices_total {}",
            ld(&self.lost_notices)
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes_and_exposition() {
        assert_eq!(outcome(&json!({"code": 0})), "success");
        assert_eq!(outcome(&json!({"code": 3})), "failure");
        assert_eq!(outcome(&json!({"code": 1, "error": "boom"})), "failure");
        assert_eq!(outcome(&json!({"signal": 9})), "signal");
        assert_eq!(outcome(&json!({"error": "timeout"})), "timeout");
        assert_eq!(outcome(&json!({"error": "cancelled"})), "cancelled");
        assert_eq!(outcome(&json!({"error": "spawn failed: x"})), "error");
        let m = Metrics::default();
        m.started();
        m.ended("sh", &json!({"code": 0}), Duration::from_millis(200));
        m.refused(429);
        m.refused(429);
        m.evicted(5);
        m.lost(7);
        let t = m.render(1, 2, 300, 1000);
        for line in [
            "skyhook_serve_executions{state=\"running\"} 1",
            "skyhook_serve_executions{state=\"exited\"} 2",
            "skyhook_serve_executions_ended_total{kind=\"sh\",outcome=\"success\"} 1",
            "skyhook_serve_execution_duration_seconds_bucket{le=\"0.1\"} 0",
            "skyhook_serve_execution_duration_seconds_bucket{le=\"0.5\"} 1",
            "skyhook_serve_execution_duration_seconds_bucket{le=\"+Inf\"} 1",
            "skyhook_serve_execution_duration_seconds_sum 0.2",
            "skyhook_serve_refusals_total{reason=\"too_many_running\"} 2",
            "skyhook_serve_ring_bytes 300",
            "skyhook_serve_ring_evicted_events_total 5",
            "skyhook_serve_stream_lost_events_total 7",
            "skyhook_serve_stream_lost_notices_total 1",
        ] {
            assert!(t.lines().any(|l| l == line), "no {line:?} in\n{t}");
        }
    }
}
