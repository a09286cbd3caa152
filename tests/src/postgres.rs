//! A private PostgreSQL cluster for tests and benchmarks: `initdb` and `pg_ctl` in a temporary
//! directory, listening on a Unix socket in that directory only (no TCP), trust authentication,
//! stopped (immediately) on drop. initdb refuses root: as root the cluster runs as the `postgres`
//! system user (the directory is given to it); otherwise as the user running the test.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The superuser the cluster is made with.
pub const USER: &str = "fleet";

pub struct Postgres {
    /// Kept for its lifetime: removed on drop, after the server stops.
    _dir: tempfile::TempDir,
    data: PathBuf,
    socket_dir: PathBuf,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
}

/// The directory holding `initdb` and `pg_ctl`: Debian's `/usr/lib/postgresql/<n>/bin` (not on
/// PATH), newest first, else whatever PATH has.
pub fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort();
    if let Some(newest) = versions.pop() {
        return newest;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|p| p.join("initdb").exists())
        .expect("PostgreSQL's initdb (apt-get install postgresql; tests/run installs it)")
}

impl Postgres {
    pub fn start() -> Postgres {
        let dir = tempfile::Builder::new().prefix("pg").tempdir().unwrap();
        let data = dir.path().join("data");
        let socket_dir = dir.path().join("s");
        std::fs::create_dir(&socket_dir).unwrap();
        let owner = nix::unistd::geteuid().is_root().then(|| {
            let pw = nix::unistd::User::from_name("postgres")
                .unwrap()
                .expect("the postgres system user (from the postgresql package)");
            for p in [dir.path(), socket_dir.as_path()] {
                std::os::unix::fs::chown(p, Some(pw.uid.as_raw()), Some(pw.gid.as_raw())).unwrap();
            }
            (pw.uid.as_raw(), pw.gid.as_raw())
        });
        let pg = Postgres {
            _dir: dir,
            data,
            socket_dir,
            bin: bin_dir(),
            owner,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                pg.data.to_str().unwrap(),
                "-U",
                USER,
                "-A",
                "trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let options = format!(
            "-k {} -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
            pg.socket_dir.display()
        );
        let log = pg.socket_dir.parent().unwrap().join("postgres.log");
        pg.run(
            "pg_ctl",
            &[
                "-D",
                pg.data.to_str().unwrap(),
                "-o",
                &options,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        pg
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.current_dir(self.socket_dir.parent().unwrap())
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            c.uid(uid).gid(gid);
        }
        c
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = self.command(program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The URL of database `db` (as the superuser, over the socket).
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{USER}@localhost/{db}?host={}",
            self.socket_dir.display()
        )
    }

    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// A pool on database `db`.
    pub async fn pool(&self, db: &str) -> sqlx::PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url(db))
            .await
            .unwrap()
    }

    /// Creates database `name` and returns its URL.
    pub async fn create_db(&self, name: &str) -> String {
        let pool = self.pool("postgres").await;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&pool)
            .await
            .unwrap();
        self.url(name)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args([
                "-D",
                self.data.to_str().unwrap_or_default(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
