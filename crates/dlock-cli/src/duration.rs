//! Durations on the command line: the one grammar of URL options and the config file
//! (`lock_core::backend::parse_duration`: `500ms`, `30s`, `5m`, `1h 30m`), a unit always. A
//! bare number is refused with the fix (`--wait 3` used to mean seconds here and `?t=3`
//! milliseconds in a URL); `--wait 0` alone keeps its meaning: try once.

use std::time::Duration;

pub use dlock::backend::parse_duration;

/// `--wait`: a duration, or a bare `0` for one try without waiting.
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_grammar_with_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        let bare = parse_duration("3").expect_err("no unit");
        assert!(bare.contains("3ms or 3s"), "{bare}");
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        assert_eq!(parse_wait("0s"), Ok(Duration::ZERO));
        assert!(parse_wait("5").is_err());
    }
}
