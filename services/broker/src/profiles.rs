//! Connection profiles: a connection says whether it is a `desktop` client (the default: it may use
//! the tools that act on this machine) or a `web` client (a browser tab: client tools only). A
//! session, once bound to a profile, cannot be resumed with another (HTTP 409).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use glovebox_config::AccountId;
use glovebox_proto::tool_name::ToolName;

/// Sessions remembered for the profile check; the oldest are forgotten first.
pub const MAX_SESSIONS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Desktop,
    Web,
}

impl Profile {
    pub fn parse(s: &str) -> Option<Profile> {
        match s {
            "desktop" => Some(Profile::Desktop),
            "web" => Some(Profile::Web),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Desktop => "desktop",
            Profile::Web => "web",
        }
    }

    /// Whether a connection of this profile may see and call `tool`: the built-in file and exec
    /// tools are for desktop clients; client tools are for every profile.
    pub fn allows(self, tool: ToolName<'_>) -> bool {
        self == Profile::Desktop || matches!(tool, ToolName::Client { .. })
    }
}

/// (account, session) → profile, and the keys in the order they were first seen.
type Bound = (
    HashMap<(AccountId, String), Profile>,
    VecDeque<(AccountId, String)>,
);

/// Which profile each (account, session) was first seen with.
pub struct Sessions {
    inner: Mutex<Bound>,
    cap: usize,
}

impl Sessions {
    pub fn new(cap: usize) -> Sessions {
        Sessions {
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
            cap,
        }
    }

    /// Binds a session to a profile, or returns the profile it is already bound to if different.
    pub fn bind(
        &self,
        account: &AccountId,
        session: &str,
        profile: Profile,
    ) -> Result<(), Profile> {
        let mut inner = crate::sync::lock(&self.inner);
        let key = (account.clone(), session.to_owned());
        if let Some(bound) = inner.0.get(&key) {
            return if *bound == profile {
                Ok(())
            } else {
                Err(*bound)
            };
        }
        if inner.1.len() >= self.cap
            && let Some(old) = inner.1.pop_front()
        {
            inner.0.remove(&old);
        }
        inner.0.insert(key.clone(), profile);
        inner.1.push_back(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_limit_tools() {
        let allows = |p: Profile, name: &str| p.allows(ToolName::parse(name));
        assert!(allows(Profile::Desktop, "file_read") && allows(Profile::Desktop, "client__x"));
        assert!(!allows(Profile::Web, "file_read") && !allows(Profile::Web, "exec_run"));
        assert!(allows(Profile::Web, "client__read_page"));
        assert!(
            !allows(Profile::Web, "git__status"),
            "a pack tool is not a client tool"
        );
        assert_eq!(Profile::parse("mobile"), None);
    }

    #[test]
    fn a_session_keeps_its_profile_per_account() {
        let s = Sessions::new(2);
        assert_eq!(s.bind(&"a".parse().unwrap(), "s1", Profile::Web), Ok(()));
        assert_eq!(s.bind(&"a".parse().unwrap(), "s1", Profile::Web), Ok(()));
        assert_eq!(
            s.bind(&"a".parse().unwrap(), "s1", Profile::Desktop),
            Err(Profile::Web)
        );
        assert_eq!(
            s.bind(&"b".parse().unwrap(), "s1", Profile::Desktop),
            Ok(()),
            "sessions are per account"
        );
        // the cap forgets the oldest
        assert_eq!(
            s.bind(&"a".parse().unwrap(), "s2", Profile::Desktop),
            Ok(())
        );
        assert_eq!(
            s.bind(&"a".parse().unwrap(), "s1", Profile::Desktop),
            Ok(())
        );
    }
}
