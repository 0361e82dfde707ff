//! A node's exit event read for what a preview uses of it, without building it as a
//! `serde_json::Value` (that was 70 % of the client's instructions over http).
//!
//! [`ExitLine::parse`] reads the line of a chain's exit event (`serve::plan`): the
//! exit's `error`, and per package its `exit` (`code`, `error`), whether it is
//! `not_planned`, its `rendered` text (borrowed from the line when it has no escapes) and
//! per mode of its `plans` the fields a failure or a pending count is made of
//! (`package_mode`, `not_planned`, `error`, `counts`, and per step `name`, `kind`, `error`,
//! `result.ok`, `result.error`, `result.drift`). Everything else (each change, each diff)
//! is only checked to be JSON. [`plans`] reads each package's whole `plans` as a value,
//! for `--output json` only.
//!
//! Each field reads as the `Value` accessors the preview used before read it, so the
//! outputs stay the same for any answer: a field of another type than the one read is
//! absent (an object where a string is read, a string where a list is), a field given
//! twice is its last, and `not_planned` counts as given whatever its value.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// What a JSON value is read as: the shape's own reading of an object, an array or a
/// string, `Self::default()` for any other value (as `Value::get`, `as_array`, `as_str`
/// answer `None` for a value of another type).
trait Shape<'de>: Default {
    /// An object, field by field.
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }
    /// An array, element by element.
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }
    /// A string without escapes, borrowed from the line.
    fn borrowed(s: &'de str) -> Self {
        Self::owned(s)
    }
    /// A string the parser unescaped.
    fn owned(_: &str) -> Self {
        Self::default()
    }
}

/// A value of any JSON type read as the shape `T`.
struct Shaped<T>(T);

impl<'de, T: Shape<'de>> Deserialize<'de> for Shaped<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Shape<'de>> Visitor<'de> for V<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_unit<E>(self) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_none<E>(self) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<T, E> {
                Ok(T::borrowed(s))
            }
            fn visit_str<E>(self, s: &str) -> Result<T, E> {
                Ok(T::owned(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
                T::seq(seq)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::map(map)
            }
        }
        d.deserialize_any(V(PhantomData)).map(Shaped)
    }
}

/// A field's name, borrowed from the line unless it has escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// Read an object's fields: `field` reads the value of each name it knows (and answers
/// true), the others are skipped. A name given twice is read twice (the last stays).
fn fields<'de, A: MapAccess<'de>>(
    mut map: A,
    mut field: impl FnMut(&str, &mut A) -> Result<bool, A::Error>,
) -> Result<(), A::Error> {
    while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
        if !field(&k, &mut map)? {
            map.next_value::<IgnoredAny>()?;
        }
    }
    Ok(())
}

/// The value of the current field read as the shape `T`.
fn shaped<'de, T: Shape<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    map.next_value::<Shaped<T>>().map(|s| s.0)
}

/// A string (`Value::as_str`), `None` for a value of another type.
#[derive(Debug, Default)]
pub struct Text<'de>(pub Option<Cow<'de, str>>);

impl<'de> Text<'de> {
    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de> Shape<'de> for Text<'de> {
    fn borrowed(s: &'de str) -> Self {
        Text(Some(Cow::Borrowed(s)))
    }
    fn owned(s: &str) -> Self {
        Text(Some(Cow::Owned(s.to_owned())))
    }
}

/// An array's elements (`Value::as_array`), none for a value of another type.
#[derive(Debug)]
pub struct List<T>(pub Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<'de, T: Shape<'de>> Shape<'de> for List<T> {
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Shaped(v)) = seq.next_element::<Shaped<T>>()? {
            out.push(v);
        }
        Ok(List(out))
    }
}

/// The line of a chain's exit event: `{"exit": {...}, "packages": [...], ...}`.
#[derive(Debug, Default)]
pub struct ExitLine<'de> {
    /// The exit, when the line has one (whatever its value): the line is the exit event.
    pub exit: Option<Exit<'de>>,
    /// Per package, in order.
    pub packages: List<Answer<'de>>,
}

