//! `MPI_Wtime` and `MPI_Wtick`.
//!
//! `wtime` is elapsed seconds on the process's monotonic clock
//! ([`std::time::Instant`], `CLOCK_MONOTONIC` on Linux) since a fixed point
//! taken at the first call in the process. It is **not global**
//! ([`WTIME_IS_GLOBAL`](crate::attr::WTIME_IS_GLOBAL) is `false`): values
//! from different processes are not comparable, only differences within one
//! process are meaningful.

use std::sync::OnceLock;
use std::time::Instant;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `MPI_Wtime`: seconds since a fixed point in this process's past; never
/// decreases.
///
/// ```
/// let t0 = adi::wtime();
/// let t1 = adi::wtime();
/// assert!(t1 >= t0);
/// ```
pub fn wtime() -> f64 {
    epoch().elapsed().as_secs_f64()
}

/// `MPI_Wtick`: the resolution of [`wtime`] in seconds: 1 ns, the unit of
/// [`Instant`] (Linux reports a 1 ns resolution for `CLOCK_MONOTONIC` with
/// high-resolution timers; the value is a bound on the representation, not
/// a measured granularity).
pub fn wtick() -> f64 {
    1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wtime_is_monotonic_and_starts_near_zero() {
        let a = wtime();
        let b = wtime();
        assert!(a >= 0.0);
        assert!(b >= a);
        assert!(wtick() > 0.0 && wtick() <= 1e-6);
    }
}
