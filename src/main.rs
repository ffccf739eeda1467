//! The `ferry` command: `run` a node, `validate` a flows directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use actix::Actor;
use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

use ferry::config;
use ferry::node::{Node, Shutdown};
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
        /// Address of the HTTP endpoint (/health, /flows, /metrics).
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: SocketAddr,
        /// Seconds a graceful stop (SIGTERM/SIGINT) may take before the node exits anyway.
        #[arg(long, default_value_t = 30.0)]
        shutdown_timeout: f64,
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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,librdkafka=warn,rdkafka=warn"));
    // Colours only for a terminal: a log file or a log collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
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
        Command::Run { flows, listen, shutdown_timeout } => {
            init_logging(cli.log_format);
            let set = match config::load_dir(&flows) {
                Ok(set) => set,
                Err(errors) => {
                    eprint!("{errors}");
                    return ExitCode::from(2);
                }
            };
            match run(set, listen, Duration::from_secs_f64(shutdown_timeout.max(0.0))) {
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

fn run(set: config::FlowSet, listen: SocketAddr, shutdown_timeout: Duration) -> anyhow::Result<()> {
    let system = actix::System::new();
    system.block_on(async move {
        let status = StatusBoard::default();
        let server =
            ferry::http::serve(listen, status.clone()).with_context(|| format!("cannot listen on {listen}"))?;
        let server_handle = server.handle();
        actix::spawn(server);
        tracing::info!(%listen, "serving /health, /flows and /metrics");
        let node = Node::new(set, status).start();

        wait_for_signal().await?;
        tracing::info!(timeout_s = shutdown_timeout.as_secs_f64(), "stopping: draining flows");
        if let Err(e) = node.send(Shutdown { timeout: shutdown_timeout }).await {
            tracing::warn!(error = %e, "node did not answer the shutdown request");
        }
        server_handle.stop(true).await;
        tracing::info!("stopped");
        anyhow::Ok(())
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM"),
        _ = int.recv() => tracing::info!("received SIGINT"),
    }
    Ok(())
}
