//! Which groups `ferry translate` takes (`--group`, `--groups REGEX`, `--all-groups`), what it knows of
//! each from the checkpoints topic, and which of them `--apply` must refuse: a checkpoint too old to
//! trust, or a group with members on the target. Pure logic; the Kafka calls are in the parent module.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use regex::Regex;

use crate::mm2::records::Checkpoint;
use crate::translate::TranslatedOffsets;

/// The groups a run of `ferry translate` is about.
#[derive(Debug)]
pub enum Selection {
    /// `--group G`: exactly this group, whatever the flow's `groups` filter says.
    One(String),
    /// `--groups REGEX`: every checkpointed group whose whole name matches, among the flow's groups.
    Matching(Regex),
    /// `--all-groups`: every checkpointed group among the flow's groups.
    All,
}

impl Selection {
    /// `--groups REGEX`, anchored like the flow's `groups` patterns (the whole name must match).
    pub fn matching(pattern: &str) -> Result<Selection, String> {
        Regex::new(&format!("^(?:{pattern})$"))
            .map(Selection::Matching)
            .map_err(|e| format!("--groups `{pattern}` is not a valid regular expression: {e}"))
    }

    /// Whether `group` is selected; `flow_selects` says whether the flow's group filter admits it.
    pub fn picks(&self, group: &str, flow_selects: bool) -> bool {
        match self {
            Selection::One(g) => g == group,
            Selection::Matching(re) => flow_selects && re.is_match(group),
            Selection::All => flow_selects,
        }
    }
}

/// What the checkpoints topic says of one group.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct GroupCheckpoints {
    /// Downstream (topic, partition) → (offset, metadata): the last checkpoint of each partition.
    pub offsets: TranslatedOffsets,
    /// Downstream (topic, partition) → the group's upstream offset that checkpoint translated.
    pub upstream: BTreeMap<(String, i32), i64>,
    /// Record timestamp (ms since the epoch) of the group's newest checkpoint.
    pub newest_ms: i64,
}

/// The selected groups' checkpoints from the topic's records (checkpoint, record timestamp in ms), in
/// topic order: the last record of a (group, topic, partition) wins, as MM2's readers have it.
pub fn collect(
    records: impl IntoIterator<Item = (Checkpoint, i64)>,
    picks: impl Fn(&str) -> bool,
) -> BTreeMap<String, GroupCheckpoints> {
    let mut out: BTreeMap<String, GroupCheckpoints> = BTreeMap::new();
    for (cp, ts) in records {
        if !picks(&cp.group) {
            continue;
        }
        let g = out.entry(cp.group).or_default();
        let key = (cp.topic, cp.partition);
        g.upstream.insert(key.clone(), cp.upstream_offset);
        g.offsets.insert(key, (cp.downstream_offset, cp.metadata));
        g.newest_ms = g.newest_ms.max(ts);
    }
    out
}

/// What the source says about a group whose checkpoint is older than `--max-age`.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceView {
    /// The group's committed offsets on the source, by upstream (topic, partition).
    Committed(BTreeMap<(String, i32), i64>),
    /// The source could not be asked (gone, or refusing): nothing confirms the checkpoint.
    Unavailable(String),
}

/// Why `--apply` leaves a group alone.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The newest checkpoint is older than `--max-age` and the source does not confirm it.
    Stale { age: Duration, max_age: Duration, source: String, why: StaleWhy },
    /// The group has members (or is rebalancing) on the target.
    Active { state: String, members: usize, target: String },
}

#[derive(Debug, Clone, PartialEq)]
pub enum StaleWhy {
    /// The group committed other offsets on the source since: (upstream topic, partition,
    /// checkpointed, committed now).
    Moved(Vec<(String, i32, i64, Option<i64>)>),
    Unavailable(String),
}

