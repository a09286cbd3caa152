//! The secret floor: names that are denied whatever the rules say (unless the sandbox is off).
//!
//! Applied to every segment of a canonical path, case-insensitively, so a directory on the floor
//! protects everything below it. Before comparing, each segment is folded ([`fold_segment`]):
//! Unicode compatibility forms (fullwidth letters, ligatures, the Kelvin sign, long s) become their
//! plain letters, combining marks and invisible format characters are dropped, case is folded,
//! and trailing dots and spaces are trimmed. `．ＳＳＨ`, `.s\u{200b}sh` and `.ssh.` are all `.ssh`.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// Segment names denied outright.
const EXACT: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".npmrc",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".git-credentials",
    ".vault-token",
    ".password-store",
    ".pypirc",
    // Firefox-family profiles (and Thunderbird's mail and passwords).
    ".mozilla",
    ".librewolf",
    ".waterfox",
    ".floorp",
    ".zen",
    ".thunderbird",
    "keychains",
];

/// Segment name prefixes denied outright (`.env`, `.env.local`, `id_rsa.pub`, ...).
const PREFIXES: &[&str] = &[".env", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"];

/// Segment name suffixes denied outright.
const SUFFIXES: &[&str] = &[".pem", ".key", ".pfx", ".p12", ".kdbx"];

/// Consecutive segment pairs denied outright (credential files, password stores).
const PAIRS: &[(&str, &str)] = &[
    (".docker", "config.json"),
    (".cargo", "credentials"),
    (".cargo", "credentials.toml"),
    ("share", "keyrings"),
    ("share", "kwalletd"),
    ("share", "gopass"),
    (".gnome2", "keyrings"),
];

/// Directories denied in a configuration home ([`in_config_home`]): Chromium-family profiles
/// (cookies, saved passwords, tokens) and password managers' local vaults. (Firefox-family
/// profiles are dot-directories of their own, in [`EXACT`].)
const CONFIG_DIRS: &[&str] = &[
    "google-chrome",
    "google-chrome-beta",
    "google-chrome-unstable",
    "chromium",
    "bravesoftware",
    "microsoft-edge",
    "microsoft-edge-beta",
    "microsoft-edge-dev",
    "vivaldi",
    "vivaldi-snapshot",
    "opera",
    "opera-beta",
    "opera-developer",
    "yandex-browser",
    "bitwarden",
    "1password",
    "keepassxc",
    "gcloud",
];

/// Whether the (folded) segments `before` end in a configuration home: `.config`, a Flatpak
/// app's `.var/app/<id>/config`, or a Snap's `snap/<name>/common` (where Chromium keeps its
/// profile).
fn in_config_home<S: AsRef<str>>(before: &[S]) -> bool {
    let at = |back: usize| {
        before
            .len()
            .checked_sub(back)
            .and_then(|i| before.get(i))
            .map(AsRef::as_ref)
    };
    match at(1) {
        Some(".config") => true,
        Some("config") => at(3) == Some("app") && at(4) == Some(".var"),
        Some("common") => at(3) == Some("snap"),
        _ => false,
    }
}

/// Every floor entry as shown to people (`.ssh`, `.env*`, `*.pem`, `.docker/config.json`, ...).
pub fn entries() -> Vec<String> {
    EXACT
        .iter()
        .map(|e| (*e).to_owned())
        .chain(PREFIXES.iter().map(|p| format!("{p}*")))
        .chain(SUFFIXES.iter().map(|s| format!("*{s}")))
        .chain(PAIRS.iter().map(|(a, b)| format!("{a}/{b}")))
        .chain(CONFIG_DIRS.iter().map(|d| format!(".config/{d}")))
        .chain(std::iter::once("glovebox state".to_owned()))
        .collect()
}

/// Why a path is on the floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloorHit {
    /// The floor entry that matched, e.g. `.ssh` or `*.pem` or `glovebox state`.
    pub entry: String,
}

impl FloorHit {
    pub fn rule(&self) -> String {
        format!("floor:{}", self.entry)
    }

    pub fn reason(&self) -> String {
        format!("secret floor: {} is never accessible to agents", self.entry)
    }
}

/// Checks a canonical absolute path against the floor. `protected` are directories (canonical,
/// e.g. glovebox's own state dir) that are on the floor with everything below them.
pub fn check(path: &str, protected: &[String]) -> Option<FloorHit> {
    for root in protected {
        if is_same_or_below(path, root) {
            return Some(FloorHit {
                entry: "glovebox state".to_owned(),
            });
        }
    }
    let segments: Vec<Cow<'_, str>> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(fold_segment)
        .collect();
    for (i, seg) in segments.iter().enumerate() {
        if let Some(hit) = check_segment(seg) {
            return Some(hit);
        }
        if let Some(hit) = config_dir(seg, &segments[..i]) {
            return Some(hit);
        }
        if let Some(next) = segments.get(i + 1) {
            for (a, b) in PAIRS {
                if seg == a && next == b {
                    return Some(FloorHit {
                        entry: format!("{a}/{b}"),
                    });
                }
            }
        }
    }
    None
}

