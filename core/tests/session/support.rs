//! What several session families share.

use botmesh_redis_core::testing::sim::Harness;

/// Three masters with one replica each: the simulated cluster most families start from.
pub(crate) fn cluster() -> Harness {
    Harness::cluster(3, 1)
}
