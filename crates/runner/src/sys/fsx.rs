//! Small file helpers shared by the runner's state files: the atomic writers (every state file
//! the runner replaces goes through [`replace`], on the workspace's one atomic replace in
//! `trantor_proto::fsx`) and append-only lines.

use std::io::Write;
use std::path::Path;

/// Replace `path` with `bytes` atomically: write a sibling temp file, fsync it, rename it over
/// the target, then fsync the directory so the rename itself survives a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_durable(path, bytes).map(|_| ())
}

/// What a durable write synced: the file's data (always, or the write failed) and its
/// directory entry (a directory that cannot be opened or synced is reported, not fatal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// The new file's contents were fsync'd before the rename.
    pub file: bool,
    /// The directory was fsync'd after the rename (or the removal).
    pub dir: bool,
}

/// [`write_atomic`], saying what it synced.
pub fn write_durable(path: &Path, bytes: &[u8]) -> std::io::Result<Synced> {
    replace(path, bytes, true)?;
    Ok(Synced {
        file: true,
        dir: sync_dir(path),
    })
}

/// Remove `path` (missing is fine) and fsync its directory, so the removal survives a crash.
pub fn remove_durable(path: &Path) -> std::io::Result<Synced> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(Synced {
        file: true,
        dir: sync_dir(path),
    })
}

/// fsync the directory holding `path`; false when it could not be.
fn sync_dir(path: &Path) -> bool {
    trantor_proto::fsx::sync_dir(path)
}

/// Replace `path` atomically (temp file + rename, so a killed runner never leaves it torn)
/// and fsync the file and its directory in the background. A killed *process* loses nothing
/// once the rename returned; only a machine crash in the next milliseconds could, and keeping
/// the fsync off the wake path is what lets a wake reach the CLI in a few milliseconds.
pub fn write_atomic_sync_later(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_replace(path, bytes)?;
    let file = path.to_path_buf();
    let sync = move || {
        if let Ok(f) = std::fs::File::open(&file) {
            let _ = f.sync_all();
        }
        if let Some(d) = file.parent().and_then(|d| std::fs::File::open(d).ok()) {
            let _ = d.sync_all();
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            h.spawn_blocking(sync);
        }
        Err(_) => sync(),
    }
    Ok(())
}

/// Write `value` as JSON to `path` atomically and durably ([`write_atomic`]).
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    write_atomic(path, &bytes)
}

/// Replace `path` with `bytes` by rename, without fsync: for state that is rewritten often and
/// only has to be whole (never torn), not durable — the turn-state file.
pub fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, false)
}

/// Write a sibling temp file (mode 0600, fsync'd when `sync`) and rename it over `path`, with
/// the workspace's one atomic replace (`trantor_proto::fsx::replace`).
fn replace(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let how = trantor_proto::fsx::Replace {
        mode: 0o600,
        perms: None,
        sync,
    };
    trantor_proto::fsx::replace(path, bytes, how)
}

/// Append one line to `path`, creating it and its directory when missing.
pub fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    f.write_all(&buf)
}

/// Move a file that cannot be read aside (`<name>.corrupt-<ms>`, next to it) so a fresh one can
/// take its place and nothing in it is lost; returns the new path (or the old one, when even the
/// rename failed).
pub fn keep_aside(path: &Path) -> String {
    let aside = path.with_file_name(format!(
        "{}.corrupt-{}",
        path.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        trantor_proto::now_ms()
    ));
    match std::fs::rename(path, &aside) {
        Ok(()) => aside.display().to_string(),
        Err(e) => {
            tracing::warn!("could not move {} aside: {e}", path.display());
            path.display().to_string()
        }
    }
}

/// Remove `path`, ignoring "not found".
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("sub/x.json");
        write_atomic(&p, b"one").expect("w1");
        write_atomic(&p, b"two").expect("w2");
        assert_eq!(std::fs::read_to_string(&p).expect("r"), "two");
        let names: Vec<_> = std::fs::read_dir(d.path().join("sub"))
            .expect("ls")
            .filter_map(|e| e.ok())
            .collect();
        assert_eq!(names.len(), 1);
        append_line(&d.path().join("l/a.jsonl"), "{}").expect("a");
        append_line(&d.path().join("l/a.jsonl"), "{}").expect("a");
        let t = std::fs::read_to_string(d.path().join("l/a.jsonl")).expect("r");
        assert_eq!(t, "{}\n{}\n");
    }
}
