//! The cache on the node's disk: a file written now and then and read at
//! start (`cache::warm`), so a process that could not hand its cache over
//! (an OOM kill, a crash, a node reboot) starts warm as a handover's does.
//!
//! The file is a header, then the handover's stream (`cache::snapshot`):
//! the magic `NDCF`, the format version (u32), the writer's wall-clock
//! time (Unix milliseconds, u64), the stream's length (u64), its CRC-32
//! (u32) and the identity of the zones and upstreams it was written for
//! (u64, `SnapshotPlan::identity`): a file written for another cluster
//! domain or other upstreams is refused whole. The stream's ages are
//! relative to the time written; the reader adds the wall-clock time
//! elapsed since (`snapshot::read_aged`), so what expired while no process
//! ran is dropped and the TTLs go on counting down.
//!
//! Read as a stream, never whole: a first pass checks the CRC, a second
//! loads the records, each through a small buffer. While it is read the
//! file is set aside (`<file>.loading`): a process killed in the load (the
//! OOM killer) leaves no file to kill the next start too; the next start
//! removes what was set aside and starts cold.
//!
//! Written atomically: to `<file>.tmp` beside it, synced, renamed over the
//! file, the directory synced. A crash at any moment leaves the previous
//! file or the new one, whole; a `.tmp` left behind is never read.
//!
//! Read as input, like the handover's stream: the directory must be
//! nodens's alone and the file nodens's, closed to others (`trust`); the
//! length, the CRC, the version and the time are checked before any record
//! (a torn or truncated file, another format, a file from the future is
//! refused whole), then each record is checked as a handover's is.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Cache;
use super::snapshot::{self, Written};

const MAGIC: &[u8; 4] = b"NDCF";
/// The format this nodens writes and reads; a file of another is refused.
const VERSION: u32 = 2;
const HEADER_LEN: u64 = 4 + 4 + 8 + 8 + 4 + 8;
/// The buffer of each pass over the file.
const READ_BUFFER: usize = 64 << 10;
/// How far in the future a file's time may be and still count as written
/// now (two readings of one clock, a coarse file system).
const FUTURE_SLACK: Duration = Duration::from_secs(2);

/// One write at a time to a directory, whoever writes: a writer stopped on
/// reload may still be writing when its successor starts, and around a
/// handover the old process and the new one may both write. Both use the
/// same `.tmp`; an exclusive `flock` on the directory, held for the
/// write, keeps one from renaming the other's half-written file. Released
/// when the directory's descriptor is closed.
fn lock_dir(dir: &Path) -> io::Result<File> {
    let file = File::open(dir)?;
    // SAFETY: flock(2) on a descriptor `file` owns, open for the call.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("cannot open it: {0}")]
    Open(#[source] io::Error),
    /// Its directory or itself is not nodens's alone (`trust`).
    #[error("not trusted: {0}")]
    Untrusted(#[source] io::Error),
    #[error("{size} bytes, more than snapshot_max_size ({max})")]
    TooLarge { size: u64, max: u64 },
    #[error("not a nodens cache file")]
    NotACacheFile,
    #[error("format version {0}, this nodens reads version {VERSION}")]
    Version(u32),
    /// The length or the CRC does not match: cut short or damaged.
    #[error("truncated or damaged ({0})")]
    Damaged(&'static str),
    #[error("written {0:?} in the future: the clock went back")]
    Future(Duration),
    #[error("written {age:?} ago, longer than anything in it may be served ({horizon:?})")]
    TooOld { age: Duration, horizon: Duration },
    #[error("cannot read it: {0}")]
    Read(#[source] io::Error),
    #[error("written for other zones or upstreams (another cluster domain, another cluster DNS)")]
    OtherIdentity,
    #[error(
        "a start before this one was killed while reading it (out of memory?); it is not read again"
    )]
    Interrupted,
}

/// A file that passed the checks of the whole: its time, and its stream to
/// read. Set aside while it is read; [`Opened::finish`] puts it back.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) written_at: SystemTime,
    file: File,
    length: u64,
    /// Where it was, and where it is set aside while read.
    path: PathBuf,
    aside: PathBuf,
}

/// `<file>.loading`, where a file is set aside while it is read.
pub(crate) fn set_aside(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".loading");
    path.with_file_name(name)
}

