//! The cache file's tests: written and read back, bounded, refused.

use super::*;
use crate::cache::testing::{POLICY, every_name, key};
use crate::cache::{Entry, Lookup};
use crate::wire::response;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

fn name(i: usize) -> Vec<u8> {
    let label = format!("host{i}");
    let mut n = vec![label.len() as u8];
    n.extend(label.as_bytes());
    n.extend(b"\x07example\x00");
    n
}

fn answer(name: &[u8], ttl: u32) -> Vec<u8> {
    let mut m = vec![0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
    m.extend(name);
    m.extend([0, 1, 0, 1, 0xc0, 0x0c, 0, 1, 0, 1]);
    m.extend(ttl.to_be_bytes());
    m.extend([0, 4, 192, 0, 2, 1]);
    m
}

fn filled(count: usize, ttl: u32) -> Cache {
    let cache = Cache::new(1 << 30);
    let now = Instant::now();
    for i in 0..count {
        let n = name(i);
        let msg = answer(&n, ttl);
        let layout = response::layout(&msg).unwrap();
        cache.insert(
            key(&n).to_owned(),
            Arc::new(Entry::from_response(&msg, &layout, &POLICY, now).unwrap()),
        );
    }
    cache
}

/// The identity the tests write and read with.
const ID: u64 = 0x5eed_0fc1_u64;

/// What `check` says of a file of these bytes.
fn parse(bytes: Vec<u8>) -> Result<SystemTime, Refused> {
    let size = bytes.len() as u64;
    check(&mut io::Cursor::new(bytes), size, ID).map(|(at, _)| at)
}

fn load(opened: &mut Opened, age: Duration) -> (Cache, snapshot::Loaded) {
    let now = Instant::now();
    let rules = snapshot::Rules {
        policy: &every_name,
        stale_max_age: Duration::ZERO,
        max_records: 1 << 20,
        deadline: now + Duration::from_secs(60),
    };
    let cache = Cache::new(1 << 30);
    let loaded = snapshot::read_aged(&cache, now, age, &rules, &mut opened.stream().unwrap());
    (cache, loaded)
}

fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn a_written_file_reads_back_with_its_time_and_entries() {
    let dir = private_dir();
    let path = dir.path().join("sub/cache.snap");
    let before = SystemTime::now();
    let w = write(&path, &filled(50, 300), Duration::ZERO, 1 << 20, ID).unwrap();
    assert_eq!((w.records, w.cut), (50, false));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), w.bytes);
    assert!(!temporary(&path).exists());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut opened = open(&path, 1 << 20, ID).unwrap().unwrap();
    let age = opened
        .age(SystemTime::now(), Duration::from_secs(60))
        .unwrap();
    assert!(opened.written_at + FUTURE_SLACK >= before && age < Duration::from_secs(5));
    let (cache, loaded) = load(&mut opened, Duration::ZERO);
    assert_eq!((loaded.loaded, loaded.refused), (50, 0));
    assert!(matches!(
        cache.lookup(&key(&name(7)), Instant::now(), Duration::ZERO),
        Lookup::Fresh(_)
    ));
    // 301 s later nothing of it is left.
    let (_, loaded) = load(&mut opened, Duration::from_secs(301));
    assert_eq!((loaded.loaded, loaded.refused), (0, 50));
    assert!(
        open(&dir.path().join("none"), 1 << 20, ID)
            .unwrap()
            .is_none()
    );
}

#[test]
fn the_size_bound_leaves_entries_out() {
    let dir = private_dir();
    let path = dir.path().join("cache.snap");
    let w = write(&path, &filled(100, 300), Duration::ZERO, 2000, ID).unwrap();
    assert!(w.cut && w.records > 0 && w.records < 100, "{w:?}");
    assert!(w.bytes <= 2000);
    let mut opened = open(&path, 2000, ID).unwrap().unwrap();
    assert_eq!(load(&mut opened, Duration::ZERO).1.loaded, w.records);
    opened.finish();
    // A reader with a smaller bound refuses it.
    assert!(matches!(
        open(&path, 1000, ID),
        Err(Refused::TooLarge { .. })
    ));
}

