//! The wall clock of the agent's timestamps: flag contents, history entries, log file names
//! and the per-chunk output timestamps.
//!
//! `chrono`'s `Utc::now()`/`Local::now()` panic when the system clock is before 1970 or beyond
//! chrono's range (year 262143), and a local offset may push a valid UTC instant out of range.
//! Here every reading is total: the clock is clamped to [`earliest`]`..=`[`latest`]
//! (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z, the range of Python's `datetime`,
//! whose `%Y` keeps log file names at four digits), so a host with a wrong clock still runs
//! its steps; a clock before 1970 gives the same timestamps as Python's agent.

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDateTime, Offset, TimeZone, Utc};

/// Seconds since the epoch of 0001-01-01T00:00:00Z.
const EARLIEST_SECS: i64 = -62_135_596_800;
/// Seconds since the epoch of 9999-12-31T23:59:59Z.
const LATEST_SECS: i64 = 253_402_300_799;

/// The earliest timestamp: 0001-01-01T00:00:00Z.
pub fn earliest() -> DateTime<Utc> {
    DateTime::from_timestamp(EARLIEST_SECS, 0).unwrap_or(DateTime::UNIX_EPOCH)
}

/// The latest timestamp: 9999-12-31T23:59:59.999999Z.
pub fn latest() -> DateTime<Utc> {
    DateTime::from_timestamp(LATEST_SECS, 999_999_000).unwrap_or(DateTime::UNIX_EPOCH)
}

/// `t` as a UTC instant, clamped to [`earliest`]`..=`[`latest`]; never panics.
pub fn utc_from(t: SystemTime) -> DateTime<Utc> {
    // (whole seconds, nanoseconds in 0..1e9) since the epoch, floor-divided for `t` before it
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (i64::try_from(d.as_secs()).ok(), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let back = i64::try_from(d.as_secs()).ok();
            match d.subsec_nanos() {
                0 => (back.map(|s| -s), 0),
                n => (back.map(|s| -s - 1), 1_000_000_000 - n),
            }
        }
    };
    match secs {
        Some(s) if (EARLIEST_SECS..=LATEST_SECS).contains(&s) => {
            DateTime::from_timestamp(s, nanos).unwrap_or_else(earliest)
        }
        Some(s) if s < EARLIEST_SECS => earliest(),
        None if t < UNIX_EPOCH => earliest(),
        _ => latest(),
    }
}

/// The naive local time of `t` (the host's time zone, as Python's `datetime.now()`); the UTC
/// time itself when the local offset cannot be applied. Never panics.
pub fn local_from(t: DateTime<Utc>) -> NaiveDateTime {
    let naive = t.naive_utc();
    let offset = chrono::Local.offset_from_utc_datetime(&naive).fix();
    naive.checked_add_offset(offset).unwrap_or(naive)
}

/// The system clock; a test on this thread may replace it (`set_for_test`, test builds only).
fn system_now() -> SystemTime {
    #[cfg(test)]
    if let Some(t) = TEST_NOW.with(std::cell::Cell::get) {
        return t;
    }
    SystemTime::now()
}

/// Now, UTC, clamped as [`utc_from`].
pub fn now_utc() -> DateTime<Utc> {
    utc_from(system_now())
}

/// Now, naive local time, as [`local_from`].
pub fn now_local() -> NaiveDateTime {
    local_from(now_utc())
}

#[cfg(test)]
thread_local! {
    static TEST_NOW: std::cell::Cell<Option<SystemTime>> = const { std::cell::Cell::new(None) };
}

/// Make [`now_utc`]/[`now_local`] on this thread read `t` (`None`: the system clock again).
#[cfg(test)]
pub(crate) fn set_for_test(t: Option<SystemTime>) {
    TEST_NOW.with(|c| c.set(t));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const YEAR: u64 = 365 * 86_400;

    #[test]
    fn every_clock_value_converts_without_panicking() {
        let before_1970 = UNIX_EPOCH - Duration::new(5 * YEAR, 250_000_000);
        let year_300000 = UNIX_EPOCH + Duration::from_secs(298_030 * YEAR);
        let year_minus_5 = UNIX_EPOCH - Duration::from_secs(1_980 * YEAR);
        let far = UNIX_EPOCH + Duration::from_secs(i64::MAX as u64);
        let far_past = UNIX_EPOCH - Duration::from_secs(i64::MAX as u64);
        let ok = UNIX_EPOCH + Duration::new(1_735_825_501, 123_456_789);
        let rfc = |t| utc_from(t).to_rfc3339();
        assert_eq!(rfc(before_1970), "1965-01-01T23:59:59.750+00:00");
        assert_eq!(rfc(UNIX_EPOCH), "1970-01-01T00:00:00+00:00");
        assert_eq!(rfc(ok), "2025-01-02T13:45:01.123456789+00:00");
        assert_eq!(rfc(year_minus_5), "0001-01-01T00:00:00+00:00");
        assert_eq!(rfc(far_past), "0001-01-01T00:00:00+00:00");
        assert_eq!(rfc(year_300000), "9999-12-31T23:59:59.999999+00:00");
        assert_eq!(utc_from(far), latest());
        let edge = UNIX_EPOCH + Duration::from_secs(LATEST_SECS as u64 + 1);
        assert_eq!(utc_from(edge), latest());
        // The formats built on them.
        let file = |t| crate::logs::sink::file_timestamp(&utc_from(t));
        assert_eq!(file(before_1970), "1965-01-01-235959");
        assert_eq!(file(year_minus_5), "0001-01-01-000000");
        assert_eq!(file(year_300000), "9999-12-31-235959");
        let entry = |t| crate::state::history::entry_time(utc_from(t));
        assert_eq!(entry(year_300000), "9999-12-31T23:59:59.999999+00:00");
        assert_eq!(entry(year_minus_5), "0001-01-01T00:00:00+00:00");
        // Local time of both bounds: within a day of UTC, never a panic.
        for t in [earliest(), latest()] {
            let l = local_from(t);
            assert!((l - t.naive_utc()).num_hours().abs() <= 26, "{l}");
        }
    }

    #[test]
    fn the_test_clock_is_per_thread() {
        let before_1970 = UNIX_EPOCH - Duration::from_secs(YEAR);
        set_for_test(Some(before_1970));
        assert_eq!(now_utc().to_rfc3339(), "1969-01-01T00:00:00+00:00");
        let other = std::thread::spawn(now_utc).join().unwrap();
        assert!(other > DateTime::UNIX_EPOCH);
        set_for_test(None);
        assert!(now_utc() > DateTime::UNIX_EPOCH);
    }
}
