//! `start_from`: where a partition with no stored progress starts. `"earliest"`, `"latest"`, or an
//! RFC 3339 time (`2026-12-01T08:00:00Z`, `2026-12-01T09:00:00.250+01:00`), read here without a date
//! crate: the format is small and fixed, and the arithmetic is Howard Hinnant's days-from-civil.

use super::StartFrom;

/// Parses a `start_from` value.
///
/// # Errors
///
/// A reason naming the expected forms, for anything else (a date without a time or an offset, an
/// impossible date, a time before 1970).
pub fn parse_start_from(value: &str) -> Result<StartFrom, String> {
    match value {
        "earliest" => Ok(StartFrom::Earliest),
        "latest" => Ok(StartFrom::Latest),
        _ => rfc3339_ms(value).map(StartFrom::Timestamp).ok_or_else(|| {
            format!(
                "`{value}` is not a start position; use \"earliest\", \"latest\" or an RFC 3339 time such as \
                 \"2026-12-01T08:00:00Z\""
            )
        }),
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 date-time, if `s` is one (at or after 1970).
fn rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut at = 19;
    let mut millis = 0;
    if sep(at, b".") {
        let start = at + 1;
        let mut end = start;
        while b.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        if end == start {
            return None;
        }
        // Only milliseconds matter to ListOffsets; further digits are truncated.
        let frac = &s[start..end];
        millis = format!("{:0<3}", &frac[..frac.len().min(3)]).parse::<i64>().ok()?;
        at = end;
    }
    let offset_minutes = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && sep(at + 3, b":") => {
            let (h, m) = (digits(at + 1, 2)?, digits(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            if *sign == b'+' { h * 60 + m } else { -(h * 60 + m) }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_minutes * 60;
    (seconds >= 0).then_some(seconds * 1000 + millis)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_and_times() {
        assert_eq!(parse_start_from("earliest"), Ok(StartFrom::Earliest));
        assert_eq!(parse_start_from("latest"), Ok(StartFrom::Latest));
        assert_eq!(parse_start_from("1970-01-01T00:00:00Z"), Ok(StartFrom::Timestamp(0)));
        // `date -u -d 2026-12-01T08:00:00Z +%s` = 1796112000
        assert_eq!(parse_start_from("2026-12-01T08:00:00Z"), Ok(StartFrom::Timestamp(1_796_112_000_000)));
        assert_eq!(parse_start_from("2026-12-01T09:00:00.25+01:00"), Ok(StartFrom::Timestamp(1_796_112_000_250)));
        assert_eq!(parse_start_from("2026-12-01 02:30:00.123456-05:30"), Ok(StartFrom::Timestamp(1_796_112_000_123)));
        assert_eq!(parse_start_from("2024-02-29T00:00:00Z"), Ok(StartFrom::Timestamp(1_709_164_800_000)));
    }

    #[test]
    fn anything_else_is_refused_with_the_forms() {
        for bad in [
            "",
            "Earliest",
            "2026-12-01",
            "2026-12-01T08:00:00",
            "2026-13-01T08:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T08:00:00.Z",
            "2026-12-01T08:00:00+0100",
            "1969-12-31T23:59:59Z",
            "2026-12-01T08:00:00Zjunk",
        ] {
            let err = parse_start_from(bad).unwrap_err();
            assert!(err.contains("RFC 3339") && err.contains(bad), "{bad}: {err}");
        }
    }
}
