//! The account's packs as its owner sees them (the `manage` operation `packs`, the web
//! console's packs table): each configured pack with its state, its tools as agents see them,
//! why it is not running and, for a project pack, the approver's trust. Listing goes through
//! [`super::listing`], so it starts what a listing starts and queues the same trust asks as an
//! agent's listing would; while the account's tools are off nothing is listed or started.
//!
//! Every string here (a pack's name, a server's stderr in an error) is the pack's or its
//! server's, untrusted: clients show it as text.

use glovebox_config::AccountId;
use glovebox_proto::v1::ListPacksResponse;
use glovebox_proto::ws::manage::{PackRow, Packs};

use super::listing::PackHosts;

/// What the account's owner is shown of its packs now.
pub async fn view(hosts: PackHosts<'_>, account: &AccountId) -> Packs {
    let info = hosts.backends.account_info(account, Vec::new()).await;
    if !info.as_ref().is_some_and(|i| i.enabled) {
        return Packs {
            enabled: false,
            packs: Vec::new(),
            errors: vec![
                "the account's tools are switched off (or the gate is unavailable): no pack is listed or started"
                    .to_owned(),
            ],
        };
    }
    match super::listing::listing(hosts, account).await {
        Err(why) => Packs {
            enabled: true,
            packs: Vec::new(),
            errors: vec![why.to_string()],
        },
        Ok(listed) => {
            let (packs, errors) = rows(&listed);
            Packs {
                enabled: true,
                packs,
                errors,
            }
        }
    }
}

/// Each listed pack with its tools (by the names agents see, after the broker's own checks), and
/// every error that is not already a pack's reason for not running: a file that does not parse,
/// a tool refused by name or schema, a tool listed twice.
pub fn rows(listed: &ListPacksResponse) -> (Vec<PackRow>, Vec<String>) {
    let mut errors = Vec::new();
    let mut packs: Vec<PackRow> = listed
        .packs
        .iter()
        .map(|p| PackRow {
            name: p.name.clone(),
            origin: p.origin.clone(),
            state: p.state.clone(),
            message: p.message.clone(),
            tools: Vec::new(),
            trust: p.trust.clone(),
        })
        .collect();
    for t in &listed.tools {
        let row = packs
            .iter_mut()
            .find(|p| p.name == t.pack && p.origin == t.origin);
        match (super::listing::pack_info(t), row) {
            (Ok(info), Some(row)) => row.tools.push(info.name),
            (Ok(info), None) => errors.push(format!("{}: a tool of an unlisted pack", info.name)),
            (Err(why), _) => errors.push(format!("{} ({} pack): {why}", t.pack, t.origin)),
        }
    }
    for e in &listed.errors {
        let told = packs
            .iter()
            .any(|p| p.name == e.pack && p.origin == e.origin && p.message == e.message);
        if told {
            continue;
        }
        let whose = if e.pack.is_empty() {
            format!("the {} mcp.json", e.origin)
        } else {
            format!("{} ({} pack)", e.pack, e.origin)
        };
        errors.push(format!("{whose}: {}", e.message));
    }
    (packs, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use glovebox_proto::v1::{PackError, PackStatus, PackTool};

    fn status(name: &str, origin: &str, state: &str, message: &str, trust: &str) -> PackStatus {
        PackStatus {
            name: name.into(),
            origin: origin.into(),
            state: state.into(),
            message: message.into(),
            trust: trust.into(),
        }
    }

    fn tool(pack: &str, tool: &str, origin: &str) -> PackTool {
        PackTool {
            name: format!("{pack}__{tool}"),
            pack: pack.into(),
            tool: tool.into(),
            input_schema_json: r#"{"type":"object"}"#.into(),
            origin: origin.into(),
            ..Default::default()
        }
    }

    fn error(pack: &str, origin: &str, message: &str) -> PackError {
        PackError {
            pack: pack.into(),
            origin: origin.into(),
            message: message.into(),
        }
    }

    #[test]
    fn each_pack_gets_its_own_tools_and_its_reason_once() {
        let listed = ListPacksResponse {
            tools: vec![
                tool("good", "echo", "user"),
                tool("good", "write", "user"),
                tool("good", "echo", "project"),
            ],
            errors: vec![
                error(
                    "bad",
                    "user",
                    "the server exited; its stderr ends: <b>x</b>",
                ),
                error("good", "user", "tool \"dup\" is listed more than once"),
                error("", "project", "/w/.glovebox/mcp.json: line 3: expected ','"),
                error("proj", "project", "waiting for the account's approver"),
            ],
            untrusted: Vec::new(),
            packs: vec![
                status(
                    "bad",
                    "user",
                    "failed",
                    "the server exited; its stderr ends: <b>x</b>",
                    "",
                ),
                status("good", "project", "running", "", "once"),
                status("good", "user", "running", "", ""),
                status(
                    "proj",
                    "project",
                    "untrusted",
                    "waiting for the account's approver",
                    "waiting",
                ),
            ],
        };
        let (rows, errors) = rows(&listed);
        let by = |name: &str, origin: &str| {
            rows.iter()
                .find(|r| r.name == name && r.origin == origin)
                .unwrap()
                .clone()
        };
        assert_eq!(by("good", "user").tools, ["good__echo", "good__write"]);
        assert_eq!(by("good", "project").tools, ["good__echo"]);
        assert_eq!(by("good", "project").trust, "once");
        assert_eq!(by("bad", "user").state, "failed");
        assert!(by("bad", "user").message.contains("<b>x</b>"));
        assert_eq!(by("proj", "project").trust, "waiting");
        assert_eq!(
            errors,
            [
                "good (user pack): tool \"dup\" is listed more than once",
                "the project mcp.json: /w/.glovebox/mcp.json: line 3: expected ','",
            ]
        );
    }

    #[test]
    fn a_tool_the_broker_refuses_is_an_error_not_a_tool() {
        let bad = tool("p", "no spaces allowed", "user");
        let listed = ListPacksResponse {
            tools: vec![bad],
            packs: vec![status("p", "user", "running", "", "")],
            ..Default::default()
        };
        let (rows, errors) = rows(&listed);
        assert!(rows[0].tools.is_empty(), "{rows:?}");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("p (user pack): "), "{errors:?}");
    }
}
