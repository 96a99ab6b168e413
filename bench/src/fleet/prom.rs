//! Prometheus text exposition, as far as the fleet benchmark reads it:
//! kube-apiserver's `apiserver_request_total` and
//! `apiserver_response_sizes_sum` by verb, resource and subresource, what
//! it sent to watchers (`apiserver_watch_events_total` and
//! `apiserver_watch_events_sizes_sum` by resource), and the operator's
//! `p4fleet_reconciles_total` by kind. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What one API row is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ApiKey {
    pub verb: String,
    pub resource: String,
    /// Empty for the object itself, e.g. `status`.
    pub subresource: String,
}

impl ApiKey {
    /// `PATCH switches/status`, `LIST configmaps`.
    pub fn label(&self) -> String {
        if self.subresource.is_empty() {
            format!("{} {}", self.verb, self.resource)
        } else {
            format!("{} {}/{}", self.verb, self.resource, self.subresource)
        }
    }

    /// A write of a status subresource (server-side apply shows as APPLY).
    pub fn is_status_write(&self) -> bool {
        self.subresource == "status" && matches!(self.verb.as_str(), "PATCH" | "APPLY" | "UPDATE")
    }
}

/// Requests and response bytes per [`ApiKey`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApiCounts {
    pub rows: BTreeMap<ApiKey, ApiRow>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ApiRow {
    pub requests: f64,
    /// Sum of response sizes (kube-apiserver records none for WATCH).
    pub bytes: f64,
}

impl ApiCounts {
    /// The apiserver's request counters from its /metrics text, summed
    /// over the labels not in [`ApiKey`] (code, scope, group, version …).
    pub fn parse(text: &str) -> ApiCounts {
        let mut out = ApiCounts::default();
        for (name, labels, value) in samples(text) {
            let field = match name {
                "apiserver_request_total" => 0,
                "apiserver_response_sizes_sum" => 1,
                _ => continue,
            };
            let get = |k: &str| label(&labels, k).to_string();
            let key = ApiKey {
                verb: get("verb"),
                resource: get("resource"),
                subresource: get("subresource"),
            };
            let row = out.rows.entry(key).or_default();
            if field == 0 {
                row.requests += value;
            } else {
                row.bytes += value;
            }
        }
        out
    }

    /// What happened between `before` and `self` (rows that did not change
    /// are left out).
    pub fn since(&self, before: &ApiCounts) -> ApiCounts {
        let mut rows = BTreeMap::new();
        for (k, after) in &self.rows {
            let b = before.rows.get(k).copied().unwrap_or_default();
            let d = ApiRow {
                requests: after.requests - b.requests,
                bytes: after.bytes - b.bytes,
            };
            if d.requests != 0.0 || d.bytes != 0.0 {
                rows.insert(k.clone(), d);
            }
        }
        ApiCounts { rows }
    }

    pub fn requests(&self) -> f64 {
        total(self.rows.values().map(|r| r.requests))
    }

    pub fn bytes(&self) -> f64 {
        total(self.rows.values().map(|r| r.bytes))
    }

    /// Requests of one verb (any resource).
    pub fn verb(&self, verb: &str) -> f64 {
        total(
            self.rows
                .iter()
                .filter(|(k, _)| k.verb == verb)
                .map(|(_, r)| r.requests),
        )
    }

    /// Writes of `*/status`.
    pub fn status_writes(&self) -> f64 {
        total(
            self.rows
                .iter()
                .filter(|(k, _)| k.is_status_write())
                .map(|(_, r)| r.requests),
        )
    }
}

/// A sum that is +0 when there is nothing to add: `Iterator::sum` of
/// floats starts at -0.0, which prints as "-0".
fn total(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(0.0, |a, b| a + b)
}

/// Events and bytes kube-apiserver sent to watchers, by resource (a
/// WATCH request's own response size is recorded only when it ends, so
/// this is where watch traffic shows while the watches stand).
pub fn watch_sent(text: &str) -> BTreeMap<String, (f64, f64)> {
    let events = sums_by(text, "apiserver_watch_events_total", |l| {
        label(l, "resource").to_string()
    });
    let bytes = sums_by(text, "apiserver_watch_events_sizes_sum", |l| {
        label(l, "resource").to_string()
    });
    let mut out = BTreeMap::new();
    for (k, n) in events {
        out.entry(k).or_insert((0.0, 0.0)).0 = n;
    }
    for (k, b) in bytes {
        out.entry(k).or_insert((0.0, 0.0)).1 = b;
    }
    out
}

/// `p4fleet_reconciles_total` by kind.
pub fn reconciles(text: &str) -> BTreeMap<String, f64> {
    sums_by(text, "p4fleet_reconciles_total", |l| {
        label(l, "kind").to_string()
    })
}

