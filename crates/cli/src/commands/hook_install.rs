//! Installing and removing the `trantor hook` entries in Claude Code's user settings
//! (`~/.claude/settings.json`), and `trantor connect --remove`.
//!
//! Claude Code's hook settings: `hooks.<Event>` is a list of matcher groups, each
//! `{"matcher"?, "hooks": [{"type": "command", "command", "timeout"}]}`. We own exactly the
//! command entries that run `trantor hook …`; every other group, entry and key — the person's
//! own hooks — stays as it was, in its order. A change is backed up first; a run that would
//! change nothing writes nothing.

use super::hook::Event;
use super::wiring::{
    Format, OJson, Target, Wiring, inspect, json_entry, ostr, read_json, read_toml,
    write_with_backup,
};
use std::path::{Path, PathBuf};

/// Seconds Claude Code gives one hook before cancelling it (our own cap is shorter).
const HOOK_TIMEOUT_S: i64 = 10;

/// Claude Code's user settings file under `home`.
pub(crate) fn settings_path(home: &Path) -> PathBuf {
    home.join(".claude").join("settings.json")
}

/// The command line Claude Code runs for `event` (quoted for its shell when needed).
pub(crate) fn hook_command(exe: &str, event: Event) -> String {
    let plain = exe
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c));
    let exe = if plain {
        exe.to_string()
    } else {
        format!("'{}'", exe.replace('\'', r"'\''"))
    };
    format!("{exe} hook {}", event.arg())
}

/// Whether a hook command runs `trantor hook …` (ours).
pub(crate) fn is_ours(command: &str) -> bool {
    let cmd = command.trim();
    let (first, rest) = if let Some(stripped) = cmd.strip_prefix('\'') {
        match stripped.split_once('\'') {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => return false,
        }
    } else {
        match cmd.split_once(char::is_whitespace) {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => return false,
        }
    };
    let base = Path::new(&first)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    base == "trantor" && rest.split_whitespace().next() == Some("hook")
}

fn entry_is_ours(e: &OJson) -> bool {
    e.get("command").and_then(OJson::str).is_some_and(is_ours)
}

/// `doc` without our hook entries: groups left empty by that are dropped, then empty event
/// lists, then an empty `hooks` object. Everything else is untouched.
pub(crate) fn without_ours(mut doc: OJson) -> OJson {
    let OJson::Obj(top) = &mut doc else {
        return doc;
    };
    let Some(pos) = top.iter().position(|(k, _)| k == "hooks") else {
        return doc;
    };
    if let OJson::Obj(events) = &mut top[pos].1 {
        for (_, groups) in events.iter_mut() {
            let OJson::Arr(list) = groups else { continue };
            list.retain_mut(|g| {
                let OJson::Obj(kv) = g else { return true };
                let Some((_, OJson::Arr(hooks))) = kv.iter_mut().find(|(k, _)| k == "hooks") else {
                    return true;
                };
                let before = hooks.len();
                hooks.retain(|h| !entry_is_ours(h));
                !(before > 0 && hooks.is_empty())
            });
        }
        events.retain(|(_, g)| !matches!(g, OJson::Arr(l) if l.is_empty()));
        if events.is_empty() {
            top.remove(pos);
        }
    }
    doc
}

/// `doc` with exactly our hook entries (one group per event, after the person's own).
pub(crate) fn with_ours(doc: OJson, exe: &str) -> Result<OJson, String> {
    let mut doc = without_ours(doc);
    let hooks = doc
        .object_mut("hooks")
        .ok_or_else(|| "\"hooks\" in the Claude Code settings is not an object".to_string())?;
    for event in Event::ALL {
        let entry = OJson::Obj(vec![
            ("type".into(), ostr("command")),
            ("command".into(), ostr(&hook_command(exe, event))),
            ("timeout".into(), OJson::Num(HOOK_TIMEOUT_S.into())),
        ]);
        let mut group = Vec::new();
        if event == Event::PostToolUse {
            group.push(("matcher".to_string(), ostr("*")));
        }
        group.push(("hooks".to_string(), OJson::Arr(vec![entry])));
        let name = event.claude_name();
        match hooks.get(name) {
            None => hooks.set(name, OJson::Arr(vec![OJson::Obj(group)])),
            Some(OJson::Arr(list)) => {
                let mut list = list.clone();
                list.push(OJson::Obj(group));
                hooks.set(name, OJson::Arr(list));
            }
            Some(_) => {
                return Err(format!(
                    "hooks.{name} in the Claude Code settings is not a list"
                ));
            }
        }
    }
    Ok(doc)
}

