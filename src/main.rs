//! The `ferry` command: `run` a node, `validate` a flows directory, `check` it against its clusters,
//! `translate` groups' offsets; talk to a running node (`status`, `pause`, `resume`, `reload`, and
//! `health`, the container's HEALTHCHECK);
//! `completions` and `man`, generated from the definitions below.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use actix::Actor;
use anyhow::Context as _;
use clap::{Args, CommandFactory, Parser, Subcommand};

use ferry::cli::{self, Output, client};
use ferry::config;
use ferry::node::{Node, Shutdown};
use ferry::reload::Reload;
use ferry::reload::Trigger;
use ferry::settings::{self, LogFormat, ReloadMode};
use ferry::status::StatusBoard;

#[derive(Parser)]
#[command(name = "ferry", version, about = "A Kafka replication node, wire-compatible with MirrorMaker 2")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr. For `run` also FERRY_LOG_FORMAT or `log_format` in the settings file;
    /// default: text.
    #[arg(long, value_enum, global = true)]
    log_format: Option<LogFormat>,
}

#[derive(Subcommand)]
enum Command {
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
        #[arg(long, value_name = "DIR", default_value = ferry::import_mm2::DEFAULT_SECRETS_DIR)]
        secrets_dir: PathBuf,
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
struct NodeArgs {
    /// The node's HTTP listener.
    #[arg(long, default_value = "http://127.0.0.1:9464")]
    url: String,
    /// PEM CA certificate(s) to verify an https:// node with.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Do not verify an https:// node's certificate.
    #[arg(long)]
    insecure: bool,
}

/// A node's listener and the authority its mutating endpoints need.
#[derive(Args)]
struct AdminArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// File holding the node's admin token (its --admin-token-file), sent as a bearer token. Needed
    /// when the node has one.
    #[arg(long, env = "FERRY_ADMIN_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Seconds to wait for the node's answer (a reload stops and starts flows first).
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
}

