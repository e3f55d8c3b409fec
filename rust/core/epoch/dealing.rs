//! How a pass's positions go to (rank, local index): the dealing.
//!
//! A pass deals the global positions `[start, start + num_samples·W)` to `W` ranks of
//! `num_samples` items each. Every dealing gives the position of a rank's item
//! ([`Dealing::position`]) and the owner of a position ([`Dealing::owner`]); the two are
//! inverse to each other, which is what the proof by the inverse checks. For a fixed rank,
//! positions grow with the local index (so a rank's padding is a suffix of its stream).
//!
//! * `round-robin` — DistributedSampler's: item `k` of rank `r` at `start + r + k·W`.
//! * `step` — accelerate's: at step `s` rank `r` takes the `b` consecutive positions from
//!   `start + s·B·W + r·b`, `b` being the batch size `B` except maybe at the last step.
//!
//! A batch sampler that drops its last partial batch keeps whole batches only: its pass
//! ends earlier, and the positions it never deals are dropped like `drop_last`'s.

use crate::error::Error;

/// Which layout deals the positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Rank `r` takes `start + r, start + r + W, ...` (DistributedSampler).
    RoundRobin,
    /// Rank `r` takes whole batches of consecutive positions, step by step (accelerate).
    Step,
}

/// A dealing: the layout, and the batches a batch sampler cuts the stream into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dealing {
    layout: Layout,
    batch_size: u64,
    drop_last: bool,
}

/// A pass's shape: `num_replicas` ranks of `num_samples` items from position `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pass {
    /// First position dealt.
    pub start: u64,
    /// Ranks.
    pub num_replicas: u64,
    /// Items per rank (whole batches only, when the last partial one is dropped).
    pub num_samples: u64,
}

impl Pass {
    /// One past the last position dealt.
    pub fn end(&self) -> u64 {
        self.start + self.num_samples * self.num_replicas
    }
}

impl Default for Dealing {
    fn default() -> Self {
        Dealing::ROUND_ROBIN
    }
}

impl Dealing {
    /// The dealing of an item sampler: round-robin, every item kept.
    pub const ROUND_ROBIN: Dealing = Dealing {
        layout: Layout::RoundRobin,
        batch_size: 0,
        drop_last: false,
    };

    /// The dealing called `name` (`"round-robin"`, `"step"`), in batches of `batch_size`
    /// (`0`: items, not batches; round-robin only), dropping the last partial batch with
    /// `drop_last`.
    pub fn new(name: &str, batch_size: u64, drop_last: bool) -> Result<Self, Error> {
        let layout = match name {
            "round-robin" => Layout::RoundRobin,
            "step" => Layout::Step,
            other => {
                return Err(Error::Invalid(format!(
                    "dealing must be 'round-robin' or 'step', got {other:?}"
                )))
            }
        };
        if batch_size == 0 && layout == Layout::Step {
            return Err(Error::Invalid(
                "dealing='step' deals whole batches: pass batch_size=... (>= 1)".into(),
            ));
        }
        if batch_size == 0 && drop_last {
            return Err(Error::Invalid(
                "drop_last_batch=True drops a partial batch: pass batch_size=... (>= 1)".into(),
            ));
        }
        Ok(Dealing {
            layout,
            batch_size,
            drop_last,
        })
    }

    /// The dealing's name, as certificates record it.
    pub fn name(&self) -> &'static str {
        match self.layout {
            Layout::RoundRobin => "round-robin",
            Layout::Step => "step",
        }
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Items per batch (`0`: an item sampler).
    pub fn batch_size(&self) -> u64 {
        self.batch_size
    }

    /// Whether the last partial batch is dropped.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// Items a rank keeps of `num_samples`: all, or whole batches only.
    pub fn kept(&self, num_samples: u64) -> u64 {
        if self.drop_last {
            num_samples - num_samples % self.batch_size
        } else {
            num_samples
        }
    }

