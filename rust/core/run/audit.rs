//! The exactly-once audit of a run's history: every kept sample read once per epoch (the
//! declared padding aside), none after its exclusion, whatever resumes happened.
//!
//! Two proofs. The history's own: each segment starts where the one before stopped (in
//! the order of its exclusions: [`Sharding::resume_from`]), an epoch ends only once read to
//! its end and the exclusions only grow — O(#segments), exact because a segment's dealing
//! is a bijection of its positions (what `verify` proves); that the steps add up is checked
//! wherever a history is read (`evidence.rs`). And, with
//! `recount`, the samples': every sample's reads counted by the inverse of each segment's
//! order, on every core — O(n · #segments) time, O(1) memory per thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Read, Run, Segment};
use crate::error::Error;
use crate::partition::Partition;
use crate::pool::{self, CHUNK};
use crate::sharding::Sharding;

/// What an audit proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audit {
    /// The epochs the history covers, in order.
    pub epochs: Vec<u64>,
    /// Its segments.
    pub segments: usize,
    /// Where it begins: (epoch, global position). A state saved before histories were kept
    /// (0.5 and earlier) starts its history at the load.
    pub begins: (u64, u64),
    /// Reads of kept samples (padding aside), counted from the history.
    pub reads: u128,
    /// Whether every sample's reads were counted one by one too.
    pub recounted: bool,
}

/// The reads of a sample, as a message says them (the first few).
pub fn describe(reads: &[Read]) -> String {
    if reads.is_empty() {
        return "never read".into();
    }
    let mut parts: Vec<String> = reads
        .iter()
        .take(6)
        .map(|r| {
            let at = match r.step {
                Some(step) => format!("step {step}"),
                None => "item".into(),
            };
            let pad = if r.padding { " (padding)" } else { "" };
            format!(
                "epoch {} {at} rank {} position {}{pad}",
                r.epoch, r.rank, r.position
            )
        })
        .collect();
    if reads.len() > 6 {
        parts.push(format!("and {} more", reads.len() - 6));
    }
    format!("read at {}", parts.join("; "))
}

impl Run {
    /// Proves from the history that every kept sample was read exactly once per epoch it
    /// covers (declared padding aside; the epoch in progress up to its resume point) and no
    /// excluded sample after its exclusion; `recount` counts every sample's reads too. A
    /// history that breaks it is an [`Error::Violation`] naming the first sample read twice
    /// or never, and its reads.
    pub fn audit(&self, recount: bool, threads: usize) -> Result<Audit, Error> {
        let Some(first) = self.segments.first() else {
            return Err(Error::Invalid(
                "this run has no history yet (no pass read anything since it started or loaded)"
                    .into(),
            ));
        };
        let shardings = self
            .segments
            .iter()
            .map(|s| self.sharding(s))
            .collect::<Result<Vec<_>, _>>()?;
        let parts = shardings
            .iter()
            .zip(&self.segments)
            .map(|(sh, s)| sh.partition(s.start))
            .collect::<Result<Vec<_>, _>>()?;
        let mut reads: u128 = 0;
        for (i, s) in self.segments.iter().enumerate() {
            reads += u128::from(s.stop.min(parts[i].n()).saturating_sub(s.start));
        }
        for i in 1..self.segments.len() {
            self.check_pair(i, &shardings, &parts)?;
        }
        let ranges = self.epochs();
        let recounted = recount && self.recount(&ranges, &parts, threads)?;
        Ok(Audit {
            epochs: ranges
                .iter()
                .map(|r| self.segments[r.start].epoch)
                .collect(),
            segments: self.segments.len(),
            begins: (first.epoch, first.start),
            reads,
            recounted,
        })
    }

    /// Segment `i` continues segment `i - 1` exactly.
    fn check_pair(
        &self,
        i: usize,
        shardings: &[Sharding],
        parts: &[Partition],
    ) -> Result<(), Error> {
        let (a, b) = (&self.segments[i - 1], &self.segments[i]);
        if b.excluded < a.excluded {
            let sample = self.log[b.excluded as usize];
            let after: Vec<Read> = self
                .where_read(sample, 0)?
                .into_iter()
                .filter(|r| r.segment >= i)
                .collect();
            return Err(Error::Violation(format!(
                "sample {sample} was excluded before segment {i} of the history (epoch {}), which \
                 reads it again: {}",
                b.epoch,
                describe(&after)
            )));
        }
        let first_read = |at: u64| -> Result<(u64, Vec<Read>), Error> {
            let sample = parts[i].sample_at(at);
            let reads = self
                .where_read(sample, 0)?
                .into_iter()
                .filter(|r| r.epoch == b.epoch)
                .collect();
            Ok((sample, reads))
        };
        if b.epoch == a.epoch {
            let expected = shardings[i].resume_from(&shardings[i - 1], a.stop)?;
            if b.start < expected {
                let (sample, reads) = first_read(b.start)?;
                return Err(Error::Violation(format!(
                    "sample {sample} is read twice in epoch {}: segment {i} of the history \
                     ({}) starts at position {}, before {expected} where the one before \
                     stopped; {}",
                    b.epoch,
                    b.change.name(),
                    b.start,
                    describe(&reads)
                )));
            }
            if b.start > expected {
                let (sample, _) = first_read(expected)?;
                return Err(Error::Violation(format!(
                    "sample {sample} is never read in epoch {}: segment {i} of the history \
                     ({}) starts at position {}, past {expected} where the one before \
                     stopped (positions [{expected}, {}) skipped)",
                    b.epoch,
                    b.change.name(),
                    b.start,
                    b.start
                )));
            }
            return Ok(());
        }
        if self.segments[..i].iter().any(|s| s.epoch == b.epoch) {
            let (sample, reads) = first_read(b.start)?;
            return Err(Error::Violation(format!(
                "epoch {} is read again after epoch {}: sample {sample} is read twice in it; {}",
                b.epoch,
                a.epoch,
                describe(&reads)
            )));
        }
        let part = &parts[i - 1];
        if a.stop < part.end().min(part.n()) {
            let sample = part.sample_at(a.stop);
            return Err(Error::Violation(format!(
                "sample {sample} is never read in epoch {}: the run moved to epoch {} at \
                 position {} of {} (segment {i} of the history)",
                a.epoch,
                b.epoch,
                a.stop,
                part.end().min(part.n())
            )));
        }
        if b.start != 0 {
            let sample = parts[i].sample_at(0);
            return Err(Error::Violation(format!(
                "sample {sample} is never read in epoch {}: its first segment (segment {i} of \
                 the history) starts at position {}, not 0",
                b.epoch, b.start
            )));
        }
        Ok(())
    }

