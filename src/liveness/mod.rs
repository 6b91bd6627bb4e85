//! Liveness the fail-open supervisor can trust: progress, not answers.
//!
//! The supervisor (`node/supervisor.rs`) kills a server that hangs, and a kill
//! withdraws the node setup, loses the cache and sends every pod of the node
//! to the cluster DNS at once. So what decides a kill must be something clients
//! cannot move. A DNS probe on the client sockets is not: a flood fills them,
//! the probe waits behind the flood or is dropped with it, and an overloaded
//! server (which should degrade: drop, answer late) was killed instead.
//!
//! What decides now is progress. Each thread that serves bumps a counter of
//! its own as its loop turns: a UDP worker at least every 100 ms (its receive
//! timeout, or each batch under load), the main runtime through a task that
//! ticks every 100 ms. A heartbeat thread looks every [`CHECK_EVERY`] and,
//! only if every counter moved since its last look, writes a beat on a pipe
//! the supervisor made and passed to the server. Load makes the loops turn
//! faster, not slower; a thread blocked for good (a deadlock, a call that never
//! returns) stops its counter, and the report names it. A stopped process
//! writes nothing at all.

pub mod health;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How often the heartbeat thread looks at the counters (and beats).
pub const CHECK_EVERY: Duration = Duration::from_millis(250);
/// How often the main runtime's tick task bumps its counter.
const RUNTIME_TICK: Duration = Duration::from_millis(100);
/// A beat: every counter moved since the last look.
pub(crate) const BEAT: &[u8] = b"beat\n";
/// The start of a report naming the counters that did not move.
pub(crate) const STALLED: &str = "stalled ";
/// The longest report line the supervisor keeps; the rest of a longer one is
/// dropped (the server names at most its workers, a few dozen bytes each).
pub(crate) const MAX_LINE: usize = 512;

/// One serving loop's progress: bumped by its thread, read by the heartbeat.
/// Aligned to its own cache lines, so that two workers' counters do not
/// share one.
#[derive(Debug)]
#[repr(align(128))]
pub struct Progress {
    name: String,
    count: AtomicU64,
    /// The count at the heartbeat's last look; [`UNSEEN`] before the first.
    seen: AtomicU64,
    /// Times the loop panicked and was started again (`health`).
    restarts: AtomicU64,
    /// The loop's thread ended while it should serve (`health`).
    dead: AtomicBool,
}

/// `seen` of a counter the heartbeat has not looked at yet.
const UNSEEN: u64 = u64::MAX;

