//! The audit shipped to a real PostgreSQL (a private cluster per test, see
//! `glovebox_e2e::postgres`): rows of real calls arrive whole; a shipper killed mid-run resumes
//! with no duplicates and no gaps; `audit verify --postgres` re-computes the chain and names a
//! tampered row; the README's queries give the same rows on both back ends; a dead database
//! costs calls nothing; the gate's `audit.ship` ships continuously.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use glovebox_e2e::postgres::Postgres;
use glovebox_e2e::{Glovebox, Options, WAIT, expect_error, expect_ok, glovebox_bin};
use serde_json::json;
use sqlx::{Column, Row, TypeInfo, ValueRef};

/// Rows of real calls of every kind the README's queries look at: allowed reads, a refused read,
/// an approved and a denied write, a command.
async fn make_calls(g: &Glovebox) {
    std::fs::write(g.workdir.join("a.txt"), "hello\n").unwrap();
    let mut agent = g.connect("agent").await;
    let mut approver = g.connect("approver").await;
    for i in 0..3 {
        expect_ok(
            &agent
                .invoke(&format!("r{i}"), "file_read", json!({"path": "a.txt"}))
                .await,
        );
    }
    expect_error(
        &agent
            .invoke("outside", "file_read", json!({"path": "/etc/shadow"}))
            .await,
        "denied",
    );
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "w1",
            "file_write",
            json!({"path": "b.txt", "content": "x"}),
            "once",
        )
        .await;
    expect_ok(&r);
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "w2",
            "file_write",
            json!({"path": "c.txt", "content": "y"}),
            "deny",
        )
        .await;
    expect_error(&r, "denied");
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "x1",
            "exec_run",
            json!({"command": "echo hi"}),
            "once",
        )
        .await;
    let job = expect_ok(&r)["job_id"].as_str().unwrap().to_owned();
    agent.wait_job(&job).await;
}

fn ship(g: &Glovebox, url: &str, machine: &str) -> (i32, String, String) {
    g.run_cli(&["audit", "ship", "--postgres", url, "--machine", machine])
}

fn verify(g: &Glovebox, url: &str, machine: &str) -> (i32, String, String) {
    g.run_cli(&["audit", "verify", "--postgres", url, "--machine", machine])
}

/// `(id, hash)` of every local row, in order.
async fn local_rows(g: &Glovebox) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT id, hash FROM events ORDER BY id")
        .fetch_all(&g.audit_pool().await)
        .await
        .unwrap()
}

async fn shipped_rows(pg: &sqlx::PgPool, machine: &str) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT id, hash FROM events WHERE machine_id = $1 ORDER BY id")
        .bind(machine)
        .fetch_all(pg)
        .await
        .unwrap()
}

/// The SQL statements of the README's "Auditing with SQL" block.
fn readme_queries() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = &readme[readme.find("## Auditing with SQL").unwrap()..];
    let block = &section[section.find("```sql\n").unwrap() + 7..];
    let block = &block[..block.find("```").unwrap()];
    let text: String = block
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    text.split(';')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(str::to_owned)
        .collect()
}

type Rows = Vec<Vec<Option<String>>>;

/// Each row's values as text (SQLite stores integers and text here).
async fn sqlite_rows(g: &Glovebox, sql: &str) -> Rows {
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(&g.audit_pool().await)
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (0..r.columns().len())
                .map(|i| {
                    let raw = r.try_get_raw(i).unwrap();
                    if raw.is_null() {
                        return None;
                    }
                    Some(match raw.type_info().name() {
                        "INTEGER" => r.get::<i64, _>(i).to_string(),
                        _ => r.get::<String, _>(i),
                    })
                })
                .collect()
        })
        .collect()
}

