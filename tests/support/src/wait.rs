//! Waiting with deadlines, and running work concurrently: every wait in the
//! tests goes through [`wait_until`] (or sleeps on purpose with
//! [`sleep_until`] where time itself is under test).

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Polls `f` every 20 ms until it returns `Some`, panicking with `what` after
/// `timeout`. The one way tests wait for something to become true.
pub fn wait_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Sleeps until `start + offset`: for tests about time itself (TTL expiry,
/// prefetch windows), where the wait is the thing being tested.
pub fn sleep_until(start: Instant, offset: Duration) {
    let target = start + offset;
    let now = Instant::now();
    if target > now {
        thread::sleep(target - now);
    }
}

/// Runs `work` while another thread calls `sample` every `every` (and once
/// more after `work` returns); returns work's result and the samples with
/// their time since the start. Sampling stops after 120 s whatever happens.
pub fn sample_during<T: Send, R>(
    every: Duration,
    mut sample: impl FnMut() -> T + Send,
    work: impl FnOnce() -> R,
) -> (R, Vec<(Duration, T)>) {
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut v = Vec::new();
            loop {
                let done = stop.load(Ordering::SeqCst);
                v.push((start.elapsed(), sample()));
                if done || start.elapsed() > Duration::from_secs(120) {
                    return v;
                }
                thread::sleep(every);
            }
        });
        let r = work();
        stop.store(true, Ordering::SeqCst);
        (r, sampler.join().expect("sampler thread"))
    })
}

/// Calls `f(0..n)` on `n` threads at once; the results in index order.
pub fn in_parallel<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let f = &f;
    thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|i| s.spawn(move || f(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("query thread"))
            .collect()
    })
}
