//! The performance goals glovebox-compare checks, round by round: each a figure of one round's
//! results (glovebox's, "gb", against its reference: the MCP filesystem server, "fs", or the
//! pack's server called directly, "ev") and the bound it must keep; then each goal's figure over
//! all rounds' samples together and in how many rounds it was met.

use serde_json::Value;

use crate::{quantile, samples};

/// A performance goal: a figure of one round and the bound it must keep.
pub struct Goal {
    pub label: &'static str,
    pub figure: fn(round: &Value) -> f64,
    pub bound: Bound,
}

#[derive(Clone, Copy)]
pub enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

impl Bound {
    pub fn kept(self, figure: f64) -> bool {
        match self {
            Bound::AtMost(b) => figure <= b,
            Bound::AtLeast(b) => figure >= b,
        }
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::AtMost(b) => write!(f, "<= {b:.2}"),
            Bound::AtLeast(b) => write!(f, ">= {b:.2}"),
        }
    }
}

/// glovebox's p50 of `measure` over its reference's (`reference`: "fs" or "ev").
fn p50_ratio(round: &Value, reference: &str, measure: &str) -> f64 {
    quantile(&samples(&round["gb"][measure]), 0.5)
        / quantile(&samples(&round[reference][measure]), 0.5)
}

/// The CPU a side spent per call of `key`, all its processes (the client's included).
pub fn cpu_total(side: &Value, key: &str) -> f64 {
    side[key]
        .as_object()
        .map(|parts| parts.values().filter_map(Value::as_f64).sum())
        .unwrap_or(f64::NAN)
}

/// The goals of the gated path against the unguarded servers: each figure glovebox ÷ its
/// reference, but the read p99, which is glovebox's own p99 ÷ its p50.
pub const GOALS: [Goal; 9] = [
    Goal {
        label: "read 4 KiB p50",
        figure: |r| p50_ratio(r, "fs", "read"),
        bound: Bound::AtMost(0.80),
    },
    Goal {
        label: "read after 1.1 s idle p50",
        figure: |r| p50_ratio(r, "fs", "read_spaced"),
        bound: Bound::AtMost(0.90),
    },
    Goal {
        label: "read p99 / p50 (glovebox)",
        figure: |r| {
            let s = samples(&r["gb"]["read"]);
            quantile(&s, 0.99) / quantile(&s, 0.5)
        },
        bound: Bound::AtMost(3.0),
    },
    Goal {
        label: "reads/s, 8 in flight",
        figure: |r| {
            r["gb"]["reads_per_s"].as_f64().unwrap_or(0.0)
                / r["fs"]["reads_per_s"].as_f64().unwrap_or(f64::NAN)
        },
        bound: Bound::AtLeast(1.5),
    },
    Goal {
        label: "CPU per read, all processes",
        figure: |r| cpu_total(&r["gb"], "read_cpu_ms") / cpu_total(&r["fs"], "read_cpu_ms"),
        bound: Bound::AtMost(0.85),
    },
    Goal {
        label: "list 1,000 names p50",
        figure: |r| p50_ratio(r, "fs", "list"),
        bound: Bound::AtMost(0.80),
    },
    Goal {
        label: "find 400 of 20,000 p50",
        figure: |r| p50_ratio(r, "fs", "find"),
        bound: Bound::AtMost(0.05),
    },
    Goal {
        label: "pack echo p50 (vs direct)",
        figure: |r| p50_ratio(r, "ev", "echo"),
        bound: Bound::AtMost(1.3),
    },
    Goal {
        label: "pack echo 4 KiB p50",
        figure: |r| p50_ratio(r, "ev", "echo4k"),
        bound: Bound::AtMost(1.3),
    },
];

/// The timed measures whose samples are pooled across rounds.
const SAMPLED: [&str; 6] = ["read", "read_spaced", "list", "find", "echo", "echo4k"];

