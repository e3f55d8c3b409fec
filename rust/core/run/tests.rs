//! The run against a simulation: a sampler's passes replayed item by item (the forward
//! path, position → sample), compared with `where_read` and `show` (the inverse path).

use super::*;
use crate::dealing::Dealing;
use crate::epoch::EpochSpec;
use crate::exclusion::Exclusions;
use std::collections::BTreeMap;

type Key = (u64, Option<u64>, u64, u64, bool); // epoch, step, rank, position, padding

fn epoch(n: u64, world: u64, epoch: u64, dealing: Dealing, excluded: &[u64]) -> Sharding {
    Sharding::of_spec(
        EpochSpec {
            seed: 7,
            epoch,
            ..EpochSpec::new(n, world)
        },
        0,
        0,
    )
    .unwrap()
    .with_dealing(dealing)
    .with_exclusions(Exclusions::new(excluded.to_vec(), n).unwrap())
    .unwrap()
}

/// Replays passes `(sharding, start, steps taken)` in lockstep: what each rank read.
struct Sim {
    run: Run,
    reads: BTreeMap<u64, Vec<Key>>, // sample -> reads
    by_step: BTreeMap<u64, Vec<(u64, u64, u64, bool)>>, // step -> (rank, position, sample, padding)
    step: u64,
    consumed: u64,
}

impl Sim {
    fn new(first: &Sharding) -> Sim {
        Sim {
            run: Run::new(first.clone()),
            reads: BTreeMap::new(),
            by_step: BTreeMap::new(),
            step: 0,
            consumed: 0,
        }
    }

    /// A pass from `start` taking `steps` batches (all of them when `None`).
    fn pass(&mut self, s: &Sharding, start: u64, steps: Option<u64>) {
        let prev = self.run.is_open().then_some(self.consumed);
        self.run.begin(s, start, prev).unwrap();
        let part = s.partition(start).unwrap();
        let b = s.dealing.batch_size();
        let batches = part.num_samples().div_ceil(b);
        let take = steps.unwrap_or(batches).min(batches);
        let mut out = vec![0; part.num_samples() as usize];
        let mut last_pos = start;
        for rank in 0..s.spec.num_replicas {
            part.fill_rank(rank, 0, &mut out).unwrap();
            for (local, &sample) in out.iter().enumerate() {
                let local = local as u64;
                if local / b >= take {
                    break;
                }
                let step = self.step + local / b;
                // Padding: a position past the epoch's kept samples, which repeats one.
                let padding = part.position(rank, local) >= part.n();
                self.reads.entry(sample).or_default().push((
                    s.spec.epoch,
                    Some(step),
                    rank,
                    local % b,
                    padding,
                ));
                self.by_step
                    .entry(step)
                    .or_default()
                    .push((rank, local % b, sample, padding));
                last_pos = last_pos.max(part.position(rank, local) + 1);
            }
        }
        self.step += take;
        self.consumed = if take == batches {
            part.end()
        } else {
            start + take * b * s.spec.num_replicas
        };
        assert!(last_pos <= self.consumed);
    }

    fn check(&self) {
        let run = Run::from_state(&owned(self.state()), true).unwrap().0;
        for sample in 0..run.base.spec.n {
            let got: Vec<Key> = run
                .where_read(sample, 0)
                .unwrap()
                .iter()
                .map(|r| (r.epoch, r.step, r.rank, r.position, r.padding))
                .collect();
            let mut want = self.reads.get(&sample).cloned().unwrap_or_default();
            want.sort();
            let mut got_sorted = got.clone();
            got_sorted.sort();
            assert_eq!(got_sorted, want, "sample {sample}");
        }
        for (&step, want) in &self.by_step {
            let mut got: Vec<_> = run
                .show(step, 0)
                .unwrap()
                .iter()
                .map(|r| (r.rank, r.position, r.sample, r.padding))
                .collect();
            let mut want = want.clone();
            got.sort();
            want.sort();
            assert_eq!(got, want, "step {step}");
        }
    }

    fn state(&self) -> Vec<(&'static str, Value)> {
        let now = self.run.base().clone();
        self.run
            .state(&now, self.consumed, Some(self.consumed), 0)
            .unwrap()
    }
}

