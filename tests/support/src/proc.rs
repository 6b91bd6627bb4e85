//! Child processes (nodens, CoreDNS, dnsmasq) behind a guard that kills and
//! reaps them on drop, with their output captured line by line.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A child process that is killed and reaped when dropped, with its stdout and
/// stderr captured line by line (and echoed, prefixed, to the test's output so
/// a failing test shows them).
pub struct Proc {
    pub name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for pipe in [out, err] {
            let lines = Arc::clone(&lines);
            let name = name.to_string();
            // Ends at EOF, i.e. when the process (and anything holding its pipes) exits.
            thread::spawn(move || {
                let mut reader = BufReader::new(pipe);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                            eprintln!("[{name}] {line}");
                            lines.lock().unwrap().push(line);
                        }
                    }
                }
            });
        }
        Proc {
            name: name.to_string(),
            child,
            lines,
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every line printed so far, stdout and stderr interleaved.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn line_count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// The first line from index `from` on that matches, if one was printed.
    fn find_line(&self, from: usize, pred: impl Fn(&str) -> bool) -> Option<String> {
        let lines = self.lines.lock().unwrap();
        lines.iter().skip(from).find(|l| pred(l)).cloned()
    }

    /// The first line from index `from` on that matches, waiting up to `timeout`.
    pub fn wait_for_line(
        &mut self,
        from: usize,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.find_line(from, &pred) {
                return l;
            }
            if let Some(st) = self.try_status() {
                // Give the reader threads a moment to drain the pipes, then look once more.
                thread::sleep(Duration::from_millis(100));
                if let Some(l) = self.find_line(from, &pred) {
                    return l;
                }
                panic!(
                    "{} exited ({st}) before printing {what}; output:\n{}",
                    self.name,
                    self.lines().join("\n")
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} did not print {what} within {timeout:?}; output:\n{}",
                    self.name,
                    self.lines().join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: libc::c_int) {
        if self.status.is_some() {
            return;
        }
        // SAFETY: plain kill(2) on our own child, which we have not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(
            rc,
            0,
            "kill({}, {sig}) failed: {}",
            self.child.id(),
            std::io::Error::last_os_error()
        );
    }

    /// The exit status if the process has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn is_alive(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process ID.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
