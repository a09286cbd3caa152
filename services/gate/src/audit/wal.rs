//! SQLite's WAL folded into the database off the writer's path. Left to itself, the writer's
//! connection checkpoints every 1,000 WAL pages — under load several times a second, each a sync
//! of the WAL and of the database on the thread every caller waits for, and each copying again
//! the pages every commit touches (the newest leaf of the table and of each index). Here a
//! connection of its own checkpoints at most once per [`CHECKPOINT_EVERY`] while rows are being
//! committed: first alongside the writer (`PASSIVE`: the bulk of the copying, never blocking a
//! commit), then the pages committed meanwhile with the writer held (`RESTART`, waiting at most
//! [`RESTART_WAIT`] for it and for readers), and then it begins the WAL again itself with a
//! commit of no content, so that the sync of the WAL's new header is this thread's and not a
//! call's. A commit the restart holds waits for it in short steps (the writer's busy handler).
//!
//! A WAL that reaches half the writer's bound between two passes has the next one come sooner
//! (an eighth of [`CHECKPOINT_EVERY`] after the last). Under a load that fills the WAL faster
//! still, the writer's own connection checkpoints
//! (`PASSIVE`) after the commit that makes the WAL hold [`WRITER_AUTOCHECKPOINT_PAGES`] (16 MiB,
//! its bound), finding most of it already copied. It waits for a pass of the thread still running
//! (SQLite's own automatic checkpoint would skip it and let the WAL grow for as long as the pass
//! takes on a slow disk), so the WAL holds at most the bound unless a reader keeps it in use.
//!
//! Durability is unchanged: a commit is in the WAL when its caller is answered; a checkpoint
//! only moves committed pages into the database file, synced before the WAL is reused.

use std::path::Path;
use std::time::Duration;

use super::paced::Paced;

/// The least time between two checkpoints while rows are committed; the last commit's rows
/// reach the database file within it.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The longest the restart waits for the writer's commit and for readers (an administrator's
/// `sqlite3` holding a read): past it, the WAL grows on and the next pass tries again.
pub const RESTART_WAIT: Duration = Duration::from_millis(20);
/// The longest the writer waits for the checkpoint thread's pass to copy a WAL past its bound
/// (past it, the WAL grows on and the next commit tries again).
const PAST_THE_BOUND_WAIT: Duration = Duration::from_secs(1);
/// The WAL's length past which the writer checkpoints it itself while the checkpoint thread runs
/// (SQLite's own automatic checkpoint comes at 1,000 pages): 16 MiB of WAL.
pub const WRITER_AUTOCHECKPOINT_PAGES: u32 = 4_000;

/// The checkpoint thread. Dropping it ends the thread and closes its connection (before the
/// writer's, which folds what is left when it closes).
pub struct WalCheckpoints {
    thread: Paced<()>,
}

impl WalCheckpoints {
    /// Starts checkpointing the database at `path` and raises `writer`'s own threshold; on any
    /// failure the writer keeps checkpointing itself, as SQLite does by default.
    pub fn start(path: &Path, writer: &rusqlite::Connection) -> Option<WalCheckpoints> {
        let start = || -> Result<WalCheckpoints, String> {
            let conn = rusqlite::Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| e.to_string())?;
            conn.busy_timeout(RESTART_WAIT).map_err(|e| e.to_string())?;
            // As the writer's: the commit that begins the WAL again syncs the WAL's new header,
            // and not its page too, while the writer waits for it.
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(|e| e.to_string())?;
            let thread = Paced::start("audit-wal", CHECKPOINT_EVERY, move |()| checkpoint(&conn))
                .map_err(|e| e.to_string())?;
            writer.wal_hook(Some(checkpoint_past_the_bound));
            Ok(WalCheckpoints { thread })
        };
        start()
            .inspect_err(
                |e| tracing::warn!(error = %e, "audit WAL checkpoints stay on the writer's thread"),
            )
            .ok()
    }

    /// Rows were committed (on this thread): a checkpoint follows within [`CHECKPOINT_EVERY`], or
    /// within an eighth of it if the WAL has reached [`EARLY_CHECKPOINT_PAGES`]. Never waits.
    pub fn committed(&self) {
        if WAL_PAGES.get() >= EARLY_CHECKPOINT_PAGES {
            self.thread.offer_soon(());
        } else {
            self.thread.offer(());
        }
    }
}