    /// The global position of `rank`'s item `local` (no range check).
    #[inline]
    pub fn position(&self, pass: &Pass, rank: u64, local: u64) -> u64 {
        let w = pass.num_replicas;
        match self.layout {
            Layout::RoundRobin => pass.start + rank + local * w,
            Layout::Step => {
                let b = self.batch_size;
                let (step, j) = (local / b, local % b);
                let count = b.min(pass.num_samples - step * b);
                pass.start + step * b * w + rank * count + j
            }
        }
    }

    /// The `(rank, local)` that position `p` is dealt to, or `None` outside the pass.
    pub fn owner(&self, pass: &Pass, p: u64) -> Option<(u64, u64)> {
        if p < pass.start || p >= pass.end() {
            return None;
        }
        let (q, w) = (p - pass.start, pass.num_replicas);
        Some(match self.layout {
            Layout::RoundRobin => (q % w, q / w),
            Layout::Step => {
                let b = self.batch_size;
                let full = pass.num_samples / b; // steps of b items on every rank
                let round = b * w;
                if q < full * round {
                    let (step, rem) = (q / round, q % round);
                    (rem / b, step * b + rem % b)
                } else {
                    let count = pass.num_samples - full * b; // the last, partial step
                    let rem = q - full * round;
                    (rem / count, full * b + rem % count)
                }
            }
        })
    }

    /// Whether position `p` is dealt to `rank`'s item `local` (`rank < W`): `owner(p)` is
    /// `(rank, local)`. For round-robin that is `p = start + rank + local·W`, the unique
    /// decomposition of `p - start` by `W`: no division per item.
    #[inline]
    pub fn owns(&self, pass: &Pass, p: u64, rank: u64, local: u64) -> bool {
        match self.layout {
            Layout::RoundRobin => local < pass.num_samples && p == self.position(pass, rank, local),
            Layout::Step => self.owner(pass, p) == Some((rank, local)),
        }
    }

    /// Whether every position of `dealt` is dealt to `rank`'s item `lo + i` ([`Self::owns`]
    /// for each, batched): for round-robin a run of positions `W` apart, compared without a
    /// branch per item.
    pub fn owns_run(&self, pass: &Pass, rank: u64, lo: u64, dealt: &[u64]) -> bool {
        match self.layout {
            Layout::RoundRobin => {
                if lo + dealt.len() as u64 > pass.num_samples {
                    return false;
                }
                let (w, mut want) = (pass.num_replicas, self.position(pass, rank, lo));
                dealt.iter().fold(true, |ok, &p| {
                    let owned = p == want;
                    want = want.wrapping_add(w);
                    ok & owned
                })
            }
            Layout::Step => {
                (dealt.iter().enumerate()).all(|(k, &p)| self.owns(pass, p, rank, lo + k as u64))
            }
        }
    }

