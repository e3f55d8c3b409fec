//! The exact proof by the inverse, in O(1) memory at any `n`, split across the ranks.
//!
//! For a map `f` from a set `X` of `n` items into `[0, n)`: if some `g` has `g(f(x)) = x`
//! for every `x`, then `f` is injective, hence a bijection onto `[0, n)`. Every order has
//! an O(1) inverse. So each rank proves its own stream: for every item it yields, the
//! order's inverse of the sample must be the position the item is dealt from, and the
//! pass's [`Dealing`](crate::Dealing) must own that position at exactly this (rank, local
//! index) — so distinct items have distinct positions, whatever the dealing (round-robin,
//! step), and distinct samples. The positions outside the pass
//! (consumed before a resume, or dropped) are checked the same way, each rank a 1/W slice
//! of them. Together the checks cover `[0, n)`: every sample of the epoch is yielded once,
//! consumed before or dropped, and padding repeats the sample of its position mod `n`.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Error;
use crate::order::{Order, SampleOrder};
use crate::partition::Partition;
use crate::pool::{self, CHUNK};
use crate::verdict::Verdict;

/// Marks a failure at a position outside the pass (no rank, no local index).
pub const OUTSIDE: u64 = u64::MAX;

/// A counter-example: what was found where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The global position checked.
    pub position: u64,
    /// The rank whose stream holds it ([`OUTSIDE`] for a position outside the pass).
    pub rank: u64,
    /// Its local index in that stream ([`OUTSIDE`] outside the pass).
    pub local: u64,
    /// The sample found there.
    pub sample: u64,
    /// The position the order's inverse gives for that sample (`u64::MAX`: none).
    pub found: u64,
    /// Whether the dealing itself failed there.
    pub dealt: Dealt,
}

/// How the dealing stands at a failure: the item's position is its own, or the dealing
/// gives it to another item, or to none (outside the pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dealt {
    /// The dealing owns the position at exactly this (rank, local): the sample is wrong.
    Rightly,
    /// The dealing gives the position to this other `(rank, local)`: dealt twice.
    ToAnother(u64, u64),
    /// The position lies outside the pass: the dealing skips one of its own.
    OutsideThePass,
}

/// Words of a [`Failure`] in a fixed-size record (see [`Share::to_words`]).
const FAILURE_WORDS: usize = 8;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Failure {
            position,
            rank,
            local,
            sample,
            found,
            dealt,
        } = *self;
        let place = if rank == OUTSIDE {
            format!("position {position} (consumed before the pass, or dropped)")
        } else {
            format!("rank {rank} at local position {local} (global position {position})")
        };
        match dealt {
            Dealt::ToAnother(r, l) => write!(
                f,
                "{place} is dealt a position the dealing gives to rank {r} at local position \
                 {l}: a position dealt twice, and another never"
            ),
            Dealt::OutsideThePass => write!(
                f,
                "{place} is dealt a position outside the pass: the dealing skips a position"
            ),
            Dealt::Rightly if found == u64::MAX => write!(
                f,
                "{place} holds sample {sample}, which has no position in the order"
            ),
            Dealt::Rightly => write!(
                f,
                "{place} holds sample {sample}, but the order's inverse puts that sample at \
                 position {found}: a sample twice, or dealt from the wrong position"
            ),
        }
    }
}

impl Failure {
    /// The message of a proof whose first counter-example is this one, of `failures` in all.
    pub fn report(&self, failures: u64) -> String {
        format!("{self} ({failures} failures in all)")
    }

    fn to_words(self) -> [u64; FAILURE_WORDS] {
        let (kind, r, l) = match self.dealt {
            Dealt::Rightly => (0, 0, 0),
            Dealt::OutsideThePass => (1, 0, 0),
            Dealt::ToAnother(r, l) => (2, r, l),
        };
        [
            self.position,
            self.rank,
            self.local,
            self.sample,
            self.found,
            kind,
            r,
            l,
        ]
    }

    fn from_words(w: &[u64]) -> Result<Self, Error> {
        let dealt = match w[5] {
            0 => Dealt::Rightly,
            1 => Dealt::OutsideThePass,
            2 => Dealt::ToAnother(w[6], w[7]),
            k => {
                return Err(Error::Invalid(format!(
                    "a failure record of unknown kind {k}"
                )))
            }
        };
        Ok(Failure {
            position: w[0],
            rank: w[1],
            local: w[2],
            sample: w[3],
            found: w[4],
            dealt,
        })
    }
}

