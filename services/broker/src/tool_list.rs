//! The tools an account's connection is offered: what `hello_ok` lists on `/v1/ws` and what MCP
//! `tools/list` returns. One function, so both front doors list the same tools (built-in, client
//! and pack tools, from the catalog's `ToolInfo`); whether the account's tools are on is the
//! gate's to say (`AccountInfo`), never the broker's.

use glovebox_config::AccountId;
use glovebox_proto::tool_name::ToolName;
use glovebox_proto::tools::Tool;
use glovebox_proto::tools::catalog::ToolInfo;
use glovebox_proto::v1::AccountInfoResponse;
use glovebox_proto::ws::ToolSpec;

use crate::app::App;
use crate::profiles::Profile;

/// The built-in tools, the account's client tools and its pack tools (with their hints), as a
/// connection of `profile` sees them, given what the gate said of the account: none when its
/// tools are off or the gate could not be asked (every call would be refused anyway), none a
/// managed cap or a managed `tools` deny forbids outright (the gate says which), only client
/// tools for a `web` connection.
pub async fn tools_for(
    app: &App,
    account: &AccountId,
    profile: Profile,
    info: Option<&AccountInfoResponse>,
) -> Vec<ToolSpec> {
    let Some(info) = info.filter(|i| i.enabled) else {
        return Vec::new();
    };
    let packs = if profile == Profile::Desktop && !info.packs_capped {
        crate::packs::tool_specs(app, account).await
    } else {
        Vec::new()
    };
    // What a managed cap forbids outright is not offered (its calls would all be refused).
    let builtin = Tool::ALL
        .iter()
        .filter(|t| !info.capped_tools.iter().any(|c| c == t.name()))
        .map(|t| ToolInfo::builtin(*t));
    let client = app
        .registry
        .tools(account)
        .into_iter()
        .map(|t| ToolInfo::client(&t.name, &t.description, t.input_schema));
    let builtin_names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
    let listed: Vec<ToolSpec> = builtin
        .chain(client)
        .map(|t| ToolSpec {
            name: t.name,
            description: t.description,
            input_schema: t.input_schema,
            annotations: None,
            output_schema: None,
            title: None,
            meta: None,
        })
        .chain(packs)
        .filter(|t| profile.allows(ToolName::parse(&t.name)))
        .collect();
    // Client and pack tools are judged by name: the managed layer's denies hide them. Without
    // the gate's word on them, they are not listed (their calls would wait on the gate too).
    let named: Vec<String> = listed
        .iter()
        .filter(|t| !builtin_names.contains(&t.name.as_str()))
        .map(|t| t.name.clone())
        .collect();
    if named.is_empty() || info.managed_tool_denies.is_empty() {
        return listed;
    }
    let denied = match app.backends.account_info(account, named).await {
        Some(answer) => answer.denied_tools,
        None => return Vec::new(),
    };
    listed
        .into_iter()
        .filter(|t| !denied.contains(&t.name))
        .collect()
}
