//! The workspace's one atomic file writer ([`replace`]; the runner's state files go through it
//! too): a file is replaced whole or not at all, so a process killed mid-write leaves the old
//! file or the new one, never half of one. Beside it, the one rule that makes a name part of a
//! file name ([`safe_file_name`]).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// `name` as part of a file name: every character outside `[A-Za-z0-9_.-]` becomes `_`. The
/// rule the original's hooks and runner name their per-session files by (keys, nudge ledgers,
/// hook cursors, handoffs), so both find the same file.
pub fn safe_file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Replace `path` with `bytes` atomically: write a sibling temp file, fsync it, rename it over
/// the target, then fsync the directory so the rename itself survives a crash. Creates the
/// parent directory when missing.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, bytes, None)
}

/// [`write_atomic`], giving the new file `perms` before it takes the target's place (so a
/// private file is never readable by others, not even for a moment).
pub fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    perms: Option<std::fs::Permissions>,
) -> std::io::Result<()> {
    replace(
        path,
        bytes,
        Replace {
            mode: 0o666,
            perms,
            sync: true,
        },
    )?;
    sync_dir(path);
    Ok(())
}

/// How [`replace`] writes the new file.
#[derive(Debug, Clone)]
pub struct Replace {
    /// The new file's permission bits when it is created (the umask applies).
    pub mode: u32,
    /// Exact permissions set on the new file before the rename (no umask), when given.
    pub perms: Option<std::fs::Permissions>,
    /// Whether the file's data is fsync'd before the rename (durable), or only renamed (whole,
    /// never torn, but a machine crash may lose it).
    pub sync: bool,
}

/// The workspace's one atomic replace: write a sibling temp file (unique to this process and
/// call), fsync it when `how.sync`, and rename it over `path`; the temp file goes when anything
/// fails. Creates the parent directory when missing. The directory itself is not synced: a
/// durable writer follows with [`sync_dir`].
pub fn replace(path: &Path, bytes: &[u8], how: Replace) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let tmp = temp_sibling(&dir, path);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(how.mode)
            .open(&tmp)?;
        if let Some(p) = how.perms {
            f.set_permissions(p)?;
        }
        f.write_all(bytes)?;
        if how.sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// fsync the directory holding `path`, so a rename or removal in it survives a crash; false
/// when the directory could not be opened or synced.
pub fn sync_dir(path: &Path) -> bool {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir).and_then(|d| d.sync_all()).is_ok()
}

/// A temp name beside `path`, unique within this process and across processes.
fn temp_sibling(dir: &Path, path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("sub/state.json");
        write_atomic(&p, b"one").expect("first");
        write_atomic(&p, b"two").expect("second");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let left: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