/// Items checked together within a task: three buffers of them fit in a core's L2.
const IN_CACHE: usize = 1 << 12;

/// What a proof of some ranks' streams checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// Items of the streams checked.
    pub items: u64,
    /// Of them, items at positions below `n`: each a distinct sample.
    pub real: u64,
    /// Of them, padding (positions `>= n`, repeating the sample of position `p mod n`).
    pub padding: u64,
    /// Positions outside the pass (consumed before it, or dropped) checked.
    pub outside: u64,
    /// Items and positions that failed.
    pub failures: u64,
    /// The failure at the smallest global position.
    pub first: Option<Failure>,
}

impl Share {
    /// Words of [`Share::to_words`]: what ranks exchange, one fixed-size record each.
    pub const WORDS: usize = 6 + FAILURE_WORDS;

    /// The shares of disjoint ranks added up; the first failure is the earliest.
    pub fn merge(&self, other: &Share) -> Share {
        let first = match (self.first, other.first) {
            (Some(a), Some(b)) => Some(if b.position < a.position { b } else { a }),
            (a, b) => a.or(b),
        };
        Share {
            items: self.items + other.items,
            real: self.real + other.real,
            padding: self.padding + other.padding,
            outside: self.outside + other.outside,
            failures: self.failures + other.failures,
            first,
        }
    }

    /// This share as a fixed-size record of words.
    pub fn to_words(&self) -> [u64; Self::WORDS] {
        let mut w = [0u64; Self::WORDS];
        w[..6].copy_from_slice(&[
            self.items,
            self.real,
            self.padding,
            self.outside,
            self.failures,
            self.first.is_some() as u64,
        ]);
        if let Some(first) = self.first {
            w[6..].copy_from_slice(&first.to_words());
        }
        w
    }

    /// The share a record of [`Share::to_words`] holds.
    pub fn from_words(w: &[u64]) -> Result<Share, Error> {
        if w.len() != Self::WORDS {
            return Err(Error::Invalid(format!(
                "a proof share is {} words, got {}",
                Self::WORDS,
                w.len()
            )));
        }
        Ok(Share {
            items: w[0],
            real: w[1],
            padding: w[2],
            outside: w[3],
            failures: w[4],
            first: match w[5] {
                0 => None,
                _ => Some(Failure::from_words(&w[6..])?),
            },
        })
    }
}

#[derive(Default)]
struct Tally {
    real: AtomicU64,
    padding: AtomicU64,
    outside: AtomicU64,
    failures: AtomicU64,
    first: Mutex<Option<Failure>>,
}

impl Tally {
    fn fail(&self, failure: Failure) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut slot = self.first.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none_or(|f| failure.position < f.position) {
            *slot = Some(failure);
        }
    }
}

/// Proves the streams of ranks `ranks` of `part` and their slice of the positions outside
/// the pass, with `threads` threads (`0`: all cores) and O(threads) memory; `progress`
/// grows by the items and positions checked. Failures are counted and the first kept (not
/// an error): a distributed proof adds up every rank's share before it judges.
pub fn prove_ranks(
    part: &Partition,
    ranks: Range<u64>,
    threads: usize,
    progress: &AtomicU64,
) -> Result<Share, Error> {
    prove_against(part, part.order(), ranks, threads, progress)
}