/// Checks the entry `name` of the directory `parent` (canonical), when `parent` is known not to
/// be on the floor: the same answer as [`check`] on `parent/name`, found by checking only what
/// the new segment adds (the segment itself, the pair it makes with `parent`'s last segment, and
/// a protected directory that is exactly `parent/name`). Listings and walks call this for every
/// entry, so it folds two segments instead of the whole path.
pub fn check_entry(parent: &str, name: &str, protected: &[String]) -> Option<FloorHit> {
    let parent = parent.trim_end_matches('/');
    for root in protected {
        let root = root.trim_end_matches('/');
        if root.strip_prefix(parent).and_then(|r| r.strip_prefix('/')) == Some(name) {
            return Some(FloorHit {
                entry: "glovebox state".to_owned(),
            });
        }
    }
    let segment = fold_segment(name);
    if let Some(hit) = check_segment(&segment) {
        return Some(hit);
    }
    // The parent's own names matter only for a name that ends one of the pairs or is a
    // configuration directory (and folding them for every entry of a listing was work spent on
    // nearly none).
    if CONFIG_DIRS.contains(&segment.as_ref()) {
        let before: Vec<Cow<'_, str>> = parent
            .split('/')
            .filter(|s| !s.is_empty())
            .map(fold_segment)
            .collect();
        return config_dir(&segment, &before);
    }
    if !PAIRS.iter().any(|(_, b)| segment == *b) {
        return None;
    }
    let last = parent
        .rsplit('/')
        .find(|s| !s.is_empty())
        .map(fold_segment)?;
    PAIRS
        .iter()
        .find(|(a, b)| last == *a && segment == *b)
        .map(|(a, b)| FloorHit {
            entry: format!("{a}/{b}"),
        })
}

/// The hit of `seg` if it is a denied configuration directory in a configuration home (`before`:
/// the folded segments above it).
fn config_dir<S: AsRef<str>>(seg: &str, before: &[S]) -> Option<FloorHit> {
    (CONFIG_DIRS.contains(&seg) && in_config_home(before)).then(|| FloorHit {
        entry: format!(".config/{seg}"),
    })
}

/// Folds one path segment for comparison with the floor: NFKD, combining marks and format
/// characters (zero-width spaces and joiners, soft hyphen, bidi controls, BOM) dropped, lowercase,
/// NFKC, trailing dots and spaces trimmed. Most segments are their own folded form (ASCII, no
/// capital, no trailing dot or space) and come back as they are, with no copy: listings and
/// walks fold every entry's name, and each decision every segment of its paths.
pub fn fold_segment(seg: &str) -> Cow<'_, str> {
    if seg.is_ascii() {
        // ASCII has no compatibility forms, marks or invisible characters: folding it is
        // lowercasing and trimming, without the Unicode passes.
        if !seg.bytes().any(|b| b.is_ascii_uppercase()) && !seg.ends_with(['.', ' ']) {
            return Cow::Borrowed(seg);
        }
        return Cow::Owned(trim_trailing(seg.to_ascii_lowercase()));
    }
    Cow::Owned(fold_unicode(seg))
}

fn fold_unicode(seg: &str) -> String {
    let stripped: String = seg
        .nfkd()
        .filter(|c| !is_combining_mark(*c) && !is_invisible(*c))
        .collect();
    trim_trailing(stripped.to_lowercase().nfkc().collect())
}

/// Trailing dots and spaces trimmed, unless nothing would be left.
fn trim_trailing(mut folded: String) -> String {
    let len = folded.trim_end_matches(['.', ' ']).len();
    if len > 0 {
        folded.truncate(len);
    }
    folded
}

fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fff8}'
    )
}

fn check_segment(seg: &str) -> Option<FloorHit> {
    let hit = |entry: String| Some(FloorHit { entry });
    if let Some(e) = EXACT.iter().find(|e| seg == **e) {
        return hit((*e).to_owned());
    }
    if let Some(p) = PREFIXES.iter().find(|p| seg.starts_with(**p)) {
        return hit(format!("{p}*"));
    }
    if let Some(s) = SUFFIXES.iter().find(|s| seg.ends_with(**s)) {
        return hit(format!("*{s}"));
    }
    None
}

