//! The Prometheus text exposition format (version 0.0.4) of the metrics a manual reader
//! collected: sums become counters (`_total`) or gauges, histograms become cumulative
//! `_bucket{le=…}`, `_sum` and `_count`. Pure: data in, text out.

use std::fmt::Write as _;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{
    AggregatedMetrics, HistogramDataPoint, Metric, MetricData, ResourceMetrics,
};

/// Renders every metric of `rm`.
pub fn render(rm: &ResourceMetrics) -> String {
    let mut out = String::new();
    for scope in rm.scope_metrics() {
        for metric in scope.metrics() {
            match metric.data() {
                AggregatedMetrics::F64(data) => write_metric(&mut out, metric, data, |v| *v),
                AggregatedMetrics::U64(data) => write_metric(&mut out, metric, data, |v| *v as f64),
                AggregatedMetrics::I64(data) => write_metric(&mut out, metric, data, |v| *v as f64),
            }
        }
    }
    out
}

fn write_metric<T: Copy>(
    out: &mut String,
    metric: &Metric,
    data: &MetricData<T>,
    as_f64: impl Fn(&T) -> f64,
) {
    let base = name(metric.name());
    match data {
        MetricData::Sum(sum) => {
            let (name, kind) = if sum.is_monotonic() {
                (format!("{base}_total"), "counter")
            } else {
                (base, "gauge")
            };
            header(out, &name, metric.description(), kind);
            for p in sum.data_points() {
                sample(
                    out,
                    &name,
                    &labels(p.attributes(), None),
                    as_f64(&p.value()),
                );
            }
        }
        MetricData::Gauge(gauge) => {
            header(out, &base, metric.description(), "gauge");
            for p in gauge.data_points() {
                sample(
                    out,
                    &base,
                    &labels(p.attributes(), None),
                    as_f64(&p.value()),
                );
            }
        }
        MetricData::Histogram(histogram) => {
            header(out, &base, metric.description(), "histogram");
            for p in histogram.data_points() {
                write_histogram(out, &base, p, &as_f64);
            }
        }
        // Not used by glovebox's instruments.
        MetricData::ExponentialHistogram(_) => {}
    }
}

fn write_histogram<T: Copy>(
    out: &mut String,
    base: &str,
    p: &HistogramDataPoint<T>,
    as_f64: &impl Fn(&T) -> f64,
) {
    let bucket = format!("{base}_bucket");
    let mut cumulative = 0u64;
    for (bound, count) in p.bounds().zip(p.bucket_counts()) {
        cumulative += count;
        let le = format_value(bound);
        sample(
            out,
            &bucket,
            &labels(p.attributes(), Some(&le)),
            cumulative as f64,
        );
    }
    sample(
        out,
        &bucket,
        &labels(p.attributes(), Some("+Inf")),
        p.count() as f64,
    );
    let plain = labels(p.attributes(), None);
    sample(out, &format!("{base}_sum"), &plain, as_f64(&p.sum()));
    sample(out, &format!("{base}_count"), &plain, p.count() as f64);
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "{name}{labels} {}", format_value(value));
}

/// `{a="1",b="2"}` sorted by name, with `le` last; empty without labels.
fn labels<'a>(attributes: impl Iterator<Item = &'a KeyValue>, le: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> = attributes
        .map(|kv| (name(kv.key.as_str()), escape(&kv.value.as_str())))
        .collect();
    pairs.sort();
    if let Some(le) = le {
        pairs.push(("le".to_owned(), le.to_owned()));
    }
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{{{}}}", inner.join(","))
}

/// A metric or label name with anything outside `[a-zA-Z0-9_]` as `_`.
fn name(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn format_value(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.is_nan() {
        "NaN".to_owned()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_sorted_escaped_and_named_safely() {
        let kvs = [
            KeyValue::new("tool", "a\"b\\c\nd"),
            KeyValue::new("a.b", "x"),
        ];
        assert_eq!(
            labels(kvs.iter(), Some("0.5")),
            r#"{a_b="x",tool="a\"b\\c\nd",le="0.5"}"#
        );
        assert_eq!(labels([].iter(), None), "");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(2.0), "2");
        assert_eq!(format_value(0.25), "0.25");
    }
}
