//! One health probe of the gate and the executors ([`Probe`]) and the last one, shared by
//! concurrent requests ([`Probes`], part of the broker's state): a request that arrives while a
//! probe runs takes its result, so a flood of requests costs the gate and the executors one
//! probe at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backends::Backends;
use glovebox_config::AccountId;

/// How long `/healthz` waits for each backend.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What one probe found.
#[derive(Debug)]
pub struct Probe {
    gate: Option<glovebox_proto::v1::HealthResponse>,
    /// Each executor's status by account (`None`: unreachable).
    executors: Vec<(
        AccountId,
        Option<glovebox_proto::v1::ExecutorStatusResponse>,
    )>,
}

impl Probe {
    /// Whether everything holds: the gate reachable, the audit healthy, every policy loaded,
    /// every executor reachable and sandboxed (where the kernel has no Landlock, health says so
    /// rather than pretending).
    pub fn ok(&self) -> bool {
        let Some(gate) = &self.gate else { return false };
        gate.audit_healthy
            && gate.policy_errors.is_empty()
            && self.executors.iter().all(|(_, s)| {
                s.as_ref()
                    .is_some_and(|s| !s.sandbox.starts_with("landlock=not_available"))
            })
    }

    /// The details `account`'s approver may see.
    pub fn details_for(&self, account: &AccountId, connections: usize) -> serde_json::Value {
        let executor = match self.executors.iter().find(|(a, _)| a == account) {
            Some((_, Some(s))) => serde_json::json!({
                "reachable": true, "sandbox": s.sandbox, "jobs": s.jobs, "uid": s.uid,
                "running_jobs": s.running_jobs,
            }),
            _ => serde_json::json!({ "reachable": false }),
        };
        let mut body = serde_json::json!({
            "ok": self.ok(),
            "executors": { account.as_str(): executor },
            "connections": connections,
        });
        match &self.gate {
            Some(h) => {
                let prefix = format!("{account}: ");
                body["gate"] = "reachable".into();
                body["audit"] =
                    serde_json::json!({ "healthy": h.audit_healthy, "failures": h.audit_failures });
                body["policy_errors"] = h
                    .policy_errors
                    .iter()
                    .filter(|e| e.starts_with(&prefix))
                    .cloned()
                    .collect();
            }
            None => body["gate"] = "unreachable".into(),
        }
        body
    }
}

/// The last probe and when it finished, shared by concurrent requests.
#[derive(Debug, Default)]
pub struct Probes {
    last: tokio::sync::Mutex<Option<(Instant, Arc<Probe>)>>,
}

impl Probes {
    /// A probe that finished after `asked`: the one running when the request arrived, or a new
    /// one.
    pub async fn current(&self, backends: &Backends, asked: Instant) -> Arc<Probe> {
        let mut last = self.last.lock().await;
        if let Some((finished, probe)) = &*last
            && *finished >= asked
        {
            return probe.clone();
        }
        let probe = Arc::new(probe(backends).await);
        *last = Some((Instant::now(), probe.clone()));
        probe
    }
}

/// Asks the gate and each executor how they are, each for at most [`PROBE_TIMEOUT`].
async fn probe(backends: &Backends) -> Probe {
    let mut gate = backends.gate.clone();
    let mut req = tonic::Request::new(glovebox_proto::v1::HealthRequest {});
    req.set_timeout(PROBE_TIMEOUT);
    let gate = gate.health(req).await.ok().map(|h| h.into_inner());
    let mut executors = Vec::new();
    for account in backends.accounts() {
        let status = match backends.executor(&account) {
            Some(mut client) => {
                let mut req = tonic::Request::new(glovebox_proto::v1::ExecutorStatusRequest {});
                req.set_timeout(PROBE_TIMEOUT);
                client.status(req).await.ok().map(|s| s.into_inner())
            }
            None => None,
        };
        executors.push((account, status));
    }
    Probe { gate, executors }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::v1::{ExecutorStatusResponse, HealthResponse};

    fn probe(policy_errors: &[&str], executors: &[(&str, Option<&str>)]) -> Probe {
        Probe {
            gate: Some(HealthResponse {
                audit_healthy: true,
                audit_failures: 0,
                audit_rows: 7,
                policy_errors: policy_errors.iter().map(|e| e.to_string()).collect(),
                ..Default::default()
            }),
            executors: executors
                .iter()
                .map(|(a, sandbox)| {
                    (
                        a.parse().unwrap(),
                        sandbox.map(|s| ExecutorStatusResponse {
                            sandbox: s.to_owned(),
                            ..Default::default()
                        }),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn ok_needs_every_part_well() {
        let fine = [("a", Some("landlock=fully_enforced"))];
        assert!(probe(&[], &fine).ok());
        assert!(!probe(&["a: x"], &fine).ok());
        assert!(!probe(&[], &[("a", None)]).ok());
        assert!(!probe(&[], &[("a", Some("landlock=not_available"))]).ok());
        let mut no_gate = probe(&[], &fine);
        no_gate.gate = None;
        assert!(!no_gate.ok());
    }

    #[test]
    fn an_approver_sees_its_own_account_only() {
        let p = probe(
            &[
                "a: permissions.yaml: line 2: bad",
                "b: permissions.yaml: line 9: worse",
            ],
            &[("a", Some("landlock=fully_enforced")), ("b", None)],
        );
        let details = p.details_for(&"a".parse().unwrap(), 3).to_string();
        assert!(
            details.contains("line 2") && !details.contains("line 9"),
            "{details}"
        );
        assert!(!details.contains("\"b\""), "{details}");
        assert!(!details.contains("rows"), "{details}");
        let v = p.details_for(&"b".parse().unwrap(), 0);
        assert_eq!(v["executors"]["b"]["reachable"], false);
        assert_eq!(v["ok"], false);
    }
}
