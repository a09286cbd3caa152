//! `glovebox audit query`, `tail` and `verify` on a real state directory whose audit the
//! gate's own store wrote: reads work, anything that would write is refused and changes nothing,
//! the bounds hold, and stored escape sequences never reach the terminal.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use glovebox_gate::audit::{AuditFiles, AuditStore, chain::AuditKey};
use glovebox_proto::v1::AuditEvent;

use super::glovebox;

fn files(state: &Path) -> AuditFiles {
    AuditFiles {
        db: state.join("audit.db"),
        head: state.join("audit.head"),
        key: AuditKey::from_bytes(&[7u8; 32]).unwrap(),
    }
}

fn event(call: &str, subject: &str) -> AuditEvent {
    AuditEvent {
        call_id: call.into(),
        account: "alice".into(),
        source: "gate".into(),
        kind: "decide".into(),
        tool: "file_read".into(),
        subject: subject.into(),
        verdict: "allow".into(),
        ..Default::default()
    }
}

/// Writes rows through the gate's store (its start checkpoint first), then closes it.
fn write_rows(state: &Path, rows: &[(&str, &str)]) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = AuditStore::open(&files(state)).await.unwrap();
        for (call, subject) in rows {
            assert!(store.append(event(call, subject)).await);
        }
    });
}

/// Waits until nothing has the audit open any more. The store's connections close on threads of
/// their own, and the last one to close moves the write-ahead log into audit.db and deletes it:
/// a test comparing the file must compare the one glovebox left, not one still being written.
fn settled(state: &Path) {
    let wal = state.join("audit.db-wal");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while wal.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the audit store did not close"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn state_with_rows() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_rows(
        dir.path(),
        &[
            ("c1", "read /w/a.txt"),
            ("c2", "read /w/\x1b]0;owned\x07\x1b[2J.txt"),
            ("c3", "read /w/evil\u{202e}txt.exe"),
        ],
    );
    settled(dir.path());
    dir
}

fn query(state: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["audit", "query", "--state-dir", state.to_str().unwrap()];
    all.extend_from_slice(args);
    glovebox(&all)
}

