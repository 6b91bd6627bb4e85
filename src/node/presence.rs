//! Which nodens owns the node setup, as the kernel sees it.
//!
//! A server holds an exclusive `flock` on `claim-<interface>-<netns>` in the node's
//! state directory (`[node] state_dir`) for as long as it lives, and the
//! kernel releases the lock the instant the process dies, SIGKILL and OOM
//! kill included. So "is a server alive here?" is one `flock` attempt, with
//! no probe timeout and no confusion between a server that is starting and
//! one that is dead. Holding the lock is also what keeps a withdraw (by the
//! supervisor or the guard) from interleaving with a server's setup.
//!
//! Only nodens can hold it: the directory must belong to nodens's uid with
//! mode 0700 (`trust::check_dir`), and only nodens's containers mount it.
//! (It was an abstract Unix name, which any process on the host network,
//! of any uid, could bind first: the supervisor and the guard then never
//! withdrew, and a starting server waited and gave up.) A holder that
//! nothing answers for is still not trusted for long: see [`HOLDER_SILENCE`].

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::trust;

/// How long the claim may be held while nothing answers on the node's
/// address before the holder is taken for something that is not a serving
/// nodens (a hung process, a foreign holder) and is overruled. Longer than
/// a server's setup and a predecessor's drain (`shutdown_grace`, 5 s by
/// default); long enough that an overload, which loses some probes but not
/// all of them for ten seconds, never looks like it.
pub(crate) const HOLDER_SILENCE: Duration = Duration::from_secs(10);

/// The claim on the node setup of one interface; released on drop or exit.
#[derive(Debug)]
pub(crate) struct Presence {
    _file: File,
}

/// Where the claim of `interface` lives. An interface belongs to a network
/// namespace, and so does its claim: the file is named after both (two
/// namespaces sharing a directory, as tests do, never share a claim).
pub(crate) fn claim_path(dir: &Path, interface: &str) -> PathBuf {
    let netns = std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino());
    dir.join(format!("claim-{interface}-{netns}"))
}

/// Creates `dir` private (0700) if it does not exist, then checks it is
/// private and ours.
fn ensure_dir(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    trust::check_dir(dir)
}

/// Opens the claim file of `interface`, creating it when `create`; `None`
/// when it does not exist (and `create` is false).
fn open(dir: &Path, interface: &str, create: bool) -> io::Result<Option<File>> {
    if create {
        ensure_dir(dir)?;
    } else {
        match trust::check_dir(dir) {
            // Nobody ever claimed here.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            checked => checked?,
        }
    }
    let path = claim_path(dir, interface);
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(Some(file))
}

/// Tries an exclusive lock on `file` without waiting: false when another
/// open file holds it.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock(2) on a descriptor `file` owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

impl Presence {
    /// Claims the node setup of `interface`, or `None` if another process
    /// holds it. A claim file another uid left here (only root could have,
    /// the directory being ours) is replaced.
    pub(crate) fn try_claim(dir: &Path, interface: &str) -> io::Result<Option<Presence>> {
        let file = match open(dir, interface, true) {
            Ok(file) => file.ok_or_else(|| io::Error::other("claim file"))?,
            // Another uid's, that ours may not open: replaced as below.
            Err(e)
                if e.kind() == io::ErrorKind::PermissionDenied && trust::check_dir(dir).is_ok() =>
            {
                return Presence::replace(dir, interface);
            }
            Err(e) => return Err(e),
        };
        if file.metadata()?.uid() != trust::own_uid() {
            drop(file);
            return Presence::replace(dir, interface);
        }
        Ok(try_lock(&file)?.then_some(Presence { _file: file }))
    }

