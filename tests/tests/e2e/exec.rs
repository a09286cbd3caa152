//! The exec job model end to end: approval of the exact command, output and exit status, the
//! allowlisted environment, run-time limits, and no process outliving its job.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use glovebox_e2e::{Client, Glovebox, Options, alive, eventually, expect_error, expect_ok};
use serde_json::{Value, json};

/// Starts `command` as a job, approving it once; returns the job id.
async fn run(agent: &mut Client, approver: &mut Client, call_id: &str, params: Value) -> String {
    let (_, r) = agent
        .invoke_asked(approver, call_id, "exec_run", params, "once")
        .await;
    expect_ok(&r)["job_id"].as_str().unwrap().to_owned()
}

/// A fresh glovebox, its agent, and a job running `params` (approved once).
async fn started_job(params: Value) -> (Glovebox, Client, String) {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let job = run(&mut agent, &mut approver, "r", params).await;
    (g, agent, job)
}

/// The pid a job wrote to `dir/name`, once the whole line is there (`echo $! > f` creates the
/// file before it writes to it).
fn pid_in(dir: &Path, name: &str) -> Option<i32> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    text.strip_suffix('\n')?.parse().ok()
}

fn pids_in(dir: &Path, names: &[&str]) -> Vec<i32> {
    names.iter().map(|n| pid_in(dir, n).unwrap()).collect()
}

#[tokio::test]
async fn a_job_reports_output_streams_and_its_exit_code() {
    let (_g, mut agent, job) =
        started_job(json!({"command": "echo hello; echo oops >&2; exit 3"})).await;
    let status = agent.wait_job(&job).await;
    assert_eq!(status["state"], "exited", "{status}");
    assert_eq!(status["exit_code"], 3);
    let tail = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({ "job_id": job }))
            .await,
    );
    assert_eq!(tail["stdout"]["text"], "hello\n");
    assert_eq!(tail["stderr"]["text"], "oops\n");
    let only_err = expect_ok(
        &agent
            .invoke(
                "t2",
                "exec_tail",
                json!({ "job_id": job, "stream": "stderr" }),
            )
            .await,
    );
    assert!(only_err.get("stdout").is_none());
    let list = expect_ok(&agent.invoke("l", "exec_stat", json!({})).await);
    assert_eq!(list["jobs"][0]["job_id"], job);
}

#[tokio::test]
async fn a_signal_is_reported_and_tail_since_an_offset_returns_the_rest() {
    let (_g, mut agent, job) =
        started_job(json!({"command": "printf abc; sleep 0.2; printf def; kill -9 $$"})).await;
    let status = agent.wait_job(&job).await;
    assert_eq!(
        (status["state"].as_str(), status["signal"].as_i64()),
        (Some("signaled"), Some(9)),
        "{status}"
    );
    let rest = expect_ok(
        &agent
            .invoke(
                "t",
                "exec_tail",
                json!({"job_id": job, "stream": "stdout", "since": 3}),
            )
            .await,
    );
    assert_eq!(rest["stdout"]["text"], "def");
    assert_eq!(rest["stdout"]["start"], 3);
    assert_eq!(rest["stdout"]["end"], 6);
}

#[tokio::test]
async fn the_job_environment_is_an_allowlist() {
    let g = Glovebox::start_with(Options {
        env: vec![("GLOVEBOX_TEST_LEAK".into(), "service-secret".into())],
        ..Default::default()
    });
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let job = run(&mut agent, &mut approver, "r", json!({"command": "env"})).await;
    agent.wait_job(&job).await;
    let out = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({"job_id": job, "lines": 1000}))
            .await,
    );
    let env = out["stdout"]["text"].as_str().unwrap();
    assert!(
        !env.contains("service-secret") && !env.contains("GLOVEBOX_TEST_LEAK"),
        "{env}"
    );
    assert!(!env.contains("GLOVEBOX_LOG"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
}

#[tokio::test]
async fn a_job_runs_with_git_config_nosystem_and_no_inherited_git_variables() {
    let g = Glovebox::start_with(Options {
        env: vec![
            ("GIT_CONFIG_NOSYSTEM".into(), "0".into()),
            ("GIT_DIR".into(), "/tmp/elsewhere".into()),
        ],
        ..Default::default()
    });
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let job = run(&mut agent, &mut approver, "r", json!({"command": "env"})).await;
    agent.wait_job(&job).await;
    let out = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({"job_id": job, "lines": 1000}))
            .await,
    );
    let env = out["stdout"]["text"].as_str().unwrap();
    let git: Vec<&str> = env.lines().filter(|l| l.starts_with("GIT_")).collect();
    assert_eq!(git, ["GIT_CONFIG_NOSYSTEM=1"], "{env}");
}

