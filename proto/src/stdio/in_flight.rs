//! The record of a handed-over stdio session's tool calls in flight (`handover`), kept in a
//! sealed memory file that `glovebox mcp` made and handed over with its stdio. The broker writes
//! a call's JSON-RPC id into a slot when the call starts and clears the slot when it ends: one
//! `pwrite` each, no wake-up of the bridge. When the broker dies, the bridge reads the file and
//! answers each recorded call with an error, so the MCP client is not left waiting for answers
//! nobody will send. A call is recorded until its answer is on its way: one dropped unanswered
//! (a broker stopping gracefully drops its calls) stays recorded.
//!
//! The file is [`SLOTS`] slots of [`SLOT_BYTES`]: the first byte is the id's length (0: free),
//! then the id as JSON (a number or a string). An id too long for a slot is not recorded.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// How many calls the file records at once; more in flight are not recorded.
pub const SLOTS: usize = 256;
/// One slot: a length byte and up to 127 bytes of JSON.
pub const SLOT_BYTES: usize = 128;
/// The file's size, fixed by its seals.
pub const FILE_BYTES: usize = SLOTS * SLOT_BYTES;

/// The bytes of a slot recording `id_json`, or `None` when it does not fit.
pub fn slot_of(id_json: &str) -> Option<Vec<u8>> {
    let len = u8::try_from(id_json.len()).ok()?;
    if len == 0 || usize::from(len) >= SLOT_BYTES {
        return None;
    }
    let mut slot = Vec::with_capacity(SLOT_BYTES);
    slot.push(len);
    slot.extend_from_slice(id_json.as_bytes());
    Some(slot)
}

/// The ids recorded in `file` (its bytes), each a JSON number or string; anything else in a slot
/// is skipped.
pub fn recorded(file: &[u8]) -> Vec<serde_json::Value> {
    file.chunks(SLOT_BYTES)
        .filter_map(|slot| {
            let len = usize::from(*slot.first()?);
            let text = slot.get(1..=len).filter(|_| len > 0)?;
            match serde_json::from_slice(text).ok()? {
                id @ (serde_json::Value::Number(_) | serde_json::Value::String(_)) => Some(id),
                _ => None,
            }
        })
        .collect()
}

/// A new record for a bridge to hand over: a memory file of [`FILE_BYTES`], sealed against
/// growing and shrinking.
pub fn new_file() -> std::io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags, fcntl_add_seals, ftruncate, memfd_create};
    let fd = memfd_create(
        "glovebox-mcp-in-flight",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    ftruncate(&fd, FILE_BYTES as u64)?;
    fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL)?;
    Ok(fd)
}

/// Whether `fd` is a file this module may write: a memory file of [`FILE_BYTES`] sealed against
/// growing and shrinking (so no write of ours reaches anything else).
pub fn is_sealed_record(fd: &OwnedFd) -> bool {
    use rustix::fs::{FileType, SealFlags, fcntl_get_seals, fstat};
    let Ok(stat) = fstat(fd.as_fd()) else {
        return false;
    };
    let seals = fcntl_get_seals(fd.as_fd()).unwrap_or(SealFlags::empty());
    FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
        && usize::try_from(stat.st_size).ok() == Some(FILE_BYTES)
        && seals.contains(SealFlags::GROW | SealFlags::SHRINK)
}

/// The broker's writer of one session's record.
pub struct InFlight {
    file: std::fs::File,
    free: Mutex<Vec<usize>>,
}

/// A recorded call. [`Recorded::answered`] clears its slot; dropped without it (the broker
/// stopping, its runtime dropping the call) the call stays recorded, for the bridge to answer.
pub struct Recorded<'a> {
    record: &'a InFlight,
    slot: usize,
}

impl InFlight {
    /// Writes into `fd`, which [`is_sealed_record`] accepted.
    pub fn new(fd: OwnedFd) -> InFlight {
        InFlight {
            file: std::fs::File::from(fd),
            free: Mutex::new((0..SLOTS).rev().collect()),
        }
    }

