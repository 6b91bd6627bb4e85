//! The query log's writer: formats the records its queue's thread takes
//! (`answered::queue`) into lines and writes them out in batches.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::IntCounter;

use super::config::{QueryLogFormat, QueryLogOutput};
use super::format::{self, Clock, Pod};
use super::record::Record;
use crate::answered::queue::Writer;
use crate::search::Clients;

/// Bytes gathered before a write: several lines per system call. Under
/// the size of a pipe's atomic write, so a line never interleaves with
/// another writer's on the container log.
const BATCH: usize = 4096;

/// Where the lines go.
pub(super) enum Output {
    /// Through the process's stdout or stderr handle, whose lock keeps
    /// the server's own log lines whole beside ours.
    Stdout,
    Stderr,
    File(LogFile),
}

/// A query log file: nodens's alone (mode 0600, no symlink followed, a
/// regular file of nodens's uid), capped in size with one rotated file
/// beside it, and opened again after a SIGHUP (for an outside rotation).
pub(super) struct LogFile {
    path: PathBuf,
    file: std::fs::File,
    written: u64,
    max_size: u64,
    /// Bumped at each SIGHUP (the query log's `Hub::reopen`): the writer
    /// opens its file again (the path may have been rotated away by
    /// logrotate or an operator).
    reopen: Arc<AtomicU64>,
    /// The reopen generation the file was opened at.
    generation: u64,
}

impl Output {
    pub(super) fn open(
        output: &QueryLogOutput,
        max_size: u64,
        reopen: &Arc<AtomicU64>,
    ) -> std::io::Result<Output> {
        Ok(match output {
            QueryLogOutput::Stdout => Output::Stdout,
            QueryLogOutput::Stderr => Output::Stderr,
            QueryLogOutput::File(path) => {
                let generation = reopen.load(Ordering::Relaxed);
                let (file, written) = open_private(path)?;
                Output::File(LogFile {
                    path: path.clone(),
                    file,
                    written,
                    max_size,
                    reopen: reopen.clone(),
                    generation,
                })
            }
        })
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout => std::io::stdout().lock().write_all(bytes),
            Output::Stderr => std::io::stderr().lock().write_all(bytes),
            Output::File(f) => f.write(bytes),
        }
    }
}

impl LogFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let generation = self.reopen.load(Ordering::Relaxed);
        if generation != self.generation {
            self.generation = generation;
            (self.file, self.written) = open_private(&self.path)?;
        }
        if self.written > 0
            && self.written + bytes.len() as u64 > self.max_size
            && self.file.metadata()?.file_type().is_file()
        {
            let mut rotated = self.path.clone().into_os_string();
            rotated.push(".1");
            std::fs::rename(&self.path, &rotated)?;
            (self.file, self.written) = open_private(&self.path)?;
        }
        self.file.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }
}

/// Opens `path` to append, created mode 0600; refuses a symlink (any
/// process that can write the directory could point it at a file of
/// nodens's to be overwritten) and anything but a regular file of our
/// own uid; a file of ours open to others is made 0600. Returns the file
/// and its length.
fn open_private(path: &Path) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("{} (a symlink is not followed): {e}", path.display()),
            )
        })?;
    let meta = file.metadata()?;
    let refused = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{}: {why}", path.display()),
        )
    };
    if meta.file_type().is_char_device() {
        // /dev/null and the like: written as it is, never rotated.
        return Ok((file, 0));
    }
    if !meta.file_type().is_file() {
        return Err(refused("not a regular file or a character device".into()));
    }
    // SAFETY: geteuid has no preconditions.
    let own = unsafe { libc::geteuid() };
    if meta.uid() != own {
        return Err(refused(format!(
            "belongs to uid {}, not nodens's {own}",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok((file, meta.len()))
}

/// The writer's counters.
pub(super) struct Counts {
    pub(super) written: IntCounter,
    pub(super) errors: IntCounter,
}

/// The query log's [`Writer`]: formats each record into a batch of
/// lines, written in one call.
pub(super) struct Lines {
    output: Output,
    format: QueryLogFormat,
    clients: Arc<Clients>,
    counts: Counts,
    batch: String,
    lines: u64,
    clock: Clock,
}

impl Lines {
    pub(super) fn new(
        output: Output,
        format: QueryLogFormat,
        clients: Arc<Clients>,
        counts: Counts,
    ) -> Lines {
        Lines {
            output,
            format,
            clients,
            counts,
            batch: String::with_capacity(BATCH * 2),
            lines: 0,
            clock: Clock::now(),
        }
    }
}

impl Writer<Record> for Lines {
    fn take(&mut self, record: Record) -> bool {
        let (format, clock, batch) = (self.format, &self.clock, &mut self.batch);
        self.clients.with_pod(record.client.ip(), |pod| {
            let pod = pod.map(|(namespace, name)| Pod { namespace, name });
            format::line(format, &record, pod, clock, batch);
        });
        self.lines += 1;
        self.batch.len() >= BATCH
    }

    fn flush(&mut self) {
        flush(
            &mut self.output,
            &mut self.batch,
            &mut self.lines,
            &self.counts,
        );
        self.clock = Clock::now();
    }
}

fn flush(output: &mut Output, batch: &mut String, lines: &mut u64, counts: &Counts) {
    if batch.is_empty() {
        return;
    }
    match output.write(batch.as_bytes()) {
        Ok(()) => counts.written.inc_by(*lines),
        Err(_) => counts.errors.inc_by(*lines),
    }
    batch.clear();
    *lines = 0;
}