/// As [`prove_ranks`], inverting with `reference` (the order every rank agreed on) rather
/// than the order the streams come from: a rank whose stream silently follows another
/// order (another seed, another build) fails here, although it is consistent with itself.
pub fn prove_against(
    part: &Partition,
    reference: &Order,
    ranks: Range<u64>,
    threads: usize,
    progress: &AtomicU64,
) -> Result<Share, Error> {
    if reference.len() != part.n() {
        return Err(Error::Invalid(format!(
            "the reference order has {} positions, the partition {}",
            reference.len(),
            part.n()
        )));
    }
    let w = part.num_replicas();
    if ranks.start >= ranks.end || ranks.end > w {
        return Err(Error::Invalid(format!(
            "ranks [{}, {}) are not a non-empty range of [0, {w})",
            ranks.start, ranks.end
        )));
    }
    let (n, per_rank) = (part.n(), part.num_samples());
    let order = reference;
    let outside = part.outside();
    let (out_lo, out_hi) = outside.slice(&ranks, w);
    let proved = ranks.end - ranks.start;
    let item_tasks = per_rank.div_ceil(CHUNK) * proved;
    let tasks = item_tasks + (out_hi - out_lo).div_ceil(CHUNK);
    let tally = Tally::default();

    let pass = part.pass();
    let dealing = part.dealing();
    let check_items = |rank: u64, lo: u64, bufs: [&mut [u64]; 3]| {
        let [samples, inverse, dealt] = bufs;
        // The positions the items are dealt from (the dealing must own each at exactly
        // this (rank, local): it is then injective, a bijection onto the pass), and the
        // stream from them as fill_rank yields it, dealt once.
        part.fill_dealt(rank, lo, dealt)?;
        samples.copy_from_slice(dealt);
        part.samples_of(samples);
        inverse.copy_from_slice(samples);
        order_inverse(order.as_ref(), inverse);
        // The common case first, without a branch per item: every item dealt from its
        // own position and inverted back to it (padding, only at a pass's tail: to its
        // position mod n).
        // A run's positions ascend, its padding (past n) last: where they do not, a check
        // below fails and the per-item path finds what is wrong.
        let real = dealt.partition_point(|&p| p < n);
        let (real_positions, padding_positions) = dealt.split_at(real);
        let (real_found, padding_found) = inverse.split_at(real);
        let clean = dealing.owns_run(&pass, rank, lo, dealt)
            && real_positions == real_found
            && (padding_positions.iter().zip(padding_found)).all(|(&p, &f)| p >= n && f == p % n);
        if clean {
            tally.real.fetch_add(real as u64, Ordering::Relaxed);
            tally
                .padding
                .fetch_add((dealt.len() - real) as u64, Ordering::Relaxed);
            return Ok(());
        }
        let (mut real, mut padding) = (0u64, 0u64);
        for (k, ((&sample, &found), &p)) in samples
            .iter()
            .zip(inverse.iter())
            .zip(dealt.iter())
            .enumerate()
        {
            let local = lo + k as u64;
            let mut failure = Failure {
                position: p,
                rank,
                local,
                sample,
                found,
                dealt: Dealt::Rightly,
            };
            if !dealing.owns(&pass, p, rank, local) {
                failure.dealt = match dealing.owner(&pass, p) {
                    Some((r, l)) => Dealt::ToAnother(r, l),
                    None => Dealt::OutsideThePass,
                };
                tally.fail(failure);
                continue;
            }
            let ok = if p < n {
                real += 1;
                found == p
            } else {
                padding += 1;
                found == p % n // padding repeats the sample of its position mod n
            };
            if !ok {
                tally.fail(failure);
            }
        }
        tally.real.fetch_add(real, Ordering::Relaxed);
        tally.padding.fetch_add(padding, Ordering::Relaxed);
        Ok::<(), Error>(())
    };

    let check_outside = |lo: u64, positions: &mut [u64], samples: &mut [u64], found: &mut [u64]| {
        for (k, p) in positions.iter_mut().enumerate() {
            *p = outside.position(lo + k as u64);
        }
        samples.copy_from_slice(positions);
        order.map_in_place(samples);
        found.copy_from_slice(samples);
        order_inverse(order.as_ref(), found);
        for ((&p, &sample), &f) in positions.iter().zip(samples.iter()).zip(found.iter()) {
            if f != p {
                tally.fail(Failure {
                    position: p,
                    rank: OUTSIDE,
                    local: OUTSIDE,
                    sample,
                    found: f,
                    dealt: Dealt::Rightly,
                });
            }
        }
        tally
            .outside
            .fetch_add(positions.len() as u64, Ordering::Relaxed);
    };

    pool::run(threads, tasks, pool::buffers::<3>, |[a, b, c], task| {
        let len = if task < item_tasks {
            let (rank, chunk) = (ranks.start + task % proved, task / proved);
            let lo = chunk * CHUNK;
            let len = CHUNK.min(per_rank - lo) as usize;
            // A task's items in cache-sized runs: the six passes over the buffers stay in
            // L1/L2 instead of streaming 1.5 MiB through the cache each time.
            for at in (0..len).step_by(IN_CACHE) {
                let end = (at + IN_CACHE).min(len);
                check_items(
                    rank,
                    lo + at as u64,
                    [&mut a[at..end], &mut b[at..end], &mut c[at..end]],
                )?;
            }
            len
        } else {
            let lo = out_lo + (task - item_tasks) * CHUNK;
            let len = CHUNK.min(out_hi - lo) as usize;
            for at in (0..len).step_by(IN_CACHE) {
                let end = (at + IN_CACHE).min(len);
                check_outside(
                    lo + at as u64,
                    &mut a[at..end],
                    &mut b[at..end],
                    &mut c[at..end],
                );
            }
            len
        };
        progress.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    })?;
    Ok(Share {
        items: per_rank * proved,
        real: tally.real.into_inner(),
        padding: tally.padding.into_inner(),
        outside: tally.outside.into_inner(),
        failures: tally.failures.into_inner(),
        first: tally.first.into_inner().unwrap_or_else(|e| e.into_inner()),
    })
}

