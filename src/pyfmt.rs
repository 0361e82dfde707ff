//! Python-compatible renderings of values that end up in on-host state names and contents.
//!
//! The Python agent derives flag names from `repr()` of lists (contract 6.2), writes
//! `time.time()` and `datetime.isoformat()` into state files, and serialises the history file
//! with `json.dumps` defaults (6.3). These functions reproduce those renderings byte for byte.

use std::fmt::Write as _;

use chrono::{NaiveDateTime, Timelike};
use unicode_general_category::{GeneralCategory, get_general_category};

/// True when Python's `str.isprintable()` holds for the single code point `c`: its general
/// category is none of Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs, except that ASCII space is printable.
///
/// Categories come from the `unicode-general-category` tables (Unicode 16); a Python built on an
/// older Unicode database may consider a newly assigned code point unassigned (`Cn`).
fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::Surrogate
            | GeneralCategory::PrivateUse
            | GeneralCategory::Unassigned
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
            | GeneralCategory::SpaceSeparator
    )
}

/// Python's `repr()` of a `str` (contract 6.2 rules 1-6).
///
/// Quote: `"` when the string contains `'` and no `"`, otherwise `'`. Escapes: `\\`, the
/// chosen quote, `\t`, `\n`, `\r`; other code points below 0x20 and 0x7F as `\xhh`;
/// non-printable non-ASCII as `\xhh`, `\uhhhh` or `\Uhhhhhhhh` (lowercase hex); everything
/// else literal (`é`, emoji).
pub fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        let cp = u32::from(c);
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            _ if c == quote => {
                out.push('\\');
                out.push(c);
            }
            _ if cp < 0x20 || cp == 0x7f => {
                let _ = write!(out, "\\x{cp:02x}");
            }
            _ if c.is_ascii() || is_printable(c) => out.push(c),
            _ if cp <= 0xff => {
                let _ = write!(out, "\\x{cp:02x}");
            }
            _ if cp <= 0xffff => {
                let _ = write!(out, "\\u{cp:04x}");
            }
            _ => {
                let _ = write!(out, "\\U{cp:08x}");
            }
        }
    }
    out.push(quote);
    out
}

/// Python's `repr()` of a list of `str`: `['a', 'b']`, `[]` when empty.
pub fn repr_str_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| repr_str(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// Python's `repr()` of a list of values whose `Display` is their own `repr()`: a step's
/// `returncodes` (`package::ReturnCode`) renders `[0, 1]`, or `[1.0]` for a float code.
pub fn repr_codes<T: std::fmt::Display>(codes: &[T]) -> String {
    let inner: Vec<String> = codes.iter().map(ToString::to_string).collect();
    format!("[{}]", inner.join(", "))
}

/// Python's `repr()` of a `float`: the shortest string that round-trips, in positional form
/// with at least one digit after the `.` (`1724846400.0`, `0.0001`), or in exponent form when
/// the decimal exponent is below -4 or at least 16 (`1e-05`, `1e+16`, `1.5e+16`); `nan`,
/// `inf`, `-inf`.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `-1.5e-5`, `1e16`, `0e0`.
    let sci = format!("{x:e}");
    let (neg, sci) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci.as_str()),
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let n = digits.len() as i32;
    // Position of the decimal point relative to the start of `digits`.
    let decpt = exp + 1;
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-decpt) as usize));
        out.push_str(&digits);
    } else if decpt >= n {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (decpt - n) as usize));
        out.push_str(".0");
    } else {
        out.push_str(&digits[..decpt as usize]);
        out.push('.');
        out.push_str(&digits[decpt as usize..]);
    }
    out
}

/// Python's `datetime.isoformat()` of a naive datetime: `YYYY-MM-DDTHH:MM:SS.ffffff`, the
/// fraction omitted when the microseconds are 0. Sub-microsecond precision is truncated.
pub fn isoformat(dt: NaiveDateTime) -> String {
    let mut out = dt.format("%Y-%m-%dT%H:%M:%S").to_string();
    let micros = (dt.nanosecond() % 1_000_000_000) / 1000;
    if micros != 0 {
        let _ = write!(out, ".{micros:06}");
    }
    out
}

/// Python's `json.dumps(v)` with default arguments: separators `", "` and `": "`, no
/// indentation, no trailing newline, `ensure_ascii` (everything outside ` `..`~` escaped as
/// `\uXXXX` in lowercase hex, surrogate pairs above U+FFFF; `\"`, `\\`, `\n`, `\r`, `\t`,
/// `\b`, `\f` short forms), object keys in stored order. Floats render as [`float_repr`].
///
/// Integers beyond the `u64`/`i64` range were already parsed into floats by `serde_json` and
/// render as floats (Python would keep them as integers).
pub fn json_dumps(v: &serde_json::Value) -> String {
    let mut out = String::new();
    dump_value(v, &mut out);
    out
}

fn dump_value(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                out.push_str(&float_repr(n.as_f64().unwrap_or(f64::NAN)));
            }
        }
        Value::String(s) => dump_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump_str(k, out);
                out.push_str(": ");
                dump_value(item, out);
            }
            out.push('}');
        }
    }
}

