//! Local records from hosts-file lines (CoreDNS's `hosts`): names to IPv4
//! and IPv6 addresses, and (unless `reverse` is off) addresses to names for
//! PTR. A line is `ADDRESS NAME...`, `#` starts a comment. Unlike CoreDNS,
//! which skips a line it cannot read, nodens refuses it with its line: a
//! typo in a record should not silently answer differently.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::SystemTime;

use crate::search::names::suffix_at;
use crate::wire::name;

/// The records of one hosts file or of the inline entries.
#[derive(Debug, Default)]
pub(crate) struct HostsData {
    v4: HashMap<Box<[u8]>, Vec<Ipv4Addr>>,
    v6: HashMap<Box<[u8]>, Vec<Ipv6Addr>>,
    /// Address to names, in wire form.
    names: HashMap<IpAddr, Vec<Box<[u8]>>>,
}

/// A line that does not parse: its number (1-based) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// What a file looked like when it was read: a change to any of these
/// means read it again (CoreDNS compares mtime and size; the inode also
/// catches a file replaced by a rename, as a ConfigMap update does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    mtime: Option<SystemTime>,
    size: u64,
    inode: u64,
}

impl Stamp {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            mtime: meta.modified().ok(),
            size: meta.len(),
            inode: meta.ino(),
        }
    }
}

/// `addr` without an IPv6 zone (`fe80::1%eth0`), as CoreDNS reads it.
fn address(text: &str) -> Option<IpAddr> {
    let text = text.split_once('%').map_or(text, |(a, _)| a);
    text.parse().ok()
}

impl HostsData {
    /// Parses hosts-file text. Names outside `zones` are left out, as
    /// CoreDNS leaves them out.
    pub(crate) fn parse(
        text: &str,
        zones: &[Box<[u8]>],
        reverse: bool,
    ) -> Result<HostsData, LineError> {
        let mut data = HostsData::default();
        for (i, line) in text.lines().enumerate() {
            let fail = |message: String| LineError {
                line: i + 1,
                message,
            };
            let line = line.split_once('#').map_or(line, |(l, _)| l);
            let mut fields = line.split_whitespace();
            let Some(first) = fields.next() else { continue };
            let ip =
                address(first).ok_or_else(|| fail(format!("`{first}` is not an IP address")))?;
            let mut any = false;
            for host in fields {
                any = true;
                let wire: Box<[u8]> = name::from_text(host)
                    .map_err(|e| fail(e.0))?
                    .into_boxed_slice();
                if !zones.iter().any(|z| suffix_at(&wire, z).is_some()) {
                    continue;
                }
                match ip {
                    IpAddr::V4(v4) => data.v4.entry(wire.clone()).or_default().push(v4),
                    IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                        Some(v4) => data.v4.entry(wire.clone()).or_default().push(v4),
                        None => data.v6.entry(wire.clone()).or_default().push(v6),
                    },
                }
                if reverse {
                    data.names.entry(canonical(ip)).or_default().push(wire);
                }
            }
            if !any {
                return Err(fail(format!("`{first}` has no names after it")));
            }
        }
        Ok(data)
    }

    pub(crate) fn v4(&self, name: &[u8]) -> &[Ipv4Addr] {
        self.v4.get(name).map_or(&[], Vec::as_slice)
    }

    pub(crate) fn v6(&self, name: &[u8]) -> &[Ipv6Addr] {
        self.v6.get(name).map_or(&[], Vec::as_slice)
    }

    pub(crate) fn names_of(&self, ip: IpAddr) -> &[Box<[u8]>] {
        self.names.get(&canonical(ip)).map_or(&[], Vec::as_slice)
    }

    /// Names with addresses.
    pub(crate) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }
}

/// An IPv4-mapped IPv6 address is its IPv4 address (Go's net.IP says so).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Reads and parses a hosts file. A file that does not exist is empty
/// (CoreDNS warns and serves nothing from it until it appears).
/// The largest hosts file read: a file another party writes must not take
/// nodens's memory (a big cluster's generated hosts file is a few MiB).
pub(crate) const MAX_HOSTS_FILE: u64 = 16 << 20;