    /// `out[i]` = the position of `rank`'s item `lo + i` (no range check).
    pub fn fill_positions(&self, pass: &Pass, rank: u64, lo: u64, out: &mut [u64]) {
        match self.layout {
            Layout::RoundRobin => {
                let mut p = self.position(pass, rank, lo);
                for slot in out.iter_mut() {
                    *slot = p;
                    p = p.wrapping_add(pass.num_replicas); // past the last item: unused
                }
            }
            Layout::Step => {
                // Runs of consecutive positions, one per step.
                let mut local = lo;
                let mut rest = &mut out[..];
                while !rest.is_empty() {
                    let b = self.batch_size;
                    let run = ((b - local % b) as usize).min(rest.len());
                    let first = self.position(pass, rank, local);
                    for (i, slot) in rest[..run].iter_mut().enumerate() {
                        *slot = first + i as u64;
                    }
                    rest = &mut rest[run..];
                    local += run as u64;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dealings() -> Vec<Dealing> {
        let mut all = vec![Dealing::ROUND_ROBIN];
        for b in [1, 2, 3, 8] {
            for drop_last in [false, true] {
                all.push(Dealing::new("round-robin", b, drop_last).unwrap());
                all.push(Dealing::new("step", b, drop_last).unwrap());
            }
        }
        all
    }

    #[test]
    fn every_dealing_is_a_bijection_onto_the_pass_with_owner_as_its_inverse() {
        for dealing in dealings() {
            for (start, w, ns) in [(0, 1, 5), (2, 3, 7), (10, 4, 9), (0, 5, 1), (3, 2, 16)] {
                let pass = Pass {
                    start,
                    num_replicas: w,
                    num_samples: dealing.kept(ns),
                };
                // Brute force: every (rank, local) once, onto exactly [start, end).
                let mut seen = vec![0u32; (pass.end() - start) as usize];
                for rank in 0..w {
                    let mut filled = vec![0u64; pass.num_samples as usize];
                    dealing.fill_positions(&pass, rank, 0, &mut filled);
                    for local in 0..pass.num_samples {
                        let p = dealing.position(&pass, rank, local);
                        assert_eq!(filled[local as usize], p);
                        assert_eq!(dealing.owner(&pass, p), Some((rank, local)), "{dealing:?}");
                        assert!(dealing.owns(&pass, p, rank, local));
                        assert!(!dealing.owns(&pass, p + 1, rank, local) || pass.num_samples == 0);
                        if local > 0 {
                            assert!(p > dealing.position(&pass, rank, local - 1));
                        }
                        seen[(p - start) as usize] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "{dealing:?} {pass:?}");
                assert_eq!(dealing.owner(&pass, pass.end()), None);
                assert_eq!(
                    start.checked_sub(1).and_then(|p| dealing.owner(&pass, p)),
                    None
                );
            }
        }
    }

    #[test]
    fn a_run_is_owned_exactly_when_each_of_its_items_is() {
        for dealing in dealings() {
            for (start, w, ns) in [(0, 1, 5), (2, 3, 7), (3, 2, 16)] {
                let pass = Pass {
                    start,
                    num_replicas: w,
                    num_samples: dealing.kept(ns),
                };
                for rank in 0..w {
                    for lo in 0..=pass.num_samples {
                        for len in 0..=(pass.num_samples + 1 - lo) {
                            let mut run = vec![0u64; len as usize];
                            dealing.fill_positions(&pass, rank, lo, &mut run);
                            let each = |run: &[u64]| {
                                (run.iter().enumerate())
                                    .all(|(k, &p)| dealing.owns(&pass, p, rank, lo + k as u64))
                            };
                            assert_eq!(dealing.owns_run(&pass, rank, lo, &run), each(&run));
                            // One position moved anywhere in the run: both refuse it.
                            for k in 0..run.len() {
                                let mut moved = run.clone();
                                moved[k] += 1;
                                assert!(!dealing.owns_run(&pass, rank, lo, &moved));
                                assert!(!each(&moved));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn step_is_accelerates_layout() {
        // 2 ranks, B = 3, 8 items each: steps of [s·6 + r·3, +3), the last step of 2.
        let step = Dealing::new("step", 3, false).unwrap();
        let pass = Pass {
            start: 0,
            num_replicas: 2,
            num_samples: 8,
        };
        let rank1: Vec<u64> = (0..8).map(|k| step.position(&pass, 1, k)).collect();
        assert_eq!(rank1, [3, 4, 5, 9, 10, 11, 14, 15]);
        assert_eq!(step.kept(8), 8);
        assert_eq!(Dealing::new("step", 3, true).unwrap().kept(8), 6);
    }

    #[test]
    fn bad_dealings_are_refused_with_the_fix() {
        let err = Dealing::new("zigzag", 1, false).unwrap_err().to_string();
        assert!(err.contains("'round-robin' or 'step'"), "{err}");
        let err = Dealing::new("step", 0, false).unwrap_err().to_string();
        assert!(err.contains("batch_size"), "{err}");
        let err = Dealing::new("round-robin", 0, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("batch_size"), "{err}");
    }
}
