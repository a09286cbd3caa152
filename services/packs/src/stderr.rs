//! A pack server's stderr: copied to a bounded log file of its own (rotated once to `.1` when it
//! reaches [`MAX_LOG_BYTES`], so at most twice that is kept), with its last [`TAIL_BYTES`] kept
//! in memory for the pack's error when it fails to start or exits. The server is not trusted: the
//! tail is shown only with secrets masked (`glovebox_redact`) and without the partial line its
//! bound cut, since the error reaches glovebox's log, the console and the agent.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;

/// Largest stderr log of one pack before it is rotated.
pub const MAX_LOG_BYTES: u64 = 1024 * 1024;
/// How much of the end of a pack's stderr its error shows.
pub const TAIL_BYTES: usize = 1024;

/// The last bytes a pack wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<Kept>>);

#[derive(Debug, Default)]
struct Kept {
    bytes: Vec<u8>,
    /// Whether earlier bytes were dropped (the first line kept may be the end of a longer one).
    cut: bool,
    /// Masks the values of the secrets the pack was given wherever they appear, and what looks
    /// like a secret.
    masker: glovebox_redact::Masker,
}

impl Tail {
    /// A tail that masks `secrets` (the values of the secrets the pack's server was given) by
    /// value, besides what looks like a secret.
    pub fn masking(secrets: impl IntoIterator<Item = String>) -> Tail {
        Tail(Arc::new(Mutex::new(Kept {
            masker: glovebox_redact::Masker::new(secrets),
            ..Kept::default()
        })))
    }

    fn push(&self, bytes: &[u8]) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.bytes.extend_from_slice(bytes);
        let excess = kept.bytes.len().saturating_sub(TAIL_BYTES);
        if excess > 0 {
            kept.bytes.drain(..excess);
            kept.cut = true;
        }
    }

    /// The tail as text (its last whole lines, secrets masked), empty if the pack wrote nothing.
    pub fn text(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&kept.bytes);
        let whole = if kept.cut {
            // A secret cut in two would no longer look like one: its half line goes.
            text.split_once('\n').map_or("", |(_, rest)| rest)
        } else {
            &text
        };
        kept.masker.mask(whole.trim())
    }
}

/// Copies `stderr` to `log` until it closes, keeping `tail`.
pub fn spawn_copy(stderr: tokio::process::ChildStderr, log: PathBuf, tail: Tail) {
    tokio::spawn(async move {
        let mut stderr = stderr;
        let mut file = open_log(&log);
        let mut written = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        let mut buf = vec![0u8; 8192];
        loop {
            let n = match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            tail.push(&buf[..n]);
            if written + n as u64 > MAX_LOG_BYTES {
                let mut old = log.as_os_str().to_owned();
                old.push(".1");
                let _ = std::fs::rename(&log, &old);
                file = open_log(&log);
                written = 0;
            }
            if let Some(f) = file.as_mut()
                && f.write_all(&buf[..n]).is_ok()
            {
                written += n as u64;
            }
        }
    });
}

fn open_log(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let t = Tail::default();
        assert_eq!(t.text(), "");
        t.push(b"first line\n");
        t.push(&vec![b'x'; TAIL_BYTES]);
        t.push(b"\nlast line\n");
        let text = t.text();
        assert!(text.ends_with("last line"), "{text}");
        assert!(!text.contains("first"), "{text}");
        assert!(text.len() <= TAIL_BYTES);
    }

    #[test]
    fn the_tail_masks_secrets_and_drops_the_line_its_bound_cut() {
        let t = Tail::default();
        t.push(b"connecting to postgres://app:hunter2@db/prod\n");
        t.push(b"error: API_KEY=sk-live-4f9a8b7c6d5e4f3a2b1c rejected\n");
        let text = t.text();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("sk-live"), "{text}");
        assert!(text.contains("postgres://app:****@db/prod"), "{text}");
        assert!(text.contains("rejected"), "{text}");

        // A secret the pack was given is masked by its value, in any form of words.
        let t = Tail::masking(["correct horse battery".to_owned(), "pw".to_owned()]);
        t.push(b"login failed for password correct horse battery (pw ok?)\n");
        let text = t.text();
        assert!(!text.contains("correct horse"), "{text}");
        assert!(text.contains("password ****"), "{text}");
        assert!(
            text.contains("(pw ok?)"),
            "too short to mask by value: {text}"
        );

        // A long line cut by the bound: its end (`abcdef…` below) is not shown, whole lines are.
        let t = Tail::default();
        let mut long = b"token ".to_vec();
        long.extend(std::iter::repeat_n(b'a', TAIL_BYTES));
        long.extend_from_slice(b"b1c2\nstill failing\n");
        t.push(&long);
        assert_eq!(t.text(), "still failing");
    }

    #[tokio::test]
    async fn the_log_is_rotated_at_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.stderr.log");
        std::fs::write(&log, vec![b'a'; MAX_LOG_BYTES as usize - 4]).unwrap();
        let mut child = tokio::process::Command::new("/bin/sh")
            .args(["-c", "printf 'hello world' >&2"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let tail = Tail::default();
        spawn_copy(child.stderr.take().unwrap(), log.clone(), tail.clone());
        child.wait().await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read(&log)
            .map(|b| b != b"hello world")
            .unwrap_or(true)
        {
            assert!(std::time::Instant::now() < deadline, "not rotated");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let old = std::fs::metadata(dir.path().join("p.stderr.log.1")).unwrap();
        assert_eq!(old.len(), MAX_LOG_BYTES - 4);
        assert_eq!(tail.text(), "hello world");
    }
}
