//! Times to live as Redis takes them: whole milliseconds, never zero, and small enough for a
//! script's arithmetic.

use std::time::Duration;

use crate::error::{ConfigError, Error};

/// The longest time to live accepted: about 4,400 years. Longer ones would lose
/// precision in a script's arithmetic (Lua numbers are doubles).
pub const MAX_TTL: Duration = Duration::from_millis(1 << 47);

/// A time to live in whole milliseconds, rounded up: Redis refuses a zero TTL, so a
/// sub-millisecond one means one millisecond.
pub(crate) fn ttl_ms(ttl: Duration) -> Result<u64, Error> {
    if ttl > MAX_TTL {
        return Err(ConfigError::TtlTooLong { ttl, max: MAX_TTL }.into());
    }
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let rounded = if Duration::from_millis(ms) < ttl {
        ms + 1
    } else {
        ms
    };
    Ok(rounded.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_and_are_bounded() {
        assert_eq!(ttl_ms(Duration::ZERO).unwrap(), 1);
        assert_eq!(ttl_ms(Duration::from_micros(1)).unwrap(), 1);
        assert_eq!(ttl_ms(Duration::from_micros(1500)).unwrap(), 2);
        assert_eq!(ttl_ms(Duration::from_millis(300)).unwrap(), 300);
        assert_eq!(ttl_ms(MAX_TTL).unwrap(), 1 << 47);
        assert!(matches!(
            ttl_ms(Duration::MAX),
            Err(Error::Config(ConfigError::TtlTooLong { .. }))
        ));
    }
}