#[test]
fn damaged_foreign_and_untimely_files_are_refused_whole() {
    let dir = private_dir();
    let path = dir.path().join("cache.snap");
    write(&path, &filled(20, 300), Duration::ZERO, 1 << 20, ID).unwrap();
    let good = std::fs::read(&path).unwrap();
    for cut in 0..good.len() {
        assert!(parse(good[..cut].to_vec()).is_err(), "cut at {cut}");
    }
    for at in (0..good.len()).filter(|at| !(8..16).contains(at)) {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        assert!(parse(bad).is_err(), "flipped at {at}");
    }
    let mut other = good.clone();
    other[4..8].copy_from_slice(&1u32.to_be_bytes());
    assert!(matches!(parse(other), Err(Refused::Version(1))));

    let written_at = parse(good.clone()).unwrap();
    let hour = Duration::from_secs(3600);
    let back = written_at - Duration::from_secs(60);
    assert!(matches!(
        age_of(written_at, back, hour),
        Err(Refused::Future(_))
    ));
    let later = written_at + 2 * hour;
    assert!(matches!(
        age_of(written_at, later, hour),
        Err(Refused::TooOld { .. })
    ));
    // Written for other zones or upstreams.
    let size = good.len() as u64;
    let other = check(&mut io::Cursor::new(good.clone()), size, ID + 1);
    assert!(matches!(other, Err(Refused::OtherIdentity)));

    // Open to others: refused; so is a directory open to others.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        open(&path, 1 << 20, ID),
        Err(Refused::Untrusted(_))
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(
        open(&path, 1 << 20, ID),
        Err(Refused::Untrusted(_))
    ));
    // A write closes a directory of ours first.
    write(&path, &filled(1, 300), Duration::ZERO, 1 << 20, ID).unwrap();
    let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // A symlink is not followed.
    let link = dir.path().join("link.snap");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(matches!(open(&link, 1 << 20, ID), Err(Refused::Open(_))));
}

/// A load sets the file aside and puts it back when it is over; a
/// file set aside by a start killed in its load is not read again.
#[test]
fn a_load_killed_midway_does_not_kill_the_next_start() {
    let dir = private_dir();
    let path = dir.path().join("cache.snap");
    write(&path, &filled(20, 300), Duration::ZERO, 1 << 20, ID).unwrap();
    let mut opened = open(&path, 1 << 20, ID).unwrap().unwrap();
    assert!(!path.exists() && set_aside(&path).exists());
    assert_eq!(load(&mut opened, Duration::ZERO).1.loaded, 20);
    opened.finish();
    assert!(path.exists() && !set_aside(&path).exists());
    // Killed midway: the file stays aside; the next start removes it.
    let opened = open(&path, 1 << 20, ID).unwrap().unwrap();
    std::mem::forget(opened);
    assert!(matches!(
        open(&path, 1 << 20, ID),
        Err(Refused::Interrupted)
    ));
    assert!(!set_aside(&path).exists());
    assert!(open(&path, 1 << 20, ID).unwrap().is_none());
}

/// Writers at once (a reload's, a handover's two processes) take
/// turns: every write succeeds and the file is always one of theirs.
#[test]
fn writers_at_once_take_turns() {
    let dir = private_dir();
    let path = dir.path().join("cache.snap");
    std::thread::scope(|s| {
        for n in 1..=4 {
            let (path, cache) = (&path, filled(n * 50, 300));
            s.spawn(move || {
                for _ in 0..10 {
                    write(path, &cache, Duration::ZERO, 1 << 20, ID).unwrap();
                    // Whole, never half of one writer's and half of another's.
                    parse(std::fs::read(path).unwrap()).unwrap();
                }
            });
        }
    });
}

/// The write's time and size for 100,000 A answers (docs/decisions.md):
/// `cargo test --release --lib snapshot_file::tests::measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_100k_entries() {
    let dir = private_dir();
    let path = dir.path().join("cache.snap");
    let cache = filled(100_000, 300);
    let started = Instant::now();
    let w = write(&path, &cache, Duration::ZERO, 64 << 20, ID).unwrap();
    let wrote = started.elapsed();
    let started = Instant::now();
    let mut opened = open(&path, 64 << 20, ID).unwrap().unwrap();
    let (_, loaded) = load(&mut opened, Duration::ZERO);
    let read = started.elapsed();
    println!(
        "100k entries: {} records, {} bytes, write {wrote:?}, read+load {read:?} ({} loaded)",
        w.records, w.bytes, loaded.loaded
    );
    assert_eq!(loaded.loaded, 100_000);
}
