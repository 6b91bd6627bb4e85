//! Warm after a crash: nodens writes its cache to a file now and then
//! (`[cache] snapshot_file`), and a nodens started after a SIGKILL reads it
//! and answers what the killed one had cached without asking the upstream
//! (a real CoreDNS, whose query log counts what reached it), the TTLs
//! counting down across the restart. Without the file the same restart
//! asks the upstream for every name again. A file that is damaged, cut
//! short, of another format, from the future, or not nodens's alone is
//! refused whole, logged and counted, and nodens starts cold and serves.

use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use support::*;

/// Names the killed nodens answered, each an A record with TTL 300.
const NAMES: usize = 20;
const TTL: u32 = 300;

fn name(i: usize) -> String {
    format!("w{i}.test.")
}

fn records() -> String {
    (0..NAMES)
        .map(|i| format!("w{i} {TTL} IN A 192.0.2.{}\n", i + 100))
        .collect()
}

/// CoreDNS with the names, and nodens forwarding to it, made by `cfg`.
fn start(cfg: impl FnOnce(Cfg, Zone) -> Cfg) -> (Net, CoreDns, Nodens) {
    setup_custom(|net| CoreDns::test_zone(net.upstream(0), &records()), cfg)
}

/// `[cache]` with the file at `file`: written every 10 s, nothing served
/// stale (an expired entry is gone, not kept for serve-stale).
fn with_file(c: Cfg, file: &Path) -> Cfg {
    c.snapshot_file(file.to_str().unwrap())
        .snapshot_interval(secs(10))
        .stale_max_age(secs(0))
}

fn ask_all(nodens: &Nodens) {
    for i in 0..NAMES {
        let r = udp_query(nodens.dns, &Q::new(&name(i), Rt::A));
        assert_eq!(r.rcode(), rcode::NOERROR, "{}", name(i));
        assert_eq!(r.a(), vec![ipv4(&format!("192.0.2.{}", i + 100))]);
    }
}

fn config_text(nodens: &Nodens) -> String {
    std::fs::read_to_string(&nodens.config_path).unwrap()
}

/// Waits (up to 30 s: the interval is 10 s) for a periodic write.
fn wait_write(nodens: &Nodens) {
    wait_until(secs(30), "a write of the cache file", || {
        (nodens.metric(
            "nodens_cache_snapshot_writes_total",
            &[("result", "success")],
        ) >= 1.0)
            .then_some(())
    });
}

/// `nodens_cache_snapshot_file_loads_total{result}`.
fn file_loads(nodens: &Nodens, result: &str) -> f64 {
    nodens.metric(
        "nodens_cache_snapshot_file_loads_total",
        &[("result", result)],
    )
}

/// A SIGKILLed nodens restarted with the same file answers the names from
/// its cache: no query reaches CoreDNS, and each TTL is less by at least
/// the time since the first answer (the time no process ran included). An
/// entry that expired in between is not served: it is asked again.
#[test]
fn a_killed_nodens_restarts_warm_from_its_file() {
    needs!(Need::CoreDns);
    let dir = private_dir();
    let file = dir.path().join("cache.snap");
    let (_net, core, mut first) = start(|c, z| with_file(c, &file).zone(z));
    ask_all(&first);
    // TTL 2: expired by the restart.
    let short = udp_query(first.dns, &Q::new("short.test.", Rt::A));
    assert_eq!(short.a(), vec![ipv4("192.0.2.2")]);
    let answered = Instant::now();
    wait_write(&first);
    assert!(first.metric("nodens_cache_snapshot_file_entries", &[]) >= NAMES as f64);
    assert!(first.metric("nodens_cache_snapshot_file_bytes", &[]) > 0.0);
    let toml = config_text(&first);
    first.proc.kill();
    // Time that passes while no nodens runs: the TTLs must count it too.
    std::thread::sleep(secs(3));

    let mut second = Nodens::start_toml(&toml);
    second.proc.wait_for_line(0, secs(5), "the load line", |l| {
        l.contains("cache file read")
    });
    for i in 0..NAMES {
        let elapsed = answered.elapsed().as_secs() as u32;
        let r = udp_query(second.dns, &Q::new(&name(i), Rt::A));
        assert_eq!(r.a(), vec![ipv4(&format!("192.0.2.{}", i + 100))]);
        let ttl = r.ttls()[0];
        assert!(
            ttl <= TTL - elapsed && ttl + 5 >= TTL - elapsed,
            "{}: TTL {ttl} {elapsed} s after it was {TTL}",
            name(i)
        );
    }
    core.sync_log();
    for i in 0..NAMES {
        assert_eq!(core.count_queries(&name(i), "A"), 1, "{}", name(i));
    }
    let short = udp_query(second.dns, &Q::new("short.test.", Rt::A));
    assert_eq!(short.a(), vec![ipv4("192.0.2.2")]);
    core.sync_log();
    assert_eq!(core.count_queries("short.test.", "A"), 2);
    assert_eq!(file_loads(&second, "success"), 1.0);
    assert!(
        second.metric(
            "nodens_cache_snapshot_records_total",
            &[("result", "loaded")]
        ) >= NAMES as f64
    );
    second.assert_alive();
}