/// The WAL's length past which the checkpoint thread waits out only an eighth of
/// [`CHECKPOINT_EVERY`]: half the writer's bound, so that a steady load that fills the WAL faster
/// than one pass a second (a thousand calls a second, one commit each, do: each commit appends
/// the table's and each index's newest page again) has it copied by the thread before the writer
/// reaches its bound and copies and syncs it on the thread every caller waits for.
const EARLY_CHECKPOINT_PAGES: u32 = WRITER_AUTOCHECKPOINT_PAGES / 2;

thread_local! {
    /// The WAL's length after this thread's last commit, as the writer's hook was told.
    static WAL_PAGES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The writer's hook after each commit (`pages`: the WAL's length): past the bound, the WAL is
/// copied into the database before the writer goes on. A checkpoint that cannot start in time is
/// tried again after the next commit; the commit itself has succeeded either way, so no error is
/// returned for it.
fn checkpoint_past_the_bound(
    wal: &rusqlite::hooks::Wal,
    pages: std::ffi::c_int,
) -> rusqlite::Result<()> {
    WAL_PAGES.set(u32::try_from(pages).unwrap_or(0));
    if pages < WRITER_AUTOCHECKPOINT_PAGES as std::ffi::c_int {
        return Ok(());
    }
    // A pass of the checkpoint thread holds SQLite's checkpoint lock, which a checkpoint does
    // not wait for by itself: waited for here, in the busy handler's steps. Passive, as SQLite's
    // own: it never waits for readers, and once it has copied every page the next commit starts
    // the WAL from its beginning.
    let until = std::time::Instant::now() + PAST_THE_BOUND_WAIT;
    while let Err(e) = wal.checkpoint_v2(rusqlite::hooks::CheckpointMode::PASSIVE) {
        if std::time::Instant::now() >= until {
            tracing::debug!(error = %e, "audit WAL checkpoint past its bound did not finish");
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(())
}

fn checkpoint(conn: &rusqlite::Connection) {
    // Each answers (busy, WAL pages, pages in the database); busy is no error, it is tried again
    // next time.
    let pass = |mode: &str| {
        conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
            row.get::<_, i64>(0)
        })
        .inspect_err(|e| tracing::warn!(error = %e, mode, "audit WAL checkpoint failed"))
    };
    if pass("PASSIVE").is_ok() && pass("RESTART").is_ok_and(|busy| busy == 0) {
        begin_the_wal_again(conn);
    }
}

/// Starts the WAL from its beginning on this thread, once a restart has copied all of it. Whoever
/// commits first into a WAL that was copied whole starts it anew, and SQLite syncs its new header
/// to the disk before that commit's pages (at every `synchronous` level): left to the writer,
/// the first call after each pass, and every call after a second without any, would wait for that
/// sync. Here the pass makes that first commit itself, rewriting the database's `user_version`
/// with the value it holds (one page, no content changed), so the writer appends to a WAL already
/// begun. A commit of the writer that comes first begins it instead; this one then only appends.
fn begin_the_wal_again(conn: &rusqlite::Connection) {
    let begin = || -> rusqlite::Result<()> {
        let tx =
            rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        tx.execute_batch(&format!("PRAGMA user_version = {version}"))?;
        tx.commit()
    };
    if let Err(e) = begin() {
        tracing::debug!(error = %e, "audit WAL not begun again by the checkpoint thread");
    }
}
