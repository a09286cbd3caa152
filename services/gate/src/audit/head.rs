//! The audit's head file (`<state>/audit.head`): the signed head of the chain, written on a
//! thread of its own at most once per [`HEAD_INTERVAL`] ([`HeadWriter`]), each write replacing
//! the file at once as readers see it ([`HeadFile`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::chain::{AuditKey, Head, rfc3339_millis};
use super::paced;

/// Where the chain ends, as a head records it.
pub(super) struct ChainEnd<'a> {
    pub rows: u64,
    pub last_id: i64,
    pub mac: &'a str,
}

/// Writes the head file on its own thread ([`paced::Paced`]), newest head first, at most once
/// per [`HEAD_INTERVAL`]. Replacing the file on the writer's path cost every call a disk write
/// (and, written after every batch, a tenth of the gate's CPU with calls one at a time); here
/// the writer only hands the head's fields over (the thread signs the heads it writes) and
/// answers its callers. The head may lag the database by the rows of the last
/// [`HEAD_INTERVAL`], never lead it (it is handed over only after its rows are committed), so it
/// anchors every row before it; readers always see a whole file. Checkpoints asked for (at
/// start, at a stop) write their head before they are acknowledged: [`HeadWriter::write_now`].
pub(super) struct HeadWriter {
    file: Arc<HeadFile>,
    /// None: the thread could not be started, and heads are written on the writer's.
    thread: Option<paced::Paced<(u64, Head)>>,
    /// Each head's number: a head is written only over an older one.
    next: u64,
}

/// The shortest time between two writes of the head file.
pub(super) const HEAD_INTERVAL: Duration = Duration::from_millis(50);

struct HeadFile {
    path: std::path::PathBuf,
    /// The file the next head is written into before it is swapped in ([`HeadFile::replace`]).
    spare: std::path::PathBuf,
    /// The number of the head on disk; held while writing.
    written: std::sync::Mutex<u64>,
}

impl HeadFile {
    fn new(path: std::path::PathBuf) -> HeadFile {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        HeadFile {
            spare: path.with_file_name(format!(".{name}.next")),
            path,
            written: std::sync::Mutex::new(0),
        }
    }

    /// Writes head number `n` unless a newer one is already on disk.
    fn write(&self, n: u64, text: &str) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if n <= *written {
            return;
        }
        if let Err(e) = self.replace(text.as_bytes()) {
            tracing::error!(error = %e, "could not write the audit head file");
        }
        *written = n;
    }

    /// Replaces the head file's content at once, as readers see it, without making or freeing
    /// an inode: the text goes into the spare file, which is then exchanged with the head file
    /// (`renameat2(RENAME_EXCHANGE)`), so the spare holds the head before and is overwritten
    /// next time. A new file per head (written, then renamed over the head) cost ext4 an inode
    /// allocation each time, which grows with the inodes freed in the last seconds on a file
    /// system without a journal — milliseconds per head, twenty heads a second, under load.
    /// Where exchange is not offered (or at the first head), the spare is renamed over the head.
    fn replace(&self, text: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut spare = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&self.spare)?;
        spare.write_all(text)?;
        drop(spare);
        let cwd = || nix::fcntl::AT_FDCWD;
        let exchange = nix::fcntl::RenameFlags::RENAME_EXCHANGE;
        match nix::fcntl::renameat2(cwd(), &self.spare, cwd(), &self.path, exchange) {
            Ok(()) => Ok(()),
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::EINVAL) => {
                std::fs::rename(&self.spare, &self.path)
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl HeadWriter {
    /// The head thread signs each head it writes: the writer hands over only the fields, and
    /// the heads replaced before their turn are never signed.
    pub(super) fn start(path: std::path::PathBuf, key: &AuditKey) -> HeadWriter {
        let file = Arc::new(HeadFile::new(path));
        let own = Arc::clone(&file);
        let key = key.clone();
        let thread = paced::Paced::start(
            "audit-head",
            HEAD_INTERVAL,
            move |(n, head): (u64, Head)| own.write(n, &head.encode(&key)),
        )
        .ok();
        HeadWriter {
            file,
            thread,
            next: 0,
        }
    }

    fn head(&mut self, end: ChainEnd<'_>) -> (u64, Head) {
        let head = Head {
            rows: end.rows,
            last_id: end.last_id,
            mac: end.mac.to_owned(),
            ts: rfc3339_millis(SystemTime::now()),
        };
        self.next += 1;
        (self.next, head)
    }

    /// Hands the head of the chain ending at `end` over to be written (signed with `key` when
    /// there is no head thread).
    pub(super) fn write(&mut self, key: &AuditKey, end: ChainEnd<'_>) {
        let (n, head) = self.head(end);
        match &self.thread {
            Some(thread) => thread.offer((n, head)),
            None => self.file.write(n, &head.encode(key)),
        }
    }

    /// Writes the head of the chain ending at `end` before returning (any older head handed
    /// over is dropped).
    pub(super) fn write_now(&mut self, key: &AuditKey, end: ChainEnd<'_>) {
        let (n, head) = self.head(end);
        if let Some(thread) = &self.thread {
            thread.take();
        }
        self.file.write(n, &head.encode(key));
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn each_head_replaces_the_last_in_the_same_two_inodes() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let head = HeadFile::new(dir.path().join("audit.head"));
        let inode = |p: &Path| std::fs::metadata(p).unwrap().ino();
        head.write(1, "head 1\n");
        head.write(2, "head 2\n");
        let pair = [inode(&head.path), inode(&head.spare)];
        for n in 3..=6u64 {
            head.write(n, &format!("head {n}\n"));
            assert_eq!(
                std::fs::read_to_string(&head.path).unwrap(),
                format!("head {n}\n")
            );
            let mut now = [inode(&head.path), inode(&head.spare)];
            now.sort_unstable();
            let mut before = pair;
            before.sort_unstable();
            assert_eq!(now, before, "head {n} made a new file");
        }
        // an older head never replaces a newer one
        head.write(4, "head 4 again\n");
        assert_eq!(std::fs::read_to_string(&head.path).unwrap(), "head 6\n");
        let mode = std::fs::metadata(&head.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "only the head and its spare"
        );
    }

    #[test]
    fn a_link_put_in_the_spare_files_place_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let head = HeadFile::new(dir.path().join("audit.head"));
        head.write(1, "head 1\n");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "untouched").unwrap();
        let _ = std::fs::remove_file(&head.spare);
        std::os::unix::fs::symlink(&target, &head.spare).unwrap();
        head.write(2, "head 2\n");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
        assert_eq!(std::fs::read_to_string(&head.path).unwrap(), "head 1\n");
    }
}