/// `p4fleet_reconcile_triggers_total` by `Kind/trigger` (e.g.
/// `Switch/requeue`, `VirtualSwitch/related:Switch`).
pub fn triggers(text: &str) -> BTreeMap<String, f64> {
    sums_by(text, "p4fleet_reconcile_triggers_total", |l| {
        format!("{}/{}", label(l, "kind"), label(l, "trigger"))
    })
}

/// The samples of `metric` summed by `key` of their labels.
fn sums_by(
    text: &str,
    metric: &str,
    key: impl Fn(&[(String, String)]) -> String,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (name, labels, value) in samples(text) {
        if name == metric {
            *out.entry(key(&labels)).or_insert(0.0) += value;
        }
    }
    out
}

/// The value of label `name` ("" when absent).
fn label<'a>(labels: &'a [(String, String)], name: &str) -> &'a str {
    labels
        .iter()
        .find(|(n, _)| n == name)
        .map_or("", |(_, v)| v.as_str())
}

type Sample<'a> = (&'a str, Vec<(String, String)>, f64);

/// Every sample line: metric name, labels, value (comments and lines that
/// do not parse are skipped).
fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines().filter_map(sample)
}

fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let (labels, rest) = if let Some(body) = rest.strip_prefix('{') {
        parse_labels(body)?
    } else {
        (Vec::new(), rest)
    };
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some((name, labels, value))
}

/// `a="x",b="y\"z"} rest` -> labels and `rest`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let eq = s.find('=')?;
        let name = s[..eq].trim().to_string();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        s = &s[end + 1..];
        labels.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="LIST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="p4fleet.dev",resource="switches",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 3
apiserver_response_sizes_sum{component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 4096
apiserver_response_sizes_count{component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_watch_events_total{group="",resource="configmaps",version="v1"} 12
apiserver_watch_events_sizes_sum{group="",resource="configmaps",version="v1"} 324000
apiserver_watch_events_sizes_count{group="",resource="configmaps",version="v1"} 12
p4fleet_reconciles_total{kind="Switch"} 4
p4fleet_reconciles_total{kind="TableEntrySet"} 2
p4fleet_reconcile_triggers_total{kind="Switch",trigger="requeue"} 3
p4fleet_reconcile_triggers_total{kind="Switch",trigger="related:VirtualSwitch"} 1
weird_metric{a="x\"y,}z"} 1
"#;

    #[test]
    fn requests_and_bytes_are_summed_over_other_labels() {
        let c = ApiCounts::parse(TEXT);
        let list = ApiKey {
            verb: "LIST".into(),
            resource: "configmaps".into(),
            subresource: String::new(),
        };
        assert_eq!(c.rows[&list].requests, 8.0);
        assert_eq!(c.rows[&list].bytes, 4096.0);
        assert_eq!(c.status_writes(), 3.0);
        assert_eq!(c.verb("LIST"), 8.0);
        assert_eq!(c.requests(), 11.0);
        assert_eq!(list.label(), "LIST configmaps");
    }

    #[test]
    fn watch_traffic_is_events_and_bytes_by_resource() {
        let w = watch_sent(TEXT);
        assert_eq!(w.len(), 1);
        assert_eq!(w["configmaps"], (12.0, 324000.0));
        // Not API requests: the request counts are as before.
        assert_eq!(ApiCounts::parse(TEXT).requests(), 11.0);
    }

    #[test]
    fn deltas_drop_rows_that_did_not_move() {
        let before = ApiCounts::parse(TEXT);
        let after = ApiCounts::parse(&TEXT.replace("} 3\n", "} 5\n"));
        let d = after.since(&before);
        assert_eq!(d.rows.len(), 1);
        assert_eq!(d.status_writes(), 2.0);
        assert_eq!(
            d.rows.keys().next().unwrap().label(),
            "APPLY switches/status"
        );
        let idle = before.since(&before);
        let zeros = [idle.requests(), idle.bytes(), idle.verb("GET")];
        assert_eq!(
            format!("{zeros:?} {}", idle.status_writes()),
            "[0.0, 0.0, 0.0] 0"
        );
    }

    #[test]
    fn reconciles_by_kind_and_escaped_labels() {
        let r = reconciles(TEXT);
        assert_eq!(r["Switch"], 4.0);
        assert_eq!(r["TableEntrySet"], 2.0);
        let t = triggers(TEXT);
        assert_eq!(t["Switch/requeue"], 3.0);
        assert_eq!(t["Switch/related:VirtualSwitch"], 1.0);
        assert_eq!(t.len(), 2);
        let (name, labels, v) = sample(r#"weird_metric{a="x\"y,}z"} 1"#).unwrap();
        assert_eq!((name, v), ("weird_metric", 1.0));
        assert_eq!(labels, vec![("a".to_string(), "x\"y,}z".to_string())]);
    }
}
