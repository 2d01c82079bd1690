//! The bench's command line: what each flag takes, checked by clap before any server starts,
//! so that a typo costs a usage line, not a run.

use std::path::PathBuf;
use std::time::Duration;

use botmesh_redis_bench::{CALLERS, PAYLOAD_LEN};
use clap::builder::PossibleValuesParser;
use clap::{Parser, ValueEnum};

use crate::{CLIENT_NAMES, FRED_POOL_SIZE, OURS, REDIS_RS, REDIS_RS_PIPE};

/// The workloads `--only` names.
const WORKLOADS: [&str; 6] = ["W1", "W2", "W3", "S1", "S2", "S3"];

/// The async runtime every client of the run shares.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub(crate) enum RuntimeKind {
    /// Tokio's multi-thread scheduler, one worker a core.
    Multi,
    /// Tokio's current-thread scheduler.
    Current,
    /// No tokio at all: callers on async-global-executor, our async-std driver and redis-rs on
    /// smol.
    #[value(name = "async-std")]
    AsyncStd,
}

impl RuntimeKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            RuntimeKind::Multi => "multi",
            RuntimeKind::Current => "current",
            RuntimeKind::AsyncStd => "async-std",
        }
    }
}

/// The servers the run starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub(crate) enum Deployment {
    /// 3 masters, no replicas.
    Cluster,
    /// One `redis-server` without cluster mode.
    Standalone,
    /// The same server, every client over its Unix socket.
    #[value(name = "standalone-unix")]
    StandaloneUnix,
}

impl Deployment {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Deployment::Cluster => "cluster",
            Deployment::Standalone => "standalone",
            Deployment::StandaloneUnix => "standalone-unix",
        }
    }
}

/// What a run measures; the module documentation of the bench says what each line means.
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "botmesh-redis against redis-rs and fred on real servers"
)]
pub(crate) struct Args {
    /// The async runtime of every client.
    #[arg(long, value_enum, default_value = "multi")]
    pub(crate) runtime: RuntimeKind,
    /// The servers to start.
    #[arg(long, value_enum, default_value = "cluster")]
    pub(crate) deployment: Deployment,
    /// A tenth of every workload's calls: a smoke run.
    #[arg(long)]
    pub(crate) quick: bool,
    /// The workloads to run, comma-separated (any case); all when absent.
    #[arg(long, value_delimiter = ',', value_parser = workload)]
    pub(crate) only: Option<Vec<String>>,
    /// The clients to run, comma-separated; a name selects the forms named after it (`fred`
    /// selects all four of fred's); all when absent.
    #[arg(
        long = "client",
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(CLIENT_NAMES)
    )]
    pub(crate) clients: Option<Vec<String>>,
    /// W3's callers; else W3 sweeps `--callers` too.
    #[arg(long, value_parser = positive)]
    pub(crate) w3_callers: Option<usize>,
    /// Rounds of each workload and client, interleaved; lines give their median and spread.
    #[arg(long, default_value_t = 1, value_parser = positive)]
    pub(crate) rounds: usize,
    /// How long each closed-loop run lasts; else each run is the workload's count of calls.
    #[arg(long = "round-seconds", value_name = "S", value_parser = seconds)]
    pub(crate) round: Option<Duration>,
    /// Clients in fred's pool: 0 leaves the pool out, else 2 or more.
    #[arg(long, default_value_t = FRED_POOL_SIZE, value_parser = pool_size)]
    pub(crate) fred_pool: usize,
    /// The caller counts every workload runs at, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [CALLERS], value_parser = positive)]
    pub(crate) callers: Vec<usize>,
    /// W1's payload sizes in bytes, comma-separated.
    #[arg(
        long = "payload",
        value_delimiter = ',',
        default_values_t = [PAYLOAD_LEN],
        value_parser = positive
    )]
    pub(crate) payloads: Vec<usize>,
    /// Leaves out each workload's ceiling (`redis-benchmark -P 16` on the same servers).
    #[arg(long = "no-ceiling", action = clap::ArgAction::SetFalse)]
    pub(crate) ceiling: bool,
    /// Ends each workload with the open-loop levels (implied by `--offer` and `--stall`).
    #[arg(long)]
    pub(crate) open_loop: bool,
    /// The open loop's rates, calls a second, the same for every client, comma-separated;
    /// else shares of each client's peak.
    #[arg(long, value_delimiter = ',', value_parser = positive)]
    pub(crate) offer: Option<Vec<usize>>,
    /// Stalls the open loop's dispatcher this many milliseconds once in each level.
    #[arg(long, value_name = "MS", value_parser = millis)]
    pub(crate) stall: Option<Duration>,
    /// Prints each open-loop level's timeline, every 50 ms.
    #[arg(long)]
    pub(crate) timeline: bool,
    /// How long past its last arrival an open-loop level waits for its calls, seconds; the
    /// calls still out then are dropped and counted as unfinished.
    #[arg(long, value_name = "S", default_value = "20", value_parser = seconds)]
    pub(crate) drain: Duration,
    /// Our client's lanes (`ClientOptions::lanes`); else its driver's default.
    #[arg(long, value_name = "N", value_parser = positive)]
    pub(crate) lanes: Option<usize>,
    /// Writes the figures to this file as CSV, for the `charts` binary.
    #[arg(long, value_name = "PATH")]
    pub(crate) csv: Option<PathBuf>,
}