fn dump_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn repr_quotes_and_escapes() {
        assert_eq!(repr_str("a"), "'a'");
        assert_eq!(repr_str(""), "''");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("say \"hi\""), "'say \"hi\"'");
        assert_eq!(repr_str("both ' and \""), "'both \\' and \"'");
        assert_eq!(repr_str("a\\b"), "'a\\\\b'");
        assert_eq!(repr_str("tab\there"), "'tab\\there'");
        assert_eq!(repr_str("l\nr\r"), "'l\\nr\\r'");
        assert_eq!(repr_str("\u{0}\u{1b}\u{7f}"), "'\\x00\\x1b\\x7f'");
        assert_eq!(repr_str("?~ "), "'?~ '");
    }

    #[test]
    fn repr_non_ascii() {
        assert_eq!(repr_str("é"), "'é'");
        assert_eq!(repr_str("🎉"), "'🎉'");
        assert_eq!(repr_str("日本"), "'日本'");
        assert_eq!(repr_str("\u{a0}"), "'\\xa0'");
        assert_eq!(repr_str("\u{85}"), "'\\x85'");
        assert_eq!(repr_str("\u{ad}"), "'\\xad'"); // soft hyphen, Cf
        assert_eq!(repr_str("\u{200b}"), "'\\u200b'");
        assert_eq!(
            repr_str("\u{2028}\u{2029}\u{3000}"),
            "'\\u2028\\u2029\\u3000'"
        );
        assert_eq!(repr_str("\u{e000}"), "'\\ue000'"); // private use
        assert_eq!(repr_str("\u{378}"), "'\\u0378'"); // unassigned
        assert_eq!(repr_str("\u{f0000}"), "'\\U000f0000'"); // plane 15 private use
        assert_eq!(repr_str("\u{e0001}"), "'\\U000e0001'"); // language tag, Cf
    }

    #[test]
    fn repr_lists() {
        assert_eq!(repr_str_list(&[]), "[]");
        assert_eq!(repr_str_list(&["a".into(), "b".into()]), "['a', 'b']");
        assert_eq!(repr_codes(&[0, 1, -1]), "[0, 1, -1]");
        assert_eq!(repr_codes::<i64>(&[]), "[]");
    }

    #[test]
    fn float_repr_matches_python() {
        assert_eq!(float_repr(1724846400.0), "1724846400.0");
        assert_eq!(float_repr(1724846400.123456), "1724846400.123456");
        assert_eq!(float_repr(0.0), "0.0");
        assert_eq!(float_repr(-0.0), "-0.0");
        assert_eq!(float_repr(1.0), "1.0");
        assert_eq!(float_repr(-2.5), "-2.5");
        assert_eq!(float_repr(0.1), "0.1");
        assert_eq!(float_repr(0.0001), "0.0001");
        assert_eq!(float_repr(0.00001), "1e-05");
        assert_eq!(float_repr(1.5e-7), "1.5e-07");
        assert_eq!(float_repr(1e15), "1000000000000000.0");
        assert_eq!(float_repr(1e16), "1e+16");
        assert_eq!(float_repr(1.5e16), "1.5e+16");
        assert_eq!(float_repr(1e100), "1e+100");
        assert_eq!(float_repr(123456789012345680.0), "1.2345678901234568e+17");
        assert_eq!(float_repr(f64::INFINITY), "inf");
        assert_eq!(float_repr(f64::NEG_INFINITY), "-inf");
        assert_eq!(float_repr(f64::NAN), "nan");
    }

    #[test]
    fn isoformat_with_and_without_micros() {
        let d = NaiveDate::from_ymd_opt(2024, 8, 28).unwrap();
        assert_eq!(
            isoformat(d.and_hms_micro_opt(12, 0, 0, 123456).unwrap()),
            "2024-08-28T12:00:00.123456"
        );
        assert_eq!(
            isoformat(d.and_hms_micro_opt(12, 0, 0, 5).unwrap()),
            "2024-08-28T12:00:00.000005"
        );
        assert_eq!(
            isoformat(d.and_hms_opt(9, 5, 3).unwrap()),
            "2024-08-28T09:05:03"
        );
        // nanoseconds below one microsecond are dropped, as Python has no such precision
        assert_eq!(
            isoformat(d.and_hms_nano_opt(9, 5, 3, 999).unwrap()),
            "2024-08-28T09:05:03"
        );
    }

    #[test]
    fn json_dumps_matches_python() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"b": 1, "a": [true, false, null, -3, 1.5, 2.0, 18446744073709551615], "c": {}, "d": []}"#,
        )
        .unwrap();
        assert_eq!(
            json_dumps(&v),
            r#"{"b": 1, "a": [true, false, null, -3, 1.5, 2.0, 18446744073709551615], "c": {}, "d": []}"#
        );
        let s = serde_json::Value::String("é\"\\\n\t\u{8}\u{c}\u{1}\u{7f}🎉/".into());
        assert_eq!(
            json_dumps(&s),
            r#""\u00e9\"\\\n\t\b\f\u0001\u007f\ud83c\udf89/""#
        );
    }
}
