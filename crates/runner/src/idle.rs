//! Giving memory back when the seat goes idle.
//!
//! A seat spends nearly all of its life in one held `/poll`, yet its resident set still holds
//! every page the boot and the last turn touched: the binary's code (one `trantor` binary also
//! carries the hub, the MCP server and the CLI, and the kernel maps code in 64 KiB blocks) and
//! freed heap. When the seat goes idle it drops both: freed heap goes back to the OS, and the
//! unwritten read-only file pages (code and constants of the executable and its libraries) are
//! unmapped from this process (they stay in the page cache, shared, and fault back in on the
//! next wake at a cost of well under a millisecond).

use std::io::BufRead;

/// Trim the resident set (Linux; a no-op elsewhere). Safe at any time: code and read-only data
/// pages of a file mapping are re-read from the page cache on the next access.
pub fn trim() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: malloc_trim only returns free memory at the top of the heaps to the OS.
        unsafe {
            libc::malloc_trim(0);
        }
        drop_file_pages();
    }
}

#[cfg(target_os = "linux")]
fn drop_file_pages() {
    let Ok(smaps) = std::fs::File::open("/proc/self/smaps") else {
        return;
    };
    // (start, end) of the current mapping when it is a read-only file mapping (our executable,
    // libc, the loader), dropped once its `Anonymous:` line shows no private (written) page.
    let mut current: Option<(usize, usize)> = None;
    for line in std::io::BufReader::new(smaps).lines().map_while(Result::ok) {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else {
            continue;
        };
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            // A mapping header: "start-end perms offset dev inode path".
            let perms = f.next().unwrap_or("");
            let path = f.nth(3).unwrap_or("");
            current =
                (path.starts_with('/') && (perms == "r-xp" || perms == "r--p") && end > start)
                    .then_some((start, end));
            continue;
        }
        // The RELRO segment is mapped r--p too, but the loader wrote its relocations into it:
        // those pages are private (`Anonymous` > 0) and dropping them would revert the writes.
        // Only a mapping with no private page at all is dropped.
        if first == "Anonymous:"
            && let Some((start, end)) = current.take()
            && f.next() == Some("0")
        {
            // SAFETY: a read-only file mapping with no private pages; its contents are
            // exactly the file's, so MADV_DONTNEED only drops page-table entries
            // and the next access re-reads identical bytes from the page cache.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn trimming_keeps_the_process_working() {
        let v: Vec<u64> = (0..100_000).collect();
        super::trim();
        // Code and data still work after the pages were dropped.
        assert_eq!(v.iter().sum::<u64>(), 4_999_950_000);
        assert_eq!(format!("{}", 42), "42");
        super::trim();
    }
}
