//! Naming templates: `remote_topic = "{topic}.{source}"`, `"dr-{topic}"`, `"{source}_{topic}_v2"`.
//!
//! A template is literal text around `{topic}` (exactly once) and `{source}` (at most once). It is
//! parsed into its literal parts so that a remote name can be read back by matching them: the
//! prefix and the suffix are anchored at the ends of the name, and the text between the two
//! placeholders is searched for from the side of `{source}`, so that a topic that already went
//! through the template (several hops) keeps the earlier hops in its topic part. Reading back is
//! exact as long as no cluster alias contains the text between the placeholders, which
//! `ferry validate` checks against the configured aliases (this module does not know them).
//!
//! What this module does not own: heartbeats and MM2's internal topics, which the policy keeps
//! under MM2's default names (see [`super::ReplicationPolicy::Template`]).

use std::fmt;

/// Which placeholders the template holds, in which order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// `dr-{topic}`: the name does not say where it came from.
    TopicOnly,
    /// `{source}_{topic}`.
    SourceFirst,
    /// `{topic}.{source}`.
    TopicFirst,
}

/// A parsed naming template. Equal templates have equal text, so comparing them compares plans.
#[derive(Clone, PartialEq, Eq)]
pub struct NameTemplate {
    text: String,
    /// Literal text before the first placeholder.
    prefix: String,
    /// Literal text between `{source}` and `{topic}`; empty (and unused) without `{source}`.
    between: String,
    /// Literal text after the last placeholder.
    suffix: String,
    order: Order,
}

/// Why a template cannot be used. The messages complete "remote_topic `…`: ".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("must contain {{topic}} exactly once")]
    Topic,
    #[error("may contain {{source}} at most once")]
    Source,
    #[error("unknown placeholder `{{{0}}}`; the placeholders are {{source}} and {{topic}}")]
    Placeholder(String),
    #[error("`{0}` cannot be part of a topic name (letters, digits, `.`, `_` and `-` only)")]
    Character(char),
    #[error(
        "{{source}} and {{topic}} need literal text between them, or a remote name could not be split back into the two"
    )]
    Adjacent,
    #[error("`{{topic}}` alone keeps topic names: use replication_policy = \"identity\" instead")]
    Identity,
}

impl NameTemplate {
    /// Parses `text`; see [`TemplateError`] for what is refused.
    ///
    /// # Errors
    ///
    /// The first problem found.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        // Literal runs between placeholders, and the placeholders in order.
        let mut literals = vec![String::new()];
        let mut placeholders = Vec::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if c == '{' {
                let end = rest.find('}').ok_or(TemplateError::Character('{'))?;
                let name = &rest[1..end];
                match name {
                    "topic" | "source" => placeholders.push(name),
                    _ => return Err(TemplateError::Placeholder(name.to_owned())),
                }
                literals.push(String::new());
                rest = &rest[end + 1..];
            } else if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                literals.last_mut().expect("never empty").push(c);
                rest = &rest[1..];
            } else {
                return Err(TemplateError::Character(c));
            }
        }
        let count = |p: &str| placeholders.iter().filter(|&&q| q == p).count();
        if count("topic") != 1 {
            return Err(TemplateError::Topic);
        }
        if count("source") > 1 {
            return Err(TemplateError::Source);
        }
        let order = match placeholders.as_slice() {
            ["topic"] => Order::TopicOnly,
            ["source", "topic"] => Order::SourceFirst,
            _ => Order::TopicFirst,
        };
        let suffix = literals.pop().expect("one literal per placeholder, plus one");
        let (prefix, between) = match literals.as_slice() {
            [prefix] => (prefix.clone(), String::new()),
            [prefix, between] => (prefix.clone(), between.clone()),
            _ => unreachable!("at most two placeholders"),
        };
        if order != Order::TopicOnly && between.is_empty() {
            return Err(TemplateError::Adjacent);
        }
        if order == Order::TopicOnly && prefix.is_empty() && suffix.is_empty() {
            return Err(TemplateError::Identity);
        }
        Ok(Self { text: text.to_owned(), prefix, between, suffix, order })
    }

    /// The template as written.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether remote names carry the source alias (`{source}` is in the template).
    #[must_use]
    pub fn has_source(&self) -> bool {
        self.order != Order::TopicOnly
    }

    /// The literal text between `{source}` and `{topic}` (empty without `{source}`): an alias
    /// containing it could not be read back.
    #[must_use]
    pub fn between(&self) -> &str {
        &self.between
    }

    /// The remote name of `topic` from cluster `source`.
    #[must_use]
    pub fn format(&self, source: &str, topic: &str) -> String {
        let (prefix, between, suffix) = (&self.prefix, &self.between, &self.suffix);
        match self.order {
            Order::TopicOnly => format!("{prefix}{topic}{suffix}"),
            Order::SourceFirst => format!("{prefix}{source}{between}{topic}{suffix}"),
            Order::TopicFirst => format!("{prefix}{topic}{between}{source}{suffix}"),
        }
    }

    /// `name` read back into (source alias, topic), `None` when the template cannot have produced
    /// it (a local topic). The source is `None` for a template without `{source}`.
    ///
    /// `{source}` ends at the first occurrence of the text between the placeholders when it comes
    /// first, and starts after the last one when it comes last: either way a topic that already
    /// carries earlier hops (`orders.east.west` = `orders.east` from `west`) is read as one topic.
    #[must_use]
    pub fn read<'a>(&self, name: &'a str) -> Option<(Option<&'a str>, &'a str)> {
        let rest = name.strip_prefix(self.prefix.as_str())?.strip_suffix(self.suffix.as_str())?;
        let (source, topic) = match self.order {
            Order::TopicOnly => return (!rest.is_empty()).then_some((None, rest)),
            Order::SourceFirst => {
                let at = rest.find(self.between.as_str())?;
                (&rest[..at], &rest[at + self.between.len()..])
            }
            Order::TopicFirst => {
                let at = rest.rfind(self.between.as_str())?;
                (&rest[at + self.between.len()..], &rest[..at])
            }
        };
        (!source.is_empty() && !topic.is_empty()).then_some((Some(source), topic))
    }
}