/// Each row's values as PostgreSQL's text (the simple query protocol answers in text).
async fn pg_rows(pg: &sqlx::PgPool, sql: &str) -> (Vec<String>, Rows) {
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(pg)
        .await
        .unwrap();
    let columns = rows
        .first()
        .map(|r| r.columns().iter().map(|c| c.name().to_owned()).collect())
        .unwrap_or_default();
    let rows = rows
        .iter()
        .map(|r| {
            (0..r.columns().len())
                .map(|i| {
                    r.try_get_unchecked::<Option<&str>, _>(i)
                        .unwrap()
                        .map(str::to_owned)
                })
                .collect()
        })
        .collect();
    (columns, rows)
}

#[tokio::test]
async fn calls_are_shipped_whole_verified_centrally_and_queried_alike() {
    let pg = Postgres::start();
    let url = pg.url("postgres");
    let g = Glovebox::start();
    make_calls(&g).await;
    let (code, out, err) = ship(&g, &url, "m1");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("audit shipped: "), "{out}");
    let pool = pg.pool("postgres").await;
    let local = local_rows(&g).await;
    assert_eq!(shipped_rows(&pool, "m1").await, local);
    // Shipping again sends only the last row (compared) and nothing new.
    let (code, out, err) = ship(&g, &url, "m1");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("audit shipped: 0 new rows"), "{out}");

    let (code, out, err) = verify(&g, &url, "m1");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "audit chain verified with the audit key: {} rows of machine m1",
            local.len()
        )),
        "{out}"
    );

    // The README's queries give the same rows on both (none uses SQLite-only functions).
    let queries = readme_queries();
    assert!(queries.len() >= 6, "{queries:?}");
    for q in &queries {
        let mut here = sqlite_rows(&g, q).await;
        let (_, mut there) = pg_rows(&pool, q).await;
        here.sort();
        there.sort();
        assert_eq!(here, there, "{q}");
    }
    for view in ["tool_calls", "denials", "approvals", "commands"] {
        let (_, rows) = pg_rows(&pool, &format!("SELECT * FROM {view}")).await;
        assert!(!rows.is_empty(), "{view} is empty in PostgreSQL");
    }
    // Auditors see the machine beside its calls.
    let (_, machines) = pg_rows(&pool, "SELECT id, last_row_id FROM machine").await;
    assert_eq!(
        machines,
        vec![vec![
            Some("m1".to_owned()),
            Some(local.last().unwrap().0.to_string())
        ]]
    );

    // The fleet copy refuses changes like the local one...
    let e = sqlx::query("UPDATE events SET verdict = 'allow' WHERE id = 3")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("append-only"), "{e}");
    // ...and one changed by its owner anyway is named by verify.
    sqlx::raw_sql(
        "ALTER TABLE events DISABLE TRIGGER events_refuse_update; \
         UPDATE events SET subject = 'read /w/nothing-to-see' WHERE machine_id = 'm1' AND id = 4; \
         ALTER TABLE events ENABLE TRIGGER events_refuse_update",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (code, out, _) = verify(&g, &url, "m1");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("BROKEN") && out.contains("row 4: its content was changed"),
        "{out}"
    );
}

