//! A [`Sharding`]'s state dict: written, read back checked, and whether it resumes.

use super::{Value, SHARD};
use crate::algorithm::Version;
use crate::epoch::EpochSpec;
use crate::error::Error;
use crate::exclusion::Exclusions;
use crate::sharding::Sharding;

impl Sharding {
    /// The fields a state dict records of this epoch, in its order.
    pub fn values(&self) -> Vec<(&'static str, Value)> {
        let mut fields = self.spec.values(self.algorithm());
        fields.extend([
            ("block_size", Value::Int(self.block_size.into())),
            ("window_blocks", Value::Int(self.window_blocks.into())),
        ]);
        fields
    }

    /// The state dict of this epoch after `consumed` of its global positions (with
    /// exclusions, positions of the kept samples; the excluded ids sorted).
    pub fn state(&self, consumed: u64) -> Vec<(&'static str, Value)> {
        let mut fields = self.values();
        fields.push(("consumed", Value::Int(consumed.into())));
        if !self.exclusions.is_empty() {
            let ids = self.exclusions.ids().iter().map(|&id| id.into()).collect();
            fields.push(("exclude", Value::Ids(ids)));
        }
        SHARD.write(fields)
    }

    /// The epoch and its consumed positions a state dict records, checked: its keys
    /// ([`SHARD`]), their types and ranges, an algorithm that follows from its fields
    /// (0.1 and 0.2 recorded an unshuffled epoch as perm-v1), and a consumed count the
    /// epoch can reach. The permutation is the one its algorithm is built on.
    pub fn from_state(state: &[(String, Value)], strict: bool) -> Result<(Sharding, u64), Error> {
        let saved = SHARD.read(state, strict)?;
        let algorithm = saved.text("algorithm");
        let mut sharding = Sharding::of_spec(
            EpochSpec {
                seed: saved.int("seed")?,
                epoch: saved.int("epoch")?,
                shuffle: saved.flag("shuffle"),
                drop_last: saved.flag("drop_last"),
                ..EpochSpec::new(saved.int("n")?, saved.int("num_replicas")?)
            },
            saved.int("block_size")?,
            saved.int("window_blocks")?,
        )?
        .with_permutation(Version::of_order(algorithm).unwrap_or(Version::DEFAULT));
        let ids = saved.ids("exclude")?;
        if !ids.is_empty() {
            let exclusions = Exclusions::new(ids, sharding.spec.n)?;
            sharding = sharding.with_exclusions(exclusions)?;
        }
        SHARD.check_algorithm(
            &saved,
            sharding.algorithm(),
            sharding.accepts_algorithm(algorithm),
        )?;
        let consumed = saved.signed("consumed");
        let limit = sharding.max_consumed();
        if !(0..=i128::from(limit)).contains(&consumed) {
            return Err(Error::Invalid(format!(
                "state_dict['consumed'] must be in [0, {limit}] (global positions of an epoch \
                 of n={} over num_replicas={}), got {consumed}: the state was not saved by \
                 this sampler's state_dict()",
                sharding.spec.n, sharding.spec.num_replicas
            )));
        }
        Ok((sharding, consumed as u64))
    }