impl Refusal {
    /// A short machine-readable kind for `-o json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Stale { .. } => "stale_checkpoint",
            Refusal::Active { .. } => "active_on_target",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Stale { age, max_age, source, why } => {
                write!(f, "its newest checkpoint is {} old (--max-age {}) and ", secs(*age), secs(*max_age))?;
                match why {
                    StaleWhy::Moved(moved) => {
                        let parts: Vec<String> = moved
                            .iter()
                            .take(3)
                            .map(|(t, p, cp, now)| {
                                let now = now.map_or("none".to_string(), |n| n.to_string());
                                format!("{t}-{p}: checkpointed {cp}, committed {now}")
                            })
                            .collect();
                        let more =
                            if moved.len() > 3 { format!(" and {} more", moved.len() - 3) } else { String::new() };
                        write!(
                            f,
                            "does not show the group's offsets on `{source}` ({}{more}): the flow may have stopped \
                             checkpointing (see `ferry status`); pass a larger --max-age to take it anyway",
                            parts.join(", ")
                        )
                    }
                    StaleWhy::Unavailable(e) => {
                        write!(f, "`{source}` cannot confirm it ({e}); pass a larger --max-age to take it anyway")
                    }
                }
            }
            Refusal::Active { state, members, target } => {
                write!(f, "group is {state} with {members} member(s) on `{target}`: stop its consumers first")
            }
        }
    }
}

/// `90s`, or `1.5s` when the duration has a fraction.
fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{:.1}s", d.as_secs_f64()) }
}

/// The bound `--max-age` takes by default: three checkpoint intervals of the flow, in whole seconds
/// (rounded up), so that one slow or missed round does not refuse a healthy flow's groups.
pub fn default_max_age(emit_checkpoints_interval: Duration) -> Duration {
    Duration::from_secs((emit_checkpoints_interval.as_secs_f64() * 3.0).ceil() as u64)
}

/// Whether a checkpoint `age` old is too old: past `max_age`, unless the source shows the group exactly
/// where the checkpoint translated it from (a group idle since its last commit is not re-checkpointed,
/// so its newest checkpoint ages while staying exact). `upstream` maps each checkpointed upstream
/// (topic, partition) to the upstream offset its checkpoint translated. `source` is asked only when
/// the age is past the bound.
pub fn stale(
    age: Duration,
    max_age: Duration,
    upstream: &BTreeMap<(String, i32), i64>,
    source_name: &str,
    source: impl FnOnce() -> SourceView,
) -> Option<Refusal> {
    if age <= max_age {
        return None;
    }
    let why = match source() {
        SourceView::Unavailable(e) => StaleWhy::Unavailable(e),
        SourceView::Committed(now) => {
            let moved: Vec<_> = upstream
                .iter()
                .filter(|(tp, cp)| now.get(*tp) != Some(*cp))
                .map(|((t, p), cp)| (t.clone(), *p, *cp, now.get(&(t.clone(), *p)).copied()))
                .collect();
            if moved.is_empty() {
                return None;
            }
            StaleWhy::Moved(moved)
        }
    };
    Some(Refusal::Stale { age, max_age, source: source_name.to_string(), why })
}