/// Samples to positions (batched); a value that is not a sample (`>= domain`, or
/// excluded) becomes `u64::MAX`, which fails every check.
fn order_inverse(order: &dyn SampleOrder, values: &mut [u64]) {
    let n = order.domain();
    if values.iter().all(|&v| v < n) {
        order.invert_in_place(values);
        return;
    }
    for v in values.iter_mut() {
        *v = if *v < n {
            order.position_of(*v).unwrap_or(u64::MAX)
        } else {
            u64::MAX
        };
    }
}

/// Judges the shares of every rank (added up): the streams hold exactly the positions
/// of the pass below `n`, every other position of `[0, n)` was checked, and nothing
/// failed.
pub fn judge(part: &Partition, total: &Share) -> Result<Verdict, Error> {
    if let Some(first) = total.first {
        return Err(Error::Violation(first.report(total.failures)));
    }
    let outside = part.outside().count();
    let inside = part.n() - outside;
    let expected = (
        part.total_size(),
        inside,
        part.total_size() - inside,
        outside,
    );
    let got = (total.items, total.real, total.padding, total.outside);
    if got != expected {
        return Err(Error::Violation(format!(
            "the ranks checked {} items ({} real, {} padding) and {} positions outside the \
             pass; the partition needs {} items ({} real, {} padding) and {} outside",
            got.0, got.1, got.2, got.3, expected.0, expected.1, expected.2, expected.3
        )));
    }
    Ok(Verdict::of_pass(
        part,
        total.real,
        total.padding,
        total.outside,
    ))
}

/// Judges one rank's share alone: nothing failed in its stream and its slice of the
/// positions outside the pass. The epoch is proven once every rank's share is.
pub fn judge_alone(part: &Partition, share: &Share) -> Result<Verdict, Error> {
    if let Some(first) = share.first {
        return Err(Error::Violation(first.report(share.failures)));
    }
    let not_yielded = part.dropped() + part.start().min(part.n()); // declared
    Ok(Verdict::of_pass(
        part,
        share.real,
        share.padding,
        not_yielded,
    ))
}