/// The machine's signed head travels with its rows: a tail cut in PostgreSQL, with
/// `machine.last_row_id` cut to match, is still caught centrally.
#[tokio::test]
async fn a_tail_cut_in_postgresql_is_caught_by_the_shipped_head() {
    let pg = Postgres::start();
    let url = pg.url("postgres");
    let mut g = Glovebox::start();
    make_calls(&g).await;
    // A stopped gate has written the head of every row it wrote.
    g.stop();
    let (code, out, err) = ship(&g, &url, "m3");
    assert_eq!(code, 0, "{out}{err}");
    let pool = pg.pool("postgres").await;
    let head: String = sqlx::query_scalar("SELECT head FROM machine WHERE id = 'm3'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        head,
        std::fs::read_to_string(g.state.join("audit.head")).unwrap(),
        "the shipped head is the machine's head file"
    );
    let (code, out, err) = verify(&g, &url, "m3");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("up to its shipped signed head"), "{out}");

    // Someone with write access to the fleet database removes the last rows and the
    // machine's count of them.
    sqlx::raw_sql(
        "ALTER TABLE events DISABLE TRIGGER events_refuse_delete; \
         DELETE FROM events WHERE machine_id = 'm3' \
           AND id > (SELECT MAX(id) - 3 FROM events WHERE machine_id = 'm3'); \
         ALTER TABLE events ENABLE TRIGGER events_refuse_delete; \
         UPDATE machine SET last_row_id = (SELECT MAX(id) FROM events WHERE machine_id = 'm3') \
           WHERE id = 'm3'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (code, out, _) = verify(&g, &url, "m3");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("BROKEN") && out.contains("the tail is missing"),
        "{out}"
    );
    // A forged head (not signed with the machine's key) is named too.
    sqlx::query(
        "UPDATE machine SET head = replace(head, 'signature ', 'signature 0') WHERE id = 'm3'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (code, out, _) = verify(&g, &url, "m3");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("signature does not verify"), "{out}");
}

/// A fleet verifier with no audit key: the machine's public key, registered with its first rows
/// or pinned from its `audit.pub`, proves the shipped rows; the database's owner can neither
/// change a covered row nor swap the registered key unnoticed by a pinned verify.
#[tokio::test]
async fn a_verifier_with_only_the_public_key_proves_the_shipped_rows() {
    let pg = Postgres::start();
    let url = pg.url("postgres");
    let mut g = Glovebox::start();
    make_calls(&g).await;
    g.stop();
    let (code, out, err) = ship(&g, &url, "m5");
    assert_eq!(code, 0, "{out}{err}");
    let pool = pg.pool("postgres").await;
    let public = std::fs::read_to_string(g.state.join("audit.pub")).unwrap();
    let registered: String = sqlx::query_scalar("SELECT public_key FROM machine WHERE id = 'm5'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(registered, public.trim());
    // A central verifier: its own empty state, no audit key.
    let central = tempfile::tempdir().unwrap();
    let state = central.path().to_str().unwrap();
    let verify_central = |pinned: bool| {
        let mut args = vec![
            "audit",
            "verify",
            "--state-dir",
            state,
            "--postgres",
            &url,
            "--machine",
            "m5",
        ];
        if pinned {
            args.extend(["--public-key", public.trim()]);
        }
        glovebox_e2e::run_glovebox(&args)
    };
    let (code, out, err) = verify_central(false);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("signed checkpoints verified for machine m5"),
        "{out}"
    );
    assert!(out.contains("registered in the database"), "{out}");
    let (code, out, err) = verify_central(true);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("registered in the database"), "{out}");
    // The owner rewrites an approved row.
    sqlx::raw_sql(
        "ALTER TABLE events DISABLE TRIGGER events_refuse_update;          UPDATE events SET subject = 'read /w/nothing-to-see' WHERE machine_id = 'm5' AND id = 4;          ALTER TABLE events ENABLE TRIGGER events_refuse_update",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (code, out, _) = verify_central(true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("does not match the rows before it"), "{out}");
    // ...and swaps in a key of their own: the pinned verify refuses every checkpoint.
    let theirs = "22".repeat(32);
    sqlx::query("UPDATE machine SET public_key = $1 WHERE id = 'm5'")
        .bind(&theirs)
        .execute(&pool)
        .await
        .unwrap();
    let (code, out, _) = verify_central(true);
    assert_eq!(code, 1, "{out}");
    // and the machine refuses to ship under a key that is not its own
    let (code, out, err) = ship(&g, &url, "m5");
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("another public checkpoint key"), "{err}");
}