#[tokio::test]
async fn killing_a_job_leaves_no_process_behind() {
    let script = "sleep 100 & echo $! > p1; setsid sleep 100 & echo $! > p2; \
                  sh -c 'sleep 100 & echo $! > p3'; sleep 100";
    let (g, mut agent, job) = started_job(json!({ "command": script })).await;
    let dir = g.workdir.clone();
    eventually("the job to record its children", || {
        ["p1", "p2", "p3"].iter().all(|p| pid_in(&dir, p).is_some())
    })
    .await;
    let pids = pids_in(&g.workdir, &["p1", "p2", "p3"]);
    assert!(pids.iter().all(|p| alive(*p)), "{pids:?}");
    let killed = expect_ok(
        &agent
            .invoke("k", "exec_kill", json!({ "job_id": job }))
            .await,
    );
    assert_eq!(killed["state"], "killed");
    assert_eq!(
        killed["gone"], true,
        "the kill is said once the job is gone: {killed}"
    );
    let shim: i32 = killed["pid"].as_i64().unwrap() as i32;
    assert!(!alive(shim), "the job's own process outlived the answer");
    eventually("every descendant to be gone", || {
        pids.iter().all(|p| !alive(*p))
    })
    .await;
}

#[tokio::test]
async fn descendants_die_when_the_job_ends() {
    let script = "sleep 100 & echo $! > p1; setsid sleep 100 & echo $! > p2; sleep 0.2; exit 0";
    let (g, mut agent, job) = started_job(json!({ "command": script })).await;
    let status = agent.wait_job(&job).await;
    assert_eq!(status["exit_code"], 0);
    let pids = pids_in(&g.workdir, &["p1", "p2"]);
    eventually("background processes of a finished job to be gone", || {
        pids.iter().all(|p| !alive(*p))
    })
    .await;
}

#[tokio::test]
async fn a_job_that_kills_its_own_process_group_leaves_nothing_behind() {
    let script = "setsid sleep 100 & echo $! > p1; sleep 0.2; kill -9 0";
    let (g, mut agent, job) = started_job(json!({ "command": script })).await;
    let status = agent.wait_job(&job).await;
    assert_eq!(
        (status["state"].as_str(), status["signal"].as_i64()),
        (Some("signaled"), Some(9)),
        "{status}"
    );
    let pids = pids_in(&g.workdir, &["p1"]);
    eventually("the process that left the group to be gone", || {
        pids.iter().all(|p| !alive(*p))
    })
    .await;
}

#[tokio::test]
async fn a_job_past_its_timeout_is_killed() {
    let (g, mut agent, job) =
        started_job(json!({"command": "echo $$ > pid; sleep 60", "timeout_s": 1})).await;
    let status = agent.wait_job(&job).await;
    assert_eq!(status["state"], "timed_out", "{status}");
    let pid = pids_in(&g.workdir, &["pid"])[0];
    eventually("the timed-out shell to be gone", || !alive(pid)).await;
}

#[tokio::test]
async fn stopping_glovebox_kills_running_jobs() {
    let mut g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    run(
        &mut agent,
        &mut approver,
        "r",
        json!({"command": "setsid sleep 100 & echo $! > p1; sleep 100"}),
    )
    .await;
    let dir = g.workdir.clone();
    eventually("the job to start its child", || {
        pid_in(&dir, "p1").is_some()
    })
    .await;
    let pid = pids_in(&g.workdir, &["p1"])[0];
    assert!(alive(pid));
    g.stop();
    eventually("the job's processes to die with the executor", || {
        !alive(pid)
    })
    .await;
}

