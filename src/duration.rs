//! Duration strings as Kubernetes users write them (Go's `time.ParseDuration` syntax):
//! `90s`, `10m`, `1h30m`, `1.5h`, `500ms`.

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Parses a Go-style duration string. Negative durations are refused.
///
/// The arithmetic is exact, in integer nanoseconds (a fraction is cut below a nanosecond),
/// so what [`format`] prints parses back to the same duration, however large.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; use a value like 90s, 10m or 1h30m".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s;
    // In nanoseconds; `None` once past what a `Duration` holds (reported at the end, once
    // the whole text is known to be a duration).
    let mut total = Some(0u128);
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        let (whole, fraction) = num.split_once('.').unwrap_or((num, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(format!(
                "{text:?} is not a duration; use a value like 90s, 10m or 1h30m"
            ));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3600 * NANOS_PER_SEC,
            "" => {
                return Err(format!(
                    "{text:?} is missing a unit (ns, us, ms, s, m or h)"
                ));
            }
            other => {
                return Err(format!(
                    "{text:?} has an unknown unit {other:?}; use ns, us, ms, s, m or h"
                ));
            }
        };
        total = total.and_then(|t| t.checked_add(nanos(whole, fraction, unit_nanos)?));
        rest = next;
    }
    let out_of_range = || format!("{text:?} is out of range");
    let total = total.ok_or_else(out_of_range)?;
    let secs = u64::try_from(total / NANOS_PER_SEC).map_err(|_| out_of_range())?;
    let subsec = u32::try_from(total % NANOS_PER_SEC).map_err(|_| out_of_range())?;
    Ok(Duration::new(secs, subsec))
}

/// `whole.fraction` units of `unit` nanoseconds, in nanoseconds (rounded down); `None`
/// when that does not fit. Both parts hold ASCII digits only.
fn nanos(whole: &str, fraction: &str, unit: u128) -> Option<u128> {
    let mut value = 0u128;
    for d in digits(whole) {
        value = value.checked_mul(10)?.checked_add(d)?;
    }
    // floor(0.d1d2...dn * unit), exactly: from the last digit, each step divides by ten
    // what is carried (always below `unit`, so nothing overflows).
    let fraction_nanos = digits(fraction).rev().fold(0u128, |carry, d| {
        d.saturating_mul(unit).saturating_add(carry) / 10
    });
    value.checked_mul(unit)?.checked_add(fraction_nanos)
}

fn digits(s: &str) -> impl DoubleEndedIterator<Item = u128> + '_ {
    s.chars().filter_map(|c| c.to_digit(10)).map(u128::from)
}

/// Formats a duration the way `parse` reads it, for messages: `1h30m`, `45s`, `1.5s`.
pub fn format(d: Duration) -> String {
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let millis = d.subsec_millis();
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || millis > 0 || out.is_empty() {
        if millis > 0 {
            let frac = format!("{:03}", millis);
            out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
        } else {
            out.push_str(&format!("{s}s"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_durations() {
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_why() {
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("10").unwrap_err().contains("missing a unit"));
        assert!(parse("1d").unwrap_err().contains("unknown unit"));
        assert!(parse("-5s").unwrap_err().contains("not a duration"));
        assert!(parse("abc").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn formats_round_trip() {
        for s in ["1h30m", "45s", "1.5s", "0s", "2h", "1m1s"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }

    #[test]
    fn fractions_and_sums_are_exact() {
        assert_eq!(parse("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("5.s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("1.000000001s"), Ok(Duration::new(1, 1)));
        assert_eq!(parse("1.0000000019s"), Ok(Duration::new(1, 1)));
        assert_eq!(
            parse("0.999999999999999999999999999999h"),
            Ok(Duration::new(3599, 999_999_999))
        );
        assert_eq!(parse("1µs1us1ns"), Ok(Duration::from_nanos(2001)));
        assert_eq!(
            parse("0000000000000000000000000000000000000000001s"),
            Ok(Duration::from_secs(1))
        );
        assert!(parse("1.2.3s").unwrap_err().contains("not a duration"));
        assert!(parse(".s").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn the_largest_durations() {
        let max = Duration::new(u64::MAX, 999_999_999);
        assert_eq!(parse("18446744073709551615.999999999s"), Ok(max));
        assert_eq!(
            parse(&format(max)),
            Ok(Duration::new(u64::MAX, 999_000_000))
        );
        for too_large in [
            "18446744073709551616s",
            "1e9h",
            "99999999999999999999999999999999999999999h",
            "5124095576030432h",
        ] {
            let e = parse(too_large).unwrap_err();
            assert!(
                e.contains("out of range") || e.contains("unknown unit"),
                "{too_large}: {e}"
            );
        }
        assert!(
            parse("99999999999999999999999999999999999999999h")
                .unwrap_err()
                .contains("out of range")
        );
    }

    /// Found by fuzzing (fuzz/ duration_parse): summed in floating point, a large duration
    /// lost its milliseconds, so the text `format` printed for it parsed to another one.
    #[test]
    fn regression_large_values_round_trip_to_the_millisecond() {
        let d = parse("512490575603043µs5s").unwrap();
        assert_eq!(d, Duration::new(512_490_580, 603_043_000));
        assert_eq!(format(d), "142358h29m40.603s");
        assert_eq!(
            parse(&format(d)),
            Ok(Duration::new(512_490_580, 603_000_000))
        );
    }
}
