//! Fixtures for the executor's unit tests: a temporary workdir and trash, and tickets made
//! straight from plans (what the gate would sign on an allow).

use std::path::PathBuf;

use glovebox_proto::v1::{Plan, TicketBody};

use crate::context::OpContext;

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub work: PathBuf,
    pub trash: PathBuf,
    pub protected: Vec<String>,
    pub key: glovebox_ticket::AccountKey,
    pub jobs: crate::jobs::JobTable,
}

#[allow(clippy::new_without_default)]
impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let state = root.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let scratch = root.join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        let roots = vec![work.clone()];
        Fixture {
            _dir: dir,
            trash: root.join("home/.local/share/Trash"),
            protected: vec![state.to_string_lossy().into_owned()],
            work,
            root,
            key: glovebox_ticket::AccountKey::from_bytes(&[7u8; 32]).unwrap(),
            // Unit tests check what a ticket allows to start; `/bin/true` stands in for the
            // shim (the real one is the glovebox binary, exercised end to end).
            jobs: crate::jobs::JobTable::new(crate::jobs::JobConfig {
                env: Vec::new(),
                shim: PathBuf::from("/bin/true"),
                roots,
                scratch,
                ..crate::jobs::JobConfig::default()
            }),
        }
    }

    pub fn ctx(&self) -> OpContext<'_> {
        OpContext {
            workdir: &self.work,
            protected: &self.protected,
            key: &self.key,
            jobs: &self.jobs,
            trash_dir: &self.trash,
            denied: None,
            tables: false,
        }
    }

    pub fn path(&self, rel: &str) -> String {
        self.work.join(rel).to_string_lossy().into_owned()
    }
}

pub fn ticket_for(plan: &Plan) -> TicketBody {
    TicketBody {
        account: "a".into(),
        call_id: "c".into(),
        tool: "t".into(),
        subjects: plan.subjects.clone(),
        content_tag: plan.content_tag.clone(),
        expires_at_ms: u64::MAX,
        approval: "auto".into(),
        hidden_globs: Vec::new(),
        pack: None,
        job_network: String::new(),
    }
}

/// `result` of `tool`, checked to have every field, with its type, the tool catalog says its
/// results have.
pub fn conforming(
    tool: glovebox_proto::tools::Tool,
    result: serde_json::Value,
) -> serde_json::Value {
    assert!(tool.entry().result_conforms(&result), "{tool:?}: {result}");
    result
}

/// Makes a FIFO at `path` (0600): an object that blocks whoever opens it for reading.
pub fn make_fifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

/// Runs an operation as a call without tables and as one that asks for them (the MCP surfaces),
/// asserts that MCP clients are shown the two results alike (`mcp_form::present`) and that the
/// second carries the table in place of the collection, and returns the second.
pub fn shown_alike_as_tables(
    f: &Fixture,
    tool: glovebox_proto::tools::Tool,
    op: impl Fn(&OpContext<'_>) -> serde_json::Value,
) -> serde_json::Value {
    use glovebox_proto::tools::mcp_form::{TABLE_FIELD, present};
    let as_json = op(&f.ctx());
    let as_table = op(&OpContext {
        tables: true,
        ..f.ctx()
    });
    assert!(as_table[TABLE_FIELD].is_string(), "{as_table}");
    assert!(
        as_table.get("entries").is_none() && as_table.get("matches").is_none(),
        "{as_table}"
    );
    assert_eq!(
        present(Some(tool), as_table.clone()),
        present(Some(tool), as_json)
    );
    as_table
}
