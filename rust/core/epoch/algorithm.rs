//! The algorithm ids, at the bottom of the core: every order's id by the permutation
//! version it is built on (perm-vK, block-vK, mix-vK, budget-vK on perm-vK), and the
//! rule that reads any id back. Nothing here depends on the orders themselves.

use crate::error::Error;

/// The id of perm-v1 (the default order up to 0.3), stored in every state dict.
pub const ALGORITHM_V1: &str = "perm-v1";

/// The id of perm-v2.
pub const ALGORITHM_V2: &str = "perm-v2";

/// The id of the permutation new runs use: perm-v2.
pub const ALGORITHM: &str = ALGORITHM_V2;

/// The ids of the permutation by version, as every family of orders lists its own.
pub const PERM_ALGORITHMS: [&str; 2] = [ALGORITHM_V1, ALGORITHM_V2];

/// The ids of block orders by version: block-v1 on perm-v1, block-v2 on perm-v2.
pub const BLOCK_ALGORITHMS: [&str; 2] = ["block-v1", "block-v2"];

/// The ids of mixture maps built on one permutation: mix-v1 on perm-v1, mix-v2 on perm-v2.
pub const MIX_ALGORITHMS: [&str; 2] = ["mix-v1", "mix-v2"];

/// The id of mix-v3: each source's passes in the order that costs least at a random
/// position for its size, perm-v2's table, perm-v1's walk or perm-v2's Feistel network.
pub const MIX_ALGORITHM_V3: &str = "mix-v3";

/// The ids of token-budget plans by version: budget-v1 on perm-v1, budget-v2 on perm-v2.
pub const BUDGET_ALGORITHMS: [&str; 2] = ["budget-v1", "budget-v2"];

/// The id of a torchft loader's committed stream (position `p` is sample
/// `order(p // n)[p % n]`), recorded in its states.
pub const COMMITTED_ALGORITHM: &str = "committed-v1";

/// The permutation committed-v1 reads, pinned to it: a change of the default never changes
/// a resumed torchft run's stream.
pub const COMMITTED_PERMUTATION: &str = ALGORITHM_V2;

/// Which construction a [`Permutation`](crate::Permutation) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// perm-v1: splitmix64 rounds on a domain of at least 16 bits.
    V1,
    /// perm-v2: a shuffled table up to 2^16, 32-bit multiply rounds above.
    V2,
}

/// Every family of orders built on a permutation, by name, with its ids by version.
const FAMILIES: [(&str, [&str; 2]); 4] = [
    ("perm", PERM_ALGORITHMS),
    ("block", BLOCK_ALGORITHMS),
    ("mix", MIX_ALGORITHMS),
    ("budget", BUDGET_ALGORITHMS),
];

impl Version {
    /// The permutation of new runs.
    pub const DEFAULT: Version = Version::V2;

    /// Every version, oldest first.
    pub const ALL: [Version; 2] = [Version::V1, Version::V2];

    /// The version an algorithm id names: `perm-v1` or `perm-v2`.
    pub fn named(algorithm: &str) -> Result<Version, Error> {
        Version::in_family(&PERM_ALGORITHMS, "permutation", algorithm)
    }

    /// Its algorithm id.
    pub fn algorithm(self) -> &'static str {
        self.id(&PERM_ALGORITHMS)
    }

    /// The id of an order built on this version, from the ids of its family by version
    /// (`["block-v1", "block-v2"]`): an order built on a permutation carries its number.
    pub fn id(self, family: &[&'static str; 2]) -> &'static str {
        family[self as usize]
    }

    /// The ids of a family of orders by version: `"perm"`, `"block"`, `"mix"`, `"budget"`.
    pub fn family(name: &str) -> Option<[&'static str; 2]> {
        FAMILIES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, ids)| ids)
    }

    /// The permutation an order's id is built on: perm-vK, block-vK, mix-vK and budget-vK
    /// on perm-vK; `None` for another id (the identity's among them).
    pub fn of_order(algorithm: &str) -> Option<Version> {
        if algorithm == COMMITTED_ALGORITHM {
            return Version::named(COMMITTED_PERMUTATION).ok();
        }
        FAMILIES
            .iter()
            .find_map(|(_, family)| Version::in_family(family, "", algorithm).ok())
    }

    /// The version an order of `family` is asked for by `algorithm`: the permutation it is
    /// built on (`"perm-v2"`, `"perm-v1"`: every constructor's `algorithm=`) or one of
    /// the family's own ids (`"mix-v1"`); `what` names the family in the error.
    pub fn for_family(family: &[&str; 2], what: &str, algorithm: &str) -> Result<Version, Error> {
        Version::named(algorithm)
            .or_else(|_| Version::in_family(family, what, algorithm))
            .map_err(|_| {
                Error::Invalid(format!(
                    "unknown {what} algorithm {algorithm:?}: use the permutation \"{}\" (the \
                     default) or \"{}\", or the {what} ids \"{}\", \"{}\"",
                    PERM_ALGORITHMS[1], PERM_ALGORITHMS[0], family[1], family[0]
                ))
            })
    }

    /// The version of `algorithm`, one of `family`'s ids (by version); `what` names the
    /// family in the error.
    pub fn in_family(family: &[&str; 2], what: &str, algorithm: &str) -> Result<Version, Error> {
        match family.iter().position(|&id| id == algorithm) {
            Some(0) => Ok(Version::V1),
            Some(_) => Ok(Version::V2),
            None => Err(Error::Invalid(format!(
                "unknown {what} algorithm {algorithm:?}: use \"{}\" (the default) or \"{}\"",
                family[1], family[0]
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_takes_the_permutation_id_or_its_own() {
        for (i, version) in Version::ALL.into_iter().enumerate() {
            for family in [BLOCK_ALGORITHMS, MIX_ALGORITHMS, BUDGET_ALGORITHMS] {
                let by_perm = Version::for_family(&family, "x", PERM_ALGORITHMS[i]).unwrap();
                let by_own = Version::for_family(&family, "x", family[i]).unwrap();
                assert_eq!((by_perm, by_own), (version, version));
                assert_eq!(version.id(&family), family[i]);
            }
        }
        let err = Version::for_family(&MIX_ALGORITHMS, "mixture", "mix-v9")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"perm-v2\"") && err.contains("\"mix-v1\""),
            "{err}"
        );
        assert!(Version::for_family(&MIX_ALGORITHMS, "mixture", "block-v1").is_err());
    }

    #[test]
    fn committed_v1_is_pinned_to_perm_v2_whatever_the_default() {
        // A literal, not ALGORITHM: a change of the default must leave this test standing.
        assert_eq!(COMMITTED_PERMUTATION, "perm-v2");
        assert_eq!(Version::of_order(COMMITTED_ALGORITHM), Some(Version::V2));
    }
}