    /// Refuses to resume a state saved under `saved` with this epoch unless both read the
    /// same order (the epoch, the number of ranks and the exclusions may differ).
    pub fn check_resumable(&self, saved: &Sharding) -> Result<(), Error> {
        SHARD.check_resumable(&saved.values(), &self.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::EpochSpec;

    fn owned(state: Vec<(&'static str, Value)>) -> Vec<(String, Value)> {
        state.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn sharding() -> Sharding {
        Sharding::of_spec(
            EpochSpec {
                seed: 3,
                epoch: 2,
                ..EpochSpec::new(1000, 4)
            },
            0,
            0,
        )
        .unwrap()
    }

    #[test]
    fn a_shard_state_reads_back_as_written() {
        let ex = sharding()
            .with_exclusions(Exclusions::new(vec![7, 3], 1000).unwrap())
            .unwrap();
        for epoch in [sharding(), ex, sharding().with_permutation(Version::V1)] {
            let state = epoch.state(17);
            let keys: Vec<&str> = state.iter().map(|(k, _)| *k).collect();
            assert_eq!(
                &keys[..7],
                [
                    "n",
                    "num_replicas",
                    "seed",
                    "epoch",
                    "shuffle",
                    "drop_last",
                    "algorithm"
                ]
            );
            let (back, consumed) = Sharding::from_state(&owned(state), true).unwrap();
            assert_eq!((back, consumed), (epoch, 17));
        }
    }

    #[test]
    fn keys_of_earlier_releases_load_and_unknown_ones_only_when_not_strict() {
        let mut state = owned(sharding().state(5));
        state.retain(|(k, _)| k != "block_size" && k != "window_blocks"); // 0.1
        assert!(Sharding::from_state(&state, true).is_ok());
        state.push(("typo".into(), Value::Int(1)));
        let err = Sharding::from_state(&state, true).unwrap_err().to_string();
        assert!(
            err.contains("['typo']") && err.contains("strict=False"),
            "{err}"
        );
        assert!(Sharding::from_state(&state, false).is_ok());
        // 0.1 and 0.2 recorded an unshuffled epoch as perm-v1.
        let unshuffled = Sharding::of_spec(
            EpochSpec {
                shuffle: false,
                ..EpochSpec::new(10, 2)
            },
            0,
            0,
        )
        .unwrap();
        let mut old = owned(unshuffled.state(0));
        old.iter_mut().find(|(k, _)| k == "algorithm").unwrap().1 = Value::Str("perm-v1".into());
        assert!(Sharding::from_state(&old, true).is_ok());
    }

    #[test]
    fn a_bad_state_is_refused_naming_the_key() {
        let cases: [(&str, Value, &str); 6] = [
            (
                "epoch",
                Value::Other {
                    type_name: "float".into(),
                    repr: "1.5".into(),
                },
                "state_dict['epoch'] must be an integer, got float 1.5",
            ),
            (
                "shuffle",
                Value::Int(1),
                "state_dict['shuffle'] must be a bool",
            ),
            (
                "seed",
                Value::Int(-1),
                "state_dict['seed'] must be in [0, 2**64 - 1], got -1",
            ),
            ("consumed", Value::Int(1004), "must be in [0, 1003]"),
            ("algorithm", Value::Str("perm-v0".into()), "mean 'perm-v2'"),
            ("exclude", Value::Ids(vec![1000]), "out of range"),
        ];
        for (key, value, text) in cases {
            let mut state = owned(sharding().state(0));
            state.retain(|(k, _)| k != key);
            state.push((key.into(), value));
            let err = Sharding::from_state(&state, true).unwrap_err();
            assert!(err.to_string().contains(text), "{key}: {err}");
        }
        let mut state = owned(sharding().state(0));
        state.retain(|(k, _)| k != "consumed");
        let err = Sharding::from_state(&state, true).unwrap_err().to_string();
        assert!(
            err.contains(
                "state_dict (of algorithm 'perm-v2') is missing ['consumed'] of a ShardConfig"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_resume_needs_the_same_order() {
        let other = Sharding::of_spec(
            EpochSpec {
                seed: 4,
                ..EpochSpec::new(1000, 8)
            },
            0,
            0,
        )
        .unwrap();
        let err = sharding().check_resumable(&other).unwrap_err().to_string();
        assert!(
            err.contains("state_dict has seed=4 but this sampler has seed=3"),
            "{err}"
        );
        let v1 = sharding().with_permutation(Version::V1);
        let err = sharding().check_resumable(&v1).unwrap_err().to_string();
        assert!(
            err.contains("'perm-v1', this one runs 'perm-v2'")
                && err.contains("Build the sampler with algorithm='perm-v1' to resume"),
            "{err}"
        );
        assert!(sharding()
            .check_resumable(&Sharding {
                spec: EpochSpec {
                    epoch: 9,
                    num_replicas: 2,
                    ..sharding().spec
                },
                ..sharding()
            })
            .is_ok());
    }

    #[test]
    fn every_key_of_the_order_refuses_a_resume_in_another_order() {
        // (n, seed, shuffle, drop_last, block_size, window_blocks) saved, then each changed.
        let saved = (1000, 3, true, false, 8, 4);
        let make = |(n, seed, shuffle, drop_last, block_size, window_blocks): (
            u64,
            u64,
            bool,
            bool,
            u64,
            u64,
        )| {
            Sharding::of_spec(
                EpochSpec {
                    seed,
                    shuffle,
                    drop_last,
                    ..EpochSpec::new(n, 4)
                },
                block_size,
                window_blocks,
            )
            .unwrap()
        };
        let cases = [
            ("n", (1001, 3, true, false, 8, 4)),
            ("seed", (1000, 4, true, false, 8, 4)),
            ("shuffle", (1000, 3, false, false, 0, 0)),
            ("drop_last", (1000, 3, true, true, 8, 4)),
            ("block_size", (1000, 3, true, false, 16, 4)),
            ("window_blocks", (1000, 3, true, false, 8, 8)),
        ];
        for (key, now) in cases {
            let err = make(now)
                .check_resumable(&make(saved))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("{key}=")), "{key}: {err}");
        }
        assert!(make(saved).check_resumable(&make(saved)).is_ok());
    }
}
