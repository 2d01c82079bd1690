//! Key building costs: `enc`, `slot`, `bucket`, a full cluster key and a two-key script
//! request. Run with `cargo bench -p botmesh-redis-core --bench keys`; prints one line per case,
//! `keys <case> ns_per_op=<median> ...`.
//!
//! A plain timing loop (no benchmark framework): each case is calibrated to about 60 ms per
//! sample, then timed over five samples (about 0.3 s); the median is reported with the range.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark reads the clock; the core's ban on `Instant::now` is for the library.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use botmesh_redis_core::driver::store::messages;
use botmesh_redis_core::keys::{bucket, enc, slot};
use botmesh_redis_core::{Keyspace, Layout};
use bytes::Bytes;

const SAMPLES: usize = 5;
const SAMPLE_TIME: Duration = Duration::from_millis(60);

/// Times `iters` calls of `f`.
fn time(iters: u64, f: &mut impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed()
}

fn bench(case: &str, mut f: impl FnMut()) {
    // Calibrate: double the iteration count until one run takes a tenth of a sample.
    let mut iters: u64 = 1;
    loop {
        let took = time(iters, &mut f);
        if took >= SAMPLE_TIME / 10 {
            let per_iter = took.as_secs_f64() / iters as f64;
            iters = ((SAMPLE_TIME.as_secs_f64() / per_iter) as u64).max(1);
            break;
        }
        iters *= 2;
    }
    let mut ns: Vec<f64> = (0..SAMPLES)
        .map(|_| time(iters, &mut f).as_secs_f64() * 1e9 / iters as f64)
        .collect();
    ns.sort_by(f64::total_cmp);
    println!(
        "keys {case} ns_per_op={:.1} min={:.1} max={:.1} iters={iters}x{SAMPLES}",
        ns[SAMPLES / 2],
        ns[0],
        ns[SAMPLES - 1]
    );
}

fn main() {
    let typical = "5511999999999@s.whatsapp.net";
    let nasty = "a:b {x}*?[]%\\ é😀/#~ {meta}";
    let message = "3EB0C431C26A1D9B0A4F";
    let ks = Keyspace::new(Layout::Cluster, "bot").unwrap();
    let tagged = ks.message_item(typical, message).to_bytes();
    let payload = Bytes::from_static(&[b'x'; 256]);

    bench("enc_typical", || {
        black_box(enc(black_box(typical)));
    });
    bench("enc_nasty", || {
        black_box(enc(black_box(nasty)));
    });
    bench("slot_tagged_key", || {
        black_box(slot(black_box(&tagged)));
    });
    bench("bucket", || {
        black_box(bucket(black_box(typical)));
    });
    bench("cluster_message_item", || {
        black_box(ks.message_item(black_box(typical), black_box(message)));
    });
    bench("save_message_request", || {
        let plan = messages::save_message(
            &ks,
            black_box(typical),
            black_box(message),
            black_box(1_700_000_000_000),
            payload.clone(),
        );
        black_box(plan.unwrap());
    });
}