/// Reads `path` as text, at most [`MAX_HOSTS_FILE`] bytes (the file may
/// grow between the size check and the read); a FIFO does not block the
/// open.
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut text = String::new();
    file.take(MAX_HOSTS_FILE).read_to_string(&mut text)?;
    Ok(text)
}

/// Why a hosts file gives no records: the file, and what is wrong with it
/// (an I/O error kept as its text, so that two polls compare).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hosts file {}{what}", path.display())]
pub(crate) struct BadHostsFile {
    path: std::path::PathBuf,
    what: String,
}

fn bad(path: &Path, what: String) -> BadHostsFile {
    BadHostsFile {
        path: path.to_owned(),
        what,
    }
}

pub(crate) fn read_file(
    path: &Path,
    zones: &[Box<[u8]>],
    reverse: bool,
) -> Result<(HostsData, Option<Stamp>), BadHostsFile> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(path = %path.display(), "hosts file does not exist (yet): no records from it until it does");
            return Ok((HostsData::default(), None));
        }
        Err(e) => return Err(bad(path, format!(": {e}"))),
    };
    if !meta.is_file() {
        return Err(bad(path, ": not a regular file".into()));
    }
    if meta.len() > MAX_HOSTS_FILE {
        return Err(bad(
            path,
            format!(
                ": {} bytes, more than the {MAX_HOSTS_FILE} read",
                meta.len()
            ),
        ));
    }
    let text = read_bounded(path).map_err(|e| bad(path, format!(": {e}")))?;
    let data = HostsData::parse(&text, zones, reverse)
        .map_err(|e| bad(path, format!(" line {}: {}", e.line, e.message)))?;
    Ok((data, Some(Stamp::of(&meta))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Vec<Box<[u8]>> {
        vec![Box::from(&[0u8][..])]
    }

    /// A file past the bound is refused before it is read; a FIFO (which
    /// would block a plain open) is no regular file.
    #[test]
    fn a_file_too_large_or_not_regular_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("hosts");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(MAX_HOSTS_FILE + 1).unwrap();
        let why = read_file(&big, &root(), true).unwrap_err();
        assert!(why.to_string().contains("more than"), "{why}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let why = read_file(&fifo, &root(), true).unwrap_err();
        assert!(why.to_string().contains("not a regular file"), "{why}");
    }

    #[test]
    fn lines_names_and_comments() {
        let text = "# comment\n10.0.0.1 a.example.org b # c\n\n::1 a.example.org\n10.0.0.2 A.Example.Org.\n";
        let data = HostsData::parse(text, &root(), true).unwrap();
        let a = name::from_text("a.example.org").unwrap();
        assert_eq!(
            data.v4(&a),
            [
                "10.0.0.1".parse::<Ipv4Addr>().unwrap(),
                "10.0.0.2".parse().unwrap()
            ]
        );
        assert_eq!(data.v6(&a), ["::1".parse::<Ipv6Addr>().unwrap()]);
        assert_eq!(data.v4(&name::from_text("b").unwrap()).len(), 1);
        assert_eq!(data.v4(&name::from_text("c").unwrap()).len(), 0);
        assert_eq!(data.names_of("10.0.0.1".parse().unwrap()).len(), 2);
        let without = HostsData::parse(text, &root(), false).unwrap();
        assert!(without.names_of("10.0.0.1".parse().unwrap()).is_empty());
    }

    #[test]
    fn names_outside_the_zones_are_left_out() {
        let zones = vec![name::from_text("example.org").unwrap().into_boxed_slice()];
        let data =
            HostsData::parse("10.0.0.1 a.example.org a.example.com\n", &zones, true).unwrap();
        assert_eq!(data.len(), 1);
    }

    #[test]
    fn bad_lines_name_their_number() {
        let e = HostsData::parse("10.0.0.1 a\n10.0.0.300 b\n", &root(), true).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("10.0.0.300"), "{e:?}");
        let e = HostsData::parse("\n\n10.0.0.1\n", &root(), true).unwrap_err();
        assert_eq!(e.line, 3);
        let long = format!("10.0.0.1 {}.example\n", "x".repeat(64));
        assert_eq!(HostsData::parse(&long, &root(), true).unwrap_err().line, 1);
    }
}
