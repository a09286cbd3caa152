//! Benchmark of the pure decision: a policy with 1,000 rules (globs of every kind, exact
//! "always" rules, denies and command regexes), median time per decision over a mix of subjects.
//!
//! Run: `cargo bench -p glovebox-policy --bench decide`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use glovebox_policy::{Domain, Inputs, Policy, RawPolicy, Source, exact_path_rule};

fn policy() -> Policy {
    let mut yaml = String::from("paths:\n  read:\n    allow:\n");
    for i in 0..300 {
        yaml.push_str(&format!("      - './proj{i}/**'\n"));
    }
    yaml.push_str("    deny:\n");
    for i in 0..100 {
        yaml.push_str(&format!("      - '/w/proj{i}/**/*.secret{i}'\n"));
    }
    yaml.push_str("  write:\n    allow:\n");
    for i in 0..400 {
        let p = exact_path_rule(&format!("/w/proj{i}/file[{i}].txt"));
        yaml.push_str(&format!("      - \"{}\"\n", p.replace('\\', "\\\\")));
    }
    yaml.push_str("    deny:\n");
    for i in 0..100 {
        yaml.push_str(&format!("      - '/w/proj{i}/build/*'\n"));
    }
    yaml.push_str("commands:\n  allow:\n");
    for i in 0..100 {
        yaml.push_str(&format!("    - 'git (status|log) -n {i}'\n"));
    }
    let raw = RawPolicy::parse(&yaml).unwrap();
    let n = raw.all_rules().count();
    assert_eq!(n, 1000);
    Policy::compile_layers(&Inputs {
        workdir: "/w".into(),
        protected: vec!["/state".into()],
        roots: Vec::new(),
        managed: Vec::new(),
        account: Source::new("bench", raw, 0),
        project: None,
    })
    .unwrap()
}

fn main() {
    let p = policy();
    let subjects: Vec<(Domain, String)> = (0..1000)
        .map(|i| match i % 5 {
            0 => (Domain::Read, format!("/w/proj{}/src/main.rs", i % 300)),
            1 => (
                Domain::Read,
                format!("/w/proj{}/a/b.secret{}", i % 100, i % 100),
            ),
            2 => (
                Domain::Write,
                format!("/w/proj{}/file[{}].txt", i % 400, i % 400),
            ),
            3 => (Domain::Write, format!("/w/other/{i}.txt")),
            _ => (Domain::Read, format!("/home/u/.ssh/id_{i}")),
        })
        .collect();
    let now = Some(1_800_000_000);
    for (d, s) in &subjects {
        black_box(p.decide_at(*d, s, now));
    }
    let mut samples = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        for (d, s) in &subjects {
            black_box(p.decide_at(*d, black_box(s), now));
        }
        samples.push(t.elapsed().as_secs_f64() * 1e9 / subjects.len() as f64);
    }
    let mut cmd_samples = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        for i in 0..1000 {
            let c = if i % 2 == 0 {
                "git status -n 42"
            } else {
                "git status -n 42; rm -rf ~"
            };
            black_box(p.decide_command_at(black_box(c), "/w", now));
        }
        cmd_samples.push(t.elapsed().as_secs_f64() * 1e9 / 1000.0);
    }
    samples.sort_by(f64::total_cmp);
    cmd_samples.sort_by(f64::total_cmp);
    println!(
        "policy with 1000 rules: path decision median {:.0} ns (min {:.0}, max {:.0}); command decision median {:.0} ns",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
        cmd_samples[cmd_samples.len() / 2]
    );
}
