//! [`EpochSpec`]: the fields every epoch has, whichever sampler deals it.

use crate::algorithm::Version;
use crate::error::Error;
use crate::state::Value;

/// The fields every epoch has — a round-robin or step epoch ([`crate::Sharding`]) and a
/// token-budget one ([`crate::BudgetEpoch`]) alike: what every rank must agree on before
/// anything of the family's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochSpec {
    /// Dataset length, `>= 1`.
    pub n: u64,
    /// Data-parallel ranks, `>= 1`.
    pub num_replicas: u64,
    /// Shuffle seed.
    pub seed: u64,
    /// Epoch.
    pub epoch: u64,
    /// A shuffled order (else the identity).
    pub shuffle: bool,
    /// Drop what does not fill a round of ranks (a token budget: a last step not every
    /// rank can fill), else pad it.
    pub drop_last: bool,
    /// The keyed permutation of the order (and of a block order's blocks, of a token
    /// budget's steps): perm-v2 unless set otherwise.
    pub permutation: Version,
}

impl EpochSpec {
    /// `n` samples over `num_replicas` ranks, with the defaults of every sampler: seed 0,
    /// epoch 0, shuffled by perm-v2, padded (a struct update sets the others:
    /// `EpochSpec { seed: 3, ..EpochSpec::new(1000, 4) }`).
    pub fn new(n: u64, num_replicas: u64) -> Self {
        EpochSpec {
            n,
            num_replicas,
            seed: 0,
            epoch: 0,
            shuffle: true,
            drop_last: false,
            permutation: Version::DEFAULT,
        }
    }

    /// These fields, checked: samples and ranks to deal them to.
    pub fn checked(self) -> Result<Self, Error> {
        if self.n == 0 {
            return Err(Error::EmptyDomain);
        }
        if self.num_replicas == 0 {
            return Err(Error::InvalidReplicas {
                num_replicas: self.num_replicas,
            });
        }
        Ok(self)
    }

    /// What a state dict records of every epoch, `algorithm` (the family's id of the
    /// epoch's order) among them, in its order.
    pub(crate) fn values(&self, algorithm: &'static str) -> Vec<(&'static str, Value)> {
        vec![
            ("n", Value::Int(self.n.into())),
            ("num_replicas", Value::Int(self.num_replicas.into())),
            ("seed", Value::Int(self.seed.into())),
            ("epoch", Value::Int(self.epoch.into())),
            ("shuffle", Value::Bool(self.shuffle)),
            ("drop_last", Value::Bool(self.drop_last)),
            ("algorithm", Value::Str(algorithm.into())),
        ]
    }
}
