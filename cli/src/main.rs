//! `botmesh-redis`: the operator's command line of botmesh-redis.
//!
//! - `inspect`: what a prefix holds, per layout and namespace;
//! - `migrate`: the legacy layout to `cluster:v1`, in place or to another server or prefix;
//! - `rollback`: `cluster:v1` back to the legacy layout;
//! - `cleanup`: deletes the side of a prefix the bots left, once the other side holds its data;
//! - `check`: whether a store's `start()` would pass, read-only, with the topology, the keys per
//!   master and the hottest hash tags;
//! - `demo`: three simulated bot replicas sharing 50 chats on a throwaway local Redis Cluster.
//!
//! Every command prints a report on stdout and a progress bar on stderr (only at a terminal).
//! Exit codes: 0 success, 1 error, 2 usage, 3 refused. `docs/cli.md` is the operator's guide.
#![forbid(unsafe_code)]

mod check;
mod connection;
mod demo;
mod inspect;
mod migrate;
mod output;

use std::process::ExitCode;

use botmesh_redis_tokio::migrate::{Namespace, Refusal};
use botmesh_redis_tokio::KeyError;
use botmesh_redis_tokio::{Client, ClientOptions, Error, Layout};
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

use connection::{Connection, TargetCredentials};

/// Success.
const EXIT_OK: u8 = 0;
/// An error: connection, server, or a demo check that failed.
const EXIT_ERROR: u8 = 1;
/// Refused: live bots, a wrong layout, a braced prefix; `check`: start would be refused.
const EXIT_REFUSED: u8 = 3;
/// A migration or a rollback completed without copying every key: the source is kept.
const EXIT_INCOMPLETE: u8 = 4;

/// The exit codes, as every `--help` ends.
macro_rules! exit_codes {
    () => {
        "Exit codes: 0 success, 1 error, 2 usage (bad flags), 3 refused (live bots, wrong \
         layout, braced prefix, a demo on a prefix in use; for check: start() would be \
         refused), 4 incomplete (migrate, rollback: keys not copied, the source kept)."
    };
}

/// The operator's tool of botmesh-redis: inspect a prefix, migrate it between the legacy and
/// the cluster:v1 key layouts, check it before starting bots, or run the demo.
#[derive(Debug, Parser)]
#[command(
    name = "botmesh-redis",
    version,
    arg_required_else_help = true,
    after_help = concat!(
        "A typical migration: inspect, migrate --dry-run, migrate, check --layout cluster, \
         start the bots, then cleanup --layout legacy (it deletes only, and only once the \
         cluster side holds the data). Each step reads the prefix's lifecycle records and \
         refuses what would bring back deleted data or destroy newer writes. See \
         docs/migration.md and docs/cli.md.\n\n",
        exit_codes!()
    )
)]
struct Cli {
    /// Hide the progress bar (it is hidden anyway when stderr is not a terminal).
    #[arg(long, short, global = true)]
    quiet: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Count the keys under a prefix, per namespace and layout (read-only).
    Inspect(InspectArgs),
    /// Copy a legacy-layout prefix into the cluster:v1 layout (in place, or to another server
    /// or prefix).
    Migrate(MigrateArgs),
    /// Copy a cluster:v1 prefix back into the legacy layout.
    Rollback(RollbackArgs),
    /// Delete the side of a prefix the bots left (one layout), once the other side holds its
    /// data; it never copies.
    Cleanup(CleanupArgs),
    /// Tell whether start() would pass for a prefix and layout (read-only), with the topology,
    /// keys per master and hot hash tags.
    Check(CheckArgs),
    /// Three simulated bot replicas sharing 50 chats on a throwaway local Redis Cluster, with
    /// a report.
    Demo(DemoArgs),
}

/// `inspect`'s flags.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("source").args(["url", "cluster"]).required(true)),
    after_help = concat!(
        "Examples:\n  \
         botmesh-redis inspect --url redis://127.0.0.1:6379 --prefix mybot\n  \
         botmesh-redis inspect --cluster 10.0.0.5:7000 --map 10.0.0.5:7000=127.0.0.1:7000 --prefix mybot\n  \
         botmesh-redis inspect --url redis://bot:secret@db:6379 --prefix mybot --quiet\n  \
         botmesh-redis inspect --url rediss://db:6380 --cacert /etc/redis/ca.crt --prefix mybot\n\n",
        exit_codes!()
    )
)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// The key prefix to inspect.
    #[arg(long)]
    pub(crate) prefix: String,

    /// SCAN COUNT hint per page.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scan_count: u32,
}