#[tokio::test]
async fn a_denied_command_does_not_run_and_is_audited_by_length_only() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "no", "tool": "exec_run", "params": {"command": "touch classified-marker"}})).await;
    let ask = approver.next_ask().await;
    assert_eq!(
        ask["subjects"][0],
        json!({"domain": "exec", "path": "touch classified-marker"})
    );
    assert!(
        ask["preview"]
            .as_str()
            .unwrap()
            .contains("shell:   /bin/sh -c"),
        "{ask}"
    );
    approver.answer(&ask, "deny").await;
    expect_error(&agent.result_for("no").await, "denied");
    assert!(!g.workdir.join("classified-marker").exists());

    let job = run(
        &mut agent,
        &mut approver,
        "yes",
        json!({"command": "echo GITHUB_TOKEN=ghp_supersecret123 > /dev/null"}),
    )
    .await;
    agent.wait_job(&job).await;
    let pool = g.audit_pool().await;
    let denied: String =
        sqlx::query_scalar("SELECT subject FROM tool_calls WHERE client_call_id = 'no'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(!denied.contains("classified"), "{denied}");
    assert!(denied.contains("<command of 23 bytes>"), "{denied}");
    let approved: String =
        sqlx::query_scalar("SELECT subject FROM tool_calls WHERE client_call_id = 'yes'")
            .fetch_one(&pool)
            .await
            .unwrap();
    // the administrators' view of commands says the same, and holds only exec_run calls
    let commands: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT client_call_id, approval FROM commands ORDER BY started_at")
            .fetch_all(&pool)
            .await
            .unwrap();
    let ids: Vec<&str> = commands.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(ids.len(), 2, "only the two exec_run calls: {commands:?}");
    assert!(
        commands.contains(&("no".to_owned(), Some("denied".to_owned()))),
        "{commands:?}"
    );
    assert!(
        commands.contains(&("yes".to_owned(), Some("approved".to_owned()))),
        "{commands:?}"
    );
    assert!(
        approved.contains("exec echo GITHUB_TOKEN=**** > /dev/null"),
        "{approved}"
    );
    assert!(!approved.contains("supersecret"), "{approved}");
}

#[tokio::test]
async fn the_working_directory_is_judged_by_its_real_path() {
    let g = Glovebox::with_extra_roots(&["outside", "elsewhere"]);
    std::fs::create_dir_all(g.workdir.join(".ssh")).unwrap();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let e = expect_error(
        &agent
            .invoke("f", "exec_run", json!({"command": "ls", "cwd": ".ssh"}))
            .await,
        "denied",
    );
    assert_eq!(e["rule"], "floor:.ssh");
    let outside = g.root().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, g.workdir.join("link")).unwrap();
    agent.send(json!({"type": "invoke", "call_id": "o", "tool": "exec_run", "params": {"command": "pwd", "cwd": "link"}})).await;
    let ask = approver.next_ask().await;
    assert_eq!(ask["subjects"][1]["path"], outside.to_str().unwrap());
    approver.answer(&ask, "deny").await;
    expect_error(&agent.result_for("o").await, "denied");
}

#[tokio::test]
async fn the_number_of_running_jobs_is_capped() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let mut jobs = Vec::new();
    for i in 0..8 {
        jobs.push(
            run(
                &mut agent,
                &mut approver,
                &format!("r{i}"),
                json!({"command": "sleep 100"}),
            )
            .await,
        );
    }
    agent.send(json!({"type": "invoke", "call_id": "ninth", "tool": "exec_run", "params": {"command": "sleep 100"}})).await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "once").await;
    expect_error(&agent.result_for("ninth").await, "busy");
    for (i, job) in jobs.iter().enumerate() {
        expect_ok(
            &agent
                .invoke(&format!("k{i}"), "exec_kill", json!({ "job_id": job }))
                .await,
        );
    }
    // a slot is free again
    run(
        &mut agent,
        &mut approver,
        "again",
        json!({"command": "true"}),
    )
    .await;
}