/// Without the file the same restart starts cold: every name is asked again.
#[test]
fn without_the_file_a_killed_nodens_restarts_cold() {
    needs!(Need::CoreDns);
    let (_net, core, mut first) = start(|c, z| c.zone(z));
    ask_all(&first);
    let toml = config_text(&first);
    first.proc.kill();
    let second = Nodens::start_toml(&toml);
    ask_all(&second);
    core.sync_log();
    for i in 0..NAMES {
        assert_eq!(core.count_queries(&name(i), "A"), 2, "{}", name(i));
    }
}

/// Writes `bytes` to `path` as nodens would (a new file, mode 0600).
fn put(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
}

/// Starts nodens with `toml` and checks it refused the file saying
/// `why`, counted it, and serves, cold: `www.test.` reaches CoreDNS once
/// more.
fn starts_cold(toml: &str, core: &CoreDns, why: &str) {
    let before = core.count_queries("www.test.", "A");
    let mut n = Nodens::start_toml(toml);
    let line = n.proc.wait_for_line(0, secs(5), "the refusal", |l| {
        l.contains("cache file refused")
    });
    assert!(line.contains(why), "{why:?} not in {line:?}");
    assert_eq!(file_loads(&n, "failure"), 1.0);
    let r = udp_query(n.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    core.sync_log();
    assert_eq!(core.count_queries("www.test.", "A"), before + 1, "{why}");
    n.assert_alive();
}

/// The file written at a clean shutdown is read (a `.tmp` beside it, as a
/// write cut short by a kill leaves, is not); then each bad file is refused
/// whole and nodens starts cold.
#[test]
fn a_bad_cache_file_is_refused_and_nodens_starts_cold() {
    needs!(Need::Root, Need::CoreDns);
    let dir = private_dir();
    let file = dir.path().join("cache.snap");
    let tmp = dir.path().join("cache.snap.tmp");
    // Written only at shutdown here.
    let (_net, core, mut first) = start(|c, z| {
        with_file(c, &file)
            .snapshot_interval(secs(3600))
            .stale_max_age(secs(3600))
            .zone(z)
    });
    let r = udp_query(first.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    let toml = config_text(&first);
    assert!(first.terminate().success());
    let good = std::fs::read(&file).expect("the file written at shutdown");

    // A write cut short left its .tmp: ignored, the file is read.
    put(&tmp, &good[..good.len() / 2]);
    let warm = Nodens::start_toml(&toml);
    let r = udp_query(warm.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    core.sync_log();
    assert_eq!(core.count_queries("www.test.", "A"), 1);
    assert_eq!(file_loads(&warm, "success"), 1.0);
    drop(warm);

    let mut damaged = good.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x55;
    put(&file, &damaged);
    starts_cold(&toml, &core, "damaged");

    put(&file, &good[..good.len() - 10]);
    starts_cold(&toml, &core, "truncated");

    put(&file, b"not a cache at all\n");
    starts_cold(&toml, &core, "not a nodens cache file");

    let mut newer = good.clone();
    newer[4..8].copy_from_slice(&3u32.to_be_bytes());
    put(&file, &newer);
    starts_cold(&toml, &core, "format version 3");

    // Written for other zones or upstreams (its identity, bytes 28..36).
    let mut other = good.clone();
    other[28] ^= 0x01;
    put(&file, &other);
    starts_cold(&toml, &core, "written for other zones or upstreams");

    // A start killed while it read the file (the OOM killer) left it set
    // aside: the next start does not read it again, and starts cold.
    put(&dir.path().join("cache.snap.loading"), &good);
    std::fs::remove_file(&file).unwrap();
    starts_cold(&toml, &core, "killed while reading it");
    assert!(!dir.path().join("cache.snap.loading").exists());

    // Written an hour from now: the clock went back since.
    let mut future = good.clone();
    let hour_ahead = SystemTime::now() + secs(3600);
    let ms = hour_ahead
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    future[8..16].copy_from_slice(&ms.to_be_bytes());
    put(&file, &future);
    starts_cold(&toml, &core, "in the future");

    put(&file, &good);
    std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
    starts_cold(&toml, &core, "belongs to uid 65534");

    put(&file, &good);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    starts_cold(&toml, &core, "has mode 666");

    put(&file, &good);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    starts_cold(&toml, &core, "has mode 777");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// Distinct names of the measured workload (`*.load.test.`, TTL 300).
const LOAD_NAMES: usize = 2000;
const LOAD_RATE: u64 = 400;

/// Asks `n{i}.load.test.` A for i cycling over [`LOAD_NAMES`], `LOAD_RATE` a
/// second, until `stop`; a query nodens does not answer (down) is dropped.
fn workload(server: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) && started.elapsed() < secs(120) {
            let q = Q::new(
                &format!("n{}.load.test.", sent as usize % LOAD_NAMES),
                Rt::A,
            );
            let _ = udp_query_timeout(server, &q, ms(200));
            sent += 1;
            sleep_until(started, Duration::from_micros(sent * 1_000_000 / LOAD_RATE));
        }
        sent
    })
}

/// The queries CoreDNS gets in the 10 s after a SIGKILL of nodens under a
/// steady workload of 2,000 names, nodens restarted at once.
fn burst_after_kill(snapshot: bool) -> usize {
    let dir = private_dir();
    let file = dir.path().join("cache.snap");
    let (_net, core, mut first) = setup_custom(
        |net| CoreDns::test_zone(net.upstream(0), "*.load 300 IN A 192.0.2.77"),
        |c, z| {
            let c = if snapshot { with_file(c, &file) } else { c };
            c.zone(z)
        },
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load = workload(first.dns, stop.clone());
    // Every name asked once, and (with the file) a write after that.
    std::thread::sleep(Duration::from_millis(
        LOAD_NAMES as u64 * 1000 / LOAD_RATE + 500,
    ));
    if snapshot {
        let writes = first.metric("nodens_cache_snapshot_writes_total", &[]);
        wait_until(secs(30), "a write after the warm-up", || {
            (first.metric("nodens_cache_snapshot_writes_total", &[]) > writes).then_some(())
        });
        println!(
            "write: {} entries, {} bytes",
            first.metric("nodens_cache_snapshot_file_entries", &[]),
            first.metric("nodens_cache_snapshot_file_bytes", &[])
        );
    }
    let toml = config_text(&first);
    core.sync_log();
    let before = core.queries().len();
    let killed = Instant::now();
    first.proc.kill();
    let second = Nodens::start_toml(&toml);
    println!("restarted in {:?}", killed.elapsed());
    sleep_until(killed, secs(10));
    stop.store(true, Ordering::Relaxed);
    let sent = load.join().unwrap();
    core.sync_log();
    let burst = core.queries()[before..]
        .iter()
        .filter(|q| q.name.ends_with(".load.test."))
        .count();
    println!(
        "snapshot {snapshot}: {sent} queries sent, {burst} at CoreDNS in the 10 s after the kill"
    );
    drop(second);
    burst
}

/// The measure: the cluster DNS's queries in the 10 s after a
/// kill -9, with and without the file. Run with
/// `cargo test --test integration warm_restart::measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_cluster_dns_queries_after_a_kill() {
    needs!(Need::CoreDns, Need::Alone);
    let without = burst_after_kill(false);
    let with = burst_after_kill(true);
    println!("cluster DNS queries in the 10 s after kill -9: without {without}, with {with}");
    assert!(with * 10 < without, "with {with}, without {without}");
}

/// The file is part of reload: a SIGHUP that sets it starts the writer; one
/// with an interval below the bound is refused and the writer goes on.
#[test]
fn the_file_is_turned_on_by_reload() {
    needs!(Need::CoreDns);
    let dir = private_dir();
    let file = dir.path().join("cache.snap");
    let (net, core, nodens) = start(|c, z| c.zone(z));
    ask_all(&nodens);
    let on = with_file(Cfg::new(&net), &file)
        .zone(Zone::new("test.", &[core.addr]))
        .to_toml();
    nodens.reload(&on);
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "success")], 1.0);
    wait_write(&nodens);
    assert!(file.exists());
    assert!(nodens.metric("nodens_cache_snapshot_file_entries", &[]) >= NAMES as f64);
    let too_often = on.replace("snapshot_interval = \"10s\"", "snapshot_interval = \"1s\"");
    assert_ne!(too_often, on);
    nodens.reload(&too_often);
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "failure")], 1.0);
    let writes = nodens.metric(
        "nodens_cache_snapshot_writes_total",
        &[("result", "success")],
    );
    wait_until(secs(30), "the next write", || {
        (nodens.metric(
            "nodens_cache_snapshot_writes_total",
            &[("result", "success")],
        ) > writes)
            .then_some(())
    });
}