/// The whole exact proof by the inverse: every rank's stream and every position outside
/// the pass, judged. O(threads) memory at any `n`.
pub fn verify_inverse(
    part: &Partition,
    threads: usize,
    progress: &AtomicU64,
) -> Result<Verdict, Error> {
    let share = prove_ranks(part, 0..part.num_replicas(), threads, progress)?;
    judge(part, &share)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Version;
    use crate::bitmap_proof::verify;
    use crate::block::BlockPermutation;
    use crate::dealing::Dealing;
    use crate::order::{Explicit, Identity, Order};
    use crate::permutation::Permutation;
    use std::sync::Arc;

    fn partition(order: Order, w: u64, start: u64, drop_last: bool) -> Partition {
        Partition::new(order.len(), w, start, drop_last, order).unwrap()
    }

    /// A proof's verdict, or its refusal.
    type Outcome = Result<Verdict, Error>;

    /// Both proofs on one partition: the same verdict, the same counts.
    fn both(part: &Partition) -> (Outcome, Outcome) {
        let inverse = verify_inverse(part, 2, &AtomicU64::new(0));
        let bitmap = verify(part, 2, &AtomicU64::new(0));
        (inverse, bitmap)
    }

    #[test]
    fn agrees_with_the_bitmap_on_every_order_start_and_drop() {
        let mut orders: Vec<Order> = vec![
            Arc::new(Identity::new(1000).unwrap()),
            Arc::new(BlockPermutation::new(1000, 16, 4, 3, 1).unwrap()),
            Arc::new(BlockPermutation::new(20_001, 64, 8, 3, 1).unwrap()),
            Arc::new(Identity::new(1).unwrap()),
        ];
        for version in Version::ALL {
            orders.push(Arc::new(Permutation::new(version, 1000, 3, 1).unwrap()));
            orders.push(Arc::new(Permutation::new(version, 70_001, 3, 1).unwrap()));
        }
        for order in orders {
            let n = order.len();
            for w in [1, 3, 8] {
                for start in [0, 1, n / 2, n - 1, n, n + 2] {
                    for drop_last in [false, true] {
                        let part = partition(order.clone(), w, start, drop_last);
                        let (inverse, bitmap) = both(&part);
                        assert_eq!(
                            inverse, bitmap,
                            "n={n} w={w} start={start} drop={drop_last}"
                        );
                        assert!(inverse.is_ok());
                    }
                }
            }
        }
    }

    #[test]
    fn both_catch_an_order_with_a_repeat() {
        // Sample 2 at positions 1 and 3; sample 1 nowhere.
        let order: Order = Arc::new(Explicit::new(vec![0, 2, 3, 2, 4]).unwrap());
        // Position 3 is rank 3 % w's item 3 / w in each of these passes (a resume at 2
        // deals it to rank 1 as item 0).
        for (w, start, drop_last, rank, local) in [
            (2, 0, false, 1, 1),
            (1, 0, false, 0, 3),
            (2, 2, false, 1, 0),
            (2, 0, true, 1, 1),
        ] {
            let (inverse, bitmap) = both(&partition(order.clone(), w, start, drop_last));
            let message = inverse.unwrap_err().to_string();
            assert!(bitmap.unwrap_err().is_violation());
            // The inverse of sample 2 is position 1, so position 3 is the counter-example.
            let place = format!("rank {rank} at local position {local} (global position 3)");
            assert!(message.starts_with(&format!("{place} holds sample 2, but the order's inverse puts that sample at position 1")), "{message}");
        }
        // Outside the pass too: resumed at 4, position 3 was consumed before.
        let (inverse, _) = both(&partition(order.clone(), 1, 4, false));
        let message = inverse.unwrap_err().to_string();
        assert!(
            message.starts_with("position 3 (consumed before the pass, or dropped) holds sample 2"),
            "{message}"
        );
    }

    fn dealings() -> Vec<Dealing> {
        vec![
            Dealing::ROUND_ROBIN,
            Dealing::new("round-robin", 4, true).unwrap(),
            Dealing::new("step", 4, false).unwrap(),
            Dealing::new("step", 3, true).unwrap(),
        ]
    }

    fn dealt(order: Order, w: u64, start: u64, drop_last: bool, dealing: Dealing) -> Partition {
        Partition::dealt(order.len(), w, start, drop_last, order, dealing).unwrap()
    }

    #[test]
    fn every_dealing_is_proven_and_agrees_with_the_bitmap() {
        for version in Version::ALL {
            let order: Order = Arc::new(Permutation::new(version, 1001, 3, 1).unwrap());
            for dealing in dealings() {
                for w in [1, 3, 8] {
                    for start in [0, 5, 500, 1001, 1003] {
                        for drop_last in [false, true] {
                            let part = dealt(order.clone(), w, start, drop_last, dealing);
                            let (inverse, bitmap) = both(&part);
                            assert!(
                                inverse.is_ok(),
                                "{dealing:?} w={w} start={start}: {inverse:?}"
                            );
                            assert_eq!(inverse, bitmap, "{dealing:?} w={w} start={start}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_dealing_broken_on_purpose_is_caught() {
        for version in Version::ALL {
            let order: Order = Arc::new(Permutation::new(version, 1000, 5, 0).unwrap());
            for dealing in dealings() {
                let part = dealt(order.clone(), 3, 0, false, dealing);
                // Rank 2's item 7 dealt the position of rank 0's item 7: that position twice,
                // rank 2's own never.
                let twice = part.position(0, 7);
                let broken = part.clone().misdeal(2, 7, twice);
                let (inverse, bitmap) = both(&broken);
                let message = inverse.unwrap_err().to_string();
                let want = format!(
                    "rank 2 at local position 7 (global position {twice}) is dealt a position the \
                 dealing gives to rank 0 at local position 7: a position dealt twice"
                );
                assert!(message.starts_with(&want), "{dealing:?}: {message}");
                assert!(bitmap.unwrap_err().to_string().contains("yielded twice"));
                // A position past the pass: the dealing skips one of its own.
                let skipped = part.clone().misdeal(1, 0, part.end() + 5);
                let message = verify_inverse(&skipped, 2, &AtomicU64::new(0))
                    .unwrap_err()
                    .to_string();
                assert!(
                    message.contains("outside the pass: the dealing skips"),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn shares_cross_as_words_and_merge_to_the_whole() {
        for version in Version::ALL {
            let order: Order = Arc::new(Permutation::new(version, 999, 5, 0).unwrap());
            let part = dealt(order, 3, 10, false, Dealing::new("step", 4, false).unwrap())
                .misdeal(2, 7, 3);
            let whole = prove_ranks(&part, 0..3, 1, &AtomicU64::new(0)).unwrap();
            let mut merged = Share::default();
            for r in 0..3 {
                let share = prove_ranks(&part, r..r + 1, 1, &AtomicU64::new(0)).unwrap();
                let back = Share::from_words(&share.to_words()).unwrap();
                assert_eq!(back, share);
                merged = merged.merge(&back);
            }
            assert_eq!(merged, whole);
            assert_eq!(whole.first.unwrap().dealt, Dealt::OutsideThePass); // position 3 was consumed
            assert!(Share::from_words(&[0; 3]).is_err());
        }
    }

    #[test]
    fn rank_shares_add_up_to_the_whole_proof() {
        for version in Version::ALL {
            let order: Order = Arc::new(Permutation::new(version, 10_007, 1, 2).unwrap());
            for (w, start, drop_last) in [
                (4, 0, false),
                (4, 333, false),
                (5, 20, true),
                (3, 10_007, false),
            ] {
                let part = partition(order.clone(), w, start, drop_last);
                let whole = prove_ranks(&part, 0..w, 1, &AtomicU64::new(0)).unwrap();
                let mut total = Share::default();
                for r in 0..w {
                    let progress = AtomicU64::new(0);
                    let share = prove_ranks(&part, r..r + 1, 2, &progress).unwrap();
                    assert_eq!(share.items, part.num_samples());
                    assert_eq!(progress.into_inner(), share.items + share.outside);
                    total.items += share.items;
                    total.real += share.real;
                    total.padding += share.padding;
                    total.outside += share.outside;
                    total.failures += share.failures;
                }
                assert_eq!(total, whole);
                assert_eq!(judge(&part, &total).unwrap(), both(&part).1.unwrap());
            }
        }
    }

    #[test]
    fn a_stream_following_another_order_fails_against_the_agreed_one() {
        for version in Version::ALL {
            let agreed: Order = Arc::new(Permutation::new(version, 5000, 0, 0).unwrap());
            let other: Order = Arc::new(Permutation::new(version, 5000, 1, 0).unwrap());
            let honest = partition(agreed.clone(), 4, 0, false);
            let lying = partition(other, 4, 0, false);
            // Consistent with itself, the lying stream passes alone ...
            assert_eq!(
                prove_ranks(&lying, 3..4, 1, &AtomicU64::new(0))
                    .unwrap()
                    .failures,
                0
            );
            // ... and fails against the agreed order, from its first item.
            let share = prove_against(&lying, &agreed, 3..4, 1, &AtomicU64::new(0)).unwrap();
            assert!(
                share.failures > 1000 && share.first.unwrap().position == 3,
                "{share:?}"
            );
            let fine = prove_against(&honest, &agreed, 3..4, 1, &AtomicU64::new(0)).unwrap();
            assert_eq!(fine.failures, 0);
        }
    }

    #[test]
    fn a_missing_share_or_a_bad_rank_range_is_refused() {
        for version in Version::ALL {
            let part = partition(
                Arc::new(Permutation::new(version, 1000, 0, 0).unwrap()),
                4,
                0,
                false,
            );
            let half = prove_ranks(&part, 0..2, 1, &AtomicU64::new(0)).unwrap();
            let message = judge(&part, &half).unwrap_err().to_string();
            assert!(message.contains("checked 500 items"), "{message}");
            assert!(prove_ranks(&part, 2..2, 1, &AtomicU64::new(0)).is_err());
            assert!(prove_ranks(&part, 0..5, 1, &AtomicU64::new(0)).is_err());
        }
    }

    #[test]
    fn memory_does_not_grow_with_n() {
        for version in Version::ALL {
            // n = 2^63 over 2^40 ranks: one rank's 2^23 items, proven without a bitmap.
            let n = 1u64 << 63;
            let part = partition(
                Arc::new(Permutation::new(version, n, 9, 9).unwrap()),
                1 << 40,
                0,
                false,
            );
            let share = prove_ranks(&part, 5..6, 2, &AtomicU64::new(0)).unwrap();
            assert_eq!(
                (share.items, share.real, share.failures),
                (1 << 23, 1 << 23, 0)
            );
        }
    }
}