/// The samples of every round's measures together, as one round's results read: each list of
/// samples joined, the reads per second the total of reads over the total of time, and the CPU
/// per read the mean of the rounds' (each round reads as often).
pub fn pooled(rounds: &[Value]) -> Value {
    let mut all = serde_json::Map::new();
    for side in ["fs", "gb", "ev"] {
        let mut joined = serde_json::Map::new();
        for measure in SAMPLED {
            let samples: Vec<Value> = rounds
                .iter()
                .flat_map(|r| r[side][measure].as_array().cloned().unwrap_or_default())
                .collect();
            joined.insert(measure.to_owned(), Value::Array(samples));
        }
        let seconds_per_read: f64 = rounds
            .iter()
            .map(|r| 1.0 / r[side]["reads_per_s"].as_f64().unwrap_or(f64::NAN))
            .sum::<f64>()
            / rounds.len() as f64;
        joined.insert("reads_per_s".to_owned(), (1.0 / seconds_per_read).into());
        let cpu: f64 = rounds
            .iter()
            .map(|r| cpu_total(&r[side], "read_cpu_ms"))
            .sum::<f64>()
            / rounds.len() as f64;
        joined.insert("read_cpu_ms".to_owned(), serde_json::json!({ "all": cpu }));
        all.insert(side.to_owned(), Value::Object(joined));
    }
    Value::Object(all)
}

/// Each goal's figure in every round, over all rounds' samples, and how many rounds met it.
pub fn print_goals(rounds: &[Value]) {
    println!();
    println!(
        "{:<30} {:>9} {:>24} {:>9} {:>9}",
        "goal", "bound", "each round", "pooled", "met in"
    );
    let all = pooled(rounds);
    for goal in &GOALS {
        let each: Vec<f64> = rounds.iter().map(|r| (goal.figure)(r)).collect();
        let met = each.iter().filter(|&&x| goal.bound.kept(x)).count();
        let shown: Vec<String> = each.iter().map(|x| format!("{x:.2}")).collect();
        let pooled = (goal.figure)(&all);
        println!(
            "{:<30} {:>9} {:>24} {:>9.2} {:>6} of {}  {}",
            goal.label,
            goal.bound.to_string(),
            shown.join(" "),
            pooled,
            met,
            each.len(),
            if goal.bound.kept(pooled) {
                "met"
            } else {
                "MISSED"
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn side(read: &[f64], reads_per_s: f64, cpu: f64) -> Value {
        json!({"read": read, "read_spaced": [1.0], "list": [1.0], "find": [1.0],
               "echo": [1.0], "echo4k": [1.0], "reads_per_s": reads_per_s,
               "read_cpu_ms": {"client": cpu / 2.0, "server": cpu / 2.0}})
    }

    fn round(fs: Value, gb: Value) -> Value {
        json!({"fs": fs, "gb": gb, "ev": side(&[1.0], 1.0, 1.0)})
    }

    fn goal(label: &str) -> &'static Goal {
        GOALS.iter().find(|g| g.label == label).unwrap()
    }

    #[test]
    fn pooled_rounds_join_their_samples_and_rate_the_reads_over_their_total_time() {
        let all = pooled(&[
            round(side(&[1.0], 1.0, 1.0), side(&[1.0, 2.0], 100.0, 2.0)),
            round(side(&[1.0], 1.0, 1.0), side(&[3.0], 300.0, 4.0)),
        ]);
        assert_eq!(samples(&all["gb"]["read"]), vec![1.0, 2.0, 3.0]);
        // The same reads at 100/s and at 300/s: 200 s per 30,000, so 150/s.
        assert!((all["gb"]["reads_per_s"].as_f64().unwrap() - 150.0).abs() < 1e-9);
        assert!((cpu_total(&all["gb"], "read_cpu_ms") - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_goal_is_kept_at_its_bound_and_missed_past_it() {
        let slower = round(
            side(&[1.0, 1.0, 1.0], 100.0, 1.0),
            side(&[1.0, 1.1, 1.2], 149.0, 0.9),
        );
        let read = goal("read 4 KiB p50");
        assert!(!read.bound.kept((read.figure)(&slower)));
        assert!(read.bound.kept(0.80));
        let rate = goal("reads/s, 8 in flight");
        assert!(!rate.bound.kept((rate.figure)(&slower)));
        let faster = round(side(&[1.0], 100.0, 1.0), side(&[0.5], 150.0, 0.85));
        assert!(rate.bound.kept((rate.figure)(&faster)));
        assert!(read.bound.kept((read.figure)(&faster)));
        // CPU per read counts every process of a side: 0.9 of 1.0 is past 0.85.
        let cpu = goal("CPU per read, all processes");
        assert!(!cpu.bound.kept((cpu.figure)(&slower)));
        assert!(cpu.bound.kept((cpu.figure)(&faster)));
    }
}
