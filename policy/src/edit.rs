//! Changes to a policy file's text that keep everything the user wrote by hand: comments, order,
//! quoting and blank lines. Each edit touches as few lines as it can, then parses the result and
//! checks it means exactly the intended change; if the file's layout is one these edits do not
//! understand (flow maps, anchors, ...), the file is rewritten from its parsed form instead and
//! the caller is told that comments were lost.

use crate::permissions::{HEADER, Kind, PolicyError, RawPolicy, RawRule, Section};

/// The new text of a file, and whether it had to be rewritten (losing comments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    pub text: String,
    pub rewritten: bool,
}

/// Appends `rule` to the `section`.`kind` list. Returns `None` if an identical rule is there.
pub fn add_rule(
    text: &str,
    section: Section,
    kind: Kind,
    rule: &RawRule,
) -> Result<Option<Edited>, PolicyError> {
    let raw = RawPolicy::parse(text)?;
    if raw.rules(section, kind).contains(rule) {
        return Ok(None);
    }
    let mut want = raw.clone();
    want.rules_mut(section, kind).push(rule.clone());
    let mut keys: Vec<&str> = section.keys().to_vec();
    keys.push(kind.as_str());
    let base = if text.lines().any(is_content) {
        text
    } else {
        HEADER
    };
    let attempt = insert_item(base, &keys, &rule_yaml(rule));
    finish(attempt, &want).map(Some)
}

/// Removes the rule at `index` of the `section`.`kind` list.
pub fn remove_rule(
    text: &str,
    section: Section,
    kind: Kind,
    index: usize,
) -> Result<Edited, PolicyError> {
    let raw = RawPolicy::parse(text)?;
    let mut want = raw.clone();
    let list = want.rules_mut(section, kind);
    if index >= list.len() {
        return Err(PolicyError::BadRule {
            rule: format!("{}.{}[{index}]", section.name(), kind.as_str()),
            message: "no such rule".to_owned(),
        });
    }
    list.remove(index);
    let mut keys: Vec<&str> = section.keys().to_vec();
    keys.push(kind.as_str());
    let attempt = remove_item(text, &keys, index);
    finish(attempt, &want)
}

/// Sets a top-level boolean (`sandbox`, `confine_to_workdir`).
pub fn set_flag(text: &str, key: &str, value: bool) -> Result<Edited, PolicyError> {
    let raw = RawPolicy::parse(text)?;
    let mut want = raw.clone();
    match key {
        "sandbox" => want.sandbox = value,
        "confine_to_workdir" => want.confine_to_workdir = value,
        _ => {
            return Err(PolicyError::NotAllowedHere {
                key: key.to_owned(),
                message: "not a switch".to_owned(),
            });
        }
    }
    let lines = split(text);
    let attempt = match find_key(&lines, 0, lines.len(), 0, key) {
        Some(k) => {
            let mut out = lines.clone();
            out[k.line] = format!("{key}: {value}\n");
            Some(out.concat())
        }
        None => Some(format!("{}{key}: {value}\n", with_newline(text))),
    };
    finish(attempt, &want)
}

/// The account's rules emptied, its switches kept: everything asks again.
pub fn reset(text: &str) -> Result<String, PolicyError> {
    let raw = RawPolicy::parse(text).unwrap_or_default();
    let fresh = RawPolicy {
        sandbox: raw.sandbox,
        confine_to_workdir: raw.confine_to_workdir,
        ..RawPolicy::default()
    };
    fresh.to_yaml()
}

fn finish(attempt: Option<String>, want: &RawPolicy) -> Result<Edited, PolicyError> {
    if let Some(text) = attempt
        && RawPolicy::parse(&text).as_ref() == Ok(want)
    {
        return Ok(Edited {
            text,
            rewritten: false,
        });
    }
    Ok(Edited {
        text: want.to_yaml()?,
        rewritten: true,
    })
}

