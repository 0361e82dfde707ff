//! A Kubernetes label selector (`spec.nodeSelectors`), parsed and matched as the operator's
//! `metav1.LabelSelectorAsSelector`: an empty one selects every node.

use std::collections::BTreeMap;

use serde_json::Value;

/// One requirement of a label selector (`matchExpressions` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `In`: the label exists and its value is one of these.
    In(String, Vec<String>),
    /// `NotIn`: the label is absent or its value is none of these.
    NotIn(String, Vec<String>),
    /// `Exists`.
    Exists(String),
    /// `DoesNotExist`.
    DoesNotExist(String),
}

/// A Kubernetes label selector: every `matchLabels` pair and every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// `matchLabels`.
    pub labels: BTreeMap<String, String>,
    /// `matchExpressions`.
    pub requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector of `spec.nodeSelectors` (`None` or `{}`: every node), checked as
    /// `LabelSelectorAsSelector` checks it (`In`/`NotIn` need values, `Exists`/
    /// `DoesNotExist` take none, no other operator).
    ///
    /// # Errors
    /// What is wrong, with the field.
    pub fn parse(v: Option<&Value>) -> Result<Selector, String> {
        let mut s = Selector::default();
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(s);
        };
        let obj = v.as_object().ok_or("spec.nodeSelectors: not a mapping")?;
        for k in obj.keys() {
            if k != "matchLabels" && k != "matchExpressions" {
                return Err(format!("spec.nodeSelectors: unknown field {k:?}"));
            }
        }
        if let Some(ml) = obj.get("matchLabels").filter(|v| !v.is_null()) {
            let ml = ml
                .as_object()
                .ok_or("spec.nodeSelectors.matchLabels: not a mapping")?;
            for (k, v) in ml {
                let v = v
                    .as_str()
                    .ok_or_else(|| format!("spec.nodeSelectors.matchLabels.{k}: not a string"))?;
                s.labels.insert(k.clone(), v.to_string());
            }
        }
        if let Some(me) = obj.get("matchExpressions").filter(|v| !v.is_null()) {
            let me = me
                .as_array()
                .ok_or("spec.nodeSelectors.matchExpressions: not a list")?;
            for (i, e) in me.iter().enumerate() {
                let at = format!("spec.nodeSelectors.matchExpressions[{i}]");
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{at}.key: missing"))?
                    .to_string();
                let values: Vec<String> = match e.get("values") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|x| x.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("{at}.values: not a list of strings"))?,
                    Some(_) => return Err(format!("{at}.values: not a list")),
                };
                let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
                let r = match op {
                    "In" | "NotIn" if values.is_empty() => {
                        return Err(format!("{at}: operator {op} needs values"));
                    }
                    "Exists" | "DoesNotExist" if !values.is_empty() => {
                        return Err(format!("{at}: operator {op} takes no values"));
                    }
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::DoesNotExist(key),
                    _ => {
                        return Err(format!(
                            "{at}.operator: {op:?} (expected In, NotIn, Exists or DoesNotExist)"
                        ));
                    }
                };
                s.requirements.push(r);
            }
        }
        Ok(s)
    }

    /// True when `labels` satisfy every pair and requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.requirements.iter().all(|r| match r {
                Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Requirement::Exists(k) => labels.contains_key(k),
                Requirement::DoesNotExist(k) => !labels.contains_key(k),
            })
    }
}
