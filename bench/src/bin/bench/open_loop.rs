//! The open loop (`--open-loop`): after a workload's closed-loop runs, each client is offered
//! a fixed arrival rate at 25%, 50% and 80% of its closed-loop peak (its highest `ops_per_s`
//! over the rounds and caller counts just run), or at the rates `--offer` lists, the same for
//! every client.
//!
//! Calls start on a schedule, call `i` at `start + i / rate`, each on its own task, whether or
//! not earlier calls have finished, and a call's latency runs from its scheduled start, not
//! from when it was sent: a client that falls behind shows it as queueing in the percentiles
//! instead of hiding it by sending later (coordinated omission). The schedule is kept by one
//! dispatching task that sleeps until the next call is due; the runtime's timers have a
//! millisecond's resolution, so the calls due within a millisecond start together, at its end:
//! up to a millisecond of a call's latency (half on average) is the dispatcher's, and the
//! percentiles do not resolve below it. Each call's task ends when its reply is in, reporting
//! over a channel, so that memory stays flat however many calls a level offers.
//!
//! With `--stall MS` the dispatcher blocks its thread once in each level, after a quarter of
//! the calls: the stall a process meets when the machine is busy elsewhere. What follows is
//! the test of a client under overload that matters to a bot: whether it drains the calls that
//! piled up meanwhile and returns to the offered rate, or stays behind it. `--timeline` prints
//! what each 50 ms of a level did, from a thread of its own (so that a stalled runtime does not
//! stall the timeline).
//!
//! A level waits for its calls at most `--drain` seconds past its last arrival (20 by default).
//! A client that has not answered them by then is overloaded past any use: its calls still out
//! are dropped (a dropped call's future is all a caller can give up), counted as `unfinished`
//! and measured when the cut reaches them, so that its percentiles are lower bounds instead of
//! a wait of minutes, and its higher levels are not offered (each would only queue more).

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::Either;

use botmesh_redis_bench::figures::Kind;

use crate::sweep::Setting;
use crate::{Bench, Compared, Contender, Measured, Probe, RuntimeKind, Worker};

/// The shares of a client's closed-loop peak it is offered.
const SHARES: [f64; 3] = [0.25, 0.5, 0.8];

/// Seconds of calls offered per level: 2, or half a second with `--quick`.
pub(crate) fn seconds(quick: bool) -> f64 {
    if quick {
        0.5
    } else {
        2.0
    }
}

/// How the levels of one workload are offered.
#[derive(Clone, Copy)]
pub(crate) struct Level {
    pub(crate) runtime: RuntimeKind,
    /// Seconds of calls per level.
    pub(crate) seconds: f64,
    /// Operation numbers wrap at this count (the keys that exist).
    pub(crate) keyspace: usize,
    /// How long the dispatcher stalls, once a quarter of the level's calls have started.
    pub(crate) stall: Option<Duration>,
    /// Whether the level prints its timeline.
    pub(crate) timeline: bool,
    /// How long past its last arrival the level waits for its calls.
    pub(crate) drain: Duration,
}