#[tokio::test]
async fn a_shipper_killed_mid_run_resumes_with_no_duplicates_and_no_gaps() {
    let pg = Postgres::start();
    let url = pg.url("postgres");
    let g = Glovebox::start();
    g.append_rows(20_000).await;
    let mut child = Command::new(glovebox_bin())
        .args([
            "audit",
            "ship",
            "--postgres",
            &url,
            "--machine",
            "m2",
            "--batch",
            "100",
        ])
        .arg("--state-dir")
        .arg(&g.state)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..20 {
        let line = lines.next().unwrap().unwrap();
        assert!(line.starts_with("shipped up to row"), "{line}");
    }
    child.kill().unwrap(); // SIGKILL, while it works through the rest
    child.wait().unwrap();
    let pool = pg.pool("postgres").await;
    let partial = shipped_rows(&pool, "m2").await.len();
    let local = local_rows(&g).await;
    assert!(partial >= 2_000 && partial < local.len(), "{partial}");

    let (code, out, err) = ship(&g, &url, "m2");
    assert_eq!(code, 0, "{out}{err}");
    let shipped = shipped_rows(&pool, "m2").await;
    assert_eq!(shipped.len(), local.len());
    assert_eq!(shipped, local, "every row once, in order, as stored");
    let (code, out, _) = verify(&g, &url, "m2");
    assert_eq!(code, 0, "{out}");
}

#[tokio::test]
async fn a_dead_database_fails_the_shipper_clearly_and_costs_calls_nothing() {
    let dead = tempfile::tempdir().unwrap();
    let url = format!(
        "postgres://fleet:hunter2@localhost/fleet?host={}",
        dead.path().display()
    );
    let g = Glovebox::start_with(Options {
        audit: vec![format!("ship: {{postgres: '{url}', interval_ms: 100}}")],
        ..Default::default()
    });
    std::fs::write(g.workdir.join("a.txt"), "hello\n").unwrap();
    let mut agent = g.connect("agent").await;
    let started = Instant::now();
    for i in 0..20 {
        expect_ok(
            &agent
                .invoke(&format!("r{i}"), "file_read", json!({"path": "a.txt"}))
                .await,
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let (code, out, err) = ship(&g, &url, "m3");
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains("connect to PostgreSQL at postgres://fleet:***@localhost/fleet"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    // The gate's shipper keeps failing and retrying, and never says the password.
    let deadline = Instant::now() + WAIT;
    while !g.stderr().contains("audit shipping: cannot start") {
        assert!(Instant::now() < deadline, "{}", g.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!g.stderr().contains("hunter2") && !err.contains("hunter2"));
    expect_ok(
        &agent
            .invoke("after", "file_read", json!({"path": "a.txt"}))
            .await,
    );
}

#[tokio::test]
async fn the_gate_ships_continuously_what_calls_write_after_it_starts() {
    let pg = Postgres::start();
    let url = pg.url("postgres");
    let g = Glovebox::start_with(Options {
        audit: vec![format!(
            "ship: {{postgres: '{url}', machine: gate-m, interval_ms: 100, batch: 50}}"
        )],
        ..Default::default()
    });
    std::fs::write(g.workdir.join("a.txt"), "hello\n").unwrap();
    let mut agent = g.connect("agent").await;
    expect_ok(
        &agent
            .invoke("late", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    g.append_rows(300).await;
    let pool = pg.pool("postgres").await;
    let deadline = Instant::now() + WAIT;
    loop {
        let local = local_rows(&g).await;
        // Empty until the schema is there.
        let shipped = sqlx::query_as::<_, (i64, String)>(
            "SELECT id, hash FROM events WHERE machine_id = 'gate-m' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
        let has_call: bool = !shipped.is_empty()
            && sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM tool_calls WHERE machine_id = 'gate-m' AND outcome = 'ok' AND tool = 'file_read' AND call_id NOT LIKE 'bulk-%')",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
        if has_call && shipped.len() >= local.len() - 1 && shipped[..] == local[..shipped.len()] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "shipped {} of {}: {}",
            shipped.len(),
            local.len(),
            g.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, out, _) = verify(&g, &url, "gate-m");
    assert_eq!(code, 0, "{out}");
}
