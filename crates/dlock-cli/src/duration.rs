//! Durations on the command line: the one grammar of URL options and the config file
//! (`lock_core::backend::parse_duration`: `500ms`, `30s`, `5m`, `1h 30m`), a unit always. A
//! bare number is refused with the fix (`--wait 3` used to mean seconds here and `?t=3`
//! milliseconds in a URL); `--wait 0` alone keeps its meaning: try once.

use std::fmt;
use std::time::Duration;

pub use dlock::backend::parse_duration;

/// `--wait` as typed: a bound, or none (`forever`, flock(1)'s and `etcdctl lock`'s default).
/// Messages repeat what was typed (`--wait 400d`), not the duration's debug form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// `None`: wait without a bound.
    pub bound: Option<Duration>,
    typed: String,
}

impl Wait {
    /// One try, without waiting.
    pub fn once(&self) -> bool {
        self.bound.is_some_and(|d| d.is_zero())
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.typed)
    }
}

/// `--wait`: a duration up to the library's bound (365 days), a bare `0` for one try without
/// waiting, or `forever` (also `inf`, `infinity`, `none`) for no bound.
pub fn parse_wait(s: &str) -> Result<Wait, String> {
    let typed = s.trim().to_owned();
    if ["forever", "inf", "infinity", "none"].iter().any(|w| typed.eq_ignore_ascii_case(w)) {
        return Ok(Wait { bound: None, typed: "forever".into() });
    }
    let bound = if typed == "0" { Duration::ZERO } else { parse_duration(&typed)? };
    dlock::validate_wait(bound)
        .map_err(|_| format!("{typed} is longer than 365 days; use `forever` for no bound"))?;
    Ok(Wait { bound: Some(bound), typed })
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
        assert_eq!(parse_wait("0").map(|w| w.bound), Ok(Some(Duration::ZERO)));
        assert!(parse_wait("0s").is_ok_and(|w| w.once()));
        assert!(parse_wait("5").is_err());
    }

    #[test]
    fn forever_and_what_was_typed() {
        for w in ["forever", "INF", "infinity", "none"] {
            assert_eq!(parse_wait(w).map(|w| w.bound), Ok(None), "{w}");
        }
        assert_eq!(parse_wait("2m").map(|w| w.to_string()), Ok("2m".to_owned()));
        let long = parse_wait("400d").expect_err("over the bound");
        assert!(long.contains("400d") && long.contains("forever"), "{long}");
    }
}