impl Level {
    /// Offers `rate` calls per second for the level's seconds, each call from a fresh worker
    /// of `make` on its own task, and measures them from their scheduled starts.
    pub(crate) async fn offer<W: Worker>(
        self,
        rate: f64,
        probe: &Probe,
        mut make: impl FnMut() -> W,
    ) -> Measured {
        let count = ((rate * self.seconds) as usize).max(1);
        let counts_before = probe.counts();
        let cpu_before = probe.cpu();
        // Each call reports its outcome here and its task ends: a finished call's task is
        // freed at once instead of held, with its output, until every call has finished.
        let (done, outcomes) = std::sync::mpsc::channel::<Outcome>();
        // Raised at the drain's end: the calls still out then end as unfinished.
        let (cut, cut_seen) = tokio::sync::watch::channel(false);
        let stats = make().stats();
        let parked = crate::ParkedSince::now(stats.clone());
        let start = Instant::now();
        let timeline = self.timeline.then(|| Timeline::start(start, stats));
        for i in 0..count {
            if i == count / 4 {
                if let Some(stall) = self.stall {
                    // Blocks the runtime's thread, as a stall of the process does.
                    std::thread::sleep(stall);
                }
            }
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            if Instant::now() < due {
                sleep_until(self.runtime, due).await;
            } else if i % 64 == 0 {
                // Behind schedule: let the calls already started run now and then.
                YieldNow(false).await;
            }
            let mut worker = make();
            let n = i % self.keyspace;
            let done = done.clone();
            let mut cut_seen = cut_seen.clone();
            let counts = timeline.as_ref().map(|t| Arc::clone(&t.counts));
            if let Some(counts) = &counts {
                counts.started.fetch_add(1, Ordering::Relaxed);
            }
            spawn_detached(self.runtime, async move {
                // The cut first: a call whose task first runs after it is not sent at all.
                let cut = std::pin::pin!(cut_seen.wait_for(|&cut| cut));
                let op = std::pin::pin!(worker.op(n));
                let result = match futures_util::future::select(cut, op).await {
                    Either::Left(_) => None,
                    Either::Right((result, _)) => Some(result),
                };
                if let Some(counts) = counts {
                    counts.ended.fetch_add(1, Ordering::Relaxed);
                }
                let outcome = Outcome {
                    latency_ns: due.elapsed().as_nanos() as u64,
                    finished: Instant::now(),
                    result,
                };
                let _ = done.send(outcome);
            });
        }
        drop(done);
        let deadline = Instant::now() + self.drain;
        let mut results = Vec::with_capacity(count);
        while results.len() < count {
            match outcomes.try_recv() {
                Ok(outcome) => results.push(outcome),
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if !*cut.borrow() && Instant::now() >= deadline {
                        // Every call still out ends at its next poll, which this wakes.
                        cut.send_replace(true);
                    }
                    sleep_until(self.runtime, Instant::now() + Duration::from_millis(1)).await
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
            }
        }
        drop(timeline);
        let (cpu_s, server_cpu_s) = probe.cpu().since(&cpu_before);
        let counts_after = probe.counts();
        let answered = || results.iter().filter(|o| o.result.is_some());
        let last = answered().map(|o| o.finished).max().unwrap_or(start);
        let unfinished = results.len() - answered().count();
        let mut measured = Measured {
            ops: results.len() - unfinished,
            wall: last - start,
            cpu_s,
            server_cpu_s,
            servers: probe.servers.len(),
            server_reads: counts_after.reads - counts_before.reads,
            server_writes: counts_after.writes - counts_before.writes,
            latencies: Vec::with_capacity(count),
            errors: count - results.len(),
            first_error: None,
            parked: parked.as_ref().map(crate::ParkedSince::count),
            unfinished,
        };
        for outcome in results {
            // An unfinished call's latency is its age when the cut reached it: a lower bound.
            measured.latencies.push(outcome.latency_ns);
            if let Some(Err(e)) = outcome.result {
                measured.errors += 1;
                measured.first_error.get_or_insert(e);
            }
        }
        measured.latencies.sort_unstable();
        measured
    }
}

/// The calls of a level started and ended so far, counted for its timeline.
#[derive(Default)]
struct Counts {
    started: AtomicUsize,
    ended: AtomicUsize,
    stop: AtomicBool,
}

