//! The sweeps: the caller counts (`--callers`) and W1's payload sizes (`--payload`) a run
//! goes through, and what a setting of them prints.

/// Bytes of payload one W1 run of one client may write at most: the calls of a run are
/// scaled down past it (at 1 MB, 512 calls instead of 200,000), so that a run stays within
/// seconds and the servers' memory within half a gigabyte.
const W1_BYTES_PER_RUN: usize = 512 << 20;

/// W1's calls at `payload` bytes each: `calls`, or fewer when they would write more than
/// [`W1_BYTES_PER_RUN`] (16 at least). `--quick` takes a tenth of the result.
pub(crate) fn w1_calls(calls: usize, payload: usize) -> usize {
    calls.min((W1_BYTES_PER_RUN / payload.max(1)).max(16))
}

/// What a line is about beside its client: the workload and its setting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Setting {
    pub(crate) workload: &'static str,
    /// Concurrent callers; 0 for the open loop, where each call is its own task.
    pub(crate) callers: usize,
    /// W1's payload or W2's value size; none for W3 and the store's workloads.
    pub(crate) payload: Option<usize>,
    /// The servers' ceiling for this workload and payload, when measured.
    pub(crate) ceiling: Option<f64>,
}

impl Setting {
    /// A store workload's setting: the default callers, no sweep, no ceiling.
    pub(crate) fn store(workload: &'static str, payload: Option<usize>) -> Setting {
        Setting {
            workload,
            callers: crate::CALLERS,
            payload,
            ceiling: None,
        }
    }

    /// The fields every line of this setting ends with: `callers=64 payload=200`, and the
    /// share of the ceiling `ops_per_s` is, when there is a ceiling.
    pub(crate) fn fields(&self, ops_per_s: f64) -> String {
        let callers = match self.callers {
            0 => "open".to_owned(),
            n => n.to_string(),
        };
        let payload = self.payload.map_or("-".to_owned(), |p| p.to_string());
        let mut fields = format!("callers={callers} payload={payload}");
        if let Some(ceiling) = self.ceiling {
            fields.push_str(&format!(" ceiling_share={:.2}", ops_per_s / ceiling));
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_payloads_scale_the_calls_down() {
        assert_eq!(w1_calls(200_000, 200), 200_000);
        assert_eq!(w1_calls(200_000, 10_000), 53_687);
        assert_eq!(w1_calls(200_000, 1_000_000), 536);
        assert_eq!(w1_calls(200_000, 1 << 30), 16);
    }
}
