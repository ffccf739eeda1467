//! The `ferry` command: `run` a node, `validate` a flows directory, `translate` a group's offsets; talk to
//! a running node (`status`, `pause`, `resume`, `reload`, and `health`, the container's HEALTHCHECK);
//! `completions` and `man`, generated from the definitions below.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use actix::Actor;
use anyhow::Context as _;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use ferry::cli::{self, Output, client};
use ferry::config;
use ferry::node::{Node, Shutdown};
use ferry::reload::Reload;
use ferry::reload::Trigger;
use ferry::status::StatusBoard;

#[derive(Parser)]
#[command(name = "ferry", version, about = "A Kafka replication node, wire-compatible with MirrorMaker 2")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node: every flow defined in the flows directory.
    Run {
        /// Directory of `*.toml` flow files.
        #[arg(long)]
        flows: PathBuf,
        /// Address of the HTTP endpoint (/health, /flows, /metrics, POST /reload). Loopback by default;
        /// on any other address, mutating endpoints need --admin-token-file.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: SocketAddr,
        /// Seconds a graceful stop (SIGTERM/SIGINT) may take before the node exits anyway.
        #[arg(long, default_value_t = 30.0)]
        shutdown_timeout: f64,
        /// File holding the bearer token that mutating endpoints (POST /reload, ...) require; re-read
        /// on every such request. Reads stay open.
        #[arg(long)]
        admin_token_file: Option<PathBuf>,
        /// PEM certificate chain: serve HTTPS (with --tls-key).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// This node's id among the nodes sharing its flows (static membership in each flow's copier
        /// group): stable across restarts of the same node. Default: the host name.
        #[arg(long, env = "FERRY_NODE_ID")]
        node_id: Option<String>,
        /// The deployment: nodes that share flows use the same name; independent deployments on the same
        /// clusters use different ones (it prefixes the groups ferry uses).
        #[arg(long, env = "FERRY_DEPLOYMENT", default_value = "ferry")]
        deployment: String,
        /// When the flows directory is read again: `auto` on every change (watched, and rescanned every
        /// 30 s) and on SIGHUP or POST /reload; `manual` only on SIGHUP or POST /reload, so that an edit
        /// can be reviewed with `ferry reload --dry-run` before it applies.
        #[arg(long, value_enum, default_value_t = ReloadMode::Auto)]
        reload: ReloadMode,
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
    /// Print a consumer group's translated offsets on a flow's target (from its checkpoints); with
    /// --apply, commit them to the group on the target (refused while the group is active there).
    Translate {
        #[arg(long)]
        flows: PathBuf,
        /// The flow, as SOURCE->TARGET.
        #[arg(long)]
        flow: config::FlowId,
        #[arg(long)]
        group: String,
        #[arg(long)]
        apply: bool,
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

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReloadMode {
    Auto,
    Manual,
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
    let cli = Cli::parse();
    // Test builds only: read FAILPOINTS (see src/failpoints.rs).
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Validate { flows, output } => validate(&flows, output),
        Command::Translate { flows, flow, group, apply, output } => {
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
            match translate(plan, &group, apply, output) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ferry translate: {e}");
                    ExitCode::FAILURE
                }
            }
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
            init_logging(cli.log_format);
            let tls = tls_cert.zip(tls_key).map(|(cert, key)| ferry::http::TlsFiles { cert, key });
            let http = ferry::http::HttpOptions { listen, admin_token_file, tls };
            let set = match config::load_dir(&flows) {
                Ok(set) => set,
                Err(errors) => {
                    eprint!("{errors}");
                    return ExitCode::from(2);
                }
            };
            let node_id = node_id.filter(|n| !n.is_empty()).unwrap_or_else(ferry::node::default_node_id);
            let node = NodeSettings {
                shutdown_timeout: Duration::from_secs_f64(shutdown_timeout.max(0.0)),
                node_id,
                deployment,
                auto_reload: reload == ReloadMode::Auto,
            };
            match run(flows, set, http, node) {
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

fn translate(plan: &config::FlowPlan, group: &str, apply: bool, output: Output) -> Result<(), String> {
    use ferry::translate as t;
    let offsets = t::translated_offsets(plan, group)?;
    if offsets.is_empty() {
        return Err(format!("no checkpoints for group `{group}` on `{}` (flow {})", plan.target.alias, plan.id));
    }
    let current = t::current_offsets(plan, group)?;
    if output == Output::Table {
        print!("{}", t::render(&offsets, &current));
    }
    let committed = if apply { Some(t::apply(plan, group, &offsets)?) } else { None };
    match output {
        Output::Table => {
            if let Some(n) = committed {
                println!("committed {n} offset(s) to group `{group}` on `{}`", plan.target.alias);
            }
        }
        Output::Json => {
            let doc = cli::translate::offsets_json(
                &plan.id.to_string(),
                &plan.target.alias,
                group,
                &offsets,
                &current,
                committed,
            );
            print!("{}", cli::pretty(&doc));
        }
    }
    Ok(())
}

/// The node's own settings from `ferry run`'s flags.
struct NodeSettings {
    shutdown_timeout: Duration,
    node_id: String,
    deployment: String,
    auto_reload: bool,
}

fn run(flows: PathBuf, set: config::FlowSet, http: ferry::http::HttpOptions, node: NodeSettings) -> anyhow::Result<()> {
    let NodeSettings { shutdown_timeout, node_id, deployment, auto_reload } = node;
    let listen = http.listen;
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