impl Opened {
    /// The stream of records, through a small buffer.
    pub(crate) fn stream(&mut self) -> io::Result<impl Read + '_> {
        self.file.seek(io::SeekFrom::Start(HEADER_LEN))?;
        Ok(io::BufReader::with_capacity(
            READ_BUFFER,
            (&self.file).take(self.length),
        ))
    }

    /// Puts the file back where it was (unless a newer one was written
    /// there meanwhile): the load is over.
    pub(crate) fn finish(self) {
        if self.path.exists() || std::fs::rename(&self.aside, &self.path).is_err() {
            let _ = std::fs::remove_file(&self.aside);
        }
    }

    /// How long ago the file was written, by the wall clock at `now`:
    /// refused if in the future, or longer ago than `horizon` (no entry
    /// lives longer: the largest max_ttl plus the stale window).
    pub(crate) fn age(&self, now: SystemTime, horizon: Duration) -> Result<Duration, Refused> {
        age_of(self.written_at, now, horizon)
    }
}

/// How long before `now` a file written at `written_at` was: see
/// [`Opened::age`].
fn age_of(written_at: SystemTime, now: SystemTime, horizon: Duration) -> Result<Duration, Refused> {
    {
        let age = match now.duration_since(written_at) {
            Ok(age) => age,
            Err(e) if e.duration() <= FUTURE_SLACK => Duration::ZERO,
            Err(e) => return Err(Refused::Future(e.duration())),
        };
        if age > horizon {
            return Err(Refused::TooOld { age, horizon });
        }
        Ok(age)
    }
}

/// Opens the file at `path` and checks it whole (see the module's
/// comment): at most `max_size` bytes, written for `identity`. `Ok(None)`
/// when there is none. The file is set aside while it is read; a file set
/// aside by a start that never finished is removed, and refused.
pub(crate) fn open(path: &Path, max_size: u64, identity: u64) -> Result<Option<Opened>, Refused> {
    // Nothing is moved in a directory that is not nodens's alone.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        return Ok(None);
    }
    crate::trust::check_dir(dir).map_err(Refused::Untrusted)?;
    let aside = set_aside(path);
    if std::fs::symlink_metadata(&aside).is_ok() {
        let _ = std::fs::remove_file(&aside);
        if std::fs::symlink_metadata(path).is_err() {
            return Err(Refused::Interrupted);
        }
    }
    match std::fs::rename(path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Refused::Open(e)),
    }
    let opened = open_aside(&aside, max_size, identity);
    match opened {
        Ok(Some((written_at, file, length))) => Ok(Some(Opened {
            written_at,
            file,
            length,
            path: path.to_owned(),
            aside,
        })),
        Ok(None) => Ok(None),
        Err(e) => {
            // Refused: put back, for an operator to look at (it is refused
            // again at the next start, not loaded).
            if !path.exists() {
                let _ = std::fs::rename(&aside, path);
            }
            Err(e)
        }
    }
}

fn open_aside(
    aside: &Path,
    max_size: u64,
    identity: u64,
) -> Result<Option<(SystemTime, File, u64)>, Refused> {
    // Not through a symlink; a FIFO planted there does not block the open.
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(aside)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Refused::Open(e)),
    };
    crate::trust::check_private_file(aside, &file).map_err(Refused::Untrusted)?;
    let size = file.metadata().map_err(Refused::Read)?.len();
    if size > max_size {
        return Err(Refused::TooLarge {
            size,
            max: max_size,
        });
    }
    let (written_at, length) = check(&mut file, size, identity)?;
    Ok(Some((written_at, file, length)))
}

