//! What nodens trusts on the node: a directory only its own uid can enter,
//! files in it that its uid owns, and peers on a Unix socket that run as its
//! uid. Everything else on the host network (other host-network pods, other
//! root processes without nodens's mounts) is untrusted (docs/security.md).
//!
//! Every local channel goes through here: the claim on the node setup
//! (`node::presence`) and the handover socket (`listen::handover`). The
//! kernel does the checking (file modes, `SO_PEERCRED`); this module only
//! refuses what the kernel reports as someone else's.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The uid nodens runs as here (its effective uid).
pub fn own_uid() -> u32 {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The gid nodens runs as here (its effective gid).
pub fn own_gid() -> u32 {
    // SAFETY: getegid(2) has no arguments and cannot fail.
    unsafe { libc::getegid() }
}

fn refused(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, what)
}

/// Checks that `dir` is a directory (not a symlink) owned by our uid that
/// no group or other user can enter.
pub fn check_dir(dir: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() {
        return Err(refused(format!("{} is not a directory", dir.display())));
    }
    check_owned(dir, &meta, 0o077)
}

/// Checks that the socket file at `path` is owned by our uid and that no
/// group or other user may write to it, in a directory that passes
/// [`check_dir`].
pub fn check_socket_file(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        check_dir(dir)?;
    }
    let meta = std::fs::symlink_metadata(path)?;
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_socket() {
        return Err(refused(format!("{} is not a socket", path.display())));
    }
    check_owned(path, &meta, 0o077)
}

/// Checks that `file`, opened from `path`, is a regular file owned by our
/// uid that no group or other user may read or write, in a directory that
/// passes [`check_dir`]. The open file is what is checked (`fstat`), so a
/// file swapped after the check is not the one read.
pub fn check_private_file(path: &Path, file: &std::fs::File) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        check_dir(dir)?;
    }
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(refused(format!("{} is not a regular file", path.display())));
    }
    check_owned(path, &meta, 0o077)
}

fn check_owned(path: &Path, meta: &std::fs::Metadata, forbidden: u32) -> io::Result<()> {
    let uid = own_uid();
    if meta.uid() != uid {
        return Err(refused(format!(
            "{} belongs to uid {}, not to nodens's uid {uid}",
            path.display(),
            meta.uid()
        )));
    }
    if meta.mode() & forbidden != 0 {
        return Err(refused(format!(
            "{} has mode {:o}: others may use it",
            path.display(),
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Directories that other programs of the node use: nodens must never
/// take one over (chown it, make it 0700) for a socket or a file of its
/// own. `None` for a directory nodens may make its own; else why not.
pub fn shared_dir(dir: &Path) -> Option<String> {
    const SHARED: [&str; 22] = [
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
        "/var/lib",
        "/var/run",
        "/var/tmp",
        "/usr/local",
    ];
    let text = dir.to_string_lossy();
    let trimmed = text.trim_end_matches('/');
    let normal = if trimmed.is_empty() { "/" } else { trimmed };
    if dir.as_os_str().is_empty() || !dir.is_absolute() {
        return Some(format!("`{}` is not an absolute directory", dir.display()));
    }
    SHARED.contains(&normal).then(|| {
        format!(
            "{normal} is a directory other programs share: nodens would make it its own (owner, mode 0700); give the socket or file a directory of its own, such as {normal}/nodens"
        )
    })
}

/// Creates `dir` if missing and gives it to `owner`, mode 0700. Only a
/// directory that belongs to root or to `owner` already is taken (a
/// hostPath the kubelet created is root's); one that another uid owns, or a
/// symlink, is refused: someone else made it, and may have left something
/// inside. Run as root, before the uid switch (with `CAP_CHOWN`); a mode
/// that root may not change without `CAP_FOWNER` (the directory is already
/// `owner`'s) is set by [`make_private`] after the switch.
pub fn prepare_dir(dir: &Path, owner: (u32, u32)) -> io::Result<()> {
    if let Some(why) = shared_dir(dir) {
        return Err(refused(why));
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
        }
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() {
        return Err(refused(format!("{} is not a directory", dir.display())));
    }
    if meta.uid() != 0 && meta.uid() != owner.0 {
        return Err(refused(format!(
            "{} belongs to uid {}, neither root nor nodens's uid {}",
            dir.display(),
            meta.uid(),
            owner.0
        )));
    }
    // The mode first, while the directory is still ours to change.
    if meta.uid() == own_uid() && meta.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    if (meta.uid(), meta.gid()) != owner {
        std::os::unix::fs::lchown(dir, Some(owner.0), Some(owner.1))?;
    }
    Ok(())
}

/// Makes `dir`, which is ours, mode 0700, and checks it ([`check_dir`]).
pub fn make_private(dir: &Path) -> io::Result<()> {
    if let Some(why) = shared_dir(dir) {
        return Err(refused(why));
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_dir() && meta.uid() == own_uid() && meta.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    check_dir(dir)
}

/// Listens on a Unix socket at `path`, mode 0600, in a directory private
/// to our uid (created mode 0700 if missing, else checked with
/// [`check_dir`]); a file left at `path` by an earlier process is replaced.
/// For nodens's local channels: the handover socket, the control socket.
pub fn listen_private(path: &Path) -> io::Result<std::os::unix::net::UnixListener> {
    let context = |what: &str, e: io::Error| {
        io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
    };
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| context("creating the directory of", e))?;
        }
        check_dir(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(context("removing", e)),
    }
    let listener =
        std::os::unix::net::UnixListener::bind(path).map_err(|e| context("listening on", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| context("making private", e))?;
    Ok(listener)
}

/// The credentials of the process at the other end of a Unix socket, as
/// the kernel recorded them (at `connect` or `listen`).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
}

/// The peer of `socket`, refused unless it runs as our uid.
pub fn check_peer(socket: &impl AsFd) -> io::Result<Peer> {
    let creds = nix::sys::socket::getsockopt(socket, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(io::Error::from)?;
    let peer = Peer {
        pid: creds.pid(),
        uid: creds.uid(),
    };
    if peer.uid != own_uid() {
        return Err(refused(format!(
            "the peer (pid {}) runs as uid {}, not as nodens's uid {}",
            peer.pid,
            peer.uid,
            own_uid()
        )));
    }
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_others_can_enter_is_refused_and_a_private_one_taken() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            check_dir(&dir).unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_dir(&dir).unwrap();
        // A symlink to a private directory is not one.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(check_dir(&link).is_err());
    }

    #[test]
    fn prepare_makes_a_directory_private() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b");
        let me = (own_uid(), own_gid());
        prepare_dir(&dir, me).unwrap();
        check_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        prepare_dir(&dir, me).unwrap();
        check_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        make_private(&dir).unwrap();
    }

    #[test]
    fn a_peer_of_our_own_uid_passes() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let peer = check_peer(&a).unwrap();
        assert_eq!(peer.uid, own_uid());
        assert_eq!(peer.pid, std::process::id() as i32);
        drop(b);
    }
}