/// `--max-age`: `90`, `90s`, `500ms`, `5m`, `2h`, `1d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: f64 = number.parse().map_err(|_| format!("`{s}` is not a duration (e.g. 90s, 5m, 2h)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        other => return Err(format!("`{s}`: unknown unit `{other}` (ms, s, m, h, d)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(group: &str, topic: &str, partition: i32, up: i64, down: i64) -> Checkpoint {
        Checkpoint {
            group: group.into(),
            topic: topic.into(),
            partition,
            upstream_offset: up,
            downstream_offset: down,
            metadata: String::new(),
        }
    }

    #[test]
    fn selections_pick_what_they_name() {
        let one = Selection::One("billing".into());
        assert!(one.picks("billing", false), "--group ignores the flow's filter (as before)");
        assert!(!one.picks("billing-2", true));
        let re = Selection::matching("bill.*").expect("regex");
        assert!(re.picks("billing", true));
        assert!(!re.picks("billing", false), "--groups stays among the flow's groups");
        assert!(!re.picks("rebilling", true), "the whole name must match");
        assert!(Selection::All.picks("x", true) && !Selection::All.picks("x", false));
        let err = Selection::matching("(").expect_err("bad regex");
        assert!(err.contains("--groups `(`"), "{err}");
    }

    #[test]
    fn collect_keeps_the_last_checkpoint_per_partition_and_the_newest_timestamp() {
        let records = vec![
            (cp("a", "e.t", 0, 10, 9), 1_000),
            (cp("b", "e.t", 0, 5, 5), 1_500),
            (cp("a", "e.t", 0, 20, 19), 3_000),
            (cp("a", "e.t", 1, 7, 7), 2_000),
            (cp("skip", "e.t", 0, 1, 1), 9_000),
        ];
        let got = collect(records, |g| g != "skip");
        assert_eq!(got.keys().collect::<Vec<_>>(), ["a", "b"]);
        let a = &got["a"];
        assert_eq!(a.offsets[&("e.t".to_string(), 0)].0, 19);
        assert_eq!(a.upstream[&("e.t".to_string(), 0)], 20);
        assert_eq!(a.offsets.len(), 2);
        assert_eq!(a.newest_ms, 3_000);
        assert_eq!(got["b"].newest_ms, 1_500);
    }

    #[test]
    fn a_checkpoint_within_the_bound_is_fresh_without_asking_the_source() {
        let up = [(("t".to_string(), 0), 10)].into();
        let got = stale(Duration::from_secs(3), Duration::from_secs(3), &up, "east", || panic!("asked the source"));
        assert_eq!(got, None);
    }

    #[test]
    fn an_old_checkpoint_is_fresh_when_the_source_shows_the_group_where_it_was_checkpointed() {
        let up: BTreeMap<_, _> = [(("t".to_string(), 0), 10), (("t".to_string(), 1), 4)].into();
        let same = SourceView::Committed(up.clone());
        assert_eq!(stale(Duration::from_secs(60), Duration::from_secs(3), &up, "east", || same), None);
    }

    #[test]
    fn an_old_checkpoint_is_refused_when_the_group_moved_or_the_source_is_away() {
        let up: BTreeMap<_, _> = [(("t".to_string(), 0), 10), (("t".to_string(), 1), 4)].into();
        let moved = SourceView::Committed([(("t".to_string(), 0), 12), (("t".to_string(), 1), 4)].into());
        let got = stale(Duration::from_secs(60), Duration::from_secs(3), &up, "east", || moved).expect("refused");
        assert_eq!(got.kind(), "stale_checkpoint");
        let text = got.to_string();
        assert!(text.contains("60s old (--max-age 3s)"), "{text}");
        assert!(text.contains("does not show the group's offsets on `east`"), "{text}");
        assert!(text.contains("t-0: checkpointed 10, committed 12"), "{text}");
        assert!(!text.contains("t-1"), "{text}");
        let away = || SourceView::Unavailable("timed out".into());
        let got = stale(Duration::from_secs(60), Duration::from_secs(3), &up, "east", away).expect("refused");
        assert!(got.to_string().contains("`east` cannot confirm it (timed out)"), "{got}");
        // A partition the group no longer has offsets for has moved too.
        let gone = SourceView::Committed([(("t".to_string(), 0), 10)].into());
        let got = stale(Duration::from_secs(60), Duration::from_secs(3), &up, "east", || gone).expect("refused");
        assert!(got.to_string().contains("t-1: checkpointed 4, committed none"), "{got}");
    }

    #[test]
    fn active_refusal_names_state_members_and_what_to_do() {
        let r = Refusal::Active { state: "Stable".into(), members: 2, target: "west".into() };
        assert_eq!(r.to_string(), "group is Stable with 2 member(s) on `west`: stop its consumers first");
        assert_eq!(r.kind(), "active_on_target");
    }

    #[test]
    fn the_default_bound_is_three_intervals_rounded_up() {
        assert_eq!(default_max_age(Duration::from_secs(60)), Duration::from_secs(180));
        assert_eq!(default_max_age(Duration::from_secs(1)), Duration::from_secs(3));
        assert_eq!(default_max_age(Duration::from_millis(500)), Duration::from_secs(2));
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}