impl Progress {
    /// The loop turned.
    pub fn bump(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// The loops that serve. A loop registers when it starts and is forgotten
/// when its [`Progress`] is dropped: the listener that started it holds it
/// too, so a loop whose thread died is not forgotten but stalled, until its
/// listener stops (on reload or handover).
#[derive(Debug, Default)]
pub struct Registry {
    loops: Mutex<Vec<Weak<Progress>>>,
}

/// The process's registry: the serving loops are the process's, as its
/// sockets are, and the listeners that start them know nothing of the
/// supervisor.
static REGISTRY: Registry = Registry::new();

/// Registers a serving loop named `name` with the process's registry.
pub fn register(name: String) -> Arc<Progress> {
    REGISTRY.register(name)
}

impl Registry {
    pub const fn new() -> Registry {
        Registry {
            loops: Mutex::new(Vec::new()),
        }
    }

    pub fn register(&self, name: String) -> Arc<Progress> {
        let progress = Arc::new(Progress {
            name,
            count: AtomicU64::new(0),
            seen: AtomicU64::new(UNSEEN),
            restarts: AtomicU64::new(0),
            dead: AtomicBool::new(false),
        });
        self.lock().push(Arc::downgrade(&progress));
        progress
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Progress>>> {
        crate::lock::lock(&self.loops)
    }

    /// The loops registered and not forgotten.
    fn live(&self) -> Vec<Arc<Progress>> {
        self.lock().iter().filter_map(Weak::upgrade).collect()
    }

    /// The names of the live loops whose counter did not move since the
    /// last call (a loop registered since then counts as moving). One caller
    /// only: the heartbeat.
    pub fn stalled(&self) -> Vec<String> {
        let mut loops = self.lock();
        loops.retain(|weak| weak.strong_count() > 0);
        loops
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|p| {
                let now = p.count.load(Ordering::Relaxed);
                p.seen.swap(now, Ordering::Relaxed) == now
            })
            .map(|p| p.name.clone())
            .collect()
    }
}

/// What the heartbeat writes after a look: a beat, or the names that stalled.
fn report(stalled: &[String]) -> Vec<u8> {
    if stalled.is_empty() {
        return BEAT.to_vec();
    }
    let mut line = format!("{STALLED}{}", stalled.join(", "));
    if line.len() > MAX_LINE - 1 {
        let mut end = MAX_LINE - 1;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line.push('\n');
    line.into_bytes()
}

/// The write end of the supervisor's heartbeat pipe.
#[derive(Debug)]
pub struct Heartbeat {
    pipe: OwnedFd,
}

impl Heartbeat {
    /// Takes descriptor `fd`, inherited from the supervisor (`serve
    /// --heartbeat-fd`): it must be the write end of a pipe. It is made
    /// close-on-exec (the `nft` and `iptables` runs must not hold it: a
    /// beat is the server's word alone) and non-blocking (a supervisor that
    /// stops reading must not stall the heartbeat thread). Call once, before
    /// the process starts another program.
    pub fn adopt(fd: RawFd) -> io::Result<Heartbeat> {
        let invalid = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("heartbeat descriptor {fd}: {why}"),
            )
        };
        if fd < 3 {
            return Err(invalid("not a descriptor a supervisor passes"));
        }
        // SAFETY: fcntl(F_GETFD) only reads the descriptor's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(invalid("not open"));
        }
        // SAFETY: an all-zero stat is a valid output buffer for fstat.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `stat`, which outlives the call.
        if unsafe { libc::fstat(fd, &mut stat) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if stat.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return Err(invalid("not a pipe"));
        }
        // SAFETY: fcntl(F_GETFL) only reads the descriptor's status flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 || flags & libc::O_ACCMODE != libc::O_WRONLY {
            return Err(invalid("not the write end of a pipe"));
        }
        // SAFETY: the descriptor is open (checked above), was inherited at
        // exec and nothing in this process owns it: from here the
        // Heartbeat does.
        let pipe = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fcntl on a descriptor we own, with integer flags.
        let set = unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0
                && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !set {
            return Err(io::Error::last_os_error());
        }
        Ok(Heartbeat { pipe })
    }

    /// Starts beating: a task on `runtime` that shows the runtime runs its
    /// tasks, and the heartbeat thread, which beats at once. Call before the
    /// server sets anything up: the supervisor judges nothing until the
    /// first beat, and a server stopped before it would never be killed.
    pub fn start(self, runtime: &tokio::runtime::Handle) -> io::Result<()> {
        let ticks = register("runtime".to_string());
        runtime.spawn(async move {
            let mut interval = tokio::time::interval(RUNTIME_TICK);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                ticks.bump();
            }
        });
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || self.run(&REGISTRY))?;
        Ok(())
    }

    fn run(self, registry: &Registry) {
        crate::privileges::drop_all_in_this_thread();
        let mut said = Vec::new();
        // The first beat at once: the supervisor judges nothing before it.
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                std::thread::sleep(CHECK_EVERY);
            }
            let stalled = registry.stalled();
            if stalled != said {
                if stalled.is_empty() {
                    tracing::info!("heartbeat: every serving loop makes progress again");
                } else {
                    tracing::warn!(
                        stalled = %stalled.join(", "),
                        "heartbeat: serving loops made no progress for {CHECK_EVERY:?}; no beat"
                    );
                }
                said = stalled.clone();
            }
            let line = report(&stalled);
            // SAFETY: write(2) from a buffer that outlives the call, on the
            // pipe we own. Under PIPE_BUF, so a line is written whole or not.
            let n = unsafe { libc::write(self.pipe.as_raw_fd(), line.as_ptr().cast(), line.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    // The supervisor is behind: this beat is lost, the next
                    // one may not be.
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => {}
                    _ => {
                        tracing::warn!(
                            "heartbeat: the supervisor's pipe is gone ({e}); no more beats"
                        );
                        return;
                    }
                }
            }
        }
    }
}

/// Splits what the supervisor reads from the pipe into reports, keeping at
/// most [`MAX_LINE`] bytes of a line that has not ended yet.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    partial: Vec<u8>,
    /// The line being read is over [`MAX_LINE`]: drop it up to its end.
    skipping: bool,
}

/// One line of the heartbeat pipe.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Report {
    Beat,
    /// The serving loops that made no progress, as the server named them.
    Stalled(String),
    /// Anything else (a server of another version): neither a beat nor a
    /// stall.
    Unknown,
}

impl Reports {
    /// Feeds bytes read from the pipe; returns the reports whose lines ended.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<Report> {
        let mut reports = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                if !self.skipping {
                    reports.push(parse(&self.partial));
                }
                self.partial.clear();
                self.skipping = false;
            } else if self.partial.len() >= MAX_LINE {
                self.partial.clear();
                self.skipping = true;
            } else if !self.skipping {
                self.partial.push(b);
            }
        }
        reports
    }
}

