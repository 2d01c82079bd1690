//! What a reply means for routing: pure classification and backoff, written once for every
//! driver (the table in `docs/architecture.md`, "Retries, as implemented").

use std::time::Duration;

use crate::addr::NodeAddr;
use crate::error::{Error, ServerError};
use crate::topology::{parse_redirect, Redirect};

/// What to do with an error reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A final answer: hand it to the plan.
    Final,
    /// `MOVED`: patch the slot, resend to `addr`, refresh the topology soon.
    Moved {
        /// The slot.
        slot: u16,
        /// Its new owner.
        addr: NodeAddr,
    },
    /// `ASK`: send `ASKING` and the request to `addr`, once; the map stays.
    Ask {
        /// The importing node.
        addr: NodeAddr,
    },
    /// Back off and resend; the reply came before anything ran.
    Backoff {
        /// Whether the topology is probably stale (`CLUSTERDOWN`, `READONLY`, ...).
        refresh: bool,
    },
    /// `NOSCRIPT`: resend as `EVAL` with the source to the node that said it.
    NoScript,
}

/// Classifies an error reply by its leading code word only: texts differ between Redis 6.2,
/// 7.x and Valkey.
pub fn classify(err: &ServerError, fallback_host: &str) -> Decision {
    match err.code() {
        "MOVED" | "ASK" => match parse_redirect(err, fallback_host) {
            Some(Redirect::Moved { slot, addr }) => Decision::Moved { slot, addr },
            Some(Redirect::Ask { addr, .. }) => Decision::Ask { addr },
            // A redirect we cannot follow is an answer the caller must see.
            None => Decision::Final,
        },
        "TRYAGAIN" => Decision::Backoff { refresh: false },
        "CLUSTERDOWN" | "LOADING" | "MASTERDOWN" | "READONLY" => {
            Decision::Backoff { refresh: true }
        }
        "NOSCRIPT" => Decision::NoScript,
        // (Redis 6's `ERR Error running script ... -READONLY ...` of a write inside a script
        // on a demoted master has the code READONLY: see `ServerError::code`.)
        _ => Decision::Final,
    }
}

/// The error a [`Decision::Final`] reply ends its request with. A script the server stopped
/// part-way (a command it called refused as touching a "non local key": Redis 6.2 says `Lua
/// script attempted to access a non local key in a cluster node`, 7.0 and Valkey 8.1 `Script
/// attempted to ...`, Valkey 9.1 `Attempted to ...`) is no redirect and not safe to resend: it may have written part of its
/// work, so it is [`Error::ScriptStoppedPartWay`], whose outcome is unknown.
pub fn final_error(reply: ServerError) -> Error {
    if reply.code() == "ERR" && reply.text().contains("non local key in a cluster node") {
        Error::ScriptStoppedPartWay { reply }
    } else {
        Error::Server(reply)
    }
}

/// What an error reply to the connection handshake (`AUTH`, or `PING` without credentials)
/// means for the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// The credentials were refused: no request can succeed on this node until the
    /// configuration changes, so none is retried.
    Refused,
    /// The node is reachable but not serving yet (`LOADING` to a `PING`): the connection is
    /// usable, and requests back off on their own `LOADING` replies.
    Usable,
    /// Anything else (`max number of clients reached`, `BUSY`, `LOADING` to an `AUTH`, ...):
    /// a failed connect, retried with backoff.
    Failed,
}

/// Classifies an error reply to the handshake. Only the credential errors of every server
/// version mean [`Handshake::Refused`]: `WRONGPASS`, `NOAUTH` and `NOPERM` (Redis 6+ and
/// Valkey), and the `ERR` texts of servers older than 6 or without a password configured.
pub fn handshake(err: &ServerError, with_auth: bool) -> Handshake {
    let text = err.text();
    match err.code() {
        "WRONGPASS" | "NOAUTH" | "NOPERM" => Handshake::Refused,
        "ERR"
            if text.contains("invalid password")
                || text.contains("without any password configured")
                || text.contains("no password is set") =>
        {
            Handshake::Refused
        }
        "LOADING" if !with_auth => Handshake::Usable,
        _ => Handshake::Failed,
    }
}

/// How retryable replies and unreachable nodes are retried (`ClientOptions::cluster_retry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first send, before giving up (default 10).
    pub attempts: u32,
    /// The first delay (default 10 ms); each next one doubles.
    pub base: Duration,
    /// The longest delay (default 500 ms).
    pub cap: Duration,
}

