//! `nodens top`: the node's busiest workloads, live, as `top` shows
//! processes: refreshed every --interval, sorted (s changes the column),
//! q to quit. Rates are the difference of two of nodens's cumulative views
//! over the time between them (the first frame: since counting began).
//! With --once, or when stdout is no terminal, prints one frame as text
//! and exits: for scripts and `kubectl exec` without `-t`.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyModifiers};
use crossterm::{cursor, execute, terminal};
use nodens::control::{self, Client, Rates, Reply, Request, TopView, Workload};

use super::cache::DEFAULT_SOCKET;
use super::report::{Failure, Outcome};

#[derive(clap::Args)]
pub(super) struct TopArgs {
    /// The control socket of the nodens to watch.
    #[arg(long, value_name = "PATH", env = "NODENS_CONTROL_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Time between two frames.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    interval: Duration,
    /// Print one frame (rates over --interval) and exit.
    #[arg(long)]
    once: bool,
    /// Workloads shown at most.
    #[arg(long, default_value_t = 25)]
    rows: usize,
}

/// The columns `s` cycles through, in order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SortBy {
    Queries,
    Nxdomain,
    Servfail,
    Expansions,
    Misses,
}

impl SortBy {
    fn next(self) -> SortBy {
        match self {
            SortBy::Queries => SortBy::Nxdomain,
            SortBy::Nxdomain => SortBy::Servfail,
            SortBy::Servfail => SortBy::Expansions,
            SortBy::Expansions => SortBy::Misses,
            SortBy::Misses => SortBy::Queries,
        }
    }

    fn name(self) -> &'static str {
        match self {
            SortBy::Queries => "Q/S",
            SortBy::Nxdomain => "NXDOMAIN/S",
            SortBy::Servfail => "SERVFAIL/S",
            SortBy::Expansions => "EXP/LOOKUP",
            SortBy::Misses => "MISS/S",
        }
    }

    fn key(self, r: &Rates<'_>) -> f64 {
        match self {
            SortBy::Queries => r.queries,
            SortBy::Nxdomain => r.nxdomain,
            SortBy::Servfail => r.servfail,
            SortBy::Expansions => expansions(r),
            SortBy::Misses => r.queries * (1.0 - r.hit_ratio),
        }
    }
}

/// Search-list expansions per lookup as shown: `inf` when no lookup of the
/// window reached its name.
fn expansions(r: &Rates<'_>) -> f64 {
    if r.only_expansions {
        f64::INFINITY
    } else {
        r.expansions_per_lookup
    }
}

pub(super) fn run(args: TopArgs) -> Result<Outcome, Failure> {
    let client = control::connect(&args.socket).map_err(anyhow::Error::from)?;
    let fail = |e: anyhow::Error| Failure::new(format!("{e:#}"));
    if args.once || !std::io::stdout().is_terminal() {
        let first = view(&client).map_err(fail)?;
        std::thread::sleep(args.interval);
        let second = view(&client).map_err(fail)?;
        print!(
            "{}",
            frame(Some(&first), &second, SortBy::Queries, args.rows, None).join("\n")
        );
        println!();
        return Ok(Outcome::Done);
    }
    live(&client, &args).map_err(fail)?;
    Ok(Outcome::Done)
}

fn view(client: &Client) -> anyhow::Result<TopView> {
    let replies = client.ask(&Request::Top { limit: None })?;
    match replies.into_iter().next() {
        Some(Reply::Top(view)) => Ok(view),
        other => anyhow::bail!("nodens sent {other:?} to `top`"),
    }
}

