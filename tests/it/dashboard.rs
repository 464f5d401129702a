//! The operators' files of `docs/`: the Grafana dashboard (`docs/grafana-dashboard.json`) is one
//! Grafana imports, and every series it and `docs/operations.md` query is one that idem
//! (`idem-runtime/src/telemetry.rs`) or the payments example (`examples/payments/ops.rs`)
//! records. `payments::metrics_are_served` checks that the example serves them.

use std::collections::BTreeSet;

use serde_json::Value;

/// A file of the repository.
fn read(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the series recorded: the string constants of idem's telemetry and of the
/// example's `ops.rs` that name a metric, the histograms (`_seconds`) with their `_bucket`,
/// `_sum` and `_count`.
fn recorded() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in ["idem-runtime/src/telemetry.rs", "examples/payments/ops.rs"] {
        for line in read(file).lines() {
            let Some((_, value)) = line.split_once(": &str = \"") else {
                continue;
            };
            let name = value.trim_end_matches("\";");
            if !(name.starts_with("idem_") || name.starts_with("payments_")) {
                continue;
            }
            names.insert(name.to_owned());
            if name.ends_with("_seconds") {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    assert!(names.contains("idem_requests_total"), "{names:?}");
    assert!(names.contains("payments_http_requests_total"), "{names:?}");
    names
}

/// The metric names a text (a PromQL expression, a document) names: its words that begin with
/// `idem_` or `payments_`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("idem_") || w.starts_with("payments_"))
        .map(str::to_owned)
        .collect()
}

fn int(v: &Value, what: &str) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("{what}: {v}"))
}

fn text<'a>(v: &'a Value, what: &str) -> &'a str {
    let s = v.as_str().unwrap_or_else(|| panic!("{what}: {v}"));
    assert!(!s.trim().is_empty(), "{what} is empty");
    s
}

/// The dashboard's fields Grafana needs, and the series of its queries.
#[test]
fn grafana_dashboard_queries_recorded_series() {
    let dashboard: Value = serde_json::from_str(&read("docs/grafana-dashboard.json")).unwrap();
    text(&dashboard["title"], "title");
    text(&dashboard["uid"], "uid");
    int(&dashboard["schemaVersion"], "schemaVersion");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    let recorded = recorded();
    let (mut ids, mut queried) = (BTreeSet::new(), BTreeSet::new());
    for panel in panels {
        let title = text(&panel["title"], "a panel's title");
        text(&panel["type"], title);
        assert!(ids.insert(int(&panel["id"], title)), "{title}: id repeated");
        let grid = &panel["gridPos"];
        let (x, w) = (int(&grid["x"], title), int(&grid["w"], title));
        assert!(
            int(&grid["h"], title) > 0 && int(&grid["y"], title) >= 0,
            "{title}"
        );
        assert!(x >= 0 && w > 0 && x + w <= 24, "{title}: 24 columns");
        let targets = panel["targets"].as_array().expect(title);
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            text(&target["refId"], title);
            let names = metric_names(text(&target["expr"], title));
            assert!(!names.is_empty(), "{title}: a query of no series");
            queried.extend(names);
        }
    }
    let unknown: Vec<_> = queried.difference(&recorded).collect();
    assert!(unknown.is_empty(), "queried, never recorded: {unknown:?}");
    // Each of the series that matter has a panel.
    for name in [
        "idem_requests_total",
        "idem_settlements_total",
        "idem_purged_total",
        "idem_store_seconds_bucket",
        "payments_http_requests_total",
    ] {
        assert!(queried.contains(name), "no panel of {name}");
    }
}

/// The series `docs/operations.md` names, in its table, its queries and its alert rules.
#[test]
fn operations_doc_names_recorded_series() {
    let (named, recorded) = (metric_names(&read("docs/operations.md")), recorded());
    let unknown: Vec<_> = named.difference(&recorded).collect();
    assert!(
        unknown.is_empty(),
        "documented, never recorded: {unknown:?}"
    );
}
