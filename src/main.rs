//! The `ferry` command: `run` a node, `validate` a flows directory, `translate` a group's offsets, check a
//! node's `health` (the container's HEALTHCHECK).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use actix::Actor;
use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

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
    },
    /// Print a node's flows as a table: state, lag, records/s, last checkpoint.
    Status {
        /// The node's HTTP listener.
        #[arg(long, default_value = "http://127.0.0.1:9464")]
        url: String,
        /// PEM CA certificate(s) to verify an https:// node with.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Do not verify an https:// node's certificate.
        #[arg(long)]
        insecure: bool,
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
    },
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Test builds only: read FAILPOINTS (see src/failpoints.rs).
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Validate { flows } => match config::load_dir(&flows) {
            Ok(set) => {
                print!("{}", set.describe());
                println!("{}: {} cluster(s), {} flow(s): valid", flows.display(), set.clusters.len(), set.flows.len());
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprint!("{errors}");
                ExitCode::from(2)
            }
        },
        Command::Translate { flows, flow, group, apply } => {
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
            match translate(plan, &group, apply) {
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
        Command::Status { url, ca, insecure } => {
            let url = format!("{}/flows", url.trim_end_matches('/'));
            match ferry::http::get(&url, ca.as_deref(), insecure, Duration::from_secs(10)) {
                Ok((200, body)) => match serde_json::from_slice::<serde_json::Value>(&body) {
                    Ok(v) => {
                        print!("{}", ferry::status::render_table(&v));
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("ferry status: {url}: not JSON: {e}");
                        ExitCode::FAILURE
                    }
                },
                Ok((code, _)) => {
                    eprintln!("ferry status: {url}: HTTP {code}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("ferry status: {url}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run { flows, listen, shutdown_timeout, admin_token_file, tls_cert, tls_key, node_id, deployment } => {
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
            match run(flows, set, http, Duration::from_secs_f64(shutdown_timeout.max(0.0)), &node_id, &deployment) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "ferry stopped with an error");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn translate(plan: &config::FlowPlan, group: &str, apply: bool) -> Result<(), String> {
    use ferry::translate as t;
    let offsets = t::translated_offsets(plan, group)?;
    if offsets.is_empty() {
        return Err(format!("no checkpoints for group `{group}` on `{}` (flow {})", plan.target.alias, plan.id));
    }
    print!("{}", t::render(&offsets, &t::current_offsets(plan, group)?));
    if apply {
        let n = t::apply(plan, group, &offsets)?;
        println!("committed {n} offset(s) to group `{group}` on `{}`", plan.target.alias);
    }
    Ok(())
}

fn run(
    flows: PathBuf,
    set: config::FlowSet,
    http: ferry::http::HttpOptions,
    shutdown_timeout: Duration,
    node_id: &str,
    deployment: &str,
) -> anyhow::Result<()> {
    let listen = http.listen;
    let system = actix::System::new();
    system.block_on(async move {
        let status = StatusBoard::default();
        // A node that cannot serve its endpoints (unreadable token or TLS files) does not start copying.
        ferry::http::check(&http).context("cannot serve HTTP")?;
        let node = Node::new(flows, set, status.clone(), shutdown_timeout)
            .with_node_id(node_id)
            .with_deployment(deployment)
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