/// `migrate`'s flags.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("source").args(["url", "cluster"]).required(true)),
    group(ArgGroup::new("target_server").args(["target_url", "target_cluster"])),
    after_help = concat!(
        "Examples:\n  \
         # see what would happen, then migrate in place on one node\n  \
         botmesh-redis migrate --url redis://127.0.0.1:6379 --prefix mybot --dry-run\n  \
         botmesh-redis migrate --url redis://127.0.0.1:6379 --prefix mybot\n  \
         # copy into a Redis Cluster under a new prefix\n  \
         botmesh-redis migrate --url redis://old:6379 --prefix mybot --target-cluster 10.0.0.5:7000 --target-prefix mybot2\n  \
         # only some namespaces (the layout marker is then not written)\n  \
         botmesh-redis migrate --url redis://127.0.0.1:6379 --prefix mybot --include messages,chats\n  \
         # copy and delete the source in one go (bots stopped, before they start on the copy)\n  \
         botmesh-redis migrate --url redis://old:6379 --prefix mybot --target-cluster 10.0.0.5:7000 --delete-source\n  \
         # once the bots run on the cluster layout, the legacy keys go with cleanup, not migrate\n  \
         botmesh-redis cleanup --url redis://127.0.0.1:6379 --prefix mybot --layout legacy\n\n",
        exit_codes!()
    )
)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// The legacy-layout prefix to migrate.
    #[arg(long)]
    pub(crate) prefix: String,

    /// Migrate to another single node (default: in place, on the source).
    #[arg(long, value_name = "URL", conflicts_with = "target_cluster")]
    pub(crate) target_url: Option<String>,

    /// Migrate to a Redis Cluster, discovered from this root node; repeatable.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) target_cluster: Vec<String>,

    #[command(flatten)]
    pub(crate) target: TargetCredentials,

    /// The target's prefix (default: --prefix).
    #[arg(long, value_name = "PREFIX")]
    pub(crate) target_prefix: Option<String>,

    /// Count what would happen; write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// Only these namespaces (comma-separated): messages, chats, contacts, checkpoints,
    /// schedules, user-data, fences, terms, conversations, cursors, leases, durability. A
    /// limited run leaves the layout marker unset.
    #[arg(long, value_name = "NS,NS", value_delimiter = ',', value_parser = parse_copied_namespace)]
    pub(crate) include: Option<Vec<Namespace>>,

    /// Copy only: existing target keys win (unless --overwrite) and nothing is removed from
    /// the target. The default mirrors: the target ends up holding exactly the source's data.
    #[arg(long)]
    pub(crate) no_mirror: bool,

    /// With --no-mirror, replace existing target keys (counters are still only raised).
    #[arg(long, requires = "no_mirror")]
    pub(crate) overwrite: bool,

    /// Run although heartbeats or pending chat tickets show live bots. Unsafe: their writes
    /// during the run may be lost.
    #[arg(long)]
    pub(crate) allow_live: bool,

    /// Once the copy is complete, delete the source (the cleanup step, which only deletes).
    /// Refused with --no-mirror or --include.
    #[arg(long, conflicts_with_all = ["no_mirror", "include"])]
    pub(crate) delete_source: bool,

    /// SCAN COUNT hint per page.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scan_count: u32,
}

/// `rollback`'s flags.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("source").args(["url", "cluster"]).required(true)),
    group(ArgGroup::new("target_server").args(["target_url"])),
    after_help = concat!(
        "Examples:\n  \
         # in place on one node\n  \
         botmesh-redis rollback --url redis://127.0.0.1:6379 --prefix mybot --dry-run\n  \
         botmesh-redis rollback --url redis://127.0.0.1:6379 --prefix mybot\n  \
         # from a Redis Cluster back to one node, under another prefix\n  \
         botmesh-redis rollback --cluster 10.0.0.5:7000 --prefix mybot --target-url redis://old:6379 --target-prefix mybot-back\n  \
         # copy only: existing legacy keys win, nothing is pruned\n  \
         botmesh-redis rollback --url redis://127.0.0.1:6379 --prefix mybot --no-mirror\n\n",
        exit_codes!()
    )
)]
pub(crate) struct RollbackArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// The cluster:v1 prefix to roll back.
    #[arg(long)]
    pub(crate) prefix: String,

    /// Roll back into another single node (default: in place, on the source, which must then
    /// be a single node).
    #[arg(long, value_name = "URL")]
    pub(crate) target_url: Option<String>,

    #[command(flatten)]
    pub(crate) target: TargetCredentials,

    /// The target's prefix (default: --prefix).
    #[arg(long, value_name = "PREFIX")]
    pub(crate) target_prefix: Option<String>,

    /// Make the legacy target match the source: records overwrite, legacy records the source
    /// no longer holds are deleted (the default).
    #[arg(long, overrides_with = "no_mirror")]
    pub(crate) mirror: bool,

    /// Copy only: existing legacy keys win and nothing is deleted from the target.
    #[arg(long, overrides_with = "mirror")]
    pub(crate) no_mirror: bool,

    /// Count what would happen; write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// Once the rollback is complete, delete the cluster-layout source (the cleanup step,
    /// which only deletes). Refused with --no-mirror. After the legacy bots ran, use
    /// `cleanup --layout cluster` instead: the rollback itself is then refused.
    #[arg(long, conflicts_with = "no_mirror")]
    pub(crate) delete_source: bool,

    /// Run although heartbeats or pending chat tickets show live bots. Unsafe.
    #[arg(long)]
    pub(crate) allow_live: bool,

    /// SCAN COUNT hint per page.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scan_count: u32,
}

