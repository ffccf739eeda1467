//! The node's and the commands' logging: text or JSON on stderr, filtered by RUST_LOG, and librdkafka's
//! own warnings kept aside so that a failed Kafka operation can say why its cluster did not answer.

use crate::settings::LogFormat;

/// Sets up logging for the process: once, before anything logs.
pub fn init_logging(format: LogFormat) {
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
/// context) to [`crate::kafka::note_client_log`], so that a failed Kafka operation can name why its
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
            crate::kafka::note_client_log(&fields.message);
        }
    }
}