#[tokio::test]
async fn bad_exec_params_and_unknown_jobs() {
    let g = Glovebox::start();
    let mut agent = g.connect("agent").await;
    for (i, params) in [
        json!({"command": "   "}),
        json!({"command": "ls", "timeout_s": 0}),
        json!({"command": "ls", "timeout_s": 99999}),
        json!({"command": 5}),
        json!({"command": "echo a\u{0}b"}),
        json!({ "command": "x".repeat(64 * 1024 + 1) }),
        json!({"command": "ls", "timeout_s": -1}),
        json!({"command": "ls", "cwd": 7}),
        json!({"command": "ls", "env": {"LD_PRELOAD": "/tmp/x.so"}}),
    ]
    .into_iter()
    .enumerate()
    {
        expect_error(
            &agent.invoke(&format!("b{i}"), "exec_run", params).await,
            "invalid_params",
        );
    }
    expect_error(
        &agent
            .invoke(
                "u",
                "exec_status",
                json!({"job_id": "job-0000000000000000"}),
            )
            .await,
        "not_found",
    );
    expect_error(
        &agent
            .invoke("v", "exec_tail", json!({"job_id": "../../etc"}))
            .await,
        "invalid_params",
    );
}

#[tokio::test]
async fn always_on_a_command_persists_an_exact_command_rule() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    agent.send(json!({"type": "invoke", "call_id": "a", "tool": "exec_run", "params": {"command": "echo one && echo two"}})).await;
    let ask = approver.next_ask().await;
    approver.answer(&ask, "always").await;
    expect_ok(&agent.result_for("a").await);
    let policy = std::fs::read_to_string(g.permissions_file()).unwrap();
    assert!(policy.contains("commands:"), "{policy}");
    drop(approver);
    // the same command runs without asking (no approver is connected now) ...
    expect_ok(
        &agent
            .invoke("b", "exec_run", json!({"command": "echo one && echo two"}))
            .await,
    );
    // ... and the rule is anchored: anything appended still asks, and is denied here
    expect_error(
        &agent
            .invoke(
                "c",
                "exec_run",
                json!({"command": "echo one && echo two; rm -rf ~"}),
            )
            .await,
        "denied",
    );
}

#[tokio::test]
async fn an_account_chooses_which_variables_its_jobs_inherit() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true)],
        job_env: vec!["GLOVEBOX_TEST_SHARED".into()],
        sandbox: Default::default(),
        env: vec![
            ("GLOVEBOX_TEST_SHARED".into(), "visible".into()),
            ("GLOVEBOX_TEST_LEAK".into(), "hidden".into()),
        ],
        ..Default::default()
    });
    let mut approver = g.connect_as("alice", "approver").await;
    let mut agent = g.connect_as("alice", "agent").await;
    let job = run(&mut agent, &mut approver, "r", json!({"command": "env"})).await;
    agent.wait_job(&job).await;
    let out = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({"job_id": job, "lines": 1000}))
            .await,
    );
    let env = out["stdout"]["text"].as_str().unwrap();
    assert!(env.contains("GLOVEBOX_TEST_SHARED=visible"), "{env}");
    assert!(
        !env.contains("GLOVEBOX_TEST_LEAK") && !env.contains("HOME="),
        "{env}"
    );
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
}

#[tokio::test]
async fn a_job_starts_with_no_signal_blocked_and_sigterm_ends_it() {
    // The shim blocks the signals it waits for; a job that inherited that mask could not be
    // stopped by SIGTERM or SIGINT, and programs that wait for SIGCHLD would hang.
    let (_g, mut agent, job) = started_job(json!({
        "command": "grep -E '^Sig(Blk|Ign):' /proc/self/status; sh -c 'kill -TERM $$; sleep 5; echo survived'"
    }))
    .await;
    let status = agent.wait_job(&job).await;
    let tail = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({ "job_id": job }))
            .await,
    );
    let out = tail["stdout"]["text"].as_str().unwrap();
    assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
    assert!(!out.contains("survived"), "{out} {status}");
}