/// `cleanup`'s flags.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("source").args(["url", "cluster"]).required(true)),
    group(ArgGroup::new("target_server").args(["other_url", "other_cluster"])),
    after_help = concat!(
        "The side named by --url or --cluster and --layout is deleted; the other side (the other \
         layout: in place by default, or on --other-url / --other-cluster, under --other-prefix) \
         must hold its data, as the two sides' lifecycle records tell: the other side went live \
         after the copy, or holds an exact copy no bot has changed since. --target-user, \
         --target-password and --target-map name the other side's credentials.\n\n\
         Examples:\n  \
         # the bots run on the cluster layout, in place: delete the legacy keys\n  \
         botmesh-redis cleanup --url redis://127.0.0.1:6379 --prefix mybot --layout legacy --dry-run\n  \
         botmesh-redis cleanup --url redis://127.0.0.1:6379 --prefix mybot --layout legacy\n  \
         # the bots run on the cluster: delete the old legacy node's keys\n  \
         botmesh-redis cleanup --url redis://old:6379 --prefix mybot --layout legacy --other-cluster 10.0.0.5:7000\n  \
         # rolled back, the legacy bots run again: delete the cluster-layout keys\n  \
         botmesh-redis cleanup --cluster 10.0.0.5:7000 --prefix mybot --layout cluster --other-url redis://old:6379\n\n",
        exit_codes!()
    )
)]
pub(crate) struct CleanupArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// The prefix of the side to delete.
    #[arg(long)]
    pub(crate) prefix: String,

    /// The layout of the side to delete.
    #[arg(long, value_enum)]
    pub(crate) layout: LayoutArg,

    /// The other side is this single node (default: in place, on --url).
    #[arg(long, value_name = "URL", conflicts_with = "other_cluster")]
    pub(crate) other_url: Option<String>,

    /// The other side is this Redis Cluster, discovered from this root node; repeatable.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) other_cluster: Vec<String>,

    #[command(flatten)]
    pub(crate) target: TargetCredentials,

    /// The other side's prefix (default: --prefix).
    #[arg(long, value_name = "PREFIX")]
    pub(crate) other_prefix: Option<String>,

    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// Run although pending chat tickets (or, on another server, heartbeats) show bots on the
    /// side to delete. Unsafe.
    #[arg(long)]
    pub(crate) allow_live: bool,

    /// SCAN COUNT hint per page.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scan_count: u32,
}

/// A layout, as `check --layout` and `cleanup --layout` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LayoutArg {
    /// The historical single-node layout.
    Legacy,
    /// The cluster:v1 layout.
    Cluster,
}

impl From<LayoutArg> for Layout {
    fn from(layout: LayoutArg) -> Layout {
        match layout {
            LayoutArg::Legacy => Layout::Legacy,
            LayoutArg::Cluster => Layout::Cluster,
        }
    }
}

/// `check`'s flags.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("source").args(["url", "cluster"]).required(true)),
    after_help = concat!(
        "Examples:\n  \
         # after an in-place migration: may bots start on the cluster layout?\n  \
         botmesh-redis check --url redis://127.0.0.1:6379 --prefix mybot --layout cluster\n  \
         # a cluster: topology, keys per master, hot hash tags\n  \
         botmesh-redis check --cluster 10.0.0.5:7000 --prefix mybot\n\n",
        exit_codes!()
    )
)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// The key prefix the bots will use.
    #[arg(long)]
    pub(crate) prefix: String,

    /// The layout the bots will use (default: cluster on a cluster, legacy on one node, as
    /// the store chooses).
    #[arg(long, value_enum)]
    pub(crate) layout: Option<LayoutArg>,

    /// SCAN COUNT hint per page.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scan_count: u32,
}

/// `demo`'s flags.
#[derive(Debug, Args)]
#[command(after_help = concat!(
    "Examples:\n  \
     # a throwaway local 3-master cluster (needs redis-server on PATH)\n  \
     botmesh-redis demo\n  \
     # an existing server\n  \
     botmesh-redis demo --url redis://127.0.0.1:6379 --prefix botmesh-demo\n  \
     botmesh-redis demo --cluster 127.0.0.1:7000\n\n",
    exit_codes!()
))]
pub(crate) struct DemoArgs {
    /// Without --url or --cluster: a throwaway local cluster.
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// The key prefix: one of the demo's own. On an existing server, a prefix that holds keys
    /// a demo did not write is refused (exit 3).
    #[arg(long, default_value = "botmesh-demo")]
    pub(crate) prefix: String,

