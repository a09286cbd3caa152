//! Whether an account's agents get tools at all: `enabled` in `glovebox.yaml`, re-read when the
//! file changes, so `glovebox enable/disable` takes effect for the next hello and the next call.
//! Unknown accounts and unreadable files count as disabled.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

type Stamp = glovebox_config::FileStamp;

pub struct Enablement {
    file: Option<PathBuf>,
    state: Mutex<(Option<Stamp>, HashMap<String, bool>)>,
}

impl Enablement {
    /// `file` is the `glovebox.yaml` to follow (none: `initial` is final).
    pub fn new(file: Option<PathBuf>, initial: HashMap<String, bool>) -> Enablement {
        let stamp = file.as_deref().and_then(glovebox_config::file_stamp);
        Enablement {
            file,
            state: Mutex::new((stamp, initial)),
        }
    }

    pub fn is_enabled(&self, account: &str) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = &self.file {
            let stamp = glovebox_config::file_stamp(file);
            if stamp != state.0 {
                state.0 = stamp;
                match std::fs::read_to_string(file)
                    .ok()
                    .and_then(|t| glovebox_config::Config::parse(&t, file).ok())
                {
                    Some(config) => {
                        state.1 = config
                            .accounts
                            .iter()
                            .map(|a| (a.id.clone(), a.enabled))
                            .collect();
                    }
                    None => {
                        tracing::warn!(file = %file.display(), "could not re-read enablement; keeping the last known")
                    }
                }
            }
        }
        state.1.get(account).copied().unwrap_or(false)
    }
}