impl fmt::Debug for NameTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> NameTemplate {
        NameTemplate::parse(text).expect("valid template")
    }

    #[test]
    fn formats_the_issue_examples() {
        assert_eq!(t("{topic}.{source}").format("east", "orders"), "orders.east");
        assert_eq!(t("dr-{topic}").format("east", "orders"), "dr-orders");
        assert_eq!(t("{source}_{topic}_v2").format("east", "orders"), "east_orders_v2");
    }

    #[test]
    fn reads_remote_names_back() {
        let suffix = t("{topic}.{source}");
        assert_eq!(suffix.read("orders.east"), Some((Some("east"), "orders")));
        // Two hops: `orders.east` copied on from west.
        assert_eq!(suffix.read("orders.east.west"), Some((Some("west"), "orders.east")));
        assert_eq!(suffix.read("orders"), None);
        assert_eq!(suffix.read(".east"), None);
        assert_eq!(suffix.read("orders."), None);

        let v2 = t("{source}_{topic}_v2");
        assert_eq!(v2.read("east_orders_v2"), Some((Some("east"), "orders")));
        assert_eq!(v2.read("west_east_orders_v2_v2"), Some((Some("west"), "east_orders_v2")));
        assert_eq!(v2.read("east_my_orders_v2"), Some((Some("east"), "my_orders")));
        assert_eq!(v2.read("east_orders"), None);
        assert_eq!(v2.read("_v2"), None);

        let dr = t("dr-{topic}");
        assert_eq!(dr.read("dr-orders"), Some((None, "orders")));
        assert_eq!(dr.read("dr-dr-orders"), Some((None, "dr-orders")));
        assert_eq!(dr.read("dr-"), None);
        assert_eq!(dr.read("orders"), None);
    }

    #[test]
    fn read_inverts_format() {
        for text in ["{topic}.{source}", "{source}_{topic}_v2", "x-{source}--{topic}.y", "dr-{topic}", "{topic}-dr"] {
            let template = t(text);
            for topic in ["orders", "a.b", "a_b", "a-b", "a--b", "x-y.z"] {
                let name = template.format("east", topic);
                let source = template.has_source().then_some("east");
                assert_eq!(template.read(&name), Some((source, topic)), "{text} {topic}");
            }
        }
    }

    #[test]
    fn prefix_and_suffix_do_not_overlap() {
        let template = t("ab{topic}ba");
        assert_eq!(template.read("aba"), None);
        assert_eq!(template.read("abxba"), Some((None, "x")));
    }

    #[test]
    fn refuses_templates_that_cannot_be_read_back() {
        assert_eq!(NameTemplate::parse("{source}.orders"), Err(TemplateError::Topic));
        assert_eq!(NameTemplate::parse("{topic}.{topic}"), Err(TemplateError::Topic));
        assert_eq!(NameTemplate::parse("{source}.{topic}.{source}"), Err(TemplateError::Source));
        assert_eq!(NameTemplate::parse("{source}{topic}"), Err(TemplateError::Adjacent));
        assert_eq!(NameTemplate::parse("x{topic}{source}"), Err(TemplateError::Adjacent));
        assert_eq!(NameTemplate::parse("{topic}"), Err(TemplateError::Identity));
        assert_eq!(NameTemplate::parse("{cluster}.{topic}"), Err(TemplateError::Placeholder("cluster".into())));
        assert_eq!(NameTemplate::parse("{topic}/{source}"), Err(TemplateError::Character('/')));
        assert_eq!(NameTemplate::parse("{topic"), Err(TemplateError::Character('{')));
        assert_eq!(NameTemplate::parse("{topic}}"), Err(TemplateError::Character('}')));
        assert_eq!(
            NameTemplate::parse("{source}{topic}").unwrap_err().to_string(),
            "{source} and {topic} need literal text between them, or a remote name could not be split back into the two"
        );
    }

    #[test]
    fn parts() {
        let template = t("{source}_{topic}_v2");
        assert!(template.has_source());
        assert_eq!(template.between(), "_");
        assert_eq!(template.text(), "{source}_{topic}_v2");
        assert!(!t("dr-{topic}").has_source());
        assert_eq!(format!("{:?}", t("dr-{topic}")), "\"dr-{topic}\"");
    }
}