    /// Records the call with id `id_json` until the guard is dropped; `None` when every slot is
    /// taken, the id does not fit, or the write fails.
    pub fn record(&self, id_json: &str) -> Option<Recorded<'_>> {
        let bytes = slot_of(id_json)?;
        let slot = self.lock().pop()?;
        if self
            .file
            .write_all_at(&bytes, (slot * SLOT_BYTES) as u64)
            .is_err()
        {
            self.lock().push(slot);
            return None;
        }
        Some(Recorded { record: self, slot })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Recorded<'_> {
    /// The call's answer is being sent: the bridge must not answer it.
    pub fn answered(self) {
        let offset = (self.slot * SLOT_BYTES) as u64;
        let _ = self.record.file.write_all_at(&[0], offset);
    }
}

impl Drop for Recorded<'_> {
    /// The slot may be taken again (a call dropped while its broker runs is not answered by
    /// anyone: its id may be overwritten).
    fn drop(&mut self) {
        self.record.lock().push(self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{MemfdFlags, SealFlags, fcntl_add_seals, ftruncate, memfd_create};

    fn sealed_file() -> OwnedFd {
        new_file().unwrap()
    }

    fn read_all(fd: &OwnedFd) -> Vec<u8> {
        let file = std::fs::File::from(fd.try_clone().unwrap());
        let mut bytes = vec![0; FILE_BYTES];
        file.read_exact_at(&mut bytes, 0).unwrap();
        bytes
    }

    #[test]
    fn a_call_is_recorded_while_it_runs_and_cleared_when_it_ends() {
        let fd = sealed_file();
        assert!(is_sealed_record(&fd));
        let record = InFlight::new(fd.try_clone().unwrap());
        let a = record.record("7").unwrap();
        let b = record.record(r#""call-b""#).unwrap();
        assert_eq!(
            recorded(&read_all(&fd)),
            vec![serde_json::json!(7), serde_json::json!("call-b")]
        );
        a.answered();
        assert_eq!(recorded(&read_all(&fd)), vec![serde_json::json!("call-b")]);
        b.answered();
        assert!(recorded(&read_all(&fd)).is_empty());
    }

    #[test]
    fn a_call_dropped_unanswered_stays_recorded_until_its_slot_is_taken_again() {
        let fd = sealed_file();
        let record = InFlight::new(fd.try_clone().unwrap());
        drop(record.record("1").unwrap());
        assert_eq!(recorded(&read_all(&fd)), vec![serde_json::json!(1)]);
        record.record("2").unwrap().answered();
        assert!(recorded(&read_all(&fd)).is_empty());
    }

    #[test]
    fn a_full_record_or_an_oversized_id_records_nothing_and_slots_are_reused() {
        let record = InFlight::new(sealed_file());
        assert!(record.record(&format!("\"{}\"", "x".repeat(200))).is_none());
        let held: Vec<_> = (0..SLOTS)
            .map(|i| record.record(&i.to_string()).unwrap())
            .collect();
        assert!(record.record("9999").is_none(), "every slot is taken");
        drop(held);
        assert!(
            record.record("9999").is_some(),
            "freed slots are used again"
        );
    }

    #[test]
    fn only_numbers_and_strings_are_read_back() {
        let mut file = vec![0u8; FILE_BYTES];
        for (i, text) in [r#"{"a":1}"#, "[1]", "null", "12", r#""ok""#, "not json"]
            .iter()
            .enumerate()
        {
            let slot = slot_of(text).unwrap();
            file[i * SLOT_BYTES..i * SLOT_BYTES + slot.len()].copy_from_slice(&slot);
        }
        // a length past the slot's end reads as nothing
        file[10 * SLOT_BYTES] = 200;
        assert_eq!(
            recorded(&file),
            vec![serde_json::json!(12), serde_json::json!("ok")]
        );
    }

    #[test]
    fn an_unsealed_or_wrongly_sized_file_is_not_written() {
        let plain = tempfile::tempfile().unwrap();
        plain.set_len(FILE_BYTES as u64).unwrap();
        assert!(!is_sealed_record(&OwnedFd::from(plain)));
        let unsealed = memfd_create("x", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        ftruncate(&unsealed, FILE_BYTES as u64).unwrap();
        assert!(!is_sealed_record(&unsealed), "it could still grow");
        let small = memfd_create("x", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        ftruncate(&small, 64).unwrap();
        fcntl_add_seals(&small, SealFlags::GROW | SealFlags::SHRINK).unwrap();
        assert!(!is_sealed_record(&small));
        let (r, _w) = std::io::pipe().unwrap();
        assert!(!is_sealed_record(&OwnedFd::from(r)));
    }
}