    /// Counts every sample's reads in each epoch by the inverse of each segment's order.
    fn recount(
        &self,
        ranges: &[std::ops::Range<usize>],
        parts: &[Partition],
        threads: usize,
    ) -> Result<bool, Error> {
        let n = self.base.spec.n;
        let index: HashMap<u64, u64> = self
            .log
            .iter()
            .enumerate()
            .map(|(k, &id)| (id, k as u64))
            .collect();
        // The exclusions in force before each segment, over the whole history.
        let mut before = Vec::with_capacity(self.segments.len());
        let mut most = 0;
        for s in &self.segments {
            before.push(most);
            most = most.max(s.excluded);
        }
        let total = AtomicU64::new(0);
        let last_range = ranges.len() - 1;
        for (k, range) in ranges.iter().enumerate() {
            let segs: Vec<(usize, &Segment)> =
                range.clone().map(|i| (i, &self.segments[i])).collect();
            let (last_i, last) = *segs.last().expect("a range holds a segment");
            let end = parts[last_i].end().min(parts[last_i].n());
            let complete = k < last_range || last.stop >= end;
            let excluded_at_end = segs.iter().map(|(_, s)| s.excluded).max().unwrap_or(0);
            // A history that begins at a load mid-epoch (a state without one) did not see
            // the positions before it.
            let (first_i, first) = segs[0];
            let unseen = if k == 0 { first.start } else { 0 };
            let before_history = |sample: u64| -> bool {
                unseen > 0
                    && parts[first_i]
                        .order()
                        .position_of(sample)
                        .is_ok_and(|p| p < unseen)
            };
            let chunks = n.div_ceil(CHUNK);
            pool::run(
                threads,
                chunks,
                || (),
                |_, chunk| {
                    let mut counted = 0;
                    for sample in chunk * CHUNK..((chunk + 1) * CHUNK).min(n) {
                        let mut count = 0;
                        for &(i, s) in &segs {
                            for (rank, local) in parts[i].locate(sample)? {
                                let p = parts[i].position(rank, local);
                                if p >= s.stop || p >= parts[i].n() {
                                    continue;
                                }
                                if index.get(&sample).is_some_and(|&at| at < before[i]) {
                                    return Err(self.violation(
                                        sample,
                                        "is read after its exclusion",
                                        s.epoch,
                                    ));
                                }
                                count += 1;
                            }
                        }
                        if count > 1 {
                            return Err(self.violation(sample, "is read twice", last.epoch));
                        }
                        let excluded = index.get(&sample).is_some_and(|&at| at < excluded_at_end);
                        if complete && count == 0 && !excluded && !before_history(sample) {
                            return Err(self.violation(sample, "is never read", last.epoch));
                        }
                        counted += count;
                    }
                    total.fetch_add(counted, Ordering::Relaxed);
                    Ok(())
                },
            )?;
        }
        let expected: u128 = self
            .segments
            .iter()
            .zip(parts)
            .map(|(s, p)| u128::from(s.stop.min(p.n()).saturating_sub(s.start.min(p.n()))))
            .sum();
        let counted = u128::from(total.load(Ordering::Relaxed));
        if counted != expected {
            return Err(Error::Violation(format!(
                "the history's segments consumed {expected} positions of kept samples, but \
                 {counted} reads were counted sample by sample"
            )));
        }
        Ok(true)
    }

    fn violation(&self, sample: u64, what: &str, epoch: u64) -> Error {
        violation(sample, what, epoch, self.where_read(sample, 0))
    }
}

/// The audit's failure for `sample`: `what` (`is read twice`, ...) in `epoch`, with the
/// reads of that epoch among `reads` (its reads over the history).
pub fn violation(sample: u64, what: &str, epoch: u64, reads: Result<Vec<Read>, Error>) -> Error {
    let reads = reads
        .map(|r| {
            describe(
                &r.into_iter()
                    .filter(|r| r.epoch == epoch)
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap_or_default();
    Error::Violation(format!("sample {sample} {what} in epoch {epoch}: {reads}"))
}
