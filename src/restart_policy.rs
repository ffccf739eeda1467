//! When a failed actor is started again: exponential backoff with jitter, a restart budget, a reset
//! after a healthy period, and slow retries once the budget is spent (the flow is then reported failed,
//! but it never gives up). Pure: time and randomness are passed in.

use std::time::{Duration, Instant};

/// The knobs of the policy (from the flow file; defaults in [`RestartSettings::default`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestartSettings {
    /// Backoff before the first restart.
    pub initial: Duration,
    /// Backoff ceiling.
    pub max: Duration,
    /// Restarts allowed before the actor counts as failed (retried every `max` from then on).
    pub budget: u32,
    /// An actor that ran this long before failing starts a fresh budget.
    pub healthy_after: Duration,
}

impl Default for RestartSettings {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            budget: 10,
            healthy_after: Duration::from_secs(60),
        }
    }
}

/// What the supervisor should do about a failed actor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestartDecision {
    pub delay: Duration,
    /// 1 for the first restart after a healthy period.
    pub attempt: u32,
    /// The budget is spent: report the actor (and its flow) as failed while it keeps retrying slowly.
    pub exhausted: bool,
}

/// Restart bookkeeping of one actor.
#[derive(Clone, Debug, Default)]
pub struct RestartState {
    attempts: u32,
    started_at: Option<Instant>,
}

impl RestartState {
    pub fn started(&mut self, now: Instant) {
        self.started_at = Some(now);
    }

    /// The actor just failed at `now`; `jitter` in `[0, 1)` spreads restarts of many actors apart.
    pub fn failed(&mut self, settings: &RestartSettings, now: Instant, jitter: f64) -> RestartDecision {
        if self.started_at.is_some_and(|t| now.duration_since(t) >= settings.healthy_after) {
            self.attempts = 0;
        }
        self.attempts += 1;
        let exhausted = self.attempts > settings.budget;
        let exp = settings.initial.saturating_mul(1u32 << (self.attempts - 1).min(20));
        let base = if exhausted { settings.max } else { exp.min(settings.max) };
        // Equal jitter: half the delay fixed, half random, so restarts never come sooner than half the
        // backoff and many actors failing together do not come back in lockstep.
        let delay = base / 2 + base.mul_f64(jitter.clamp(0.0, 1.0) / 2.0);
        RestartDecision { delay, attempt: self.attempts, exhausted }
    }
}

/// A jitter value in `[0, 1)` from the standard library's random hasher keys.
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RestartSettings {
        RestartSettings {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(8),
            budget: 5,
            healthy_after: Duration::from_secs(60),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling_with_jitter_bounds() {
        let s = settings();
        let mut st = RestartState::default();
        let t = Instant::now();
        st.started(t);
        let lows: Vec<_> = (0..5).map(|_| st.failed(&s, t, 0.0).delay.as_millis()).collect();
        assert_eq!(lows, vec![500, 1000, 2000, 4000, 4000]);
        let mut st = RestartState::default();
        let highs: Vec<_> = (0..5).map(|_| st.failed(&s, t, 0.999_999).delay.as_millis()).collect();
        assert_eq!(highs, vec![999, 1999, 3999, 7999, 7999]);
    }

    #[test]
    fn budget_spent_means_failed_but_still_retrying_slowly() {
        let s = settings();
        let mut st = RestartState::default();
        let t = Instant::now();
        for i in 1..=5 {
            let d = st.failed(&s, t, 0.5);
            assert!(!d.exhausted, "attempt {i}");
        }
        let d = st.failed(&s, t, 0.0);
        assert!(d.exhausted);
        assert_eq!(d.attempt, 6);
        assert_eq!(d.delay, s.max / 2);
    }

    #[test]
    fn a_healthy_period_resets_the_budget() {
        let s = settings();
        let mut st = RestartState::default();
        let t = Instant::now();
        for _ in 0..7 {
            st.failed(&s, t, 0.0);
        }
        st.started(t);
        let d = st.failed(&s, t + Duration::from_secs(61), 0.0);
        assert_eq!((d.attempt, d.exhausted, d.delay), (1, false, Duration::from_millis(500)));
        st.started(t + Duration::from_secs(62));
        let d = st.failed(&s, t + Duration::from_secs(70), 0.0);
        assert_eq!(d.attempt, 2, "a short run does not reset");
    }

    #[test]
    fn jitter_is_in_range() {
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }
}
