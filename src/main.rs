//! The `nodens` command: the allocator, and the command line of
//! [`cli`] (one file per command, one reporter for how each ends).

mod cli;

use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: with misses allocated and freed on
/// each UDP worker's thread among long-lived cache entries, glibc's
/// per-thread arenas fragmented (from 310 up to 2,500 bytes of RSS per cached
/// entry, depending on the allocation pattern); mimalloc holds ~330 bytes
/// whatever the pattern, so the cache's byte capacity bounds memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    cli::run()
}
