//! What a test needs that a machine may not have, and the skip tier.
//!
//! CI has everything: there a test whose tool is missing fails, so nothing is
//! skipped by accident. On a laptop without root or CoreDNS, plain `cargo
//! test` fails those tests with a message saying what to install, unless
//! `NODENS_ALLOW_SKIP=1`: then each one passes at once and says
//! `skipped: needs X` on the terminal (written past the test harness's
//! capture, so the list of what was skipped is in the output).
//!
//! ```ignore
//! #[test]
//! fn a_test() {
//!     needs!(Need::Root, Need::CoreDns, Need::Tool("dnsmasq"));
//!     ...
//! }
//! ```
//!
//! `Need::Alone` asks for the machine to itself: a test that loads it
//! (a flood, thousands of connections, a handover under load) waits until
//! the tests running beside it end, and the tests that say `needs!` wait
//! while it runs, so that its load cannot make their timings fail. The
//! integration tests are one process, so a lock in it is enough.

use std::io::Write as _;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::kube::kubernetes_found;
use super::netns::euid;
use super::tools::{find_coredns, find_on_path};

/// One thing a test cannot run without.
#[derive(Debug, Clone, Copy)]
pub enum Need {
    /// Network namespaces, cgroups, other uids.
    Root,
    /// A CoreDNS binary (`$COREDNS`, PATH or `$(go env GOPATH)/bin`).
    CoreDns,
    /// An executable on PATH.
    Tool(&'static str),
    /// A kube-apiserver (`lab/kube/build k8s`) and etcd.
    Kubernetes,
    /// The machine to itself while it runs (see the module docs).
    Alone,
}

impl Need {
    fn is_met(self) -> bool {
        match self {
            Need::Root => euid() == 0,
            Need::CoreDns => find_coredns().is_ok(),
            Need::Tool(name) => find_on_path(name).is_some(),
            Need::Kubernetes => kubernetes_found(),
            Need::Alone => true,
        }
    }

    fn describe(self) -> String {
        match self {
            Need::Root => "root".to_string(),
            Need::CoreDns => "CoreDNS".to_string(),
            Need::Tool(name) => format!("`{name}`"),
            Need::Kubernetes => "a kube-apiserver and etcd".to_string(),
            Need::Alone => "the machine to itself".to_string(),
        }
    }
}

/// The variable that lets a missing need skip a test instead of failing it.
pub const ALLOW_SKIP: &str = "NODENS_ALLOW_SKIP";

/// True when the test must stop here: something it needs is missing and
/// `NODENS_ALLOW_SKIP=1` allows a skip (said on the terminal). Panics when
/// something is missing and skips are not allowed. Use [`needs!`].
pub fn skip_for(needs: &[Need]) -> bool {
    let missing: Vec<String> = needs
        .iter()
        .filter(|n| !n.is_met())
        .map(|n| n.describe())
        .collect();
    if missing.is_empty() {
        return false;
    }
    skip_because(&missing.join(", "))
}

/// True when the test must stop here because the machine lacks `missing`
/// (something [`Need`] cannot name, such as a kernel feature) and
/// `NODENS_ALLOW_SKIP=1`; panics otherwise. `if !works && skip_because(..)`.
pub fn skip_because(missing: &str) -> bool {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    if std::env::var(ALLOW_SKIP).as_deref() != Ok("1") {
        panic!(
            "{test} needs {missing}: run as root after .ci/install-deps, or set {ALLOW_SKIP}=1 to skip it"
        );
    }
    // Past the harness's capture of print!/eprint!, so the skip is seen.
    let _ = writeln!(std::io::stderr(), "skipped: needs {missing}: {test}");
    true
}

/// Whether the test may run, and its turn if so: `None` when it must stop
/// (see [`skip_for`]). The turn is shared with the other tests, or the
/// machine's alone with `Need::Alone`; it ends when dropped. Use [`needs!`].
pub fn begin(needs: &[Need]) -> Option<Turn> {
    if skip_for(needs) {
        return None;
    }
    let alone = needs.iter().any(|n| matches!(n, Need::Alone));
    Some(Turn::take(alone))
}

/// Who runs: how many tests share the machine, and whether one has it alone.
#[derive(Default)]
struct Gate {
    sharing: usize,
    alone: bool,
    /// Tests waiting to run alone: newcomers wait behind them, so a test
    /// that asks to run alone is not passed over for ever.
    waiting_alone: usize,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    sharing: 0,
    alone: false,
    waiting_alone: 0,
});
static TURN_ENDED: Condvar = Condvar::new();

fn gate() -> MutexGuard<'static, Gate> {
    // A test that panicked holding the lock left the counts as they were.
    GATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A test's turn on the machine, shared or alone, until dropped.
#[must_use]
pub struct Turn {
    alone: bool,
}

impl Turn {
    fn take(alone: bool) -> Turn {
        let mut g = gate();
        if alone {
            g.waiting_alone += 1;
            while g.alone || g.sharing > 0 {
                g = TURN_ENDED.wait(g).unwrap_or_else(PoisonError::into_inner);
            }
            g.waiting_alone -= 1;
            g.alone = true;
        } else {
            while g.alone || g.waiting_alone > 0 {
                g = TURN_ENDED.wait(g).unwrap_or_else(PoisonError::into_inner);
            }
            g.sharing += 1;
        }
        Turn { alone }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut g = gate();
        if self.alone {
            g.alone = false;
        } else {
            g.sharing -= 1;
        }
        TURN_ENDED.notify_all();
    }
}

/// Returns from the test, saying `skipped: needs X`, when something it
/// needs is missing and `NODENS_ALLOW_SKIP=1`; fails it when skips are not
/// allowed; then waits for its turn ([`begin`]), held to the end of the
/// test. `needs!(Need::Root, Need::CoreDns)`.
#[macro_export]
macro_rules! needs {
    ($($need:expr),+ $(,)?) => {
        let _turn = match $crate::begin(&[$($need),+]) {
            Some(turn) => turn,
            None => return,
        };
    };
}
