//! Which subjects belong to a flow's topics, and what they are called on the target.
//!
//! The serializers name a subject after the record's topic (TopicNameStrategy: `<topic>-key`,
//! `<topic>-value`), after the topic and the record (TopicRecordNameStrategy: `<topic>-<record>`), or
//! after the record alone (RecordNameStrategy: `<record>`). The first two are renamed with their topic by
//! the flow's replication policy (`orders-value` from east becomes `east.orders-value` on the target
//! under the default policy); record-named subjects keep their names, as do the subjects a schema
//! references that belong to no copied topic.

/// The topic a subject is named after, when that topic is one `copied` accepts: the subject is
/// `<topic>-key`, `<topic>-value` or `<topic>-<record>`, and a record's name holds no `-` (Avro,
/// Protobuf and JSON Schema names cannot), so the topic is everything before the last `-`. A subject
/// of a topic the flow does not copy is not the flow's (`orders-dlq-value` is never `orders`'s).
pub fn topic_of<'a>(subject: &'a str, copied: &dyn Fn(&str) -> bool) -> Option<(&'a str, &'a str)> {
    subject.rsplit_once('-').filter(|(topic, rest)| !topic.is_empty() && !rest.is_empty() && copied(topic))
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
/// record (`<topic>-<record>`), else a record-named one (no `-`). `None` when the ID belongs to none of
/// these: the bytes only look framed (a binary key that starts with a zero byte) and are left alone.
pub fn subject_for<'a>(subjects: &'a [(String, i32)], topic: &str, is_key: bool) -> Option<&'a (String, i32)> {
    let part = if is_key { "key" } else { "value" };
    let exact = format!("{topic}-{part}");
    subjects
        .iter()
        .find(|(s, _)| *s == exact)
        .or_else(|| {
            subjects.iter().find(|(s, _)| {
                s.rsplit_once('-').is_some_and(|(t, rest)| t == topic && rest != "key" && rest != "value")
            })
        })
        .or_else(|| subjects.iter().find(|(s, _)| !s.contains('-')))
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
        // The topic is everything before the last `-`: `orders-eu-value` is orders-eu's value.
        assert_eq!(topic_of("orders-eu-value", &copied), Some(("orders-eu", "value")));
        assert_eq!(renamed("orders-eu-value", &copied, &remote), "east.orders-eu-value");
        // TopicRecordNameStrategy.
        assert_eq!(renamed("pay.ments-com.acme.Payment", &copied, &remote), "east.pay.ments-com.acme.Payment");
    }

    #[test]
    fn record_named_and_foreign_subjects_keep_their_names() {
        assert_eq!(renamed("com.acme.Money", &copied, &remote), "com.acme.Money");
        assert_eq!(renamed("invoices-value", &copied, &remote), "invoices-value");
        // A topic the flow does not copy is not claimed by a shorter one it does.
        assert_eq!(topic_of("orders-dlq-value", &copied), None);
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
        let pick = |topic: &str, key: bool| subject_for(&subjects, topic, key).map(|(s, v)| (s.as_str(), *v));
        assert_eq!(pick("orders", false), Some(("orders-value", 2)));
        assert_eq!(pick("orders", true), Some(("orders-key", 1)));
        assert_eq!(pick("orders-eu", false), Some(("orders-eu-value", 3)));
        // orders-eu has no key subject: its key's ID, registered as the record-named one, is that.
        assert_eq!(pick("orders-eu", true), Some(("com.acme.Order", 1)));
        assert_eq!(pick("pay.ments", false), Some(("com.acme.Order", 1)));
        // An ID registered only for other topics' parts is not this record's: its bytes only look framed.
        let others = vec![("invoices-value".to_string(), 1), ("orders-dlq-key".to_string(), 4)];
        assert_eq!(subject_for(&others, "orders", true), None);
        assert_eq!(subject_for(&others, "orders", false), None);
        assert_eq!(subject_for(&[], "orders", false), None);
    }
}