/// Reads the header of a file of `size` bytes and checks the stream after
/// it against the header's length and CRC, one buffer at a time; returns
/// the time written and the stream's length.
fn check(
    file: &mut (impl Read + Seek),
    size: u64,
    identity: u64,
) -> Result<(SystemTime, u64), Refused> {
    let mut header = [0u8; HEADER_LEN as usize];
    let got = read_up_to(file, &mut header).map_err(Refused::Read)?;
    if got < 8 || &header[..4] != MAGIC {
        return Err(Refused::NotACacheFile);
    }
    let word = |at: usize| u32::from_be_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_be_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let version = word(4);
    if version != VERSION {
        return Err(Refused::Version(version));
    }
    if got < header.len() {
        return Err(Refused::Damaged("shorter than its header"));
    }
    let (written_ms, length, crc) = (long(8), long(16), word(24));
    if length != size - HEADER_LEN {
        return Err(Refused::Damaged("its length is not the one written"));
    }
    if long(28) != identity {
        return Err(Refused::OtherIdentity);
    }
    let mut summed = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; READ_BUFFER];
    let mut left = length;
    while left > 0 {
        let n = file.read(&mut buffer).map_err(Refused::Read)?;
        if n == 0 {
            return Err(Refused::Damaged("its length is not the one written"));
        }
        let n = n.min(left as usize);
        summed.update(&buffer[..n]);
        left -= n as u64;
    }
    if summed.finalize() != crc {
        return Err(Refused::Damaged("the CRC does not match"));
    }
    Ok((UNIX_EPOCH + Duration::from_millis(written_ms), length))
}

/// Reads into `buf` until it is full or the input ends; how much was read.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// `<file>.tmp`, where a write goes before it is renamed over the file.
pub(crate) fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// A writer that counts and checksums what goes through it.
struct Summed<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes the entries of `cache` servable within `stale_max_age` to `path`
/// atomically, the file at most `max_size` bytes (the entries past it left
/// out). The directory is created private when missing, made private when
/// ours, and must be nodens's alone (`trust::make_private`).
pub(crate) fn write(
    path: &Path,
    cache: &Cache,
    stale_max_age: Duration,
    max_size: u64,
    identity: u64,
) -> io::Result<Written> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    // A directory of ours left open (a hostPath the kubelet created while
    // nodens runs as root) is closed first; another's is refused.
    crate::trust::make_private(dir)?;
    let locked = lock_dir(dir)?;
    let tmp = temporary(path);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = write_new(&tmp, cache, stale_max_age, max_size, identity)
        .and_then(|w| std::fs::rename(&tmp, path).map(|()| w));
    match written {
        Ok(w) => {
            locked.sync_all()?;
            Ok(w)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The file at `tmp`, new (mode 0600), written and synced.
fn write_new(
    tmp: &Path,
    cache: &Cache,
    stale_max_age: Duration,
    max_size: u64,
    identity: u64,
) -> io::Result<Written> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)?;
    let mut out = Summed {
        inner: BufWriter::with_capacity(256 << 10, file),
        crc: crc32fast::Hasher::new(),
    };
    // The header's place; its fields are known at the end.
    out.inner.write_all(&[0; HEADER_LEN as usize])?;
    let (now, written_at) = (Instant::now(), SystemTime::now());
    let budget = max_size.saturating_sub(HEADER_LEN);
    let written = snapshot::write_bounded(cache, now, stale_max_age, budget, &mut out)?;
    let mut file = out.inner.into_inner().map_err(|e| e.into_error())?;
    let millis = written_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let mut header = Vec::with_capacity(HEADER_LEN as usize);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_be_bytes());
    header.extend_from_slice(&millis.to_be_bytes());
    header.extend_from_slice(&written.bytes.to_be_bytes());
    header.extend_from_slice(&out.crc.finalize().to_be_bytes());
    header.extend_from_slice(&identity.to_be_bytes());
    file.rewind()?;
    file.write_all(&header)?;
    file.sync_all()?;
    Ok(Written {
        bytes: written.bytes + HEADER_LEN,
        ..written
    })
}

#[cfg(test)]
#[path = "snapshot_file_tests.rs"]
mod tests;