fn parse(line: &[u8]) -> Report {
    if line == &BEAT[..BEAT.len() - 1] {
        return Report::Beat;
    }
    match std::str::from_utf8(line) {
        Ok(text) => match text.strip_prefix(STALLED) {
            Some(names) => Report::Stalled(names.to_string()),
            None => Report::Unknown,
        },
        Err(_) => Report::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_does_not_turn_is_named_and_one_that_turns_is_not() {
        let registry = Registry::new();
        let a = registry.register("udp 10.96.0.10:53 #0".into());
        let b = registry.register("runtime".into());
        // A loop registered since the last look counts as moving.
        assert!(registry.stalled().is_empty());
        a.bump();
        assert_eq!(registry.stalled(), ["runtime"]);
        a.bump();
        b.bump();
        assert!(registry.stalled().is_empty());
        assert_eq!(
            registry.stalled(),
            ["udp 10.96.0.10:53 #0", "runtime"],
            "neither turned since the last look"
        );
    }

    #[test]
    fn a_blocked_thread_is_reported_stalled() {
        // A worker thread blocked for good (here: on a lock it never gets)
        // stops its counter, whatever the other loops do.
        let registry = Registry::new();
        let lock = Arc::new(Mutex::new(()));
        let held = lock.lock().unwrap();
        let (started, wait_started) = std::sync::mpsc::channel();
        let progress = registry.register("udp-0".into());
        let worker = {
            let (lock, progress) = (lock.clone(), progress.clone());
            std::thread::spawn(move || {
                progress.bump();
                started.send(()).unwrap();
                let _blocked = lock.lock();
                progress.bump();
            })
        };
        wait_started.recv().unwrap();
        let runtime = registry.register("runtime".into());
        assert!(registry.stalled().is_empty());
        for _ in 0..3 {
            runtime.bump();
            assert_eq!(registry.stalled(), ["udp-0"]);
        }
        drop(held);
        worker.join().unwrap();
        runtime.bump();
        assert!(registry.stalled().is_empty());
    }

    #[test]
    fn a_loop_that_ended_is_forgotten() {
        let registry = Registry::new();
        let a = registry.register("udp-0".into());
        drop(registry.stalled());
        drop(a);
        assert!(registry.stalled().is_empty());
        assert!(registry.lock().is_empty());
    }

    #[test]
    fn reports_round_trip_and_bad_lines_are_bounded() {
        let mut reports = Reports::default();
        let mut bytes = report(&[]);
        bytes.extend(report(&["udp-0".into(), "runtime".into()]));
        // Split anywhere: a line may come in two reads.
        let (first, second) = bytes.split_at(7);
        let mut got = reports.feed(first);
        got.extend(reports.feed(second));
        assert_eq!(
            got,
            [Report::Beat, Report::Stalled("udp-0, runtime".into())]
        );
        // A line far over the bound is dropped whole; the next one counts.
        let mut long = vec![b'x'; 10 * MAX_LINE];
        long.extend_from_slice(b"\n\xff\nbeat\n");
        assert_eq!(reports.feed(&long), [Report::Unknown, Report::Beat]);
        assert!(reports.partial.capacity() <= 2 * MAX_LINE);
        // A stall report of many names is cut to fit.
        let many: Vec<String> = (0..200)
            .map(|i| format!("udp 10.96.0.10:53 #{i}"))
            .collect();
        let line = report(&many);
        assert!(line.len() <= MAX_LINE && line.ends_with(b"\n"));
        assert!(matches!(reports.feed(&line)[..], [Report::Stalled(_)]));
    }

    #[test]
    fn only_the_write_end_of_a_pipe_is_adopted() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both were just opened and are owned here.
        let read = unsafe { OwnedFd::from_raw_fd(fds[0]) };
        let err = Heartbeat::adopt(read.as_raw_fd()).unwrap_err();
        assert!(err.to_string().contains("not the write end"), "{err}");
        let file = tempfile::tempfile().unwrap();
        let err = Heartbeat::adopt(file.as_raw_fd()).unwrap_err();
        assert!(err.to_string().contains("not a pipe"), "{err}");
        assert!(Heartbeat::adopt(1).is_err());
        let err = Heartbeat::adopt(1 << 20).unwrap_err();
        assert!(err.to_string().contains("not open"), "{err}");
        let heartbeat = Heartbeat::adopt(fds[1]).unwrap();
        // SAFETY: fcntl reads the flags of a descriptor the Heartbeat owns.
        let (fd_flags, fl_flags) = unsafe {
            (
                libc::fcntl(fds[1], libc::F_GETFD),
                libc::fcntl(fds[1], libc::F_GETFL),
            )
        };
        assert_ne!(fd_flags & libc::FD_CLOEXEC, 0);
        assert_ne!(fl_flags & libc::O_NONBLOCK, 0);
        drop(heartbeat);
    }
}
