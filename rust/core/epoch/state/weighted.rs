//! The state a weighted stream adds to its sharded epoch's: which draws, of which weights.

use super::{py_list, repr, Value, DRAWS};
use crate::error::Error;
use crate::weighted::{Weights, WEIGHTED_ALGORITHM};

impl Weights {
    /// The fields a state dict records of these draws, in [`DRAWS`]' order: the draws' id,
    /// the weights' digest (16 hex digits), their number and `replacement`.
    pub fn state(&self) -> Vec<(&'static str, Value)> {
        DRAWS.write(vec![
            ("draws", Value::Str(WEIGHTED_ALGORITHM.into())),
            ("weights", Value::Str(format!("{:016x}", self.digest()))),
            ("num_weights", Value::Int(self.len().into())),
            ("replacement", Value::Bool(self.replacement())),
        ])
    }

    /// Checks the draws' fields of a weighted stream's `state`: present, of their types,
    /// and those of these weights (else the state draws another stream). The rest of the
    /// state, the keys [`DRAWS`] does not have, is the sharded epoch's.
    pub fn check_state(&self, state: &[(String, Value)]) -> Result<(), Error> {
        let missing = DRAWS.missing(state);
        if !missing.is_empty() {
            return Err(Error::Invalid(format!(
                "state_dict is missing {}: it was not saved by a WeightedShardedSampler; pass \
                 a dict saved by this sampler's state_dict()",
                py_list(&missing)
            )));
        }
        DRAWS.read(state, false)?; // each of its type
        for (key, mine) in self.state() {
            let saved = state.iter().find(|(k, _)| k == key).map(|(_, v)| v);
            if saved != Some(&mine) {
                return Err(Error::Invalid(format!(
                    "state_dict has {key}={} but this sampler has {key}={}: build the sampler \
                     with the weights and replacement= of the run that saved it",
                    saved.map_or_else(String::new, repr),
                    repr(&mine)
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(state: Vec<(&'static str, Value)>) -> Vec<(String, Value)> {
        state.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    #[test]
    fn the_draws_fields_come_off_a_state_checked() {
        let weights = Weights::new(&[1.0, 2.0, 0.0], true).unwrap();
        let mut state = owned(weights.state());
        let keys: Vec<&str> = state.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["draws", "weights", "num_weights", "replacement"]);
        assert_eq!(state[1].1, Value::Str(format!("{:016x}", weights.digest())));
        state.push(("consumed".into(), Value::Int(6)));
        weights.check_state(&state).unwrap();
        let rest: Vec<&(String, Value)> = state.iter().filter(|(k, _)| !DRAWS.has(k)).collect();
        assert_eq!(rest, [&("consumed".to_string(), Value::Int(6))]);
        // Other weights, another replacement, a field of another type: refused by name.
        for (other, named) in [
            (Weights::new(&[1.0, 2.0, 0.5], true).unwrap(), "weights="),
            (
                Weights::new(&[1.0, 2.0, 0.0], false).unwrap(),
                "replacement=",
            ),
        ] {
            let err = other.check_state(&state).unwrap_err().to_string();
            assert!(
                err.contains(named) && err.contains("build the sampler"),
                "{err}"
            );
        }
        state[3].1 = Value::Int(1);
        let err = weights.check_state(&state).unwrap_err().to_string();
        assert!(err.contains("replacement"), "{err}");
        // A state without the draws' fields was not saved by a weighted sampler.
        let err = weights
            .check_state(&[("consumed".into(), Value::Int(0))])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not saved by a WeightedShardedSampler"),
            "{err}"
        );
    }
}
