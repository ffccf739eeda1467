//! The `ferry` command line: every command, argument and flag as clap reads them, and the help, the
//! shell completions and the man pages generated from them. `main.rs` runs what they ask for.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use super::{Output, client};
use crate::config;
use crate::settings::{LogFormat, ReloadMode};

#[derive(Parser)]
#[command(name = "ferry", version, about = "A Kafka replication node, wire-compatible with MirrorMaker 2")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format on stderr. For `run` also FERRY_LOG_FORMAT or `log_format` in the settings file;
    /// default: text.
    #[arg(long, value_enum, global = true)]
    pub log_format: Option<LogFormat>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the node: every flow defined in the flows directory.
    ///
    /// Each setting comes from the command line, else its FERRY_* environment variable, else the node
    /// settings file (--config), else its default.
    Run {
        /// Node settings file (TOML): any of `flows`, `listen`, `node_id`, `deployment`,
        /// `shutdown_timeout_seconds`, `log_format`, `admin_token_file`, `tls_cert`, `tls_key`, `reload`;
        /// relative paths in it are from its directory.
        #[arg(long, value_name = "FILE", env = "FERRY_CONFIG")]
        config: Option<PathBuf>,
        /// Print the settings the node would run with, and where each came from, then exit.
        #[arg(long)]
        print_settings: bool,
        /// Directory of `*.toml` flow files. Env FERRY_FLOWS; required (here, there or in the settings file).
        #[arg(long)]
        flows: Option<PathBuf>,
        /// Address of the HTTP endpoint (/health, /flows, /metrics, POST /reload). Loopback by default;
        /// on any other address, mutating endpoints need --admin-token-file. Env FERRY_LISTEN; default:
        /// 127.0.0.1:9464.
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Seconds a graceful stop (SIGTERM/SIGINT) may take before the node exits anyway. Env
        /// FERRY_SHUTDOWN_TIMEOUT_SECONDS; default: 30.
        #[arg(long, value_name = "SECONDS")]
        shutdown_timeout: Option<f64>,
        /// File holding the bearer token that mutating endpoints (POST /reload, ...) require; re-read
        /// on every such request. Reads stay open. Env FERRY_ADMIN_TOKEN_FILE.
        #[arg(long)]
        admin_token_file: Option<PathBuf>,
        /// PEM certificate chain: serve HTTPS (with --tls-key). Env FERRY_TLS_CERT.
        #[arg(long)]
        tls_cert: Option<PathBuf>,
        /// PEM private key of --tls-cert. Env FERRY_TLS_KEY.
        #[arg(long)]
        tls_key: Option<PathBuf>,
        /// This node's id among the nodes sharing its flows (static membership in each flow's copier
        /// group): stable across restarts of the same node. Env FERRY_NODE_ID; default: the host name.
        #[arg(long)]
        node_id: Option<String>,
        /// The deployment: nodes that share flows use the same name; independent deployments on the same
        /// clusters use different ones (it prefixes the groups ferry uses). Env FERRY_DEPLOYMENT;
        /// default: ferry.
        #[arg(long)]
        deployment: Option<String>,
        /// When the flows directory is read again: `auto` on every change (watched, and rescanned every
        /// 30 s) and on SIGHUP or POST /reload; `manual` only on SIGHUP or POST /reload, so that an edit
        /// can be reviewed with `ferry reload --dry-run` before it applies. Env FERRY_RELOAD; default:
        /// auto.
        #[arg(long, value_enum)]
        reload: Option<ReloadMode>,
    },
    /// Print a node's flows as a table: state, lag, records/s, last checkpoint.
    Status {
        #[command(flatten)]
        node: NodeArgs,
        /// `table` for people, `json` for scripts (the same facts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Redraw every --interval seconds until interrupted (a node that does not answer is shown as
        /// such, and asked again).
        #[arg(long)]
        watch: bool,
        /// Seconds between two redraws of --watch.
        #[arg(long, default_value_t = 2.0, requires = "watch")]
        interval: f64,
    },
    /// Pause a flow for the whole deployment (POST /flows/FLOW/pause).
    ///
    /// Its copiers stop fetching, positions kept, across reloads and restarts, until resumed. Exit 0 when
    /// the pause is recorded for the deployment and applied on the node, 3 when the node accepted it but
    /// one of the two is not done yet (the answer says which), 1 on failure.
    Pause {
        /// The flow, as SOURCE->TARGET.
        #[arg(value_parser = parse_flow)]
        flow: config::FlowId,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Resume a paused flow (POST /flows/FLOW/resume).
    ///
    /// Exit codes as for `pause`.
    Resume {
        /// The flow, as SOURCE->TARGET.
        #[arg(value_parser = parse_flow)]
        flow: config::FlowId,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Reload a node's flows directory now (POST /reload), or with --dry-run say what a reload would do.
    ///
    /// Prints which flows started, stopped and restarted; with --dry-run, which ones a reload would start,
    /// stop or restart, changing nothing. Exit 0 when applied (for a dry run: when the directory is
    /// valid), 1 otherwise (refused, rolled back, or no answer).
    Reload {
        /// Answer what a reload would do; apply nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        admin: AdminArgs,
        /// `table` for people, `json` for scripts (the same facts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// GET a node's /health: exit 0 when it answers 200 (degraded flows included), 1 otherwise.
    Health {
        #[arg(long, default_value = "http://127.0.0.1:9464/health")]
        url: String,
        /// PEM CA certificate(s) to verify an https:// node with (e.g. its self-signed certificate).
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Do not verify an https:// node's certificate.
        #[arg(long)]
        insecure: bool,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 5.0)]
        timeout: f64,
    },
    /// Parse and validate the flows directory, print the flow set, exit non-zero on any error.
    Validate {
        #[arg(long)]
        flows: PathBuf,
        /// `table` for people, `json` for scripts (the same facts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// At a failover: hand a flow's remote topics to the applications. The flow stops copying them on
    /// every node of the deployment, for good (recorded in the control topic on its target), and ferry's
    /// DENY Write bindings on them (protect_remote_topics) are lifted.
    ///
    /// Talks to the target cluster only (the source may be gone). Prints each promoted topic and the
    /// principals whose DENY Write was lifted. Exit status: 0 when promoted; 1 when nothing matched or a
    /// cluster call failed; 2 for an invalid flows directory or an unknown --flow.
    Promote {
        #[arg(long)]
        flows: PathBuf,
        /// The flow, as SOURCE->TARGET.
        #[arg(long, value_parser = parse_flow)]
        flow: config::FlowId,
        /// Promote only the source topics whose whole name matches this regex (default: every topic
        /// the flow copies that has a remote topic).
        #[arg(long, value_name = "REGEX")]
        topics: Option<String>,
        /// The deployment the flow runs as (`ferry run --deployment`): its nodes follow the promotion.
        #[arg(long, env = "FERRY_DEPLOYMENT", default_value = "ferry")]
        deployment: String,
    },
    /// Preflight: connect to each cluster and say whether the flows would run, changing nothing.
    ///
    /// For each flow: the topics it would copy and their remote names, the groups it would checkpoint,
    /// whether every right it needs is granted (from the operations the brokers report for this
    /// principal, and a validate-only CreateTopics for a topic that does not exist; rights on a
    /// transactional id cannot be asked and are shown as unchecked), and the state of its internal
    /// topics (exists, compacted, partitions). Exit status: 0 when nothing checked would fail; 1 when
    /// something would (a missing right, a wrong internal topic, a cluster that does not answer within
    /// a few seconds); 2 for an invalid flows directory or an unknown --flow.
    Check {
        #[arg(long)]
        flows: PathBuf,
        /// Check only this flow (SOURCE->TARGET), enabled or not. Default: every enabled flow.
        #[arg(long)]
        flow: Option<config::FlowId>,
        /// The deployment the flows run as (`ferry run --deployment`): it prefixes the groups and the
        /// transactional id whose rights are checked.
        #[arg(long, env = "FERRY_DEPLOYMENT", default_value = "ferry")]
        deployment: String,
        /// `table` for people, `json` for scripts (the same facts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Print consumer groups' translated offsets on a flow's target (from its checkpoints); with --apply,
    /// commit them to the groups on the target.
    ///
    /// Each group is judged first and refused (named, with the reason, on stderr) when its consumers
    /// still have members on the target, or when its newest checkpoint is older than --max-age and the
    /// source does not show the group exactly where that checkpoint translated it from (the source is
    /// gone, or the group moved since). --apply commits every other group. Exit status: 0 when every
    /// selected group was shown (and, with --apply, committed); 3 when --apply refused a group; 1 on an
    /// error (checkpoints or target unreadable, no checkpointed group selected, a commit failed); 2 on
    /// a usage error.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["group", "groups", "all_groups"])))]
    Translate {
        #[arg(long)]
        flows: PathBuf,
        /// The flow, as SOURCE->TARGET.
        #[arg(long)]
        flow: config::FlowId,
        /// One group (whether or not the flow's `groups` still select it).
        #[arg(long)]
        group: Option<String>,
        /// Every checkpointed group of the flow whose whole name matches this regular expression.
        #[arg(long, value_name = "REGEX")]
        groups: Option<String>,
        /// Every checkpointed group of the flow (among those its `groups` select).
        #[arg(long)]
        all_groups: bool,
        /// Commit the translated offsets of every group not refused to that group on the target.
        #[arg(long)]
        apply: bool,
        /// The oldest checkpoint taken without the source's confirmation, e.g. 90s, 5m, 2h. Default:
        /// three of the flow's checkpoint intervals (3 x emit_checkpoints_interval_seconds, rounded up
        /// to whole seconds; 180s with the default interval of 60s).
        #[arg(long, value_name = "DURATION", value_parser = parse_max_age)]
        max_age: Option<Duration>,
        /// `table` for people, `json` for scripts (the same facts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Write a flows directory from an MM2 configuration: an `mm2.properties` (dedicated mode) or a Strimzi
    /// `KafkaMirrorMaker2` resource (YAML).
    ///
    /// Writes `clusters.toml` and one `SOURCE-to-TARGET.toml` per enabled flow into --out, validated
    /// before anything is written; secrets become `${VAR}` or `${file:PATH}` references (never the
    /// literal), and the report names each variable to set and each key not carried over, with why.
    /// Exit 0 when written, 1 otherwise.
    ImportMm2 {
        /// The MM2 configuration file.
        file: PathBuf,
        /// The flows directory to write to (created if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Overwrite files that already exist there.
        #[arg(long)]
        force: bool,
        /// Strimzi only: where ferry's pod mounts each Kubernetes secret the resource names, as
        /// DIR/SECRET/KEY.
        #[arg(long, value_name = "DIR", default_value = crate::import_mm2::DEFAULT_SECRETS_DIR)]
        secrets_dir: PathBuf,
        /// What a custom `replication.policy.class` does, which ferry cannot read from Java: the naming
        /// template it implements (`com.acme.SuffixPolicy={topic}.{source}`), or `default`/`identity`.
        /// Repeatable; the flows using the class get `remote_topic` (or `replication_policy`).
        #[arg(long, value_name = "CLASS=TEMPLATE", value_parser = crate::import_mm2::parse_policy_class)]
        policy_class: Vec<(String, String)>,
        /// `table` for people, `json` for scripts (the same facts).
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Print a shell completion script for ferry.
    ///
    /// E.g. `ferry completions bash > /etc/bash_completion.d/ferry`, or `ferry completions zsh >
    /// "${fpath[1]}/_ferry"`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print ferry's man page (roff).
    ///
    /// E.g. `ferry man | man -l -`. With --dir, write one page per command there instead (ferry.1,
    /// ferry-run.1, ferry-pause.1, ...).
    Man {
        /// Directory to write the pages to (created if missing).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// How to reach a node's HTTP listener.
#[derive(Args)]
pub struct NodeArgs {
    /// The node's HTTP listener.
    #[arg(long, default_value = "http://127.0.0.1:9464")]
    pub url: String,
    /// PEM CA certificate(s) to verify an https:// node with.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Do not verify an https:// node's certificate.
    #[arg(long)]
    pub insecure: bool,
}

/// A node's listener and the authority its mutating endpoints need.
#[derive(Args)]
pub struct AdminArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    /// File holding the node's admin token (its --admin-token-file), sent as a bearer token. Needed
    /// when the node has one.
    #[arg(long, env = "FERRY_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds to wait for the node's answer (a reload stops and starts flows first).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

impl NodeArgs {
    pub fn client(self, token_file: Option<PathBuf>, timeout: f64) -> client::Node {
        client::Node {
            url: self.url,
            ca: self.ca,
            insecure: self.insecure,
            token_file,
            timeout: Duration::from_secs_f64(timeout.clamp(0.1, 3600.0)),
        }
    }
}

impl AdminArgs {
    pub fn client(self) -> client::Node {
        self.node.client(self.token_file, self.timeout)
    }
}

/// A flow id as the node's endpoints check it (aliases of letters, digits, `_` and `-`).
pub fn parse_flow(raw: &str) -> Result<config::FlowId, String> {
    crate::http::flow_id(raw)
}

/// `--max-age` of `translate`: a duration such as `90s`, `15m` or `2h`.
pub fn parse_max_age(s: &str) -> Result<Duration, String> {
    crate::translate::select::parse_duration(s)
}