impl NodeArgs {
    fn client(self, token_file: Option<PathBuf>, timeout: f64) -> client::Node {
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
    fn client(self) -> client::Node {
        self.node.client(self.token_file, self.timeout)
    }
}

/// A flow id as the node's endpoints check it (aliases of letters, digits, `_` and `-`).
fn parse_flow(raw: &str) -> Result<config::FlowId, String> {
    ferry::http::flow_id(raw)
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,librdkafka=warn,rdkafka=warn"));
    // Colours only for a terminal: a log file or a log collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    // The filter applies to what is printed only: librdkafka's connection errors always reach
    // `ClientCauses`, whatever RUST_LOG says.
    tracing_subscriber::registry().with(fmt.with_filter(filter)).with(ClientCauses).init();
    // rdkafka logs through the `log` crate, with trace records on every poll and delivery; bridged to
    // tracing at every level they cost about 6 % of the copier's CPU (bench/profile-*.md). Only its
    // warnings and errors are wanted, unless RUST_LOG asks for more.
    if std::env::var_os("RUST_LOG").is_none() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

/// Hands librdkafka's warnings and errors (logged through the `log` crate by rdkafka's default client
/// context) to [`ferry::kafka::note_client_log`], so that a failed Kafka operation can name why its
/// cluster did not answer (a wrong password, an untrusted certificate) instead of only "timed out".
struct ClientCauses;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ClientCauses {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() > tracing::Level::WARN {
            return;
        }
        #[derive(Default)]
        struct Fields {
            message: String,
            target: String,
        }
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.message = format!("{value:?}"),
                    "log.target" => self.target = format!("{value:?}"),
                    _ => {}
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                match field.name() {
                    "message" => self.message = value.to_string(),
                    "log.target" => self.target = value.to_string(),
                    _ => {}
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.target.contains("rdkafka") || event.metadata().target().contains("rdkafka") {
            ferry::kafka::note_client_log(&fields.message);
        }
    }
}

/// Exit code of `ferry pause` and `resume` when the node accepted but has not completed the request (202).
const EXIT_INCOMPLETE: u8 = 3;

fn main() -> ExitCode {
    // Before any thread: the Kerberos library's default ticket cache is this process's own collection.
    let _tickets = ferry::kerberos::init_process();
    let cli = Cli::parse();
    // Test builds only: read FAILPOINTS (see src/failpoints.rs).
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Validate { flows, output } => validate(&flows, output),
        Command::Check { flows, flow, deployment, output } => check(&flows, flow.as_ref(), &deployment, output),
        Command::Translate { flows, flow, group, groups, all_groups, apply, max_age, output } => {
            let set = match config::load_dir(&flows) {
                Ok(set) => set,
                Err(errors) => {
                    eprint!("{errors}");
                    return ExitCode::from(2);
                }
            };
            let Some(plan) = set.flows.get(&flow) else {
                eprintln!("no flow {flow} in {}", flows.display());
                return ExitCode::from(2);
            };
            use ferry::translate::select::Selection;
            let selection = match (group, groups) {
                (Some(g), _) => Selection::One(g),
                (None, Some(re)) => match Selection::matching(&re) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("ferry translate: {e}");
                        return ExitCode::from(2);
                    }
                },
                (None, None) => {
                    debug_assert!(all_groups, "clap requires one of --group, --groups, --all-groups");
                    Selection::All
                }
            };
            let max_age = max_age
                .unwrap_or_else(|| ferry::translate::select::default_max_age(plan.settings.emit_checkpoints_interval));
            translate(plan, &selection, max_age, apply, output)
        }
        Command::Health { url, ca, insecure, timeout } => {
            let timeout = Duration::from_secs_f64(timeout.clamp(0.1, 3600.0));
            match ferry::http::probe(&url, ca.as_deref(), insecure, timeout) {
                Ok(200) => {
                    println!("ferry health: {url}: 200 OK");
                    ExitCode::SUCCESS
                }
                Ok(code) => {
                    eprintln!("ferry health: {url}: HTTP {code}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("ferry health: {url}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Status { node, output, watch, interval } => {
            let node = node.client(None, 10.0);
            if watch {
                watch_status(&node, output, Duration::from_secs_f64(interval.clamp(0.1, 3600.0)))
            } else {
                match status_frame(&node, output, false) {
                    Ok(text) => {
                        print!("{text}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("ferry status: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
        }
        Command::Pause { flow, admin } => set_paused(&admin.client(), &flow, true),
        Command::Resume { flow, admin } => set_paused(&admin.client(), &flow, false),
        Command::Reload { dry_run, admin, output } => match admin.client().reload(dry_run) {
            Ok(answer) => {
                match output {
                    Output::Json => print!("{}", cli::pretty(&answer.body)),
                    Output::Table => print!("{}", cli::reload::render(&answer.body)),
                }
                if cli::reload::succeeded(&answer.body) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
            }
            Err(e) => {
                eprintln!("ferry reload: {e}");
                ExitCode::FAILURE
            }
        },
        Command::ImportMm2 { file, out, force, secrets_dir, output } => {
            let opts = ferry::import_mm2::Options { file, out, force, secrets_dir };
            match ferry::import_mm2::import(&opts) {
                Ok(report) if output == Output::Json => write_stdout(cli::pretty(&report).as_bytes()),
                Ok(report) => write_stdout(report.table().as_bytes()),
                Err(errors) => {
                    errors.iter().for_each(|e| eprintln!("ferry import-mm2: {e}"));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Completions { shell } => {
            // Into a buffer first: clap_complete panics on a write error, e.g. a closed pipe.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "ferry", &mut script);
            write_stdout(&script)
        }
        Command::Man { dir: Some(dir) } => {
            match std::fs::create_dir_all(&dir).and_then(|()| clap_mangen::generate_to(Cli::command(), &dir)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ferry man: {}: {e}", dir.display());
                    ExitCode::FAILURE
                }
            }
        }
        Command::Man { dir: None } => {
            let mut page = Vec::new();
            match clap_mangen::Man::new(Cli::command()).render(&mut page) {
                Ok(()) => write_stdout(&page),
                Err(e) => {
                    eprintln!("ferry man: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run {
            config,
            print_settings,
            flows,
            listen,
            shutdown_timeout,
            admin_token_file,
            tls_cert,
            tls_key,
            node_id,
            deployment,
            reload,
        } => {
            let flags = settings::Flags {
                flows,
                listen,
                node_id,
                deployment,
                shutdown_timeout,
                log_format: cli.log_format,
                admin_token_file,
                tls_cert,
                tls_key,
                reload,
            };
            let node = match settings::load(config.as_deref(), &flags) {
                Ok(node) => node,
                Err(errors) => {
                    eprint!("{errors}");
                    return ExitCode::from(2);
                }
            };
            let node_id = node.node_id.clone().unwrap_or_else(ferry::node::default_node_id);
            if print_settings {
                print!("{}", node.to_toml(&node_id));
                return ExitCode::SUCCESS;
            }
            init_logging(node.log_format);
            tracing::info!(
                flows = %node.flows.display(),
                listen = %node.listen,
                node_id,
                deployment = node.deployment,
                shutdown_timeout_s = node.shutdown_timeout.as_secs_f64(),
                reload = ?node.reload,
                admin_token_file = node.admin_token_file.as_ref().map(|p| p.display().to_string()),
                tls = node.tls.is_some(),
                from = node.sources(),
                "node settings"
            );
            let set = match config::load_dir(&node.flows) {
                Ok(set) => set,
                Err(errors) => {
                    eprint!("{errors}");
                    return ExitCode::from(2);
                }
            };
            match run(node, node_id, set) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "ferry stopped with an error");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `bytes` to stdout; a reader that went away (`| head`) is no failure.
fn write_stdout(bytes: &[u8]) -> ExitCode {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferry: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

fn validate(flows: &std::path::Path, output: Output) -> ExitCode {
    match (config::load_dir(flows), output) {
        (Ok(set), Output::Table) => {
            print!("{}", set.describe());
            println!("{}: {} cluster(s), {} flow(s): valid", flows.display(), set.clusters.len(), set.flows.len());
            ExitCode::SUCCESS
        }
        (Ok(set), Output::Json) => {
            print!("{}", cli::pretty(&cli::validate::set_json(flows, &set)));
            ExitCode::SUCCESS
        }
        (Err(errors), Output::Table) => {
            eprint!("{errors}");
            ExitCode::from(2)
        }
        (Err(errors), Output::Json) => {
            // The document on stdout for the script, the errors on stderr for whoever reads its log.
            print!("{}", cli::pretty(&cli::validate::errors_json(flows, &errors)));
            eprint!("{errors}");
            ExitCode::from(2)
        }
    }
}

/// `ferry check`: 0 when nothing would fail, 1 when something would, 2 for an invalid directory or flow.
fn check(flows: &std::path::Path, flow: Option<&config::FlowId>, deployment: &str, output: Output) -> ExitCode {
    let set = match config::load_dir(flows) {
        Ok(set) => set,
        Err(errors) => {
            eprint!("{errors}");
            return ExitCode::from(2);
        }
    };
    let report = match ferry::check::run(&set, deployment, flow) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ferry check: {e} ({})", flows.display());
            return ExitCode::from(2);
        }
    };
    match output {
        Output::Table => print!("{}", cli::check::render(&report)),
        Output::Json => print!("{}", cli::pretty(&cli::check::report_json(&report))),
    }
    if report.problems().is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// `ferry pause` / `ferry resume`: 0 when done, [`EXIT_INCOMPLETE`] when accepted but not complete.
fn set_paused(node: &client::Node, flow: &config::FlowId, paused: bool) -> ExitCode {
    let verb = if paused { "pause" } else { "resume" };
    match node.set_paused(flow, paused) {
        Ok(answer) if answer.complete => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Ok(answer) => {
            println!("{answer}");
            ExitCode::from(EXIT_INCOMPLETE)
        }
        Err(e) => {
            eprintln!("ferry {verb}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One `ferry status` output: the table, or one JSON document (`compact`: on one line).
fn status_frame(node: &client::Node, output: Output, compact: bool) -> Result<String, client::NodeError> {
    let flows = node.flows()?;
    let view = cli::status::StatusView::of_flows(&node.url, &flows, std::time::SystemTime::now());
    Ok(match output {
        Output::Table => view.table(),
        Output::Json if compact => format!("{}\n", serde_json::to_string(&view).unwrap_or_default()),
        Output::Json => cli::pretty(&view),
    })
}

/// `ferry status --watch`: a frame every `interval` until interrupted. On a terminal each frame
/// replaces the last; otherwise (a pipe, a file) frames follow each other, JSON ones one per line.
fn watch_status(node: &client::Node, output: Output, interval: Duration) -> ExitCode {
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    loop {
        let at = ferry::status::rfc3339(std::time::SystemTime::now());
        let frame = match (status_frame(node, output, true), output) {
            (Ok(text), Output::Json) => text,
            (Ok(text), Output::Table) => format!("{} at {at}, every {interval:?} (Ctrl-C to stop)\n{text}", node.url),
            (Err(e), Output::Json) => {
                format!("{}\n", serde_json::json!({ "url": node.url, "at": at, "error": e.to_string() }))
            }
            (Err(e), Output::Table) => format!("{} at {at}: {e}\n", node.url),
        };
        let clear = if terminal && output == Output::Table { "\x1b[H\x1b[2J" } else { "" };
        let separator = if !terminal && output == Output::Table { "\n" } else { "" };
        let mut out = std::io::stdout().lock();
        // A closed pipe (`ferry status --watch | head`) ends the watch.
        if std::io::Write::write_all(&mut out, format!("{clear}{frame}{separator}").as_bytes())
            .and_then(|()| std::io::Write::flush(&mut out))
            .is_err()
        {
            return ExitCode::SUCCESS;
        }
        drop(out);
        std::thread::sleep(interval);
    }
}

/// Exit code of `ferry translate --apply` when it refused a group (and applied the others).
const EXIT_REFUSED: u8 = 3;

fn parse_max_age(s: &str) -> Result<Duration, String> {
    ferry::translate::select::parse_duration(s)
}

fn translate(
    plan: &config::FlowPlan,
    selection: &ferry::translate::select::Selection,
    max_age: Duration,
    apply: bool,
    output: Output,
) -> ExitCode {
    use ferry::translate as t;
    let report = match t::run(plan, selection, max_age, apply) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ferry translate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let target = &plan.target.alias;
    let one = matches!(selection, t::select::Selection::One(_));
    match output {
        Output::Table if one => {
            let g = &report.groups[0];
            print!("{}", t::render(&g.offsets, &g.current));
        }
        Output::Table => print!("{}", t::render_groups(&report)),
        Output::Json => {
            let flow = plan.id.to_string();
            let doc = if one {
                cli::translate::group_json(&flow, target, &report.groups[0])
            } else {
                cli::translate::report_json(&flow, target, &report, apply)
            };
            print!("{}", cli::pretty(&doc));
        }
    }
    let (mut refused, mut failed) = (0, 0);
    for g in &report.groups {
        if let Some(r) = &g.refused {
            refused += 1;
            let verb = if apply { "refused" } else { "--apply would refuse" };
            eprintln!("ferry translate: {verb} group `{}`: {r}", g.group);
        }
        if let Some(e) = &g.error {
            failed += 1;
            eprintln!("ferry translate: group `{}`: {e}", g.group);
        }
        if let (Some(n), Output::Table) = (g.committed, output) {
            println!("committed {n} offset(s) to group `{}` on `{target}`", g.group);
        }
    }
    if !one && output == Output::Table {
        let committed = report.groups.iter().filter(|g| g.committed.is_some()).count();
        let verb = if apply { "refused" } else { "would be refused" };
        println!("{} group(s): {committed} committed, {refused} {verb}, {failed} failed", report.groups.len());
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else if apply && refused > 0 {
        ExitCode::from(EXIT_REFUSED)
    } else {
        ExitCode::SUCCESS
    }
}

fn run(node: settings::NodeSettings, node_id: String, set: config::FlowSet) -> anyhow::Result<()> {
    let settings::NodeSettings { flows, listen, deployment, shutdown_timeout, admin_token_file, tls, reload, .. } =
        node;
    let http = ferry::http::HttpOptions { listen, admin_token_file, tls };
    let auto_reload = reload == ReloadMode::Auto;
    let system = actix::System::new();
    system.block_on(async move {
        let status = StatusBoard::default();
        // A node that cannot serve its endpoints (unreadable token or TLS files) does not start copying.
        ferry::http::check(&http).context("cannot serve HTTP")?;
        let node = Node::new(flows, set, status.clone(), shutdown_timeout)
            .with_node_id(&node_id)
            .with_deployment(&deployment)
            .with_auto_reload(auto_reload)
            .start();
        let server =
            ferry::http::serve(&http, status, node.clone()).with_context(|| format!("cannot listen on {listen}"))?;
        let server_handle = server.handle();
        actix::spawn(server);
        let scheme = if http.tls.is_some() { "https" } else { "http" };
        tracing::info!(%listen, scheme, "serving /health, /flows, /metrics and POST /reload");
        if !listen.ip().is_loopback() {
            let mutating = if http.admin_token_file.is_some() {
                "mutating endpoints need the admin token"
            } else {
                "mutating endpoints (POST /reload) are refused: no --admin-token-file"
            };
            tracing::warn!(%listen, "the HTTP listener is reachable from other hosts; {mutating}");
        }

        wait_for_signal(&node).await?;
        tracing::info!(timeout_s = shutdown_timeout.as_secs_f64(), "stopping: draining flows");
        if let Err(e) = node.send(Shutdown { timeout: shutdown_timeout }).await {
            tracing::warn!(error = %e, "node did not answer the shutdown request");
        }
        server_handle.stop(true).await;
        tracing::info!("stopped");
        anyhow::Ok(())
    })
}

/// Waits for SIGTERM or SIGINT; SIGHUP reloads the flows directory meanwhile.
async fn wait_for_signal(node: &actix::Addr<Node>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("install SIGHUP handler")?;
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("received SIGTERM"); return Ok(()) }
            _ = int.recv() => { tracing::info!("received SIGINT"); return Ok(()) }
            _ = hup.recv() => {
                tracing::info!("received SIGHUP: reloading the flows directory");
                node.do_send(Reload { trigger: Trigger::Signal });
            }
        }
    }
}
