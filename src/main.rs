//! The `ferry` command: `run` a node, `validate` a flows directory, `check` it against its clusters,
//! `translate` groups' offsets; talk to a running node (`status`, `pause`, `resume`, `reload`, and
//! `health`, the container's HEALTHCHECK);
//! `completions` and `man`, generated from the command line's definition (`ferry::cli::args`).

use std::process::ExitCode;
use std::time::Duration;

use actix::Actor;
use anyhow::Context as _;
use clap::{CommandFactory, Parser};

use ferry::cli::args::{Cli, Command};
use ferry::cli::logging::init_logging;
use ferry::cli::{self, Output, client};
use ferry::config;
use ferry::kafka;
use ferry::node::{Node, Shutdown};
use ferry::reload::Reload;
use ferry::reload::Trigger;
use ferry::settings::{self, ReloadMode};
use ferry::status::StatusBoard;

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
        Command::Promote { flows, flow, topics, deployment } => promote(&flows, &flow, topics.as_deref(), &deployment),
        Command::Translate { flows, flow, group, groups, all_groups, apply, max_age, output } => {
            let set = match config::load_dir(&flows, kafka::check_client_properties) {
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
        Command::ImportMm2 { file, out, force, secrets_dir, policy_class, output } => {
            let opts = ferry::import_mm2::Options {
                file,
                out,
                force,
                secrets_dir,
                policy_classes: policy_class.into_iter().collect(),
            };
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
            let set = match config::load_dir(&node.flows, kafka::check_client_properties) {
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
    match (config::load_dir(flows, kafka::check_client_properties), output) {
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
    let set = match config::load_dir(flows, kafka::check_client_properties) {
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

/// `ferry promote`: 0 when promoted, 1 when not, 2 for a bad flows directory or flow.
fn promote(flows: &std::path::Path, flow: &config::FlowId, topics: Option<&str>, deployment: &str) -> ExitCode {
    let set = match config::load_dir(flows, kafka::check_client_properties) {
        Ok(set) => set,
        Err(errors) => {
            eprint!("{errors}");
            return ExitCode::from(2);
        }
    };
    let Some(plan) = set.flows.get(flow) else {
        eprintln!("no flow {flow} in {}", flows.display());
        return ExitCode::from(2);
    };
    match cli::promote::run(plan, deployment, topics, &ferry::node::default_node_id()) {
        Ok(report) => {
            print!("{}", cli::promote::render(&report));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferry promote: {e}");
            ExitCode::FAILURE
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

/// Exit code of `ferry translate --apply` when it refused a group (and applied the others).
const EXIT_REFUSED: u8 = 3;

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
        let drained = match node.send(Shutdown { timeout: shutdown_timeout }).await {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(error = %e, "node did not answer the shutdown request");
                false
            }
        };
        server_handle.stop(true).await;
        tracing::info!("stopped");
        if !drained {
            // A flow stuck on a cluster that does not answer holds clients and threads in calls that
            // end only with their own timeouts; tearing the runtime and the clients down would wait for
            // them. The deadline is the operator's: what did not stop by then is abandoned.
            tracing::warn!("exiting without waiting for the flows that did not stop");
            std::process::exit(0);
        }
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