/// A rule as one YAML flow value.
fn rule_yaml(rule: &RawRule) -> String {
    match rule {
        RawRule::Pattern(p) => quote(p),
        RawRule::Detailed(d) => match &d.expires {
            Some(e) => format!("{{rule: {}, expires: {}}}", quote(&d.rule), quote(e)),
            None => format!("{{rule: {}}}", quote(&d.rule)),
        },
    }
}

/// A double-quoted YAML scalar: safe for any text.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn split(text: &str) -> Vec<String> {
    text.split_inclusive('\n').map(str::to_owned).collect()
}

fn with_newline(text: &str) -> String {
    if text.is_empty() {
        HEADER.to_owned()
    } else if text.ends_with('\n') {
        text.to_owned()
    } else {
        format!("{text}\n")
    }
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

struct Found {
    line: usize,
    indent: usize,
    /// Text after `key:` on its line, comments removed, trimmed.
    inline: String,
    /// End (exclusive) of the key's block.
    end: usize,
}

/// Finds `key:` at exactly `indent` among lines `[start, end)`.
fn find_key(lines: &[String], start: usize, end: usize, indent: usize, key: &str) -> Option<Found> {
    let prefix = format!("{key}:");
    for i in start..end {
        let line = &lines[i];
        if !is_content(line) || indent_of(line) != indent {
            continue;
        }
        let body = &line[indent..];
        let Some(rest) = body.strip_prefix(&prefix) else {
            continue;
        };
        if !(rest.is_empty() || rest.starts_with([' ', '\n', '\r', '\t'])) {
            continue;
        }
        let inline = strip_comment(rest).trim().to_owned();
        let mut block_end = i + 1;
        for (j, l) in lines.iter().enumerate().take(end).skip(i + 1) {
            if is_content(l) && indent_of(l) <= indent && !l[indent_of(l)..].starts_with("- ") {
                break;
            }
            if is_content(l) && indent_of(l) < indent {
                break;
            }
            block_end = j + 1;
        }
        return Some(Found {
            line: i,
            indent,
            inline,
            end: block_end,
        });
    }
    None
}

/// The value part of a line with a trailing ` # comment` removed (quotes respected).
fn strip_comment(s: &str) -> &str {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in s.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single && prev != '\\' => double = !double,
            '#' if !single && !double && (prev == ' ' || prev == '\t') => return &s[..i],
            _ => {}
        }
        prev = c;
    }
    s
}

/// The last content line of a block, so new lines go after it and before trailing comments.
fn last_content(lines: &[String], start: usize, end: usize) -> usize {
    (start..end)
        .rev()
        .find(|i| is_content(&lines[*i]))
        .unwrap_or(start)
}

fn insert_item(text: &str, keys: &[&str], item: &str) -> Option<String> {
    let mut lines = split(text);
    if let Some(l) = lines.last_mut()
        && !l.ends_with('\n')
    {
        l.push('\n');
    }
    let (mut start, mut end, mut indent) = (0, lines.len(), 0);
    for (depth, key) in keys.iter().enumerate() {
        let last = depth + 1 == keys.len();
        match find_key(&lines, start, end, indent, key) {
            Some(found) if last => {
                return insert_into_list(lines, &found, item);
            }
            Some(found) => {
                if !found.inline.is_empty() && found.inline != "{}" {
                    return None;
                }
                if found.inline == "{}" {
                    let l = &mut lines[found.line];
                    *l = format!("{}{key}:\n", " ".repeat(found.indent));
                }
                let child = (found.line + 1..found.end)
                    .find(|i| is_content(&lines[*i]))
                    .map(|i| indent_of(&lines[i]))
                    .unwrap_or(found.indent + 2);
                if child <= found.indent {
                    return None;
                }
                start = found.line + 1;
                end = found.end;
                indent = child;
            }
            None => {
                // Create the missing keys at the end of the parent block.
                let at = if depth == 0 {
                    lines.len()
                } else {
                    last_content(&lines, start.saturating_sub(1), end) + 1
                };
                let mut new = String::new();
                let mut ind = indent;
                for k in &keys[depth..] {
                    new.push_str(&format!("{}{k}:\n", " ".repeat(ind)));
                    ind += 2;
                }
                new.push_str(&format!("{}- {item}\n", " ".repeat(ind)));
                lines.insert(at, new);
                return Some(lines.concat());
            }
        }
    }
    None
}