impl Default for RetryPolicy {
    /// 10 attempts: 10, 20, 40, ... ms capped at 500 ms, about 2.6 s in total.
    fn default() -> Self {
        RetryPolicy {
            attempts: 10,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(500),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempt` (1-based), scaled by `jitter` in `[0.75, 1.25)` so
    /// that replicas retrying one failover do not retry in lockstep.
    /// A factor outside the range (or NaN) is clamped, and a delay too long to represent
    /// stays unjittered, so no policy makes this panic.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let doublings = attempt.saturating_sub(1).min(20);
        let raw = self.base.saturating_mul(1u32 << doublings).min(self.cap);
        let factor = if jitter.is_nan() {
            1.0
        } else {
            jitter.clamp(0.75, 1.25)
        };
        Duration::try_from_secs_f64(raw.as_secs_f64() * factor).unwrap_or(raw)
    }
}

/// What becomes of a request after a failed attempt that may be retried (a retryable reply, a
/// node that could not be reached, a failed topology round while it waits for a map).
#[derive(Clone, Debug, PartialEq)]
pub enum NextAttempt {
    /// Try again after this delay.
    After(Duration),
    /// Give up with this error.
    GiveUp(Error),
}

/// The one retry decision: `failed` is the number of failed attempts so far, this one included
/// (1 after the first). A `fatal` cause (refused credentials) gives up at once; past the
/// policy's attempts a server's retryable reply becomes [`Error::RetriesExhausted`] and any
/// other cause is handed on as it is; otherwise the request tries again after the policy's
/// delay for this attempt, scaled by `jitter` (see [`RetryPolicy::delay`]).
pub fn next_attempt(
    cause: Error,
    failed: u32,
    fatal: bool,
    policy: &RetryPolicy,
    jitter: f64,
) -> NextAttempt {
    if fatal {
        return NextAttempt::GiveUp(cause);
    }
    if failed > policy.attempts {
        return NextAttempt::GiveUp(match cause {
            Error::Server(last) => Error::RetriesExhausted {
                attempts: failed,
                last,
            },
            other => other,
        });
    }
    NextAttempt::After(policy.delay(failed, jitter))
}

/// A small seeded generator (SplitMix64) for jitter: the core draws no randomness of its own.
#[derive(Clone, Debug)]
pub struct Jitter(u64);

impl Jitter {
    /// Seeds the generator; the driver passes a random seed, tests a fixed one.
    pub fn new(seed: u64) -> Self {
        Jitter(seed)
    }

    /// The next factor in `[0.75, 1.25)`.
    pub fn next_factor(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 53 random bits as a fraction in [0, 1).
        0.75 + (z >> 11) as f64 / (1u64 << 53) as f64 * 0.5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The retry decision, row by row: cause, failed attempts, fatal, policy → next step.
    #[test]
    fn the_next_attempt_table() {
        let policy = RetryPolicy {
            attempts: 3,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(25),
        };
        let tryagain = || Error::Server(ServerError::new("TRYAGAIN slot moving"));
        let unreachable = || Error::Connect {
            addr: NodeAddr::new("h", 1),
            reason: "refused".into(),
        };
        let auth = || Error::Auth {
            addr: NodeAddr::new("h", 1),
            reason: "WRONGPASS".into(),
        };
        let ms = |n| NextAttempt::After(Duration::from_millis(n));
        let rows: Vec<(Error, u32, bool, NextAttempt)> = vec![
            (tryagain(), 1, false, ms(10)),
            (tryagain(), 2, false, ms(20)),
            // Capped.
            (tryagain(), 3, false, ms(25)),
            // Past the attempts: a server's reply becomes RetriesExhausted...
            (
                tryagain(),
                4,
                false,
                NextAttempt::GiveUp(Error::RetriesExhausted {
                    attempts: 4,
                    last: ServerError::new("TRYAGAIN slot moving"),
                }),
            ),
            // ...any other cause is handed on.
            (unreachable(), 1, false, ms(10)),
            (unreachable(), 4, false, NextAttempt::GiveUp(unreachable())),
            // Refused credentials end it at once.
            (auth(), 1, true, NextAttempt::GiveUp(auth())),
        ];
        for (cause, failed, fatal, want) in rows {
            let got = next_attempt(cause.clone(), failed, fatal, &policy, 1.0);
            assert_eq!(got, want, "{cause} after {failed} failed attempts");
        }
    }

    fn c(text: &str) -> Decision {
        classify(&ServerError::new(text), "h")
    }

    #[test]
    fn the_retry_table() {
        assert_eq!(
            c("MOVED 1 a:1"),
            Decision::Moved {
                slot: 1,
                addr: NodeAddr::new("a", 1)
            }
        );
        assert_eq!(
            c("ASK 1 :2"),
            Decision::Ask {
                addr: NodeAddr::new("h", 2)
            }
        );
        assert_eq!(
            c("TRYAGAIN Multiple keys request during rehashing of slot"),
            Decision::Backoff { refresh: false }
        );
        for code in [
            "CLUSTERDOWN The cluster is down",
            "LOADING x",
            "MASTERDOWN x",
            "READONLY x",
        ] {
            assert_eq!(c(code), Decision::Backoff { refresh: true }, "{code}");
        }
        assert_eq!(
            c("ERR Error running script (call to f_1): @user_script:1: -READONLY You can't write"),
            Decision::Backoff { refresh: true }
        );
        assert_eq!(c("NOSCRIPT No matching script"), Decision::NoScript);
        assert_eq!(c("ERR wrong number of arguments"), Decision::Final);
        assert_eq!(c("CROSSSLOT Keys in request"), Decision::Final);
        assert_eq!(c("MOVED nonsense"), Decision::Final);
        // A script stopped part-way on a migrating slot: final, and typed as such.
        for text in [
            "ERR Error running script (call to f_9f1c): @user_script:1: @user_script: 1: Lua \
             script attempted to access a non local key in a cluster node",
            "ERR Script attempted to access a non local key in a cluster node script: \
             9f1c0e, on @user_script:1.",
            "ERR Attempted to access a non local key in a cluster node script: on \
             @user_script:1.",
        ] {
            assert_eq!(c(text), Decision::Final, "{text}");
            let error = final_error(ServerError::new(text));
            assert_eq!(
                error,
                Error::ScriptStoppedPartWay {
                    reply: ServerError::new(text)
                }
            );
            assert!(error.outcome_unknown(), "{text}");
        }
        let other = final_error(ServerError::new("ERR wrong number of arguments"));
        assert_eq!(
            other,
            Error::Server(ServerError::new("ERR wrong number of arguments"))
        );
        assert!(!other.outcome_unknown());
    }

    #[test]
    fn a_redis_6_script_error_has_the_wrapped_code() {
        let wrapped = |inner: &str| {
            ServerError::new(format!(
                "ERR Error running script (call to f_67ed14c1): @user_script:1: \
                 @user_script: 1: -{inner}"
            ))
        };
        let noreplicas = wrapped("NOREPLICAS Not enough good replicas to write.");
        assert_eq!(noreplicas.code(), "NOREPLICAS");
        assert_eq!(classify(&noreplicas, "h"), Decision::Final);
        let readonly = wrapped("READONLY You can't write against a read only replica.");
        assert_eq!(readonly.code(), "READONLY");
        assert_eq!(
            classify(&readonly, "h"),
            Decision::Backoff { refresh: true }
        );
        // An error of the script itself, or any other ERR, keeps its code.
        let own = ServerError::new("ERR Error running script (call to f_1): @user_script:1: boom");
        assert_eq!(own.code(), "ERR");
        assert_eq!(
            ServerError::new("ERR wrong number of arguments").code(),
            "ERR"
        );
    }

    #[test]
    fn only_credential_errors_refuse_a_handshake() {
        let h = |text: &str, auth| handshake(&ServerError::new(text), auth);
        for text in [
            "WRONGPASS invalid username-password pair or user is disabled.",
            "NOAUTH Authentication required.",
            "NOPERM this user has no permissions to run the 'ping' command",
            "ERR invalid password",
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
            "ERR Client sent AUTH, but no password is set",
        ] {
            assert_eq!(h(text, true), Handshake::Refused, "{text}");
        }
        for text in [
            "ERR max number of clients reached",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            "LOADING Redis is loading the dataset in memory",
            "MASTERDOWN Link with MASTER is down",
            "ERR unknown command",
        ] {
            assert_eq!(h(text, true), Handshake::Failed, "{text}");
        }
        assert_eq!(h("LOADING loading", false), Handshake::Usable);
        assert_eq!(h("BUSY busy", false), Handshake::Failed);
    }

    #[test]
    fn default_backoff_totals_about_two_and_a_half_seconds() {
        let policy = RetryPolicy::default();
        let total: Duration = (1..=policy.attempts).map(|a| policy.delay(a, 1.0)).sum();
        assert_eq!(total, Duration::from_millis(2630));
        assert_eq!(policy.delay(1, 0.0), Duration::from_micros(7500));
        assert_eq!(policy.delay(30, 1.25), Duration::from_millis(625));
    }

    #[test]
    fn extreme_policies_do_not_panic() {
        let huge = RetryPolicy {
            attempts: u32::MAX,
            base: Duration::MAX,
            cap: Duration::MAX,
        };
        assert_eq!(huge.delay(u32::MAX, 1.25), Duration::MAX);
        assert_eq!(huge.delay(1, f64::NAN), Duration::MAX);
        let zero = RetryPolicy {
            attempts: 0,
            base: Duration::ZERO,
            cap: Duration::ZERO,
        };
        assert_eq!(zero.delay(1, 1.0), Duration::ZERO);
        assert_eq!(
            RetryPolicy::default().delay(1, f64::NAN),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn jitter_is_seeded_and_bounded() {
        let mut a = Jitter::new(7);
        let mut b = Jitter::new(7);
        for _ in 0..1000 {
            let x = a.next_factor();
            assert_eq!(x, b.next_factor());
            assert!((0.75..1.25).contains(&x));
        }
    }
}
