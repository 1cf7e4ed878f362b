//! Duration strings as Kubernetes users write them (Go's `time.ParseDuration` syntax):
//! `90s`, `10m`, `1h30m`, `1.5h`, `500ms`.

use std::time::Duration;

/// Parses a Go-style duration string. Negative durations are refused.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; use a value like 90s, 10m or 1h30m".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        let number: f64 = num.parse().map_err(|_| {
            format!("{text:?} is not a duration; use a value like 90s, 10m or 1h30m")
        })?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
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
        total += number * seconds;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|_| format!("{text:?} is out of range"))
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
}
