//! The `ferry` commands besides `run`, as far as they are more than a call into the core: talking to a
//! running node ([`client`]: `pause`, `resume`, `reload`, `status`) and printing what they (and `check`)
//! found, as a table for people or as JSON for scripts (`-o json`: the same facts, from the same values).

pub mod args;
pub mod check;
pub mod client;
pub mod logging;
pub mod promote;
pub mod reload;
pub mod status;
pub mod translate;
pub mod validate;

/// `-o` / `--output` of the commands that print a result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Text for a terminal.
    #[default]
    Table,
    /// One JSON document (with `ferry status --watch`, one per line).
    Json,
}

/// `value` as pretty JSON with a final newline.
pub fn pretty(value: &impl serde::Serialize) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
