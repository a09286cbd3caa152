//! The tools an account's connection is offered: what `hello_ok` lists on `/v1/ws` and what MCP
//! `tools/list` returns. One function, so both front doors list the same tools.

use glovebox_proto::tools::Tool;
use glovebox_proto::ws::ToolSpec;

use crate::app::App;
use crate::profiles::Profile;

/// The built-in tools and the account's client tools, as a connection of `profile` sees them: a
/// switched-off account sees none (and every invoke is refused), a `web` connection only client
/// tools.
pub fn tools_for(app: &App, account: &str, profile: Profile) -> Vec<ToolSpec> {
    // A switched-off account's agents see no tools.
    if !app.enablement.is_enabled(account) {
        return Vec::new();
    }
    let builtin = Tool::ALL.iter().map(|t| ToolSpec {
        name: t.name().to_owned(),
        description: t.description().to_owned(),
        input_schema: t.input_schema(),
    });
    let client = app.registry.tools(account).into_iter().map(|t| ToolSpec {
        name: glovebox_proto::client_tools::exposed_name(&t.name),
        description: t.description,
        input_schema: t.input_schema,
    });
    builtin
        .chain(client)
        .filter(|t| profile.allows(&t.name))
        .collect()
}
