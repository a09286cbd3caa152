//! What a pack's command needs to run besides its own file, found before it starts so that its
//! Landlock domain can grant exactly those installs: every step of the command's symlink chain
//! (a venv's `python` links to a pyenv or uv interpreter under a home directory), the interpreter
//! its `#!` line names (`#!/usr/bin/env node` behind `npx`, found on the pack's `PATH`) with that
//! one's chain, and the interpreter a Python venv's `pyvenv.cfg` names. Also the toolchain
//! directories under the user's home that tools run programs from on their own (`uvx` runs a
//! Python uv installed, `npx` a `node` from nvm), and the reading of a start that failed on a
//! refused path into a hint with the line to add. The file reads are bounded; the rest is pure.

use std::path::{Path, PathBuf};

/// Most files followed from one command (links, interpreters).
const MAX_STEPS: usize = 16;
/// Bytes of a file read to find its `#!` line.
const SHEBANG_BYTES: usize = 256;

/// Toolchain directories under a home that tools execute from by themselves: each one that exists
/// is readable (and executable) by every pack server. Data and credentials kept beside them (uv's
/// `credentials`, cargo's `credentials.toml`) are not in these.
pub const HOME_TOOLCHAINS: &[&str] = &[
    ".pyenv",
    ".nvm",
    ".volta",
    ".asdf",
    ".local/share/fnm",
    ".local/share/uv/python",
    ".local/share/uv/tools",
    ".local/pipx",
    ".local/share/pipx",
    ".cargo/bin",
    ".rustup/toolchains",
    ".bun/bin",
    ".deno/bin",
    ".local/bin",
];

/// The toolchain directories of [`HOME_TOOLCHAINS`] that exist under `home`.
pub fn home_toolchains(home: &Path) -> Vec<PathBuf> {
    HOME_TOOLCHAINS
        .iter()
        .map(|t| home.join(t))
        .filter(|p| p.is_dir())
        .collect()
}

/// Every executable file running `found` takes: `found`, where its links lead, its interpreter
/// (looked up on `path` for `#!/usr/bin/env NAME`) and so on, and a venv's base interpreter.
/// Absolute; at most [`MAX_STEPS`].
pub fn command_chain(found: &Path, path: &str, cwd: &Path) -> Vec<PathBuf> {
    let mut chain: Vec<PathBuf> = Vec::new();
    let mut todo = vec![found.to_owned()];
    while let Some(file) = todo.pop() {
        if chain.len() >= MAX_STEPS || chain.contains(&file) {
            continue;
        }
        chain.push(file.clone());
        if let Ok(target) = std::fs::read_link(&file) {
            let parent = file.parent().unwrap_or(Path::new("/"));
            todo.push(parent.join(target));
            continue;
        }
        if let Some(real) = std::fs::canonicalize(&file).ok().filter(|r| *r != file) {
            // A link in a directory above it (`/usr/local/bin` → `/opt/x/bin`).
            todo.push(real);
        }
        if let Some(interpreter) = shebang(&file).and_then(|s| interpreter_of(&s, path, cwd)) {
            todo.push(interpreter);
        }
        if let Some(base) = venv_home(&file) {
            todo.push(base);
        }
    }
    chain
}

/// The `#!` line of `file`, without `#!`, if it has one.
fn shebang(file: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = vec![0u8; SHEBANG_BYTES];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let head = head.get(..n)?.strip_prefix(b"#!")?;
    let line = head.split(|b| *b == b'\n').next()?;
    Some(String::from_utf8_lossy(line).trim().to_owned())
}

/// The interpreter a `#!` line runs: its first word, or for `env` the program it names (options
/// and `NAME=value` skipped), found on `path`.
pub fn interpreter_of(shebang: &str, path: &str, cwd: &Path) -> Option<PathBuf> {
    let mut words = shebang.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_some_and(|n| n == "env") {
        let program = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
        return crate::places::find_command(program, path, cwd);
    }
    first.is_absolute().then_some(first)
}

/// For `<venv>/bin/python…`, the interpreter the venv was made from (`home` in `pyvenv.cfg`).
fn venv_home(file: &Path) -> Option<PathBuf> {
    let name = file.file_name()?.to_str()?;
    if !name.starts_with("python") {
        return None;
    }
    let venv = file.parent()?.parent()?;
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    let home = cfg.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    home.is_absolute().then(|| home.join(name))
}