fn owned(state: Vec<(&'static str, Value)>) -> Vec<(String, Value)> {
    state.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

use crate::state::Value;

#[test]
fn where_and_show_equal_a_replayed_run_across_resumes() {
    let n = 103;
    let rr = |b| Dealing::new("round-robin", b, false).unwrap();
    let step = |b| Dealing::new("step", b, false).unwrap();
    let e0 = epoch(n, 2, 0, rr(4), &[]);
    let mut sim = Sim::new(&e0);
    sim.pass(&e0, 0, Some(5)); // 2 ranks × 5 batches of 4 = 40 positions
                               // A resume on 3 ranks, batch 3, two more samples excluded.
    let e0b = epoch(n, 3, 0, rr(3), &[90, 7]);
    let start = e0b.resume_from(&e0, sim.consumed).unwrap();
    let mut state = sim.state();
    let (run, consumed) = Run::from_state(&owned(std::mem::take(&mut state)), true).unwrap();
    assert_eq!(consumed, 40);
    sim.run = run;
    sim.pass(&e0b, start, None);
    sim.check();
    // Epoch 1 dealt by steps on 3 ranks, then a resume on 2.
    let e1 = epoch(n, 3, 1, step(5), &[7, 90]);
    sim.pass(&e1, 0, Some(2));
    let e1b = epoch(n, 2, 1, step(8), &[7, 90]);
    let start = sim.consumed;
    sim.pass(&e1b, start, None);
    sim.check();
    // A step past the history is refused, naming the steps it holds.
    let run = Run::from_state(&owned(sim.state()), true).unwrap().0;
    let err = run.show(sim.step, 0).unwrap_err().to_string();
    assert!(
        err.contains(&format!("holds steps [0, {})", sim.step)),
        "{err}"
    );
    // The replay pads (3 ranks over the rest of epoch 0): show's and where's flags are
    // checked against it above.
    assert!(sim.by_step.values().flatten().any(|r| r.3));
    let audit = sim.run.audit(true, 2).unwrap();
    assert_eq!(audit.epochs, vec![0, 1]);
    assert!(audit.recounted);
    assert_eq!(
        sim.run
            .segments()
            .iter()
            .map(|s| s.change)
            .collect::<Vec<_>>(),
        vec![Change::Start, Change::Resume, Change::Epoch, Change::Repeat]
    );
}

fn forged(rows: &mut Vec<Vec<i128>>, edit: impl Fn(&mut Vec<Vec<i128>>)) -> Result<Audit, Error> {
    edit(rows);
    let n = 50;
    let last = rows.last().unwrap().clone();
    let base = epoch(
        n,
        last[5] as u64,
        last[1] as u64,
        Dealing::new("round-robin", 4, false).unwrap(),
        &[],
    );
    let run = Run::from_rows(base, vec![], rows, last[3] as u64, true)?;
    run.audit(true, 1)
}

#[test]
fn a_forged_history_fails_naming_the_sample_and_its_reads() {
    // Epoch 0 on 2 ranks in batches of 4: 3 steps (24 positions), then the rest on 2 ranks.
    let good = vec![
        vec![0, 0, 0, 24, 0, 2, 4, 0, 0, 0],
        vec![2, 0, 24, 50, 3, 2, 4, 0, 0, 0],
    ];
    assert!(forged(&mut good.clone(), |_| {}).is_ok());
    // An overlap: the resume starts 8 positions early.
    let err = forged(&mut good.clone(), |r| {
        r[1][2] = 16;
        r[1][4] = 3;
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("read twice") && err.contains("step 2") && err.contains("step 3"),
        "{err}"
    );
    // A skip: the resume starts past where the first stopped.
    let err = forged(&mut good.clone(), |r| r[1][2] = 32)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("never read") && err.contains("[24, 32)"),
        "{err}"
    );
    // An epoch left unfinished.
    let err = forged(&mut good.clone(), |r| {
        r.push(vec![1, 1, 0, 8, 5, 2, 4, 0, 0, 0]);
        r[1][3] = 40;
    });
    let err = err.unwrap_err().to_string();
    assert!(err.contains("never read in epoch 0"), "{err}");
    // Steps that do not add up.
    let err = forged(&mut good.clone(), |r| r[1][4] = 9)
        .unwrap_err()
        .to_string();
    assert!(err.contains("steps do not add up"), "{err}");
}

#[test]
fn an_exclusion_that_shrinks_is_named() {
    let n = 40;
    let d = Dealing::new("round-robin", 2, false).unwrap();
    let log = vec![5];
    let rows = vec![
        vec![0, 0, 0, 12, 0, 2, 2, 0, 0, 1],
        vec![2, 0, 12, 39, 3, 2, 2, 0, 0, 0],
    ];
    let base = epoch(n, 2, 0, d, &[]);
    let run = Run::from_rows(base, log, &rows, 39, true).unwrap();
    let err = run.audit(true, 1).unwrap_err().to_string();
    assert!(err.contains("sample 5 was excluded"), "{err}");
}

#[test]
fn a_history_must_end_at_its_state() {
    let base = epoch(
        40,
        2,
        0,
        Dealing::new("round-robin", 2, false).unwrap(),
        &[],
    );
    let rows = vec![vec![0, 0, 0, 12, 0, 2, 2, 0, 0, 0]];
    let err = Run::from_rows(base.clone(), vec![], &rows, 14, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("ends in epoch 0 at position 12"), "{err}");
    let err = Run::from_rows(base, vec![], &[vec![0, 0, 0, 12]], 12, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has 4 integers"), "{err}");
}

#[test]
fn a_history_is_checked_as_evidence_naming_the_row_and_the_field() {
    // Epoch 0 of 50 samples on 2 ranks in batches of 4: 3 steps, then the rest.
    let good = vec![
        vec![0, 0, 0, 24, 0, 2, 4, 0, 0, 0],
        vec![2, 0, 24, 50, 3, 2, 4, 0, 0, 0],
    ];
    let load = |edit: &dyn Fn(&mut Vec<Vec<i128>>)| {
        let mut rows = good.clone();
        edit(&mut rows);
        let base = epoch(
            50,
            2,
            0,
            Dealing::new("round-robin", 4, false).unwrap(),
            &[],
        );
        let stop = rows.last().map_or(0, |r| r[3].max(0) as u64);
        Run::from_rows(base, vec![], &rows, stop, true).map(|_| ())
    };
    assert!(load(&|_| {}).is_ok());
    let huge = 1i128 << 40;
    let cases: [(usize, usize, i128, &str); 14] = [
        (0, 0, 4, "[0] has change=4, not in [0, 4)"),
        (0, 7, 2, "[0] has dealing=2, not in [0, 2)"),
        (0, 8, 2, "[0] has drop_last_batch=2, not in [0, 2)"),
        (0, 5, huge, "[0] has world=1099511627776, more ranks"),
        (0, 6, huge, "[0] has batch_size=1099511627776"),
        (
            0,
            4,
            1 << 63,
            "[0] has step=9223372036854775808, past 2**62",
        ),
        (1, 3, 60, "[1] stops at position 60, past the 50 positions"),
        (0, 3, 52, "[0] stops at position 52, past the 50 positions"),
        (
            1,
            5,
            3,
            "[1] is read by world=3 ranks, but the state is of num_replicas=2",
        ),
        (
            1,
            4,
            4,
            "[1] has step=4, but the segment before starts at step 0 and takes 3",
        ),
        (1, 4, -1, "[1] has step=-1 < 0"),
        (0, 1, -1, "[0] has epoch=-1 < 0"),
        (0, 2, -5, "[0] has start=-5 < 0"),
        (0, 9, 3, "excluding 3 ids, but the state excludes 0"),
    ];
    for (row, field, value, want) in cases {
        let err = load(&|r| r[row][field] = value).unwrap_err().to_string();
        assert!(err.contains(want), "{want:?} not in {err:?}");
    }
    // A world of more ranks than samples is a run's right (each rank pads), up to 2^20,
    // whatever world the state is of; a batch too.
    let d = |b| Dealing::new("round-robin", b, false).unwrap();
    let base = epoch(5, 8, 0, d(1), &[]);
    let rows = vec![vec![0, 0, 0, 8, 0, 8, 1, 0, 0, 0]];
    let run = Run::from_rows(base, vec![], &rows, 8, true).unwrap();
    assert_eq!(run.audit(true, 1).unwrap().reads, 5);
    let most = 1i128 << 20;
    for (world, batch, ok) in [
        (most, 1, true),
        (most + 1, 1, false),
        (1, most, true),
        (1, most + 1, false),
    ] {
        // A segment of epoch 0 read whole by `world` ranks in batches of `batch`, then the
        // state on 2 ranks at the start of epoch 1.
        let end = (world.max(5)) as u64;
        let rows = vec![
            vec![0, 0, 0, end as i128, 0, world, batch, 0, 0, 0],
            vec![1, 1, 0, 0, 1, 2, batch, 0, 0, 0],
        ];
        let base = epoch(5, 2, 1, d(batch as u64), &[]);
        let read = Run::from_rows(base, vec![], &rows, 0, true);
        assert_eq!(read.is_ok(), ok, "world {world} batch {batch}: {read:?}");
    }
}

#[test]
fn rows_round_trip_and_rows_at_the_edges_load() {
    let dealing = Dealing::new("step", 4, true).unwrap();
    for change in Change::ALL {
        let segment = Segment {
            change,
            epoch: 3,
            start: 8,
            stop: 16,
            step: 2,
            world: 2,
            dealing,
            excluded: 0,
        };
        assert_eq!(Segment::from_row(&segment.row(), 0).unwrap(), segment);
    }
    assert_eq!(
        Change::ALL.map(Change::name),
        ["start", "epoch", "resume", "repeat"]
    );
    // A step of 2^62, the most a row may start at; an empty segment, the one a state
    // resumed onto another world and saved unread ends with.
    let base = epoch(
        50,
        2,
        0,
        Dealing::new("round-robin", 4, false).unwrap(),
        &[],
    );
    let most = 1i128 << 62;
    let far = vec![vec![0, 0, 0, 24, most, 2, 4, 0, 0, 0]];
    assert!(Run::from_rows(base.clone(), vec![], &far, 24, true).is_ok());
    let resumed = vec![
        vec![0, 0, 0, 24, 0, 3, 4, 0, 0, 0],
        vec![2, 0, 24, 24, 2, 2, 4, 0, 0, 0],
    ];
    let run = Run::from_rows(base, vec![], &resumed, 24, true).unwrap();
    assert_eq!(run.segments().len(), 2);
}

#[test]
fn an_item_runs_reads_count_each_ranks_stream_across_a_resume() {
    // An item sampler (no batch size): 2 ranks read positions [0, 20) of epoch 0, then 3
    // ranks the rest. A read's position is its place in the stream the rank of that number
    // read in the epoch: counted here by walking each segment's ranks in order.
    let n = 50;
    let items = Dealing::ROUND_ROBIN;
    let first = epoch(n, 2, 0, items, &[]);
    let rest = epoch(n, 3, 0, items, &[]);
    let rows = vec![
        vec![0, 0, 0, 20, 0, 2, 0, 0, 0, 0],
        vec![2, 0, 20, 50, 0, 3, 0, 0, 0, 0],
    ];
    let run = Run::from_rows(rest.clone(), vec![], &rows, 50, true).unwrap();
    let mut want: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let mut taken = [0u64; 3];
    for (sharding, start, stop) in [(&first, 0, 20), (&rest, 20, 50)] {
        let part = sharding.partition(start).unwrap();
        let mut out = vec![0; part.num_samples() as usize];
        for rank in 0..sharding.spec.num_replicas {
            part.fill_rank(rank, 0, &mut out).unwrap();
            for (local, &sample) in out.iter().enumerate() {
                if part.position(rank, local as u64) < stop {
                    want.entry(sample)
                        .or_default()
                        .push((rank, taken[rank as usize]));
                    taken[rank as usize] += 1;
                }
            }
        }
    }
    assert_eq!(taken, [10 + 10, 10 + 10, 10]);
    for sample in 0..n {
        let mut got: Vec<(u64, u64)> = run
            .where_read(sample, 0)
            .unwrap()
            .iter()
            .map(|r| (r.rank, r.position))
            .collect();
        got.sort();
        let mut expected = want.remove(&sample).unwrap_or_default();
        expected.sort();
        assert_eq!(got, expected, "sample {sample}");
    }
}
