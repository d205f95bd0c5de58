//! Giving memory back when the seat goes idle.
//!
//! A seat spends nearly all of its life in one held `/poll`, yet its resident set still holds
//! every page the boot and the last turn touched: the binary's code (one `trantor` binary also
//! carries the hub, the MCP server and the CLI, and the kernel maps code in 64 KiB blocks) and
//! freed heap. When the seat goes idle it drops both: freed heap goes back to the OS, and the
//! executable's code pages are unmapped from this process (they stay in the page cache, shared,
//! and fault back in on the next wake at a cost of well under a millisecond).

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
        drop_exe_pages();
    }
}

#[cfg(target_os = "linux")]
fn drop_exe_pages() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let exe = exe.to_string_lossy().to_string();
    let Ok(maps) = std::fs::File::open("/proc/self/maps") else {
        return;
    };
    for line in std::io::BufReader::new(maps).lines().map_while(Result::ok) {
        // "start-end perms offset dev inode path"
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let path = f.nth(3).unwrap_or("");
        // Only the executable's code (r-xp). Read-only data is left alone on purpose: the RELRO
        // segment is also mapped r--p but was written by the relocations at load time, and
        // dropping it would revert those writes.
        if path != exe || perms != "r-xp" {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        else {
            continue;
        };
        if end <= start {
            continue;
        }
        // SAFETY: the range is this executable's code mapping (r-xp, checked above), which is
        // never written; MADV_DONTNEED only drops its page-table entries, and the next access
        // re-reads identical contents from the file.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
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