impl Args {
    /// The process's arguments, or the usage and exit.
    pub(crate) fn from_env() -> Args {
        let args = Args::parse().settled();
        if let Some(problem) = args.nothing_to_run() {
            usage(problem);
        }
        args
    }

    /// Why the command line would run no client, if it would not: fred needs tokio, so on
    /// `--runtime async-std` a `--client` list of fred's forms alone leaves nothing to run.
    fn nothing_to_run(&self) -> Option<&'static str> {
        let runs_there = [OURS, REDIS_RS, REDIS_RS_PIPE];
        let none = !runs_there.iter().any(|client| self.runs_client(client));
        (self.runtime == RuntimeKind::AsyncStd && none).then_some(
            "--runtime async-std runs botmesh and redis-rs only (fred needs tokio): \
             name one of them in --client",
        )
    }

    /// `--offer` and `--stall` are open-loop settings: either turns the open loop on.
    fn settled(mut self) -> Args {
        self.open_loop |= self.offer.is_some() || self.stall.is_some();
        self
    }

    pub(crate) fn runs(&self, workload: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|w| w == workload))
    }

    /// Whether `client` (a name of `CLIENT_NAMES`) runs: named, or a client it is a form of
    /// named (`fred` selects `fred-pipe`, `fred-pool` and `fred-pool-pipe`).
    pub(crate) fn runs_client(&self, client: &str) -> bool {
        self.clients.as_ref().is_none_or(|list| {
            list.iter().any(|c| {
                client
                    .strip_prefix(c.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
            })
        })
    }

    /// `n`, or a tenth of it with `--quick`.
    pub(crate) fn scaled(&self, n: usize) -> usize {
        if self.quick {
            n / 10
        } else {
            n
        }
    }
}

/// Exits with the usage and `problem`, as a bad flag does.
pub(crate) fn usage(problem: &str) -> ! {
    use clap::CommandFactory;
    Args::command()
        .error(clap::error::ErrorKind::InvalidValue, problem)
        .exit()
}

fn positive(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("wants a positive whole number".to_owned()),
    }
}

fn workload(text: &str) -> Result<String, String> {
    let name = text.trim().to_uppercase();
    if WORKLOADS.contains(&name.as_str()) {
        Ok(name)
    } else {
        Err(format!("wants some of {}", WORKLOADS.join(", ")))
    }
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| "wants a positive number of seconds".to_owned())
}

fn millis(text: &str) -> Result<Duration, String> {
    positive(text).map(|ms| Duration::from_millis(ms as u64))
}