    /// Runs on a prefix that holds other keys all the same (the demo writes, deletes and
    /// drains an outbox there).
    #[arg(long)]
    pub(crate) force: bool,
}

/// Parses a namespace that a migration copies (`Namespace::from_str` also knows the ones it
/// only counts, such as `items`).
fn parse_copied_namespace(text: &str) -> Result<Namespace, String> {
    let ns: Namespace = text.parse()?;
    if Namespace::COPIED.contains(&ns) {
        return Ok(ns);
    }
    let copied: Vec<&str> = Namespace::COPIED.iter().map(|n| n.name()).collect();
    Err(format!(
        "{text:?} is counted but never copied; choose from {}",
        copied.join(", ")
    ))
}

/// How a command failed; each kind has its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The library or the server failed (exit 1).
    Error(Error),
    /// A migration, a rollback or (for `check`) the start guard would refuse (exit 3).
    Refused(String),
    /// Anything else that failed, with its message (exit 1).
    Failed(String),
    /// A migration or a rollback completed but left keys of the source out (exit 4).
    Incomplete(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            // The library names its option; the operator types the flag.
            Error::Refused(refusal @ Refusal::Live { .. }) => Failure::Refused(format!(
                "{refusal}\n(on the command line: --allow-live runs anyway; unsafe while bots \
                 write)"
            )),
            Error::Refused(refusal) => Failure::Refused(refusal.to_string()),
            // A braced prefix for the cluster layout is refused before anything is sent.
            Error::Key(KeyError::BraceInClusterPrefix { .. }) => Failure::Refused(e.to_string()),
            Error::Connect { ref reason, .. } => match tls_hint(reason) {
                Some(hint) => Failure::Failed(format!("error: {e}\n(on the command line: {hint})")),
                None => Failure::Error(e),
            },
            other => Failure::Error(other),
        }
    }
}

/// The flags that mend a failed TLS handshake, from the client's reason for it.
fn tls_hint(reason: &str) -> Option<&'static str> {
    if !reason.starts_with("TLS handshake failed") {
        return None;
    }
    Some(if reason.contains("not trusted") {
        "--cacert FILE trusts a private CA, --target-cacert FILE a migration's target"
    } else if reason.contains("does not name the host") {
        "--sni NAME (--target-sni) names the host the certificate must carry"
    } else if reason.contains("client certificate") {
        "--cert FILE --key FILE (--target-cert, --target-key) present a client certificate"
    } else {
        "--cacert, --cert and --key (with --target-* for a migration's target) set what TLS \
         trusts and presents"
    })
}

/// Connects to the source that `--url` or `--cluster` names (clap requires one of them).
pub(crate) async fn connect(connection: &Connection) -> Result<Client, Failure> {
    let options = connection
        .options()
        .ok_or_else(|| Failure::Failed("give --url or --cluster".into()))?;
    connect_with(options).await
}

/// Connects with these options.
pub(crate) async fn connect_with(options: ClientOptions) -> Result<Client, Failure> {
    Ok(Client::connect(options).await?)
}

#[tokio::main]
async fn main() -> ExitCode {
    // Usage errors exit with 2 and --help with 0, both from clap.
    let cli = Cli::parse();
    let quiet = cli.quiet;
    let outcome = match &cli.command {
        Command::Inspect(args) => inspect::run(args, quiet).await,
        Command::Migrate(args) => migrate::run_migrate(args, quiet).await,
        Command::Rollback(args) => migrate::run_rollback(args, quiet).await,
        Command::Cleanup(args) => migrate::run_cleanup(args, quiet).await,
        Command::Check(args) => check::run(args, quiet).await,
        Command::Demo(args) => demo::run(args, quiet).await,
    };
    match outcome {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(Failure::Refused(message)) => {
            eprintln!("refused: {message}");
            ExitCode::from(EXIT_REFUSED)
        }
        Err(Failure::Error(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_ERROR)
        }
        Err(Failure::Failed(message)) => {
            eprintln!("{message}");
            ExitCode::from(EXIT_ERROR)
        }
        Err(Failure::Incomplete(message)) => {
            eprintln!("incomplete: {message}");
            ExitCode::from(EXIT_INCOMPLETE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn include_takes_copied_namespaces_only() {
        assert_eq!(parse_copied_namespace("user-data"), Ok(Namespace::UserData));
        assert!(parse_copied_namespace("items").is_err());
        assert!(parse_copied_namespace("nope").is_err());
    }
}