    /// Claims the node setup with a new claim file, whoever holds the old
    /// one: its holder keeps a lock on a file that no longer counts.
    pub(crate) fn replace(dir: &Path, interface: &str) -> io::Result<Option<Presence>> {
        match std::fs::remove_file(claim_path(dir, interface)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let file = open(dir, interface, true)?.ok_or_else(|| io::Error::other("claim file"))?;
        Ok(try_lock(&file)?.then_some(Presence { _file: file }))
    }

    /// Whether this claim is still the one at its path: false once another
    /// server overruled it (`replace`), whose node setup it then is.
    pub(crate) fn current(&self, dir: &Path, interface: &str) -> bool {
        let (Ok(ours), Ok(there)) = (
            self._file.metadata(),
            std::fs::metadata(claim_path(dir, interface)),
        ) else {
            return false;
        };
        (ours.dev(), ours.ino()) == (there.dev(), there.ino())
    }

    /// Whether some process holds the claim now. (Taking the lock for an
    /// instant to see: a server claiming at that instant tries again.)
    pub(crate) fn held(dir: &Path, interface: &str) -> io::Result<bool> {
        match open(dir, interface, false)? {
            None => Ok(false),
            Some(file) => Ok(!try_lock(&file)?),
        }
    }

    /// The pid holding the claim, as `/proc/locks` shows it here (0 or
    /// `None` when the holder is in another pid namespace or gone): for logs.
    pub(crate) fn holder(dir: &Path, interface: &str) -> Option<u32> {
        let inode = std::fs::metadata(claim_path(dir, interface)).ok()?.ino();
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        holder_in(&locks, inode)
    }
}

/// The pid of the FLOCK holder of `inode` in a `/proc/locks` text.
fn holder_in(locks: &str, inode: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; waiters have
        // a "->" after the number.
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let ino: u64 = fields.get(5)?.rsplit(':').next()?.parse().ok()?;
        (ino == inode).then(|| fields.get(4)?.parse().ok())?
    })
}

/// Waits while the claim is held by a process that answers, up to
/// `patience`: what a server starting next to a draining one does.
/// `answers` says whether a nodens serves the node now (`node::serving`). Returns the claim, taken over from a
/// holder that nothing answered for [`HOLDER_SILENCE`] (with `broken` set).
pub(crate) async fn claim(
    dir: &Path,
    interface: &str,
    patience: Duration,
    answers: impl Fn() -> bool + Clone + Send + 'static,
) -> io::Result<(Presence, bool)> {
    let start = Instant::now();
    let mut silent_since = Instant::now();
    let mut said = false;
    loop {
        if let Some(p) = Presence::try_claim(dir, interface)? {
            return Ok((p, false));
        }
        let probe = answers.clone();
        if tokio::task::spawn_blocking(probe).await.unwrap_or(false) {
            silent_since = Instant::now();
        } else if silent_since.elapsed() >= HOLDER_SILENCE {
            let holder = Presence::holder(dir, interface);
            tracing::error!(
                interface,
                holder = ?holder,
                "node: the node setup's claim is held, but nothing has answered on its address for {HOLDER_SILENCE:?}: not a serving nodens; taking the claim over"
            );
            if let Some(p) = Presence::replace(dir, interface)? {
                return Ok((p, true));
            }
        }
        if start.elapsed() >= patience {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another nodens has held the node setup of {interface} for {patience:?}"),
            ));
        }
        if !said {
            tracing::info!(
                interface,
                "node: waiting for the process that holds the node setup to let go"
            );
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn one_holder_at_a_time_and_released_on_drop() {
        let dir = private_dir();
        assert!(!Presence::held(dir.path(), "if0").unwrap());
        let claim = Presence::try_claim(dir.path(), "if0").unwrap().unwrap();
        assert!(Presence::held(dir.path(), "if0").unwrap());
        assert!(Presence::try_claim(dir.path(), "if0").unwrap().is_none());
        assert_eq!(
            Presence::holder(dir.path(), "if0"),
            Some(std::process::id())
        );
        // Another interface is another claim.
        assert!(Presence::try_claim(dir.path(), "if1").unwrap().is_some());
        drop(claim);
        assert!(!Presence::held(dir.path(), "if0").unwrap());
    }

    #[test]
    fn a_replaced_claim_no_longer_counts_for_its_old_holder() {
        let dir = private_dir();
        let old = Presence::try_claim(dir.path(), "if0").unwrap().unwrap();
        let new = Presence::replace(dir.path(), "if0").unwrap().unwrap();
        assert!(!old.current(dir.path(), "if0"));
        assert!(new.current(dir.path(), "if0"));
        drop(old);
        assert!(Presence::held(dir.path(), "if0").unwrap());
        drop(new);
        assert!(!Presence::held(dir.path(), "if0").unwrap());
    }

    #[test]
    fn a_directory_others_can_enter_holds_no_claim() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = Presence::try_claim(dir.path(), "if0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(Presence::held(dir.path(), "if0").is_err());
    }

    #[test]
    fn proc_locks_lines_name_the_holder() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 00:1a:77 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4343 00:1a:77 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 99 00:1a:78 0 EOF\n";
        assert_eq!(holder_in(text, 77), Some(4242));
        assert_eq!(holder_in(text, 78), None);
    }
}
