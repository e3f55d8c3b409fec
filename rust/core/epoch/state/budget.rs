//! A token-budget epoch's fields and its state dict.

use super::{base64, Value, BUDGET};
use crate::algorithm::{Version, BUDGET_ALGORITHMS};
use crate::epoch::EpochSpec;
use crate::error::Error;

/// What decides a token-budget epoch (the plan itself is [`crate::TokenBudget`]): the
/// epoch's fields, the permutation its samples and steps are ordered by, the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetEpoch {
    /// The fields every epoch has; `drop_last` drops a last step that not every rank can
    /// fill (else pads it); the permutation orders the samples and each window's steps.
    pub spec: EpochSpec,
    /// The padded token budget of a batch, `>= 1`.
    pub max_tokens: u64,
    /// Positions planned together, `>= num_replicas`.
    pub window: u64,
}

/// Where a token-budget pass resumes: the window being planned, the steps of its plan
/// done, and the bits of its positions taken before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetResume {
    /// The window being planned.
    pub window_index: u64,
    /// Steps of its plan done.
    pub steps: u64,
    /// Its positions taken before, one bit each.
    pub taken: Vec<u8>,
}

impl BudgetEpoch {
    /// Checks the fields together.
    pub fn new(epoch: BudgetEpoch) -> Result<BudgetEpoch, Error> {
        epoch.spec.checked()?;
        if epoch.max_tokens == 0 || epoch.window == 0 {
            return Err(Error::Invalid(format!(
                "max_tokens ({}) and window ({}) must be at least 1",
                epoch.max_tokens, epoch.window
            )));
        }
        if epoch.window < epoch.spec.num_replicas {
            return Err(Error::Invalid(format!(
                "window ({}) must be at least num_replicas ({})",
                epoch.window, epoch.spec.num_replicas
            )));
        }
        Ok(epoch)
    }