fn insert_into_list(mut lines: Vec<String>, found: &Found, item: &str) -> Option<String> {
    let inline = found.inline.as_str();
    if inline.is_empty() {
        let items: Vec<usize> = (found.line + 1..found.end)
            .filter(|i| is_content(&lines[*i]))
            .collect();
        let item_indent = match items.first() {
            Some(i) if lines[*i][indent_of(&lines[*i])..].starts_with('-') => indent_of(&lines[*i]),
            Some(_) => return None,
            None => found.indent + 2,
        };
        let at = last_content(&lines, found.line, found.end) + 1;
        lines.insert(at, format!("{}- {item}\n", " ".repeat(item_indent)));
        return Some(lines.concat());
    }
    if inline.starts_with('[') && inline.ends_with(']') {
        let line = lines[found.line].clone();
        let close = line.rfind(']')?;
        let open = line.find('[')?;
        let inner = line[open + 1..close].trim();
        let new_inner = if inner.is_empty() {
            item.to_owned()
        } else {
            format!("{inner}, {item}")
        };
        lines[found.line] = format!("{}[{new_inner}]{}", &line[..open], &line[close + 1..]);
        return Some(lines.concat());
    }
    None
}

fn remove_item(text: &str, keys: &[&str], index: usize) -> Option<String> {
    let mut lines = split(text);
    let (mut start, mut end, mut indent) = (0, lines.len(), 0);
    for (depth, key) in keys.iter().enumerate() {
        let found = find_key(&lines, start, end, indent, key)?;
        if depth + 1 == keys.len() {
            if !found.inline.is_empty() {
                return None;
            }
            let items: Vec<usize> = (found.line + 1..found.end)
                .filter(|i| is_content(&lines[*i]))
                .collect();
            let item_indent = indent_of(&lines[*items.first()?]);
            let heads: Vec<usize> = items
                .iter()
                .copied()
                .filter(|i| {
                    indent_of(&lines[*i]) == item_indent
                        && lines[*i][item_indent..].starts_with('-')
                })
                .collect();
            let first = *heads.get(index)?;
            let stop = heads.get(index + 1).copied().unwrap_or(found.end);
            let stop = if heads.get(index + 1).is_some() {
                stop
            } else {
                last_content(&lines, first, found.end) + 1
            };
            lines.drain(first..stop);
            return Some(lines.concat());
        }
        if !found.inline.is_empty() {
            return None;
        }
        let child = (found.line + 1..found.end)
            .find(|i| is_content(&lines[*i]))
            .map(|i| indent_of(&lines[i]))?;
        start = found.line + 1;
        end = found.end;
        indent = child;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const HAND: &str = "\
# my rules, keep this comment
sandbox: true
paths:
  read:
    allow:
      - ./**   # the workdir
    # reads elsewhere ask
  write:
    allow: []
commands:
  allow: ['git status']
# trailing comment
";

    #[test]
    fn adding_keeps_comments_and_formatting() {
        let e = add_rule(HAND, Section::PathsRead, Kind::Allow, &"/etc/hosts".into())
            .unwrap()
            .unwrap();
        assert!(!e.rewritten, "{}", e.text);
        assert!(e.text.contains("# my rules, keep this comment"));
        assert!(
            e.text
                .contains("- ./**   # the workdir\n      - \"/etc/hosts\"\n"),
            "{}",
            e.text
        );
        let e = add_rule(&e.text, Section::PathsWrite, Kind::Allow, &"/w/a b".into())
            .unwrap()
            .unwrap();
        assert!(e.text.contains("allow: [\"/w/a b\"]"), "{}", e.text);
        let e = add_rule(&e.text, Section::Commands, Kind::Allow, &"ls".into())
            .unwrap()
            .unwrap();
        assert!(
            e.text.contains("allow: ['git status', \"ls\"]"),
            "{}",
            e.text
        );
        let e = add_rule(&e.text, Section::Delete, Kind::Deny, &"./keep/**".into())
            .unwrap()
            .unwrap();
        assert!(!e.rewritten);
        assert!(
            e.text.ends_with("delete:\n  deny:\n    - \"./keep/**\"\n"),
            "{}",
            e.text
        );
        let e = add_rule(&e.text, Section::PathsWrite, Kind::Deny, &"x".into())
            .unwrap()
            .unwrap();
        assert!(!e.rewritten, "{}", e.text);
        assert!(e.text.contains("# trailing comment"));
        let raw = RawPolicy::parse(&e.text).unwrap();
        assert_eq!(raw.paths.write.deny, vec![RawRule::from("x")]);
        assert_eq!(raw.paths.read.allow.len(), 2);
        // duplicates are not added
        assert_eq!(
            add_rule(&e.text, Section::Delete, Kind::Deny, &"./keep/**".into()).unwrap(),
            None
        );
    }

    #[test]
    fn adding_to_an_empty_file_and_with_expiry() {
        let rule = RawRule::new("/w/x", Some("2026-12-01T00:00:00Z".to_owned()));
        let e = add_rule("", Section::PathsWrite, Kind::Allow, &rule)
            .unwrap()
            .unwrap();
        assert!(!e.rewritten);
        assert!(e.text.starts_with("# glovebox permissions"));
        let raw = RawPolicy::parse(&e.text).unwrap();
        assert_eq!(raw.paths.write.allow, vec![rule]);
    }

    #[test]
    fn odd_paths_round_trip_exactly() {
        for p in [
            "/w/it's \"quoted\"",
            "/w/new\nline",
            "/w/#hash",
            "/w/: colon",
            "/w/ü",
        ] {
            let e = add_rule(HAND, Section::PathsWrite, Kind::Allow, &p.into())
                .unwrap()
                .unwrap();
            let raw = RawPolicy::parse(&e.text).unwrap();
            assert_eq!(raw.paths.write.allow, vec![RawRule::from(p)], "{p}");
        }
    }

    #[test]
    fn removing_and_switches_keep_comments() {
        let e = remove_rule(HAND, Section::PathsRead, Kind::Allow, 0).unwrap();
        assert!(!e.rewritten, "{}", e.text);
        assert!(e.text.contains("# reads elsewhere ask"));
        assert!(
            RawPolicy::parse(&e.text)
                .unwrap()
                .paths
                .read
                .allow
                .is_empty()
        );
        // a flow list falls back to a rewrite, but the result is still right
        let e = remove_rule(HAND, Section::Commands, Kind::Allow, 0).unwrap();
        assert!(RawPolicy::parse(&e.text).unwrap().commands.allow.is_empty());
        assert!(remove_rule(HAND, Section::Commands, Kind::Allow, 5).is_err());
        let e = set_flag(HAND, "sandbox", false).unwrap();
        assert!(!e.rewritten && e.text.contains("# my rules"));
        assert!(!RawPolicy::parse(&e.text).unwrap().sandbox);
        let e = set_flag(HAND, "confine_to_workdir", true).unwrap();
        assert!(!e.rewritten && e.text.contains("# trailing comment"));
        assert!(RawPolicy::parse(&e.text).unwrap().confine_to_workdir);
        let text = reset(&e.text).unwrap();
        let raw = RawPolicy::parse(&text).unwrap();
        assert!(raw.confine_to_workdir && raw.all_rules().next().is_none());
    }
}