/// As the chart runs it: started as root, switching to a uid of its own,
/// the file's directory a root-owned 0755 directory (the hostPath the
/// kubelet makes). The directory is made the uid's and private at start,
/// the file written at SIGTERM is the uid's and closed to others, and the
/// next start reads it.
#[test]
fn run_as_its_own_uid_the_directory_is_made_private_and_the_file_read() {
    needs!(Need::Root, Need::CoreDns);
    use std::os::unix::fs::MetadataExt;
    const UID: u32 = 64998;
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = base.path().join("nodens");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.join("cache.snap");
    let (_net, core, mut first) = start(|c, z| {
        with_file(c, &file)
            .server_option("run_as_user", &UID.to_string())
            .zone(z)
    });
    ask_all(&first);
    let toml = config_text(&first);
    assert!(first.terminate().success());
    let d = std::fs::metadata(&dir).unwrap();
    assert_eq!((d.uid(), d.mode() & 0o777), (UID, 0o700));
    let f = std::fs::metadata(&file).expect("the file written at SIGTERM");
    assert_eq!((f.uid(), f.mode() & 0o777), (UID, 0o600));

    let second = Nodens::start_toml(&toml);
    ask_all(&second);
    core.sync_log();
    for i in 0..NAMES {
        assert_eq!(core.count_queries(&name(i), "A"), 1, "{}", name(i));
    }
    assert_eq!(file_loads(&second, "success"), 1.0);
}