/// What the settings file says about our hooks: how many of the four events have one.
pub(crate) fn installed_hooks(home: &Path) -> Result<usize, String> {
    let Some(doc) = read_json(&settings_path(home))? else {
        return Ok(0);
    };
    Ok(Event::ALL
        .iter()
        .filter(|e| {
            let groups = doc.get("hooks").and_then(|h| h.get(e.claude_name()));
            let Some(OJson::Arr(list)) = groups else {
                return false;
            };
            list.iter().any(|g| match g.get("hooks") {
                Some(OJson::Arr(hs)) => hs.iter().any(entry_is_ours),
                _ => false,
            })
        })
        .count())
}

fn render(doc: &OJson) -> Result<String, String> {
    let mut text = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}

/// One report row: `(state, detail)`.
pub(crate) type Outcome = (&'static str, String);

/// Write (or with `remove`, take out) our hooks in Claude Code's settings.
pub(crate) fn apply(home: &Path, exe: &str, remove: bool, dry_run: bool) -> Outcome {
    let path = settings_path(home);
    let doc = match read_json(&path) {
        Ok(d) => d,
        Err(e) => return ("error", e),
    };
    let exists = doc.is_some();
    let doc = doc.unwrap_or(OJson::Obj(Vec::new()));
    if !matches!(doc, OJson::Obj(_)) {
        return (
            "error",
            format!("{} does not hold a JSON object", path.display()),
        );
    }
    let new = if remove {
        Ok(without_ours(doc.clone()))
    } else {
        with_ours(doc.clone(), exe)
    };
    let new = match new {
        Ok(n) => n,
        Err(e) => return ("error", e),
    };
    let what = if remove {
        "removed the trantor hooks (your own hooks are kept)".to_string()
    } else {
        let names: Vec<&str> = Event::ALL.iter().map(|e| e.claude_name()).collect();
        format!("hooks {} run `{exe} hook <event>`", names.join(", "))
    };
    if new == doc || (remove && !exists) {
        return (
            "unchanged",
            if remove {
                "no trantor hooks".to_string()
            } else {
                "hooks already installed".to_string()
            },
        );
    }
    if dry_run {
        return ("would-write", what);
    }
    let text = match render(&new) {
        Ok(t) => t,
        Err(e) => return ("error", e),
    };
    match write_with_backup(&path, &text) {
        Ok(Some(b)) => ("written", format!("{what} (backup: {})", b.display())),
        Ok(None) => ("written", format!("{what} (new file)")),
        Err(e) => ("error", format!("cannot write {}: {e}", path.display())),
    }
}

/// `trantor connect --remove` for one CLI: take out the `trantor` MCP entry when we wrote it.
pub(crate) fn remove_mcp(target: &Target, dry_run: bool) -> Outcome {
    match inspect(target) {
        Wiring::Missing => return ("unchanged", "no trantor entry".into()),
        Wiring::Foreign(cmd) => {
            return (
                "kept",
                format!("its `trantor` entry runs `{cmd}`, which trantor connect did not write"),
            );
        }
        Wiring::Broken(e) => return ("error", e),
        Wiring::Ours(_) | Wiring::Http(_) => {}
    }
    let text = match target.format {
        Format::CodexToml => {
            let mut doc = match read_toml(&target.path) {
                Ok(Some(d)) => d,
                Ok(None) => return ("unchanged", "no trantor entry".into()),
                Err(e) => return ("error", e),
            };
            let empty = match doc
                .get_mut("mcp_servers")
                .and_then(|s| s.as_table_like_mut())
            {
                Some(servers) => {
                    servers.remove("trantor");
                    servers.is_empty()
                }
                None => false,
            };
            if empty {
                doc.remove("mcp_servers");
            }
            doc.to_string()
        }
        f => {
            let doc = match read_json(&target.path) {
                Ok(Some(d)) => d,
                Ok(None) => return ("unchanged", "no trantor entry".into()),
                Err(e) => return ("error", e),
            };
            let (key, _) = json_entry(f, "");
            let mut doc = doc;
            if let OJson::Obj(top) = &mut doc
                && let Some((_, OJson::Obj(servers))) = top.iter_mut().find(|(k, _)| k == key)
            {
                servers.retain(|(k, _)| k != "trantor");
            }
            match render(&doc) {
                Ok(t) => t,
                Err(e) => return ("error", e),
            }
        }
    };
    if dry_run {
        return ("would-write", "would remove the trantor MCP entry".into());
    }
    match write_with_backup(&target.path, &text) {
        Ok(Some(b)) => (
            "removed",
            format!("removed the trantor MCP entry (backup: {})", b.display()),
        ),
        Ok(None) => ("removed", "removed the trantor MCP entry".into()),
        Err(e) => (
            "error",
            format!("cannot write {}: {e}", target.path.display()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> OJson {
        serde_json::from_str(s).expect("json")
    }

    const MINE: &str = r#"{
      "model": "opus",
      "hooks": {
        "PostToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": "prettier --write"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]
      },
      "permissions": {"allow": ["Bash(ls)"]}
    }"#;

    #[test]
    fn ours_is_recognised_only_for_trantor_hook() {
        assert!(is_ours("/usr/local/bin/trantor hook stop"));
        assert!(is_ours("'/home/a b/trantor' hook post-tool-use"));
        assert!(is_ours(&hook_command("/x y/trantor", Event::Stop)));
        assert!(!is_ours("/usr/local/bin/trantor mcp"));
        assert!(!is_ours("prettier --write"));
        assert!(!is_ours("my-trantor hook stop"));
    }

    #[test]
    fn install_keeps_own_hooks_is_idempotent_and_removes_cleanly() {
        let doc = parse(MINE);
        let once = with_ours(doc.clone(), "/bin/trantor").expect("install");
        let twice = with_ours(once.clone(), "/bin/trantor").expect("again");
        assert_eq!(once, twice);
        let text = render(&once).expect("render");
        assert!(
            text.contains("prettier --write") && text.contains("say done"),
            "{text}"
        );
        for e in Event::ALL {
            assert!(
                text.contains(&format!("/bin/trantor hook {}", e.arg())),
                "{text}"
            );
        }
        // The person's keys keep their order.
        let m = text.find("\"model\"").expect("model");
        let p = text.find("\"permissions\"").expect("permissions");
        let h = text.find("\"hooks\"").expect("hooks");
        assert!(m < h && h < p, "{text}");
        let back = without_ours(once);
        assert_eq!(back, doc);
        // A settings file with only our hooks loses the `hooks` key entirely.
        let bare = with_ours(OJson::Obj(Vec::new()), "/bin/trantor").expect("install");
        assert_eq!(without_ours(bare), OJson::Obj(Vec::new()));
    }

    #[test]
    fn a_moved_binary_replaces_the_old_entries() {
        let once = with_ours(parse(MINE), "/old/trantor").expect("install");
        let moved = with_ours(once, "/new/trantor").expect("install");
        let text = render(&moved).expect("render");
        assert!(!text.contains("/old/trantor"), "{text}");
        assert_eq!(
            text.matches("/new/trantor hook").count(),
            Event::ALL.len(),
            "{text}"
        );
    }
}
