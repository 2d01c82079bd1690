//! Times to live as Redis takes them: whole milliseconds, at least one, and small enough for a
//! script's arithmetic. The one check every TTL, lease, window and timeout argument of the
//! store and coordination plans goes through, before anything is sent.

use std::time::Duration;

use crate::error::{ConfigError, Error};

/// The longest time to live accepted: about 4,400 years. Longer ones would lose
/// precision in a script's arithmetic (Lua numbers are doubles).
pub const MAX_TTL: Duration = Duration::from_millis(1 << 47);

/// The shortest time to live accepted: one millisecond, Redis's unit.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// A time to live in whole milliseconds, rounded up (1.5 ms is 2 ms).
///
/// Refuses, with [`ConfigError::DurationBelowOneMs`] naming `argument`, anything shorter than
/// [`MIN_TTL`]: zero makes no sense for a lock, a lease, a window or a TTL (Redis refuses a
/// zero `PX`, and rounding it up would grant a fence for a 1 ms lock nobody asked for), and a
/// sub-millisecond one is a unit mistake. Refuses more than [`MAX_TTL`] with
/// [`ConfigError::TtlTooLong`].
pub(crate) fn ttl_ms(ttl: Duration, argument: &'static str) -> Result<u64, Error> {
    if ttl < MIN_TTL {
        return Err(ConfigError::DurationBelowOneMs {
            argument,
            given: ttl,
        }
        .into());
    }
    if ttl > MAX_TTL {
        return Err(ConfigError::TtlTooLong { ttl, max: MAX_TTL }.into());
    }
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    Ok(if Duration::from_millis(ms) < ttl {
        ms + 1
    } else {
        ms
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_and_are_bounded() {
        assert_eq!(ttl_ms(Duration::from_millis(1), "ttl").unwrap(), 1);
        assert_eq!(ttl_ms(Duration::from_micros(1500), "ttl").unwrap(), 2);
        assert_eq!(ttl_ms(Duration::from_millis(300), "ttl").unwrap(), 300);
        assert_eq!(ttl_ms(MAX_TTL, "ttl").unwrap(), 1 << 47);
        assert!(matches!(
            ttl_ms(Duration::MAX, "ttl"),
            Err(Error::Config(ConfigError::TtlTooLong { .. }))
        ));
    }

    #[test]
    fn zero_and_sub_millisecond_ttls_are_refused_by_name() {
        for given in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(999),
        ] {
            assert_eq!(
                ttl_ms(given, "window"),
                Err(Error::Config(ConfigError::DurationBelowOneMs {
                    argument: "window",
                    given
                }))
            );
        }
    }
}
