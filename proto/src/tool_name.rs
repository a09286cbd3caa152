//! [`ToolName`]: the tool a call names, read once where the call comes in, so everything after
//! knows which kind of tool it is without reading the name again: a built-in tool (an enum), a
//! pack's tool (`<pack>__<tool>`, both parts checked) or a provider's tool (`client__<name>`,
//! checked).

use crate::tools::Tool;

/// The tool a call names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolName<'a> {
    /// A built-in tool, acted on by the account's executor.
    Builtin(Tool),
    /// A tool of one of the account's packs, called through its pack host.
    Pack { pack: &'a str, tool: &'a str },
    /// A tool a connected client provides (`bare` is its name without `client__`).
    Client { bare: &'a str },
    /// No tool can have this name.
    Unknown,
}

impl<'a> ToolName<'a> {
    /// Reads `name`: a provider's tool first (its prefix is reserved), then a pack's tool, then a
    /// built-in one.
    pub fn parse(name: &'a str) -> ToolName<'a> {
        if let Some(bare) = crate::client_tools::bare_name(name) {
            return ToolName::Client { bare };
        }
        if let Some((pack, tool)) = crate::packs::split_name(name) {
            return ToolName::Pack { pack, tool };
        }
        match Tool::from_name(name) {
            Some(tool) => ToolName::Builtin(tool),
            None => ToolName::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_name_is_read_as_its_kind_and_the_rest_is_unknown() {
        assert_eq!(
            ToolName::parse("file_read"),
            ToolName::Builtin(Tool::FileRead)
        );
        assert_eq!(
            ToolName::parse("git__status"),
            ToolName::Pack {
                pack: "git",
                tool: "status"
            }
        );
        assert_eq!(
            ToolName::parse("client__click"),
            ToolName::Client { bare: "click" }
        );
        for unknown in ["", "file_reed", "client__a.b", "__x", "git__", "a b__c"] {
            assert_eq!(ToolName::parse(unknown), ToolName::Unknown, "{unknown:?}");
        }
    }
}