/// A level's timeline: a thread that prints, every [`Timeline::EVERY`], what the level did in
/// it; stopped when dropped.
struct Timeline {
    counts: Arc<Counts>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Timeline {
    const EVERY: Duration = Duration::from_millis(50);

    fn start(start: Instant, stats: Option<crate::Stats>) -> Timeline {
        let counts = Arc::new(Counts::default());
        let seen = Arc::clone(&counts);
        let thread = std::thread::spawn(move || {
            // The client's counters count from its start: the first interval is measured from
            // the level's.
            let mut client_before = stats.as_ref().map(|stats| stats());
            let (mut started_before, mut ended_before) = (0, 0);
            let mut next = start + Self::EVERY;
            while !seen.stop.load(Ordering::Relaxed) {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += Self::EVERY;
                let started = seen.started.load(Ordering::Relaxed);
                let ended = seen.ended.load(Ordering::Relaxed);
                let mut line = format!(
                    "timeline t_ms={} started={} ended={} in_flight={}",
                    start.elapsed().as_millis(),
                    started - started_before,
                    ended - ended_before,
                    started.saturating_sub(ended),
                );
                if let (Some(stats), Some(before)) = (&stats, &mut client_before) {
                    let now = stats();
                    line.push_str(&format!(
                        " passes={} writes={} reads={} parked={}",
                        now.passes - before.passes,
                        now.writes - before.writes,
                        now.reads - before.reads,
                        now.parked - before.parked,
                    ));
                    *before = now;
                }
                (started_before, ended_before) = (started, ended);
                println!("{line}");
            }
        });
        Timeline {
            counts,
            thread: Some(thread),
        }
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.counts.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What one call of the open loop reports.
struct Outcome {
    /// From the call's scheduled start to its reply.
    latency_ns: u64,
    finished: Instant,
    /// `None` for a call still out at the drain's end.
    result: Option<Result<(), String>>,
}

/// Runs `task` on the benchmark's runtime, not waited for: its task is freed when it ends.
fn spawn_detached(rt: RuntimeKind, task: impl Future<Output = ()> + Send + 'static) {
    match rt {
        RuntimeKind::AsyncStd => async_global_executor::spawn(task).detach(),
        // Dropping a tokio JoinHandle detaches the task.
        RuntimeKind::Multi | RuntimeKind::Current => drop(tokio::spawn(task)),
    }
}

/// Offers each contender the levels of its peak (`peaks`, in the contenders' order), or the
/// rates of `offer`, and prints a line per level.
pub(crate) async fn run(
    bench: &Bench<'_>,
    compared: &Compared<'_>,
    contenders: &[Contender<'_>],
    peaks: &[f64],
    offer: Option<&[usize]>,
) {
    let setting = Setting {
        callers: 0,
        ceiling: None,
        ..compared.setting
    };
    for (contender, &peak) in contenders.iter().zip(peaks) {
        let rates: Vec<f64> = match offer {
            Some(rates) => rates.iter().map(|&r| r as f64).collect(),
            None => SHARES.iter().map(|share| peak * share).collect(),
        };
        // The lowest rate this client did not drain: none above it is offered.
        let mut swamped = f64::INFINITY;
        for rate in rates {
            if rate < 1.0 {
                continue;
            }
            if rate >= swamped {
                println!(
                    "# {} open-loop client={} offered_per_s={rate:.0}: not offered, {swamped:.0} \
                     a second was not drained",
                    setting.workload, contender.name
                );
                continue;
            }
            (compared.before_each)();
            let m = (contender.offer)(rate).await;
            report(bench, &setting, &contender.name, rate, &m);
            if m.unfinished > 0 {
                swamped = rate;
                settle(bench.runtime, bench.probe, &setting, &contender.name).await;
            }
        }
    }
}

/// The longest wait for the servers to finish a cut level's calls.
const SETTLE_MOST: Duration = Duration::from_secs(60);

/// Waits until the servers are done with the calls a cut level left behind (dropping a call
/// stops its caller's wait, not the request already queued or written), so that the next
/// figures, of this client or the next, do not carry them: until the servers' read events
/// over 50 ms are the probe's own, at most [`SETTLE_MOST`].
async fn settle(rt: RuntimeKind, probe: &Probe, setting: &Setting, client: &str) {
    // Each reading opens a connection per node and sends one `INFO`.
    let own = 2 * probe.nodes.len() as u64;
    let start = Instant::now();
    let mut before = probe.counts();
    while start.elapsed() < SETTLE_MOST {
        sleep_until(rt, Instant::now() + Duration::from_millis(50)).await;
        let now = probe.counts();
        if now.reads.saturating_sub(before.reads) <= own {
            println!(
                "# {} open-loop client={client}: the servers finished the cut calls in {} ms",
                setting.workload,
                start.elapsed().as_millis()
            );
            return;
        }
        before = now;
    }
    println!(
        "# {} open-loop client={client}: the servers still read its calls {} s after the cut; \
         the figures after this line may carry them",
        setting.workload,
        SETTLE_MOST.as_secs()
    );
}

/// Prints the line of one level and records its row.
fn report(bench: &Bench<'_>, setting: &Setting, client: &str, offered: f64, m: &Measured) {
    let achieved = m.ops as f64 / m.wall.as_secs_f64();
    // Every failure is among the calls that ended (none is lost: each task reports).
    let ok = m.ops.saturating_sub(m.errors) as f64 / m.wall.as_secs_f64();
    let cpu_per_100k = m.cpu_s * 100_000.0 / m.ops as f64;
    let (p50, p99, p999) = m.percentiles_us();
    let stall = bench
        .stall
        .map(|stall| format!(" stall_ms={}", stall.as_millis()))
        .unwrap_or_default();
    let parked = m
        .parked
        .map(|parked| format!(" parked={parked}"))
        .unwrap_or_default();
    let unfinished = match m.unfinished {
        0 => String::new(),
        n => format!(" unfinished={n}"),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{} open-loop client={client} deployment={} runtime={} offered_per_s={offered:.0} \
         achieved_per_s={achieved:.0} ok_per_s={ok:.0} p50_us={p50:.1} p99_us={p99:.1} \
         p999_us={p999:.1} cpu_s_per_100k={cpu_per_100k:.3}{stall}{parked}{unfinished} {}",
        setting.workload,
        bench.deployment.name(),
        bench.runtime.name(),
        setting.fields(achieved),
    );
    let _ = out.flush();
    bench.record(botmesh_redis_bench::figures::Row {
        offered_per_s: Some(offered),
        p50_us: Some(p50),
        p99_us: Some(p99),
        p999_us: Some(p999),
        cpu_s_per_100k: Some(cpu_per_100k),
        ..bench.row(Kind::Open, setting, client, achieved)
    });
    if m.errors > 0 {
        eprintln!(
            "# {} open-loop client={client} offered_per_s={offered:.0}: {} of {} calls FAILED; \
             first: {}",
            setting.workload,
            m.errors,
            m.ops,
            m.first_error.as_deref().unwrap_or("?")
        );
    }
}

/// Sleeps until `due` on the benchmark's runtime.
async fn sleep_until(rt: RuntimeKind, due: Instant) {
    match rt {
        RuntimeKind::AsyncStd => drop(async_io::Timer::at(due).await),
        RuntimeKind::Multi | RuntimeKind::Current => {
            tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await
        }
    }
}

/// Gives the other tasks of the runtime a turn: pending once, woken at once.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
