//! The exact proof: stream every rank's samples through a bitmap of `n` bits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Error;
use crate::partition::Partition;
use crate::pool::{self, CHUNK};
use crate::verdict::Verdict;

/// The first counter-example found, by global position.
#[derive(Default)]
struct FirstViolation(Mutex<Option<(u64, String)>>);

impl FirstViolation {
    fn record(&self, position: u64, message: impl FnOnce() -> String) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_none_or(|(p, _)| position < *p) {
            *slot = Some((position, message()));
        }
    }

    fn into_result(self) -> Result<(), Error> {
        match self.0.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some((_, message)) => Err(Error::Violation(message)),
            None => Ok(()),
        }
    }
}

/// Proves that the ranks of `part` yield every sample of `[start, n)`'s positions exactly
/// once, that padding only repeats samples some rank yields, and that nothing else is
/// missing than the declared dropped positions. Uses `n / 8` bytes and `threads` threads
/// (`0`: all cores). `progress` grows by the number of items checked.
pub fn verify(part: &Partition, threads: usize, progress: &AtomicU64) -> Result<Verdict, Error> {
    let n = part.n();
    let w = part.num_replicas();
    let per_rank = part.num_samples();
    let domain = part.order().domain(); // sample ids (beyond n with exclusions)
    let words = domain.div_ceil(64);
    let out_of_memory = Error::OutOfMemory {
        bytes: words as u128 * 8,
        what: "the proof's bitmap of n bits",
    };
    let words = usize::try_from(words).map_err(|_| out_of_memory.clone())?;
    let mut bitmap: Vec<AtomicU64> = Vec::new();
    bitmap.try_reserve_exact(words).map_err(|_| out_of_memory)?;
    bitmap.extend((0..words).map(|_| AtomicU64::new(0)));
    let chunks_per_rank = per_rank.div_ceil(CHUNK);
    let tasks = chunks_per_rank * w;
    let padding = AtomicU64::new(0);
    let first = FirstViolation::default();

    // Pass 1: every real position (p < n) sets its sample's bit; a bit already set is a
    // sample yielded twice.
    pool::run(
        threads,
        tasks,
        pool::buffers::<2>,
        |[samples, dealt], task| {
            let (rank, chunk) = (task % w, task / w);
            let lo = chunk * CHUNK;
            let len = CHUNK.min(per_rank - lo) as usize;
            let (items, positions) = (&mut samples[..len], &mut dealt[..len]);
            // The positions dealt once per chunk (not a division per item under step).
            part.fill_dealt(rank, lo, positions)?;
            items.copy_from_slice(positions);
            part.samples_of(items);
            let mut pad = 0;
            for (k, (&sample, &p)) in items.iter().zip(positions.iter()).enumerate() {
                let local = lo + k as u64;
                if p >= n {
                    pad += 1;
                    continue;
                }
                let bit = 1u64 << (sample % 64);
                let old = bitmap[(sample / 64) as usize].fetch_or(bit, Ordering::Relaxed);
                if old & bit != 0 {
                    first.record(p, || {
                        format!(
                            "sample {sample} is yielded twice: again by rank {rank} at \
                         local position {local} (global position {p})"
                        )
                    });
                }
            }
            padding.fetch_add(pad, Ordering::Relaxed);
            progress.fetch_add(len as u64, Ordering::Relaxed);
            Ok(())
        },
    )?;
    first.into_result()?;
    let is_set = |s: u64| bitmap[(s / 64) as usize].load(Ordering::Relaxed) & (1 << (s % 64)) != 0;

    // Pass 2: padding must repeat a sample of the epoch, yielded now or consumed before a
    // resume; dropped positions must stay unyielded.
    for p in n.max(part.start())..part.end() {
        let sample = part.sample_at(p);
        let consumed_before = p % n < part.start();
        if !consumed_before && !is_set(sample) {
            return Err(Error::Violation(format!(
                "padding at global position {p} repeats sample {sample}, which no rank yields"
            )));
        }
    }
    let outside = part.outside();
    for p in (0..outside.count()).map(|i| outside.position(i)) {
        let sample = part.sample_at(p);
        if is_set(sample) {
            return Err(Error::Violation(format!(
                "sample {sample} at global position {p} should not be yielded \
                 (consumed or dropped) but is"
            )));
        }
    }

    if let Some(&id) = part.order().excluded().iter().find(|&&id| is_set(id)) {
        return Err(Error::Violation(format!(
            "sample {id} is excluded but a rank yields it"
        )));
    }

    // Pass 3: count; anything unset beyond the declared drops is a missing sample.
    let covered: u64 = bitmap
        .iter()
        .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
        .sum();
    let dropped = outside.count();
    if covered + dropped != n {
        let excluded = part.order().excluded();
        let missing = (0..domain)
            .find(|&s| !is_set(s) && excluded.binary_search(&s).is_err())
            .unwrap_or(0);
        return Err(Error::Violation(format!(
            "{} samples are never yielded (first: sample {missing}); {dropped} were declared \
             dropped or consumed",
            n - covered
        )));
    }
    Ok(Verdict::of_pass(
        part,
        covered,
        padding.into_inner(),
        dropped,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Version;
    use crate::order::{Explicit, Identity, Order};
    use crate::permutation::Permutation;
    use std::sync::Arc;

    fn check(version: Version, n: u64, w: u64, start: u64, drop_last: bool) -> Verdict {
        let order = Arc::new(Permutation::new(version, n, 3, 1).unwrap()) as Order;
        let part = Partition::new(n, w, start, drop_last, order).unwrap();
        let progress = AtomicU64::new(0);
        let cert = verify(&part, 2, &progress).unwrap();
        assert_eq!(progress.into_inner(), part.total_size());
        cert
    }

    /// Brute force: every rank's items counted in a plain vector.
    fn brute_force(version: Version, n: u64, w: u64, drop_last: bool) -> (u64, u64, u64) {
        brute_force_from(version, n, w, 0, drop_last)
    }

    /// As `brute_force`, for the partition resumed at `start`: items at positions `>= n`
    /// are padding, samples of the positions consumed before `start` are dropped.
    fn brute_force_from(
        version: Version,
        n: u64,
        w: u64,
        start: u64,
        drop_last: bool,
    ) -> (u64, u64, u64) {
        let order = Arc::new(Permutation::new(version, n, 3, 1).unwrap()) as Order;
        let part = Partition::new(n, w, start, drop_last, order).unwrap();
        let mut count = vec![0u64; n as usize];
        let mut padding = 0;
        for r in 0..w {
            for local in 0..part.num_samples() {
                let p = part.position(r, local);
                if p >= n {
                    padding += 1;
                } else {
                    count[part.sample_at(p) as usize] += 1;
                }
            }
        }
        assert!(
            count.iter().all(|&c| c <= 1),
            "a sample dealt twice below n"
        );
        let covered = count.iter().filter(|&&c| c > 0).count() as u64;
        (covered, padding, n - covered)
    }

    #[test]
    fn agrees_with_brute_force() {
        for version in Version::ALL {
            for (n, w) in [
                (1, 1),
                (1, 8),
                (7, 8),
                (100, 3),
                (65_537, 8),
                (1 << 20, 4),
                ((1 << 20) + 1, 7),
            ] {
                for drop_last in [false, true] {
                    let cert = check(version, n, w, 0, drop_last);
                    assert_eq!(
                        (cert.covered, cert.padding, cert.dropped + cert.consumed),
                        brute_force(version, n, w, drop_last)
                    );
                }
            }
        }
    }

    fn explicit(order: &[u64], w: u64, drop_last: bool) -> Result<Verdict, Error> {
        let part = Partition::new(
            order.len() as u64,
            w,
            0,
            drop_last,
            Arc::new(Explicit::new(order).unwrap()),
        )?;
        verify(&part, 2, &AtomicU64::new(0))
    }

    #[test]
    fn a_bitmap_too_large_is_an_error_not_an_abort() {
        let part = Partition::new(
            u64::MAX,
            3,
            0,
            false,
            Arc::new(Identity::new(u64::MAX).unwrap()),
        )
        .unwrap();
        let err = verify(&part, 1, &AtomicU64::new(0)).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
        assert!(!err.is_violation());
    }

    #[test]
    fn counter_examples_are_reported() {
        // A valid explicit order passes, and agrees with the brute-force numbers.
        let cert = explicit(&[3, 0, 4, 1, 2], 2, false).unwrap();
        assert_eq!(
            (cert.covered, cert.padding, cert.dropped + cert.consumed),
            (5, 1, 0)
        );
        // Sample 2 twice (positions 1 and 3), sample 1 never.
        let err = explicit(&[0, 2, 3, 2, 4], 2, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("sample 2 is yielded twice"), "{err}");
        assert!(
            err.contains("rank 1 at local position 1 (global position 3)"),
            "{err}"
        );
        // With drop_last the second 2 sits at the dropped position 4, yet sample 2 is
        // yielded (position 1): the dropped positions are checked before the counts.
        let err = explicit(&[0, 2, 3, 4, 2], 2, true).unwrap_err().to_string();
        assert!(
            err.contains("sample 2 at global position 4 should not be yielded"),
            "{err}"
        );
        // The same order with sample 1 at the dropped position is exact.
        let cert = explicit(&[0, 2, 3, 4, 1], 2, true).unwrap();
        assert_eq!(
            (cert.covered, cert.padding, cert.dropped + cert.consumed),
            (4, 0, 1)
        );
        let err = explicit(&[0, 2, 2, 3, 4], 3, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("sample 2 is yielded twice"), "{err}");
    }

    #[test]
    fn resumed_partitions_are_proven_too() {
        for version in Version::ALL {
            for start in [0, 1, 50, 99, 100, 103] {
                for drop_last in [false, true] {
                    let cert = check(version, 100, 3, start, drop_last);
                    let (covered, padding, dropped) =
                        brute_force_from(version, 100, 3, start, drop_last);
                    assert_eq!(
                        (cert.covered, cert.padding, cert.dropped + cert.consumed),
                        (covered, padding, dropped),
                        "start {start}, drop_last {drop_last}"
                    );
                }
            }
            // By hand: resumed at 50 of 100 over 3 ranks, 17 items each: positions [50, 101),
            // one of them padding; the 50 consumed before are declared dropped.
            let cert = check(version, 100, 3, 50, false);
            assert_eq!(
                (cert.covered, cert.padding, cert.dropped + cert.consumed),
                (50, 1, 50)
            );
        }
    }
}