/// A job renames files between directories of its workdir (as git, uv and build tools do): its
/// sandbox's inner domain once refused every such rename with EXDEV.
#[tokio::test]
async fn a_job_moves_files_between_directories_of_its_workdir() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (status, stdout, stderr) = agent
        .run_job(
            &mut approver,
            "mkdir -p a/x b && touch a/f && perl -e 'rename(\"a/f\", \"b/f\") or die \"file: $!\"; \
             rename(\"a/x\", \"b/x\") or die \"dir: $!\"; print \"renamed\\n\"'",
        )
        .await;
    assert_eq!(status["exit_code"], 0, "{status} {stderr}");
    assert_eq!(stdout.trim(), "renamed", "{stderr}");
    assert!(g.workdir.join("b/f").exists() && g.workdir.join("b/x").is_dir());
}

/// What a job printed on stdout so far, once it holds `wanted` (within `WAIT`).
async fn stdout_holding(agent: &mut Client, job: &str, wanted: &str) -> String {
    let deadline = std::time::Instant::now() + glovebox_e2e::WAIT;
    for i in 0.. {
        let tail = expect_ok(
            &agent
                .invoke(
                    &format!("tail-{i}"),
                    "exec_tail",
                    json!({"job_id": job, "since": 0}),
                )
                .await,
        );
        let out = tail["stdout"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if out.contains(wanted) {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {wanted:?} in {tail}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    unreachable!()
}

/// A Python REPL answered line by line: the job was approved as `python3`, so each line sent to
/// it is a command the approver sees and may refuse; a refused line never reaches it. Closing its
/// input ends it.
#[tokio::test]
async fn input_to_an_interpreter_is_asked_line_by_line() {
    let g = Glovebox::start();
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let (ask, r) = agent
        .invoke_asked(
            &mut approver,
            "r",
            "exec_run",
            json!({"command": "python3 -i -q", "interactive": true}),
            "once",
        )
        .await;
    assert!(
        ask["preview"].as_str().unwrap().contains("interactive"),
        "the approver is told the job takes input: {ask}"
    );
    let job = expect_ok(&r)["job_id"].as_str().unwrap().to_owned();
    let (ask, r) = agent
        .invoke_asked(
            &mut approver,
            "i1",
            "exec_input",
            json!({"job_id": job, "input": "print(6 * 7)\n"}),
            "once",
        )
        .await;
    let subjects = ask["subjects"].as_array().unwrap();
    assert_eq!(subjects[1]["domain"], "exec", "{ask}");
    assert_eq!(subjects[1]["path"], "print(6 * 7)", "{ask}");
    assert_eq!(expect_ok(&r)["written"], 13);
    stdout_holding(&mut agent, &job, "42").await;
    // Refused: the line is not written.
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "i2",
            "exec_input",
            json!({"job_id": job, "input": "open('refused-marker', 'w').write('x')\n"}),
            "deny",
        )
        .await;
    expect_error(&r, "denied");
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "i3",
            "exec_input",
            json!({"job_id": job, "input": "print('still', 'here')\n", "close": true}),
            "once",
        )
        .await;
    assert_eq!(expect_ok(&r)["closed"], true);
    stdout_holding(&mut agent, &job, "still here").await;
    let status = agent.wait_job(&job).await;
    assert_eq!(
        status["state"], "exited",
        "closing its input ended it: {status}"
    );
    assert!(
        !g.workdir.join("refused-marker").exists(),
        "a refused line ran"
    );
    // The input is audited by its size, never its text.
    let pool = g.audit_pool().await;
    let details: Vec<String> = sqlx::query_scalar(
        "SELECT detail FROM events WHERE kind = 'execute' AND tool = 'exec_input' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(details.iter().all(|d| !d.contains("print")), "{details:?}");
    assert!(
        details.iter().any(|d| d == "13 bytes of input"),
        "{details:?}"
    );
}

/// Input to a program that is no interpreter goes under the job's approval, with no ask; a job
/// not started interactive takes none, and a closed input takes no more.
#[tokio::test]
async fn input_to_other_programs_goes_under_the_jobs_approval() {
    let (g, mut agent, job) = started_job(json!({"command": "cat", "interactive": true})).await;
    // No approver is asked (none answers: an ask would fail the call).
    let r = agent
        .invoke(
            "i",
            "exec_input",
            json!({"job_id": job, "input": "hello\n"}),
        )
        .await;
    assert_eq!(expect_ok(&r)["written"], 6);
    stdout_holding(&mut agent, &job, "hello").await;
    let r = agent
        .invoke("c", "exec_input", json!({"job_id": job, "close": true}))
        .await;
    assert_eq!(expect_ok(&r)["closed"], true);
    assert_eq!(agent.wait_job(&job).await["exit_code"], 0);
    expect_error(
        &agent
            .invoke(
                "again",
                "exec_input",
                json!({"job_id": job, "input": "x\n"}),
            )
            .await,
        "invalid_params",
    );
    let mut approver = g.connect("approver").await;
    let plain = run(
        &mut agent,
        &mut approver,
        "p",
        json!({"command": "sleep 5"}),
    )
    .await;
    let e = expect_error(
        &agent
            .invoke("n", "exec_input", json!({"job_id": plain, "input": "x\n"}))
            .await,
        "invalid_params",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("not started interactive"),
        "{e}"
    );
    agent.kill_running_job(&plain, "sleep").await;
}

/// A shell answered line by line: each line asked as the command it is; another account's agent
/// cannot write to the job at all.
#[tokio::test]
async fn input_to_a_shell_is_asked_and_no_other_account_reaches_the_job() {
    let g = Glovebox::start_with(Options {
        accounts: vec![("alice".into(), true), ("bob".into(), true)],
        ..Options::default()
    });
    let mut approver = g.connect_as("alice", "approver").await;
    let mut agent = g.connect_as("alice", "agent").await;
    let job = run(
        &mut agent,
        &mut approver,
        "r",
        json!({"command": "sh", "interactive": true}),
    )
    .await;
    let (ask, r) = agent
        .invoke_asked(
            &mut approver,
            "i",
            "exec_input",
            json!({"job_id": job, "input": "echo one; echo two\nexit 3\n"}),
            "once",
        )
        .await;
    let commands: Vec<&str> = ask["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["domain"] == "exec")
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert_eq!(commands, ["echo one; echo two", "exit 3"], "{ask}");
    expect_ok(&r);
    assert_eq!(agent.wait_job(&job).await["exit_code"], 3);
    stdout_holding(&mut agent, &job, "one\ntwo\n").await;
    let mut bob = g.connect_as("bob", "agent").await;
    expect_error(
        &bob.invoke("x", "exec_input", json!({"job_id": job, "input": "id\n"}))
            .await,
        "not_found",
    );
}

/// An idle executor sleeps: its job reaper wakes about once a second with no job to collect
/// (not 40 times), and a job started then is still collected as soon as it ends.
#[tokio::test]
async fn an_idle_executor_stays_asleep_and_still_collects_a_job_at_once() {
    let g = Glovebox::start();
    let executor = g.service_pids("executor")[0];
    let before = glovebox_e2e::thread_switches(executor, "job-reaper");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let woke = glovebox_e2e::thread_switches(executor, "job-reaper") - before;
    assert!(woke <= 6, "the idle reaper woke {woke} times in 2 s");
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    for n in 0..3 {
        let (_, job) = agent
            .invoke_asked(
                &mut approver,
                &format!("j{n}"),
                "exec_run",
                json!({"command": "true"}),
                "once",
            )
            .await;
        let job = expect_ok(&job);
        let started = std::time::Instant::now();
        let status = agent.wait_job(job["job_id"].as_str().unwrap()).await;
        assert_eq!(status["state"], "exited", "{status}");
        assert!(
            started.elapsed() < std::time::Duration::from_millis(400),
            "job {n} was collected after {:?}: the reaper was not woken by its start",
            started.elapsed()
        );
    }
}