impl<'de> ExitLine<'de> {
    /// Read one line of the stream.
    ///
    /// # Errors
    /// The line is not JSON.
    pub fn parse(line: &'de [u8]) -> Result<ExitLine<'de>, serde_json::Error> {
        serde_json::from_slice::<Shaped<ExitLine>>(line).map(|s| s.0)
    }
}

impl<'de> Shape<'de> for ExitLine<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut out = ExitLine::default();
        fields(map, |k, m| {
            match k {
                "exit" => out.exit = Some(shaped(m)?),
                "packages" => out.packages = shaped(m)?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// An exit: `{"code": N, "error": "..."}`.
#[derive(Debug, Default)]
pub struct Exit<'de> {
    /// The code as it was sent (`Null` when absent).
    pub code: Value,
    /// Why it failed.
    pub error: Text<'de>,
}

impl<'de> Shape<'de> for Exit<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut out = Exit::default();
        fields(map, |k, m| {
            match k {
                "code" => out.code = m.next_value()?,
                "error" => out.error = shaped(m)?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// One package's entry of the exit's `packages`.
#[derive(Debug, Default)]
pub struct Answer<'de> {
    /// Its exit.
    pub exit: Exit<'de>,
    /// It has `not_planned` (an earlier package failed).
    pub not_planned: bool,
    /// Per mode, in order.
    pub plans: List<ModePlan<'de>>,
    /// The plan's text.
    pub rendered: Text<'de>,
}

impl<'de> Shape<'de> for Answer<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut out = Answer::default();
        fields(map, |k, m| {
            match k {
                "exit" => out.exit = shaped(m)?,
                "not_planned" => {
                    m.next_value::<IgnoredAny>()?;
                    out.not_planned = true;
                }
                "plans" => out.plans = shaped(m)?,
                "rendered" => out.rendered = shaped(m)?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// One mode's plan (`docs/plan.schema.json` `packagePlan`, or a failure).
#[derive(Debug, Default)]
pub struct ModePlan<'de> {
    /// Its mode.
    pub package_mode: Text<'de>,
    /// Present (whatever its value) when the mode was not planned: why.
    pub not_planned: Option<Text<'de>>,
    /// Why the mode failed.
    pub error: Text<'de>,
    /// Its steps.
    pub steps: List<Step<'de>>,
    /// `counts.changes` as sent (`Null` when absent).
    pub changes: Value,
    /// `counts.actions` as sent.
    pub actions: Value,
}

impl<'de> Shape<'de> for ModePlan<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut out = ModePlan::default();
        fields(map, |k, m| {
            match k {
                "package_mode" => out.package_mode = shaped(m)?,
                "not_planned" => out.not_planned = Some(shaped(m)?),
                "error" => out.error = shaped(m)?,
                "steps" => out.steps = shaped(m)?,
                "counts" => {
                    let Counts(changes, actions) = shaped(m)?;
                    (out.changes, out.actions) = (changes, actions);
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// A plan's `counts`: changes, actions.
#[derive(Default)]
struct Counts(Value, Value);

impl<'de> Shape<'de> for Counts {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut out = Counts::default();
        fields(map, |k, m| {
            match k {
                "changes" => out.0 = m.next_value()?,
                "actions" => out.1 = m.next_value()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// One step of a mode's plan.
#[derive(Debug, Default)]
pub struct Step<'de> {
    /// Its name.
    pub name: Text<'de>,
    /// `rhai`, `failed`, ...
    pub kind: Text<'de>,
    /// Why it failed (kind `failed`).
    pub error: Text<'de>,
    /// `result.ok` as sent.
    pub ok: Value,
    /// `result.error`.
    pub result_error: Text<'de>,
    /// `result.drift` as sent.
    pub drift: Value,
}

impl<'de> Shape<'de> for Step<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut out = Step::default();
        fields(map, |k, m| {
            match k {
                "name" => out.name = shaped(m)?,
                "kind" => out.kind = shaped(m)?,
                "error" => out.error = shaped(m)?,
                "result" => {
                    let r: StepResult = shaped(m)?;
                    (out.ok, out.result_error, out.drift) = (r.ok, r.error, r.drift);
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// A step's `result`: `ok`, `error`, `drift` (the rest, its report, skipped).
#[derive(Default)]
struct StepResult<'de> {
    ok: Value,
    error: Text<'de>,
    drift: Value,
}

impl<'de> Shape<'de> for StepResult<'de> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut out = StepResult::default();
        fields(map, |k, m| {
            match k {
                "ok" => out.ok = m.next_value()?,
                "error" => out.error = shaped(m)?,
                "drift" => out.drift = m.next_value()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

/// Per package of an exit event's line, its `plans` as sent (`Null` when absent); for
/// `--output json`.
///
/// # Errors
/// The line is not JSON.
pub fn plans(line: &[u8]) -> Result<Vec<Value>, serde_json::Error> {
    #[derive(Default)]
    struct Top(List<PlansOf>);
    impl<'de> Shape<'de> for Top {
        fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
            let mut out = Top::default();
            fields(map, |k, m| {
                if k != "packages" {
                    return Ok(false);
                }
                out.0 = shaped(m)?;
                Ok(true)
            })?;
            Ok(out)
        }
    }
    #[derive(Default)]
    struct PlansOf(Value);
    impl<'de> Shape<'de> for PlansOf {
        fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
            let mut out = PlansOf::default();
            fields(map, |k, m| {
                if k != "plans" {
                    return Ok(false);
                }
                out.0 = m.next_value()?;
                Ok(true)
            })?;
            Ok(out)
        }
    }
    let top = serde_json::from_slice::<Shaped<Top>>(line)?.0;
    Ok(top.0.0.into_iter().map(|p| p.0).collect())
}
