//! Listings and searches hide what the account may not read: not only the secret floor but the
//! account's own read denies, carried to the executor in the ticket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::{Glovebox, expect_ok};
use serde_json::{Value, json};

fn names(entries: &Value) -> Vec<String> {
    let mut v: Vec<String> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["name"]
                .as_str()
                .or_else(|| e["path"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn denied_entries_are_hidden_from_list_grep_and_find() {
    let g = Glovebox::start();
    std::fs::create_dir_all(g.workdir.join("private")).unwrap();
    std::fs::write(g.workdir.join("private/plan.txt"), "needle in private\n").unwrap();
    std::fs::write(g.workdir.join("notes.txt"), "needle in notes\n").unwrap();
    std::fs::write(g.workdir.join("salary.secret"), "needle in salary\n").unwrap();
    std::fs::write(
        g.permissions_file(),
        "paths:\n  read:\n    allow: ['./**']\n    deny: ['./private/**', './*.secret']\n",
    )
    .unwrap();
    let mut agent = g.connect("agent").await;
    // wait for the gate to pick up the edit
    for i in 0.. {
        let r = agent
            .invoke(
                &format!("probe{i}"),
                "file_read",
                json!({"path": "salary.secret"}),
            )
            .await;
        if r["error"]["code"] == "denied" {
            break;
        }
        assert!(i < 200, "the gate never applied the read denies: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }

    let listed = expect_ok(&agent.invoke("l", "file_list", json!({})).await);
    assert_eq!(names(&listed["entries"]), ["notes.txt"], "{listed}");
    // Names and types only: listed before the verdict, cut by the ticket's denies after it.
    let listed = expect_ok(
        &agent
            .invoke("n", "file_list", json!({"details": false}))
            .await,
    );
    assert_eq!(names(&listed["entries"]), ["notes.txt"], "{listed}");
    assert_eq!(listed["hidden"], 2, "{listed}");

    let found = expect_ok(
        &agent
            .invoke("f", "file_find", json!({"path": ".", "names": ["*"]}))
            .await,
    );
    let text = found.to_string();
    assert!(text.contains("notes.txt"), "{text}");
    assert!(
        !text.contains("plan.txt") && !text.contains("salary") && !text.contains("private"),
        "{text}"
    );

    let grep = expect_ok(
        &agent
            .invoke(
                "g",
                "file_grep",
                json!({"path": ".", "pattern": "needle", "literal": true}),
            )
            .await,
    );
    let text = grep.to_string();
    assert!(text.contains("needle in notes"), "{text}");
    assert!(
        !text.contains("needle in private") && !text.contains("needle in salary"),
        "{text}"
    );
}