/// Reads a failed start's message for a path the kernel refused (`…/x: Permission denied`, `open
/// '/x': EACCES`) and says what would allow it: the line to add to the pack in `mcp.json`.
pub fn refusal_hint(message: &str, pack: &str) -> Option<String> {
    let refused = ["Permission denied", "EACCES", "Operation not permitted"];
    let at = refused.iter().filter_map(|r| message.find(r)).min()?;
    let is_separator = |c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '(' | '`');
    let as_path = |w: &'_ str| {
        let w = w.trim_end_matches([':', ',', '\'', '"', '`', ')', ';']);
        (w.starts_with('/') && w.len() > 1).then(|| w.to_owned())
    };
    // `…/x: Permission denied` names it before; `EACCES: permission denied, open '/x'` after,
    // on the same line.
    let clause = message[..at].rsplit(['\n', ';']).next().unwrap_or_default();
    let before = clause.rsplit(is_separator).find_map(as_path);
    let after = || {
        let line = message[at..].lines().next().unwrap_or_default();
        line.split(is_separator).find_map(as_path)
    };
    let path = before.or_else(after)?;
    let path = path.as_str();
    let dir = Path::new(path)
        .parent()
        .filter(|p| p != &Path::new("/"))
        .unwrap_or(Path::new(path));
    Some(format!(
        "the pack's server is confined (Landlock) and was refused {path}; if it needs it, add \
         \"read\": [\"{}\"] (or \"write\") to pack {pack} in its mcp.json",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn executable(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_venv_python_leads_to_its_base_interpreter_under_a_home() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let base = root.join("home/.pyenv/versions/3.12.1/bin/python3.12");
        executable(&base, "\x7fELF");
        let venv = root.join("work/.venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::os::unix::fs::symlink(&base, venv.join("bin/python3")).unwrap();
        std::os::unix::fs::symlink("python3", venv.join("bin/python")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!(
                "home = {}\nversion = 3.12.1\n",
                base.parent().unwrap().display()
            ),
        )
        .unwrap();
        let chain = command_chain(&venv.join("bin/python"), "", &root);
        assert_eq!(chain[0], venv.join("bin/python"));
        assert!(chain.contains(&venv.join("bin/python3")), "{chain:?}");
        assert!(chain.contains(&base), "{chain:?}");
    }

    #[test]
    fn a_script_leads_to_its_interpreter_found_on_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let node = root.join("home/.nvm/versions/node/v22/bin/node");
        executable(&node, "\x7fELF");
        let npx = root.join("home/.nvm/versions/node/v22/lib/node_modules/npm/bin/npx-cli.js");
        executable(&npx, "#!/usr/bin/env node\nrequire('x')\n");
        let link = root.join("home/.nvm/versions/node/v22/bin/npx");
        std::os::unix::fs::symlink(&npx, &link).unwrap();
        let path = format!("/nonexistent:{}", node.parent().unwrap().display());
        let chain = command_chain(&link, &path, &root);
        assert_eq!(chain, [link, npx, node.clone()]);
        // a direct interpreter, and options and assignments before the program
        assert_eq!(
            interpreter_of("/bin/sh -e", "", &root),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            interpreter_of("/usr/bin/env -S NODE_OPTIONS=x node --flag", &path, &root),
            Some(node)
        );
        assert_eq!(interpreter_of("relative/sh", "", &root), None);
    }

    #[test]
    fn a_loop_of_links_ends() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let chain = command_chain(&a, "", dir.path());
        assert_eq!(chain, [a, b]);
    }

    #[test]
    fn a_refused_path_becomes_the_line_to_add() {
        let hint = refusal_hint(
            "could not start /home/a/.local/share/uv/python/cpython-3.12/bin/python3.12: Permission denied (os error 13)",
            "time",
        )
        .unwrap();
        assert!(
            hint.contains("\"read\": [\"/home/a/.local/share/uv/python/cpython-3.12/bin\"]")
                && hint.contains("pack time"),
            "{hint}"
        );
        let hint = refusal_hint(
            "initialize failed: closed in /srv/x; its stderr ends: Error: EACCES: permission \
             denied, open '/opt/memory/memory.json'",
            "memory",
        )
        .unwrap();
        assert!(hint.contains("refused /opt/memory/memory.json"), "{hint}");
        assert!(hint.contains("[\"/opt/memory\"]"), "{hint}");
        assert_eq!(refusal_hint("did not initialize within 20 s", "x"), None);
        assert_eq!(refusal_hint("Permission denied", "x"), None);
    }
}