/// The live screen: the alternate screen in raw mode, given back on any exit.
fn live(client: &Client, args: &TopArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    terminal::enable_raw_mode()?;
    execute!(out, terminal::EnterAlternateScreen, cursor::Hide)?;
    let result = (|| -> anyhow::Result<()> {
        let mut sort = SortBy::Queries;
        let mut before: Option<TopView> = None;
        let mut current = view(client)?;
        loop {
            let (width, height) = terminal::size().unwrap_or((120, 40));
            let rows = args.rows.min(usize::from(height).saturating_sub(4));
            let lines = frame(
                before.as_ref(),
                &current,
                sort,
                rows,
                Some(usize::from(width)),
            );
            execute!(
                out,
                cursor::MoveTo(0, 0),
                terminal::Clear(terminal::ClearType::All)
            )?;
            for line in &lines {
                write!(out, "{line}\r\n")?;
            }
            out.flush()?;
            let deadline = Instant::now() + args.interval;
            let mut redraw = false;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                if !event::poll(left)? {
                    break;
                }
                if let Event::Key(KeyEvent {
                    code, modifiers, ..
                }) = event::read()?
                {
                    match code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => {
                            return Ok(());
                        }
                        KeyCode::Char('s') => {
                            sort = sort.next();
                            redraw = true;
                            break;
                        }
                        _ => {}
                    }
                }
            }
            if !redraw {
                before = Some(std::mem::replace(&mut current, view(client)?));
            }
        }
    })();
    let _ = execute!(out, cursor::Show, terminal::LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
    result
}

/// The lines of one frame: a header, the column titles, a row per workload.
fn frame(
    before: Option<&TopView>,
    now: &TopView,
    sort: SortBy,
    rows: usize,
    width: Option<usize>,
) -> Vec<String> {
    let seconds = before.map_or(now.at_ms, |b| now.at_ms.saturating_sub(b.at_ms)) as f64 / 1000.0;
    let earlier: HashMap<(&str, &str), &Workload> = before.map_or_else(HashMap::new, |b| {
        b.workloads.iter().map(|w| (w.id(), w)).collect()
    });
    let mut table: Vec<Rates<'_>> = now
        .workloads
        .iter()
        .map(|w| Rates::between(earlier.get(&w.id()).copied(), w, seconds))
        .collect();
    table.sort_by(|a, b| {
        sort.key(b)
            .total_cmp(&sort.key(a))
            .then_with(|| a.workload.id().cmp(&b.workload.id()))
    });
    let total: f64 = table.iter().map(|r| r.queries).sum();
    let hits: f64 = table.iter().map(|r| r.queries * r.hit_ratio).sum();
    let mut lines = vec![
        format!(
            "nodens top - {} workloads, {total:.1} q/s, {:.0}% without an upstream query, over {seconds:.1}s - sorted by {} (s: sort, q: quit)",
            table.len(),
            if total > 0.0 {
                100.0 * hits / total
            } else {
                0.0
            },
            sort.name(),
        ),
        String::new(),
        format!(
            "{:<20} {:<32} {:>9} {:>6} {:>10} {:>10} {:>10}  {}",
            "NAMESPACE",
            "POD",
            "Q/S",
            "HIT%",
            "NXDOMAIN/S",
            "SERVFAIL/S",
            "EXP/LOOKUP",
            "TOP NAMES"
        ),
    ];
    for r in table.iter().take(rows) {
        let names: Vec<String> = r
            .workload
            .names
            .iter()
            .map(|(n, c)| format!("{n}({c})"))
            .collect();
        let namespace = if r.workload.namespace.is_empty() {
            "-"
        } else {
            &r.workload.namespace
        };
        lines.push(format!(
            "{:<20} {:<32} {:>9.1} {:>6.1} {:>10.1} {:>10.1} {:>10.2}  {}",
            cut(namespace, 20),
            cut(&r.workload.pod, 32),
            r.queries,
            100.0 * r.hit_ratio,
            r.nxdomain,
            r.servfail,
            expansions(r),
            names.join(" ")
        ));
    }
    if let Some(width) = width {
        for line in &mut lines {
            if let Some((at, _)) = line.char_indices().nth(width) {
                line.truncate(at);
            }
        }
    }
    lines
}

fn cut(text: &str, width: usize) -> &str {
    match text.char_indices().nth(width) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}