fn pool_size(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n != 1 => Ok(n),
        _ => Err("wants 0 (no pool) or a size of 2 or more".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(line: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("bench").chain(line.iter().copied()))
            .map(Args::settled)
    }

    #[test]
    fn no_flag_is_a_full_cluster_run_of_every_client() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.runtime, RuntimeKind::Multi);
        assert_eq!(args.deployment, Deployment::Cluster);
        assert_eq!((args.rounds, args.fred_pool), (1, FRED_POOL_SIZE));
        assert_eq!(args.callers, vec![CALLERS]);
        assert_eq!(args.payloads, vec![PAYLOAD_LEN]);
        assert!(args.ceiling && !args.open_loop && !args.quick && !args.timeline);
        assert_eq!((args.only, args.clients, args.round), (None, None, None));
        assert_eq!((args.offer, args.stall, args.csv), (None, None, None));
        assert_eq!((args.drain, args.lanes), (Duration::from_secs(20), None));
    }

    #[test]
    fn every_flag_is_read_as_the_docs_say() {
        let args = parse(&[
            "--runtime",
            "async-std",
            "--deployment",
            "standalone-unix",
            "--quick",
            "--only",
            "w2,S1",
            "--client",
            "botmesh,fred",
            "--w3-callers",
            "8",
            "--rounds",
            "5",
            "--round-seconds",
            "1.5",
            "--fred-pool",
            "0",
            "--callers",
            "1,8,64,512",
            "--payload",
            "100,10000",
            "--no-ceiling",
            "--offer",
            "100000,200000",
            "--stall",
            "50",
            "--timeline",
            "--drain",
            "2.5",
            "--lanes",
            "3",
            "--csv",
            "out.csv",
        ])
        .unwrap();
        assert_eq!(args.runtime, RuntimeKind::AsyncStd);
        assert_eq!(args.deployment, Deployment::StandaloneUnix);
        assert!(args.quick && args.timeline && !args.ceiling);
        assert_eq!(args.only, Some(vec!["W2".to_owned(), "S1".to_owned()]));
        assert!(args.runs("W2") && args.runs("S1") && !args.runs("W1"));
        assert!(args.runs_client("botmesh") && args.runs_client("fred-pool-pipe"));
        assert!(!args.runs_client("redis-rs"));
        assert_eq!(
            (args.w3_callers, args.rounds, args.fred_pool),
            (Some(8), 5, 0)
        );
        assert_eq!(args.round, Some(Duration::from_millis(1500)));
        assert_eq!(args.callers, vec![1, 8, 64, 512]);
        assert_eq!(args.payloads, vec![100, 10_000]);
        assert_eq!(args.offer, Some(vec![100_000, 200_000]));
        assert_eq!(args.stall, Some(Duration::from_millis(50)));
        assert_eq!(args.drain, Duration::from_millis(2500));
        assert_eq!(args.lanes, Some(3));
        assert!(args.open_loop, "--offer and --stall imply the open loop");
        assert_eq!(args.csv, Some(PathBuf::from("out.csv")));
        assert_eq!(args.scaled(100), 10);
    }

    #[test]
    fn async_std_refuses_a_client_list_of_fred_alone() {
        let fred = parse(&["--runtime", "async-std", "--client", "fred,fred-pool-pipe"]).unwrap();
        assert_eq!(
            fred.nothing_to_run(),
            Some(
                "--runtime async-std runs botmesh and redis-rs only (fred needs tokio): \
                 name one of them in --client"
            )
        );
        for clients in ["botmesh,fred", "redis-rs-pipe", "redis-rs"] {
            let line = ["--runtime", "async-std", "--client", clients];
            assert_eq!(parse(&line).unwrap().nothing_to_run(), None, "{clients}");
        }
        assert_eq!(
            parse(&["--runtime", "async-std"]).unwrap().nothing_to_run(),
            None
        );
        let on_tokio = parse(&["--runtime", "current", "--client", "fred"]).unwrap();
        assert_eq!(on_tokio.nothing_to_run(), None);
    }

    #[test]
    fn a_stall_alone_turns_the_open_loop_on() {
        assert!(parse(&["--stall", "100"]).unwrap().open_loop);
        assert!(parse(&["--open-loop"]).unwrap().open_loop);
    }

    #[test]
    fn bad_values_are_refused_before_any_server_starts() {
        for line in [
            &["--runtime", "smol"][..],
            &["--deployment", "sentinel"],
            &["--only", "W4"],
            &["--client", "botmesh,jedis"],
            &["--rounds", "0"],
            &["--round-seconds", "0"],
            &["--round-seconds", "soon"],
            &["--fred-pool", "1"],
            &["--callers", "64,0"],
            &["--callers", "many"],
            &["--payload", ""],
            &["--offer", "1e5"],
            &["--stall", "0"],
            &["--drain", "0"],
            &["--drain", "never"],
            &["--lanes", "0"],
        ] {
            let error = parse(line).expect_err(&format!("{line:?} was accepted"));
            assert!(
                matches!(
                    error.kind(),
                    ErrorKind::InvalidValue | ErrorKind::ValueValidation
                ),
                "{line:?}: {:?}",
                error.kind()
            );
        }
        let unknown = parse(&["--colour"]).expect_err("an unknown flag");
        assert_eq!(unknown.kind(), ErrorKind::UnknownArgument);
        let missing = parse(&["--csv"]).expect_err("a flag without its value");
        assert_eq!(missing.kind(), ErrorKind::InvalidValue);
    }
}
