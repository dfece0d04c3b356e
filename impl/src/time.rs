//! Timestamps for people: RFC 3339 in UTC (informational fields and messages, never truth).

use std::time::SystemTime;

/// RFC 3339 UTC with milliseconds, e.g. `2025-12-19T18:01:02.123Z` (informational only). An
/// instant outside the supported range (years -9999..=9999) is clamped to the nearest end.
pub fn rfc3339_utc(at: SystemTime) -> String {
    let timestamp = jiff::Timestamp::try_from(at).unwrap_or_else(|_| {
        if at < SystemTime::UNIX_EPOCH {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        }
    });
    format!("{timestamp:.3}")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339_utc(at), "2023-11-14T22:13:20.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_utc(leap), "2000-02-29T00:00:00.000Z");
        let end = UNIX_EPOCH + Duration::from_secs(1_767_225_599); // 2025-12-31T23:59:59
        assert_eq!(rfc3339_utc(end), "2025-12-31T23:59:59.000Z");
    }
}
