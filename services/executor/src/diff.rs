//! The diff an approver sees for a write or an edit (and an edit returns): unified, three lines
//! of context, cut at [`MAX_PREVIEW_BYTES`]; binary content is only counted.

/// Diffs shown to approvers are cut at this many bytes.
pub const MAX_PREVIEW_BYTES: usize = 256 * 1024;

/// A unified diff of `old` → `new`, cut at `MAX_PREVIEW_BYTES`. Returns (text, truncated).
pub fn render_diff(path: &str, old: &[u8], new: &[u8], existed: bool) -> (String, bool) {
    let (Ok(old_text), Ok(new_text)) = (std::str::from_utf8(old), std::str::from_utf8(new)) else {
        return (
            format!(
                "binary content: {} bytes replaced by {} bytes\n",
                old.len(),
                new.len()
            ),
            false,
        );
    };
    let from = if existed {
        path.to_owned()
    } else {
        "/dev/null".to_owned()
    };
    let diff = similar::TextDiff::from_lines(old_text, new_text);
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(&from, path)
        .to_string();
    if text.is_empty() {
        text = "no changes\n".to_owned();
    }
    if !glovebox_proto::display::truncate_at_char(&mut text, MAX_PREVIEW_BYTES) {
        return (text, false);
    }
    text.push_str("\n[diff truncated]\n");
    (text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_of_a_new_file() {
        let (text, cut) = render_diff("/w/a.txt", b"", b"hello\n", false);
        assert!(!cut);
        assert!(text.starts_with("--- /dev/null\n+++ /w/a.txt\n"), "{text}");
        assert!(text.contains("+hello"), "{text}");
    }

    #[test]
    fn diff_of_a_change_and_of_binary() {
        let (text, _) = render_diff("/w/a", b"one\ntwo\n", b"one\n2\n", true);
        assert!(text.contains("-two\n+2\n"), "{text}");
        let (text, _) = render_diff("/w/a", b"\xff\xfe", b"x", true);
        assert_eq!(text, "binary content: 2 bytes replaced by 1 bytes\n");
        assert_eq!(
            render_diff("/w/a", b"same\n", b"same\n", true).0,
            "no changes\n"
        );
    }

    #[test]
    fn huge_diffs_are_cut() {
        let new = "é\n".repeat(200_000);
        let (text, cut) = render_diff("/w/a", b"", new.as_bytes(), false);
        assert!(cut);
        assert!(text.len() <= MAX_PREVIEW_BYTES + 32);
        assert!(text.ends_with("[diff truncated]\n"));
    }
}