    /// The algorithm id of the plan (budget-v1, budget-v2 by the permutation): its order
    /// and its dealing.
    pub fn algorithm(&self) -> &'static str {
        self.spec.permutation.id(&BUDGET_ALGORITHMS)
    }

    /// The fields a state dict records of this epoch, in its order.
    pub fn values(&self) -> Vec<(&'static str, Value)> {
        let mut fields = self.spec.values(self.algorithm());
        fields.extend([
            ("max_tokens", Value::Int(self.max_tokens.into())),
            ("window", Value::Int(self.window.into())),
        ]);
        fields
    }

    /// The state dict of this epoch at `resume`.
    pub fn state(&self, resume: &BudgetResume) -> Vec<(&'static str, Value)> {
        self.state_with(resume, Vec::new())
    }

    /// The state dict of this epoch at `resume`, with the run's `history` fields
    /// ([`crate::BudgetRun::state`]).
    pub fn state_with(
        &self,
        resume: &BudgetResume,
        history: Vec<(&'static str, Value)>,
    ) -> Vec<(&'static str, Value)> {
        let mut fields = self.values();
        fields.extend([
            ("window_index", Value::Int(resume.window_index.into())),
            ("steps", Value::Int(resume.steps.into())),
            ("taken", Value::Str(base64::encode(&resume.taken))),
        ]);
        fields.extend(history);
        BUDGET.write(fields)
    }

    /// The epoch and resume point a state dict records, checked as
    /// [`Sharding::from_state`](crate::Sharding::from_state) checks its own ([`BUDGET`]); whether the resume point fits
    /// the plan is [`crate::BudgetStart`]'s to check.
    pub fn from_state(
        state: &[(String, Value)],
        strict: bool,
    ) -> Result<(BudgetEpoch, BudgetResume), Error> {
        let saved = BUDGET.read(state, strict)?;
        let algorithm = saved.text("algorithm");
        let epoch = BudgetEpoch::new(BudgetEpoch {
            spec: EpochSpec {
                n: saved.int("n")?,
                num_replicas: saved.int("num_replicas")?,
                seed: saved.int("seed")?,
                epoch: saved.int("epoch")?,
                shuffle: saved.flag("shuffle"),
                drop_last: saved.flag("drop_last"),
                permutation: Version::of_order(algorithm).unwrap_or(Version::DEFAULT),
            },
            max_tokens: saved.int("max_tokens")?,
            window: saved.int("window")?,
        })?;
        BUDGET.check_algorithm(&saved, epoch.algorithm(), algorithm == epoch.algorithm())?;
        let taken = base64::decode(saved.text("taken")).ok_or_else(|| {
            Error::Invalid("state_dict['taken'] is not valid base64: the state was edited".into())
        })?;
        let resume = BudgetResume {
            window_index: saved.int("window_index")?,
            steps: saved.int("steps")?,
            taken,
        };
        Ok((epoch, resume))
    }

    /// Refuses to resume a state saved under `saved` with this epoch unless both plan the
    /// same batches (the epoch and the number of ranks may differ).
    pub fn check_resumable(&self, saved: &BudgetEpoch) -> Result<(), Error> {
        BUDGET.check_resumable(&saved.values(), &self.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::Sharding;

    fn owned(state: Vec<(&'static str, Value)>) -> Vec<(String, Value)> {
        state.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn budget() -> BudgetEpoch {
        BudgetEpoch::new(BudgetEpoch {
            spec: EpochSpec {
                n: 100,
                num_replicas: 2,
                seed: 1,
                epoch: 0,
                shuffle: true,
                drop_last: false,
                permutation: Version::V2,
            },
            max_tokens: 64,
            window: 16,
        })
        .unwrap()
    }

    #[test]
    fn a_budget_state_reads_back_and_retired_keys_load_at_their_value() {
        let resume = BudgetResume {
            window_index: 2,
            steps: 3,
            taken: vec![0xff, 0x01],
        };
        let mut state = owned(budget().state(&resume));
        // The id a budget state records: its order and dealing, by its permutation.
        let id = |state: &[(String, Value)]| {
            state
                .iter()
                .find(|(k, _)| k == "algorithm")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(id(&state), Some(Value::Str("budget-v2".into())));
        let v1 = BudgetEpoch::new(BudgetEpoch {
            spec: EpochSpec {
                permutation: Version::V1,
                ..budget().spec
            },
            ..budget()
        })
        .unwrap();
        assert_eq!(
            id(&owned(v1.state(&resume))),
            Some(Value::Str("budget-v1".into()))
        );
        assert_eq!(
            Sharding::from_state(&state, true)
                .err()
                .map(|e| e.to_string()),
            Some(
                "state_dict is a state of another kind of sampler: it was saved by a \
                 TokenBudgetBatchSampler, not by a ShardedSampler (or a ShardedBatchSampler or \
                 StepBatchSampler) (it lacks ['consumed'] of a ShardConfig). Load it into a \
                 TokenBudgetBatchSampler"
                    .to_string()
            )
        );
        assert_eq!(
            BudgetEpoch::from_state(&state, true).unwrap(),
            (budget(), resume)
        );
        state.push(("block_size".into(), Value::Int(0))); // 0.3 wrote it
        assert!(BudgetEpoch::from_state(&state, true).is_ok());
        state.push(("window_blocks".into(), Value::Int(4)));
        let err = BudgetEpoch::from_state(&state, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("state_dict['window_blocks'] must be 0 for a BudgetConfig, got 4"),
            "{err}"
        );
        let small = BudgetEpoch {
            window: 1,
            ..budget()
        };
        assert!(BudgetEpoch::new(small)
            .unwrap_err()
            .to_string()
            .contains("window (1) must be at least num_replicas (2)"));
    }

    #[test]
    fn every_key_of_the_plan_refuses_a_resume_of_another_plan() {
        let saved = budget();
        let spec = saved.spec;
        let cases: [(&str, BudgetEpoch); 6] = [
            (
                "seed",
                BudgetEpoch {
                    spec: EpochSpec { seed: 2, ..spec },
                    ..saved
                },
            ),
            (
                "shuffle",
                BudgetEpoch {
                    spec: EpochSpec {
                        shuffle: false,
                        ..spec
                    },
                    ..saved
                },
            ),
            (
                "drop_last",
                BudgetEpoch {
                    spec: EpochSpec {
                        drop_last: true,
                        ..spec
                    },
                    ..saved
                },
            ),
            (
                "n",
                BudgetEpoch {
                    spec: EpochSpec { n: 101, ..spec },
                    ..saved
                },
            ),
            (
                "max_tokens",
                BudgetEpoch {
                    max_tokens: 65,
                    ..saved
                },
            ),
            (
                "window",
                BudgetEpoch {
                    window: 32,
                    ..saved
                },
            ),
        ];
        for (key, now) in cases {
            let now = BudgetEpoch::new(now).unwrap();
            let err = now.check_resumable(&saved).unwrap_err().to_string();
            assert!(err.contains(&format!("{key}=")), "{key}: {err}");
        }
        assert!(budget().check_resumable(&saved).is_ok());
    }
}
