//! Giving memory back when the seat goes idle.
//!
//! A seat spends nearly all of its life in one held `/poll`, yet the heap still holds what the
//! boot and the last turn freed. Once the poll is held the runner returns that free heap to the
//! OS, so an idle seat's private memory is what it needs to wait, not the peak of its last turn.
//!
//! The clean, shared pages of the `trantor` executable are left alone on purpose: they are the
//! same page-cache pages for every seat on the machine, so unmapping them would only make the
//! per-process RSS look smaller without freeing anything. The benchmark reports RSS and private
//! memory side by side instead.

/// Return free heap to the OS (Linux/glibc; a no-op elsewhere).
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only releases free memory at the top of the heaps; it does not
        // touch live allocations.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn trimming_keeps_the_process_working() {
        let v: Vec<u64> = (0..100_000).collect();
        drop(v);
        super::trim();
        let w: Vec<u64> = (0..1_000).collect();
        assert_eq!(w.iter().sum::<u64>(), 499_500);
    }
}