fn digest(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn a_query_prints_an_aligned_table_with_stored_escapes_defused() {
    let dir = state_with_rows();
    let (code, out, err) = query(
        dir.path(),
        &["SELECT call_id, subject FROM tool_calls ORDER BY call_id"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains('\x1b') && !out.contains('\u{202e}'),
        "{out:?}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "call_id  subject");
    assert_eq!(lines[2], "c1       read /w/a.txt");
    assert_eq!(lines[3], "c2       read /w/\\x1b]0;owned\\x07\\x1b[2J.txt");
    assert_eq!(lines[4], "c3       read /w/evil\\u{202e}txt.exe");
    assert_eq!(lines[5], "(3 rows)");
}

#[test]
fn a_query_prints_json_with_the_exact_values() {
    let dir = state_with_rows();
    let (code, out, err) = query(
        dir.path(),
        &[
            "--json",
            "SELECT id, call_id, subject, duration_ms, NULL AS nil FROM events WHERE call_id = 'c2'",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains('\x1b'), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["columns"],
        serde_json::json!(["id", "call_id", "subject", "duration_ms", "nil"])
    );
    assert_eq!(
        v["rows"],
        serde_json::json!([[3, "c2", "read /w/\x1b]0;owned\x07\x1b[2J.txt", 0, null]])
    );
    assert_eq!(v["truncated"], false);
}

#[test]
fn writes_attach_and_second_statements_are_refused_and_change_nothing() {
    let dir = state_with_rows();
    let db = dir.path().join("audit.db");
    let before = digest(&db);
    let cases: &[(&str, &str)] = &[
        ("DELETE FROM events", "DELETE is refused"),
        ("UPDATE events SET verdict = 'deny'", "UPDATE is refused"),
        ("INSERT INTO events (ts) VALUES ('x')", "INSERT is refused"),
        ("DROP TRIGGER events_refuse_delete", "DROP is refused"),
        ("PRAGMA query_only = OFF", "PRAGMA is refused"),
        ("SELECT 1; DELETE FROM events", "exactly one statement"),
        (
            "ATTACH DATABASE '/tmp/glovebox-x.db' AS x",
            "ATTACH is refused",
        ),
        (
            "WITH gone AS (SELECT 1) DELETE FROM events WHERE id > 0",
            "readonly",
        ),
        ("SELECT * FROM no_such_table", "no such table"),
    ];
    for (sql, want) in cases {
        let (code, out, err) = query(dir.path(), &[sql]);
        assert_eq!(code, 2, "{sql}: {out}");
        assert!(err.contains(want), "{sql}: {err}");
    }
    assert_eq!(digest(&db), before, "the audit changed");
    let (code, out, _) = query(dir.path(), &["SELECT COUNT(*) AS n FROM events"]);
    assert_eq!(code, 0);
    assert!(out.contains("\n4\n"), "{out}");
    // A state dir without an audit is not given one.
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = query(empty.path(), &["SELECT 1"]);
    assert_eq!(code, 2);
    assert!(err.contains("no audit store"), "{err}");
    assert!(!empty.path().join("audit.db").exists());
}

#[test]
fn rows_and_time_are_bounded() {
    let dir = state_with_rows();
    let (code, out, err) = query(
        dir.path(),
        &[
            "--json",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 20000) SELECT x FROM c",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 10_000);
    assert_eq!(v["truncated"], true);
    assert!(err.contains("MAX_ROWS"), "{err}");

    let started = Instant::now();
    let (code, _, err) = query(
        dir.path(),
        &["WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"],
    );
    let took = started.elapsed();
    assert_eq!(code, 2);
    assert!(err.contains("time limit"), "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn tail_follows_new_rows_until_interrupted() {
    let dir = state_with_rows();
    let mut child = Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .args([
            "audit",
            "tail",
            "--json",
            "-n",
            "1",
            "--state-dir",
            dir.path().to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["call_id"], "c3", "{first}");
    assert!(first["subject"].as_str().unwrap().contains('\u{202e}'));
    // Rows written while it follows (the store writes a start checkpoint first).
    write_rows(dir.path(), &[("c4", "read /w/b"), ("c5", "read /w/c")]);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let line = lines.next().unwrap().unwrap();
        let row: serde_json::Value = serde_json::from_str(&line).unwrap();
        seen.push((row["id"].as_i64().unwrap(), row["kind"].clone()));
    }
    assert_eq!(seen[0], (5, "checkpoint".into()));
    assert_eq!(seen[1].0, 6);
    assert_eq!(seen[2].0, 7);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn tail_prints_one_escaped_line_per_row() {
    let dir = state_with_rows();
    let mut child = Command::new(env!("CARGO_BIN_EXE_glovebox"))
        .args(["audit", "tail", "-n", "3"])
        .args(["--state-dir", dir.path().to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let got: Vec<String> = (0..3).map(|_| lines.next().unwrap().unwrap()).collect();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(got[0].contains("call=c1") && got[0].contains("subject=read /w/a.txt"));
    assert!(got[1].contains("\\x1b]0;owned\\x07"), "{}", got[1]);
    assert!(
        !got.iter()
            .any(|l| l.contains('\x1b') || l.contains('\u{202e}'))
    );
}

#[test]
fn verify_reads_the_audit_and_changes_nothing_not_even_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = state_with_rows();
    std::fs::write(dir.path().join("audit.key"), [7u8; 32]).unwrap();
    let db = dir.path().join("audit.db");
    // In system mode the audit group reads the file: a check must not take that away.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = digest(&db);
    let state = dir.path().to_str().unwrap();
    let (code, out, err) = glovebox(&["audit", "verify", "--state-dir", state]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("audit chain verified: 4 rows"), "{out}");
    assert_eq!(digest(&db), before, "the audit changed");
    let mode = std::fs::metadata(&db).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640, "the audit's mode changed");
}
