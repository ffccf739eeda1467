//! Which subjects belong to a flow's topics, and what they are called on the target.
//!
//! The serializers name a subject after the record's topic (TopicNameStrategy: `<topic>-key`,
//! `<topic>-value`), after the topic and the record (TopicRecordNameStrategy: `<topic>-<record>`), or
//! after the record alone (RecordNameStrategy: `<record>`). The first two are renamed with their topic by
//! the flow's replication policy (`orders-value` from east becomes `east.orders-value` on the target
//! under the default policy); record-named subjects keep their names, as do the subjects a schema
//! references that belong to no copied topic.

/// The topic a subject is named after, when that topic is one `copied` accepts: the longest prefix
/// `t` such that the subject is `t-<rest>` with a non-empty rest. Returns the topic and the rest.
pub fn topic_of<'a>(subject: &'a str, copied: &dyn Fn(&str) -> bool) -> Option<(&'a str, &'a str)> {
    subject
        .match_indices('-')
        .rev()
        .map(|(i, _)| (&subject[..i], &subject[i + 1..]))
        .find(|(topic, rest)| !topic.is_empty() && !rest.is_empty() && copied(topic))
}

/// The subject's name on the target: a topic-named subject follows its topic's remote name.
pub fn renamed(subject: &str, copied: &dyn Fn(&str) -> bool, remote: &dyn Fn(&str) -> String) -> String {
    match topic_of(subject, copied) {
        Some((topic, rest)) => format!("{}-{rest}", remote(topic)),
        None => subject.to_string(),
    }
}

/// Of the subjects one schema ID is registered under, the one a record of `topic` was written with:
/// `<topic>-key` or `<topic>-value` as the record's part says, else one named after the topic and a
/// record, else a record-named one (no topic of the flow), else the first.
pub fn subject_for<'a>(
    subjects: &'a [(String, i32)],
    topic: &str,
    is_key: bool,
    copied: &dyn Fn(&str) -> bool,
) -> Option<&'a (String, i32)> {
    let part = if is_key { "key" } else { "value" };
    let exact = format!("{topic}-{part}");
    subjects
        .iter()
        .find(|(s, _)| *s == exact)
        .or_else(|| subjects.iter().find(|(s, _)| topic_of(s, copied).is_some_and(|(t, _)| t == topic)))
        .or_else(|| subjects.iter().find(|(s, _)| topic_of(s, copied).is_none()))
        .or_else(|| subjects.first())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copied(t: &str) -> bool {
        ["orders", "orders-eu", "pay.ments"].contains(&t)
    }

    fn remote(t: &str) -> String {
        format!("east.{t}")
    }

    #[test]
    fn topic_named_subjects_follow_their_topic() {
        assert_eq!(renamed("orders-value", &copied, &remote), "east.orders-value");
        assert_eq!(renamed("orders-key", &copied, &remote), "east.orders-key");
        // The longest copied topic wins: `orders-eu-value` is orders-eu's value, not orders' `eu-value`.
        assert_eq!(topic_of("orders-eu-value", &copied), Some(("orders-eu", "value")));
        assert_eq!(renamed("orders-eu-value", &copied, &remote), "east.orders-eu-value");
        // TopicRecordNameStrategy.
        assert_eq!(renamed("pay.ments-com.acme.Payment", &copied, &remote), "east.pay.ments-com.acme.Payment");
    }

    #[test]
    fn record_named_and_foreign_subjects_keep_their_names() {
        assert_eq!(renamed("com.acme.Money", &copied, &remote), "com.acme.Money");
        assert_eq!(renamed("invoices-value", &copied, &remote), "invoices-value");
        assert_eq!(renamed("-value", &copied, &remote), "-value");
        assert_eq!(renamed("orders-", &copied, &remote), "orders-");
    }

    #[test]
    fn the_records_own_subject_is_chosen() {
        let subjects = vec![
            ("com.acme.Order".to_string(), 1),
            ("orders-eu-value".to_string(), 3),
            ("orders-value".to_string(), 2),
            ("orders-key".to_string(), 1),
        ];
        let pick = |topic: &str, key: bool| subject_for(&subjects, topic, key, &copied).map(|(s, v)| (s.as_str(), *v));
        assert_eq!(pick("orders", false), Some(("orders-value", 2)));
        assert_eq!(pick("orders", true), Some(("orders-key", 1)));
        assert_eq!(pick("orders-eu", true), Some(("orders-eu-value", 3)));
        assert_eq!(pick("pay.ments", false), Some(("com.acme.Order", 1)));
        assert_eq!(subject_for(&[], "orders", false, &copied), None);
    }
}