/// Whether `path` is `root` or below it, comparing whole segments (`/w/a` is not below `/w/ab`).
pub fn is_same_or_below(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    if root.is_empty() {
        return path.starts_with('/');
    }
    match path.strip_prefix(root) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> Option<String> {
        check(path, &["/var/lib/glovebox".to_owned()]).map(|h| h.entry)
    }

    /// `check_entry` gives `check`'s answer for every entry of a directory that is itself clear.
    #[test]
    fn check_entry_agrees_with_check() {
        let protected = vec!["/var/lib/glovebox".to_owned(), "/w/state/".to_owned()];
        let parents = [
            "/",
            "/w",
            "/w/",
            "/home/u",
            "/home/u/.docker",
            "/home/u/.config",
            "/usr/share",
            "/var/lib",
            "/w/ＳＨＡＲＥ",
            "/w/.Docker.",
            "/w/state-x",
            "/home/u/.var/app/com.google.Chrome/config",
            "/home/u/.var/app/com.google.Chrome/Config",
            "/home/u/snap/chromium/common",
            "/home/u/snap/chromium/current",
            "/w/app/x/config",
        ];
        let names = [
            "a.txt",
            ".ssh",
            ".SSH",
            "．ｓｓｈ",
            ".s\u{200b}sh",
            ".env.local",
            "id_rsa.pub",
            "x.pem",
            "x.PEM.",
            "config.json",
            "google-chrome",
            "Chromium",
            "BraveSoftware",
            "keyrings",
            "glovebox",
            "state",
            "w",
            "home",
            "share",
            "..x",
            "ok",
            "x.pem ",
            "id_RSA",
            ".env.",
            "a b",
            "Config.json",
            "keyrings.",
            "x.kdbx\t",
        ];
        for parent in parents {
            assert_eq!(
                check(parent, &protected),
                None,
                "{parent} must be clear for this test"
            );
            for name in names {
                let full = format!("{}/{name}", parent.trim_end_matches('/'));
                assert_eq!(
                    check_entry(parent, name, &protected),
                    check(&full, &protected),
                    "{parent} + {name}"
                );
            }
        }
        // The cases this test is about do occur among them.
        assert!(check_entry("/home/u/.docker", "config.json", &protected).is_some());
        assert!(check_entry("/var/lib", "glovebox", &protected).is_some());
        assert!(check_entry("/w", "state", &protected).is_some());
        assert!(check_entry("/w/ＳＨＡＲＥ", "keyrings", &protected).is_some());
    }

    #[test]
    fn table() {
        let cases: &[(&str, Option<&str>)] = &[
            ("/home/u/.ssh", Some(".ssh")),
            ("/home/u/.ssh/id_rsa", Some(".ssh")),
            ("/home/u/x/.ssh/config", Some(".ssh")),
            ("/home/u/.SSH/config", Some(".ssh")),
            ("/home/u/.Ssh", Some(".ssh")),
            ("/w/.env", Some(".env*")),
            ("/w/.env.local", Some(".env*")),
            ("/w/.ENV", Some(".env*")),
            ("/w/key.pem", Some("*.pem")),
            ("/w/KEY.PEM", Some("*.pem")),
            ("/w/tls/server.key", Some("*.key")),
            ("/w/a.p12", Some("*.p12")),
            ("/w/a.pfx", Some("*.pfx")),
            ("/w/vault.kdbx", Some("*.kdbx")),
            ("/w/x/id_rsa", Some("id_rsa*")),
            ("/w/x/id_ed25519.pub", Some("id_ed25519*")),
            ("/home/u/.gnupg/pubring.kbx", Some(".gnupg")),
            ("/home/u/.aws/credentials", Some(".aws")),
            ("/home/u/.kube/config", Some(".kube")),
            ("/home/u/.docker/config.json", Some(".docker/config.json")),
            (
                "/home/u/.config/google-chrome/Default",
                Some(".config/google-chrome"),
            ),
            ("/home/u/.npmrc", Some(".npmrc")),
            (
                "/home/u/.config/microsoft-edge/Default/Login Data",
                Some(".config/microsoft-edge"),
            ),
            ("/home/u/.config/vivaldi/Default", Some(".config/vivaldi")),
            ("/home/u/.config/opera/Cookies", Some(".config/opera")),
            (
                "/home/u/.config/google-chrome-beta/Default",
                Some(".config/google-chrome-beta"),
            ),
            (
                "/home/u/.config/Bitwarden/data.json",
                Some(".config/bitwarden"),
            ),
            ("/home/u/.librewolf/x.default/key4.db", Some(".librewolf")),
            ("/home/u/.thunderbird/p/logins.json", Some(".thunderbird")),
            (
                "/home/u/.local/share/kwalletd/kdewallet.kwl",
                Some("share/kwalletd"),
            ),
            (
                "/home/u/.cargo/credentials.toml",
                Some(".cargo/credentials.toml"),
            ),
            ("/home/u/.pypirc", Some(".pypirc")),
            // Every Chromium-family browser, where its package puts it: a distribution's
            // (~/.config), Flatpak's (~/.var/app/ID/config) and Snap's (~/snap/NAME/common).
            (
                "/home/u/.config/BraveSoftware/Brave-Browser/Default/Cookies",
                Some(".config/bravesoftware"),
            ),
            ("/home/u/.config/chromium/Default", Some(".config/chromium")),
            (
                "/home/u/.var/app/com.google.Chrome/config/google-chrome/Default/Login Data",
                Some(".config/google-chrome"),
            ),
            (
                "/home/u/.var/app/com.brave.Browser/config/BraveSoftware/x",
                Some(".config/bravesoftware"),
            ),
            (
                "/home/u/.var/app/com.microsoft.Edge/config/microsoft-edge",
                Some(".config/microsoft-edge"),
            ),
            (
                "/home/u/.var/app/org.chromium.Chromium/config/chromium/Default",
                Some(".config/chromium"),
            ),
            (
                "/home/u/snap/chromium/common/chromium/Default/Cookies",
                Some(".config/chromium"),
            ),
            (
                "/home/u/snap/opera/common/opera/Cookies",
                Some(".config/opera"),
            ),
            // Firefox-family profiles, wherever the package keeps its home.
            (
                "/home/u/.mozilla/firefox/x.default/key4.db",
                Some(".mozilla"),
            ),
            (
                "/home/u/.var/app/org.mozilla.firefox/.mozilla/firefox/p/logins.json",
                Some(".mozilla"),
            ),
            (
                "/home/u/snap/firefox/common/.mozilla/firefox/p/cookies.sqlite",
                Some(".mozilla"),
            ),
            // Password stores.
            ("/home/u/.password-store/mail.gpg", Some(".password-store")),
            ("/home/u/.local/share/gopass/stores/x", Some("share/gopass")),
            (
                "/home/u/.config/1Password/settings",
                Some(".config/1password"),
            ),
            (
                "/home/u/.config/keepassxc/keepassxc.ini",
                Some(".config/keepassxc"),
            ),
            ("/w/passwords.kdbx", Some("*.kdbx")),
            (
                "/home/u/.local/share/keyrings/login.keyring",
                Some("share/keyrings"),
            ),
            // A project's own directories of those names are not profiles.
            ("/w/config/chromium/flags.txt", None),
            ("/w/app/x/config/chromium", None),
            ("/w/common/chromium", None),
            // near misses stay clear
            ("/home/u/.config/opera-notes/x", None),
            ("/home/u/.cargo/bin/cargo-deb", None),
            ("/w/src/vivaldi.rs", None),
            ("/home/u/.git-credentials", Some(".git-credentials")),
            ("/var/lib/glovebox", Some("glovebox state")),
            ("/var/lib/glovebox/audit.db", Some("glovebox state")),
            // not on the floor
            ("/w/readme.md", None),
            ("/w/environment.md", None),
            ("/w/monkey", None),
            ("/w/keys/readme", None),
            ("/w/ssh/config", None),
            ("/home/u/.docker/other.json", None),
            ("/home/u/.config/nvim/init.lua", None),
            ("/var/lib/glovebox-other/x", None),
            ("/w/pem", None),
            // Unicode and case variants fold onto the floor
            ("/home/u/\u{ff0e}\u{ff33}\u{ff33}\u{ff28}/k", Some(".ssh")),
            ("/home/u/.s\u{200b}sh/k", Some(".ssh")),
            ("/home/u/.ssh./k", Some(".ssh")),
            ("/home/u/.\u{17f}sh/k", Some(".ssh")),
            ("/w/a.\u{212a}ey", Some("*.key")),
            ("/w/.e\u{301}nv", Some(".env*")),
            ("/w/_NETRC", Some("_netrc")),
        ];
        for (path, want) in cases {
            assert_eq!(entry(path).as_deref(), *want, "{path}");
        }
    }

    #[test]
    fn ascii_folds_as_the_unicode_passes_would() {
        let mut segments: Vec<String> = (0u8..128).map(|b| char::from(b).to_string()).collect();
        for s in [
            ".SSH",
            ".Ssh.",
            ".env. . ",
            "..",
            ". .",
            "ID_RSA.pub",
            "Key.PEM ",
            "a\tb",
            "_NETRC",
        ] {
            segments.push(s.to_owned());
        }
        for b in 0u8..128 {
            segments.push(format!(".ss{}h.", char::from(b)));
        }
        for s in &segments {
            assert_eq!(fold_segment(s), fold_unicode(s), "{s:?}");
        }
    }

    #[test]
    fn segment_prefix_compare() {
        assert!(is_same_or_below("/w/a", "/w/a"));
        assert!(is_same_or_below("/w/a/b", "/w/a/"));
        assert!(!is_same_or_below("/w/ab", "/w/a"));
        assert!(!is_same_or_below("/w", "/w/a"));
        assert!(is_same_or_below("/anything", "/"));
    }
}
