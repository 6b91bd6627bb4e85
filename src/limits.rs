//! Process limits a server raises for itself.
//!
//! Every upstream query in flight holds a UDP socket, and every client TCP
//! connection and upstream TCP connection a descriptor. Container runtimes
//! commonly start processes with a soft limit of 1,024 open files under a
//! much higher hard limit; a burst of misses would hit the soft one. So, as
//! Go's runtime does for CoreDNS, nodens raises the soft limit to the hard
//! limit at startup.

/// Raises the soft open-files limit to the hard limit; returns the limit in
/// force afterwards.
pub fn raise_open_files() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above; setrlimit only reads the struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit = raised;
    }
    Ok(limit.rlim_cur)
}

/// Opts the process out of transparent huge pages. With THP in `madvise`
/// mode (common on nodes), khugepaged collapses the allocator's partly
/// used arenas into 2 MiB pages: RSS steps up after bursts (a burst of
/// misses during an upstream outage) and never comes back, so the cache
/// capacity stops being a bound a memory limit can be sized from. The
/// cache's lookups gain little from huge pages at these sizes.
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_THP_DISABLE) reads only its integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn soft_limit_ends_at_the_hard_limit() {
        let now = super::raise_open_files().unwrap();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in raise_open_files.
        let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        assert_eq!(got, 0);
        assert_eq!(limit.rlim_cur, limit.rlim_max);
        assert_eq!(now, limit.rlim_cur);
    }
}
