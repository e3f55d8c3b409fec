//! What a state dict of an epoch holds, in one place: the keys of every family of epoch
//! ([`Sharding`]'s round-robin and step samplers, [`BudgetEpoch`]'s token budget), their
//! types, the keys of earlier releases (added since, or retired), writing a state and
//! reading one back checked (strict or not), and whether it resumes under another epoch.
//!
//! A binding hands a state over as `(key, Value)` pairs and gets the same back: it keeps
//! no list of keys.

use crate::algorithm::{Version, BUDGET_ALGORITHMS};
use crate::error::Error;
use crate::exclusion::Exclusions;
use crate::sharding::Sharding;

/// A value of a state dict, as a binding hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An integer (Python's `int`, not a `bool`).
    Int(i128),
    /// A `bool`.
    Bool(bool),
    /// A string.
    Str(String),
    /// A list of integers (a set of sample ids).
    Ids(Vec<i128>),
    /// Anything else: its type's name and its repr, for the error that refuses it.
    Other {
        /// The type's name (`"float"`).
        type_name: String,
        /// Its repr (`"1.5"`).
        repr: String,
    },
}

/// The type a key's value must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Bool,
    Str,
    Ids,
}

/// How a key appears in the state dicts of this release and of earlier ones.
#[derive(Clone, Copy, Debug)]
enum Presence {
    /// In every state.
    Always,
    /// Added after the first release: a state without it has this value.
    Since(u64),
    /// Written only when not empty (a set of ids).
    WhenNotEmpty,
    /// Written by an earlier release, always at this value; accepted at it only.
    Retired(u64),
}

/// One key of a family's state dicts.
struct Key {
    name: &'static str,
    kind: Kind,
    presence: Presence,
}

const fn key(name: &'static str, kind: Kind, presence: Presence) -> Key {
    Key {
        name,
        kind,
        presence,
    }
}

/// The keys of every epoch, in the order states write them.
macro_rules! epoch_keys {
    ($($rest:expr),* $(,)?) => {
        &[
            key("n", Kind::Int, Presence::Always),
            key("num_replicas", Kind::Int, Presence::Always),
            key("seed", Kind::Int, Presence::Always),
            key("epoch", Kind::Int, Presence::Always),
            key("shuffle", Kind::Bool, Presence::Always),
            key("drop_last", Kind::Bool, Presence::Always),
            key("algorithm", Kind::Str, Presence::Always),
            $($rest),*
        ]
    };
}

/// The keys a family's state dicts hold, and what its configuration is called in errors.
pub struct Schema {
    name: &'static str,
    keys: &'static [Key],
    /// The saved fields that decide the order, beside `algorithm`, `n` and `seed`: named
    /// when a state's algorithm does not follow from them.
    order_keys: &'static [&'static str],
}

/// The state of a [`Sharding`]: the epoch, its blocks, the global positions consumed and
/// the excluded ids. 0.1 wrote no block fields.
pub const SHARD: Schema = Schema {
    name: "ShardConfig",
    keys: epoch_keys![
        key("block_size", Kind::Int, Presence::Since(0)),
        key("window_blocks", Kind::Int, Presence::Since(0)),
        key("consumed", Kind::Int, Presence::Always),
        key("exclude", Kind::Ids, Presence::WhenNotEmpty),
    ],
    order_keys: &["shuffle", "drop_last", "block_size", "window_blocks"],
};

/// The state of a [`BudgetEpoch`]: the epoch, its budget, and the resume point (the
/// window being planned, its steps done, its samples taken before, as base64 bits). 0.3
/// wrote the block fields of a sharded epoch, always 0.
pub const BUDGET: Schema = Schema {
    name: "BudgetConfig",
    keys: epoch_keys![
        key("max_tokens", Kind::Int, Presence::Always),
        key("window", Kind::Int, Presence::Always),
        key("window_index", Kind::Int, Presence::Always),
        key("steps", Kind::Int, Presence::Always),
        key("taken", Kind::Str, Presence::Always),
        key("block_size", Kind::Int, Presence::Retired(0)),
        key("window_blocks", Kind::Int, Presence::Retired(0)),
    ],
    order_keys: &["shuffle", "drop_last", "max_tokens", "window"],
};

/// A state dict read against its schema: every key present (or its default) and of its
/// type. Ranges are checked as each value is taken out.
pub struct Saved {
    values: Vec<(&'static str, Value)>,
}

impl Saved {
    fn get(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// The integer at `name`, in `[0, 2^64 - 1]`.
    pub fn int(&self, name: &str) -> Result<u64, Error> {
        match self.get(name) {
            Some(Value::Int(v)) => u64::try_from(*v).map_err(|_| {
                Error::Invalid(format!(
                    "state_dict['{name}'] must be in [0, 2**64 - 1], got {v}"
                ))
            }),
            _ => Err(Error::Invalid(format!(
                "state_dict has no integer {name:?}"
            ))),
        }
    }

    /// The integer at `name`, unchecked (for a range the caller names).
    pub fn signed(&self, name: &str) -> i128 {
        match self.get(name) {
            Some(Value::Int(v)) => *v,
            _ => 0,
        }
    }

    /// The bool at `name`.
    pub fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Value::Bool(true)))
    }

    /// The string at `name`.
    pub fn text(&self, name: &str) -> &str {
        match self.get(name) {
            Some(Value::Str(s)) => s,
            _ => "",
        }
    }

    /// The ids at `name` (none when absent), each in `[0, 2^64 - 1]`.
    pub fn ids(&self, name: &str) -> Result<Vec<u64>, Error> {
        let Some(Value::Ids(ids)) = self.get(name) else {
            return Ok(Vec::new());
        };
        ids.iter()
            .map(|&id| {
                u64::try_from(id).map_err(|_| {
                    Error::Invalid(format!(
                        "excluded sample {id} is out of range (ids are >= 0)"
                    ))
                })
            })
            .collect()
    }
}

impl Schema {
    /// Reads `state` back: every key of this release present (or one added since, at its
    /// default), of its type, a retired key only at the value it always had, and
    /// (`strict`) no other key.
    pub fn read(&self, state: &[(String, Value)], strict: bool) -> Result<Saved, Error> {
        let find = |name: &str| state.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let missing: Vec<&str> = self
            .keys
            .iter()
            .filter(|k| matches!(k.presence, Presence::Always) && find(k.name).is_none())
            .map(|k| k.name)
            .collect();
        if !missing.is_empty() {
            let saved_by = match find("algorithm") {
                Some(Value::Str(a)) => format!(" (of algorithm {})", py_str(a)),
                _ => String::new(),
            };
            return Err(Error::Invalid(format!(
                "state_dict{saved_by} is missing {} of a {}: pass a dict saved by this \
                 sampler's state_dict()",
                py_list(&missing),
                self.name
            )));
        }
        let unknown: Vec<&str> = state
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !self.keys.iter().any(|key| key.name == *k))
            .collect();
        if strict && !unknown.is_empty() {
            return Err(Error::Invalid(format!(
                "state_dict has keys a {} does not save: {}. Pass a dict saved by this \
                 sampler's state_dict(), or load_state_dict(state, strict=False) to ignore them",
                self.name,
                py_list(&unknown)
            )));
        }
        let mut values = Vec::with_capacity(self.keys.len());
        for key in self.keys {
            let value = match (find(key.name), key.presence) {
                (Some(v), Presence::Retired(at)) => {
                    if *v != Value::Int(at.into()) {
                        return Err(Error::Invalid(format!(
                            "state_dict['{}'] must be {at} for a {}, got {}",
                            key.name,
                            self.name,
                            repr(v)
                        )));
                    }
                    continue;
                }
                (None, Presence::Retired(_) | Presence::WhenNotEmpty) => continue,
                (None, Presence::Since(default)) => Value::Int(default.into()),
                (None, Presence::Always) => unreachable!("missing keys are refused above"),
                (Some(v), _) => v.clone(),
            };
            check_kind(key, &value)?;
            values.push((key.name, value));
        }
        Ok(Saved { values })
    }

    /// `fields` (in any order) as a state dict, in this schema's order; a key without a
    /// value (an empty set, a retired key) is not written.
    pub fn write(&self, mut fields: Vec<(&'static str, Value)>) -> Vec<(&'static str, Value)> {
        let mut out = Vec::with_capacity(fields.len());
        for key in self.keys {
            if let Some(i) = fields.iter().position(|(k, _)| *k == key.name) {
                out.push(fields.swap_remove(i));
            }
        }
        debug_assert!(fields.is_empty(), "fields outside the schema: {fields:?}");
        out
    }

    /// Refuses a state whose `algorithm` does not follow from its fields (`implied`, the
    /// order they mean), naming them.
    fn check_algorithm(&self, saved: &Saved, implied: &str, accepted: bool) -> Result<(), Error> {
        if accepted {
            return Ok(());
        }
        let fields: Vec<String> = self
            .order_keys
            .iter()
            .map(|k| format!("'{k}': {}", repr(saved.get(k).unwrap_or(&Value::Int(0)))))
            .collect();
        Err(Error::Invalid(format!(
            "state_dict is for algorithm {}, but its fields ({{{}}}) mean {} for a {}: the \
             saved order cannot be reproduced here (or the state was edited)",
            py_str(saved.text("algorithm")),
            fields.join(", "),
            py_str(implied),
            self.name
        )))
    }
}

fn check_kind(key: &Key, value: &Value) -> Result<(), Error> {
    let ok = matches!(
        (key.kind, value),
        (Kind::Int, Value::Int(_))
            | (Kind::Bool, Value::Bool(_))
            | (Kind::Str, Value::Str(_))
            | (Kind::Ids, Value::Ids(_))
    );
    if ok {
        return Ok(());
    }
    let wanted = match key.kind {
        Kind::Int => "an integer",
        Kind::Bool => "a bool",
        Kind::Str => "a str",
        Kind::Ids => "a list of int sample ids",
    };
    Err(Error::WrongType(format!(
        "state_dict['{}'] must be {wanted}, got {}: pass a dict saved by this sampler's \
         state_dict()",
        key.name,
        typed_repr(value)
    )))
}

/// Python's repr of a string (the ids and keys printed here need no escapes beyond these).
fn py_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn py_list(names: &[&str]) -> String {
    let items: Vec<String> = names.iter().map(|n| py_str(n)).collect();
    format!("[{}]", items.join(", "))
}

/// Python's repr of a value.
fn repr(value: &Value) -> String {
    match value {
        Value::Int(v) => v.to_string(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Str(s) => py_str(s),
        Value::Ids(ids) => format!(
            "[{}]",
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Other { repr, .. } => repr.clone(),
    }
}

/// `type repr`, as the type errors name a value.
fn typed_repr(value: &Value) -> String {
    let type_name = match value {
        Value::Int(_) => "int",
        Value::Bool(_) => "bool",
        Value::Str(_) => "str",
        Value::Ids(_) => "list",
        Value::Other { type_name, .. } => type_name,
    };
    format!("{type_name} {}", repr(value))
}

/// The fields a state dict records of `$epoch` (a [`Sharding`] or a [`BudgetEpoch`]: the
/// same field names), those of every epoch first, then its family's own.
macro_rules! saved_values {
    ($epoch:expr, $($key:literal => $value:expr),* $(,)?) => {{
        let e = $epoch;
        vec![
            ("n", Value::Int(e.n.into())),
            ("num_replicas", Value::Int(e.num_replicas.into())),
            ("seed", Value::Int(e.seed.into())),
            ("epoch", Value::Int(e.epoch.into())),
            ("shuffle", Value::Bool(e.shuffle)),
            ("drop_last", Value::Bool(e.drop_last)),
            ("algorithm", Value::Str(e.algorithm().into())),
            $(($key, $value)),*
        ]
    }};
}

impl Schema {
    /// Refuses a resume of a state saved as `saved` (an epoch's fields, as written) under
    /// the epoch of fields `now` unless both read the same order: the same algorithm,
    /// `n`, `seed` and order fields (the epoch and the number of ranks may differ). Names
    /// the first field that differs.
    fn check_resumable(
        &self,
        saved: &[(&'static str, Value)],
        now: &[(&'static str, Value)],
    ) -> Result<(), Error> {
        let value = |fields: &[(&'static str, Value)], key: &str| {
            fields
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Int(0))
        };
        let pairs: Vec<(&str, Value, Value)> = ["n", "seed"]
            .iter()
            .chain(self.order_keys)
            .map(|&k| (k, value(saved, k), value(now, k)))
            .collect();
        let (saved_algorithm, algorithm) = (value(saved, "algorithm"), value(now, "algorithm"));
        let mut differ = pairs.iter().filter(|(_, saved, now)| saved != now);
        if saved_algorithm != algorithm {
            let because: String = differ
                .map(|(k, saved, now)| {
                    format!(
                        "; state_dict has {k}={}, this sampler {}",
                        repr(saved),
                        repr(now)
                    )
                })
                .collect();
            return Err(Error::Invalid(format!(
                "state_dict is for algorithm {}, this sampler runs {}; the saved order cannot \
                 be reproduced{because}",
                repr(&saved_algorithm),
                repr(&algorithm)
            )));
        }
        if let Some((k, saved, now)) = differ.next() {
            return Err(Error::Invalid(format!(
                "state_dict has {k}={} but this sampler has {k}={}; build the sampler with \
                 the same {k} to resume",
                repr(saved),
                repr(now)
            )));
        }
        Ok(())
    }
}

impl Sharding {
    /// The fields a state dict records of this epoch, in its order.
    pub fn values(&self) -> Vec<(&'static str, Value)> {
        saved_values!(self,
            "block_size" => Value::Int(self.block_size.into()),
            "window_blocks" => Value::Int(self.window_blocks.into()),
        )
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
        let mut sharding = Sharding::new(
            saved.int("n")?,
            saved.int("num_replicas")?,
            saved.int("seed")?,
            saved.int("epoch")?,
            saved.flag("shuffle"),
            saved.flag("drop_last"),
            saved.int("block_size")?,
            saved.int("window_blocks")?,
        )?
        .with_permutation(Version::of_order(algorithm).unwrap_or(Version::DEFAULT));
        let ids = saved.ids("exclude")?;
        if !ids.is_empty() {
            let exclusions = Exclusions::new(ids, sharding.n)?;
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
                sharding.n, sharding.num_replicas
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

/// What decides a token-budget epoch (the plan itself is [`crate::TokenBudget`]): the
/// epoch's fields, the permutation its samples and steps are ordered by, the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetEpoch {
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
    /// Drop a last step that not every rank can fill (else pad it).
    pub drop_last: bool,
    /// The permutation of the order and of each window's steps.
    pub permutation: Version,
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
        if epoch.n == 0 {
            return Err(Error::EmptyDomain);
        }
        if epoch.num_replicas == 0 {
            return Err(Error::InvalidReplicas {
                num_replicas: epoch.num_replicas,
            });
        }
        if epoch.max_tokens == 0 || epoch.window == 0 {
            return Err(Error::Invalid(format!(
                "max_tokens ({}) and window ({}) must be at least 1",
                epoch.max_tokens, epoch.window
            )));
        }
        if epoch.window < epoch.num_replicas {
            return Err(Error::Invalid(format!(
                "window ({}) must be at least num_replicas ({})",
                epoch.window, epoch.num_replicas
            )));
        }
        Ok(epoch)
    }

    /// The algorithm id of the plan (budget-v1, budget-v2 by the permutation): its order
    /// and its dealing.
    pub fn algorithm(&self) -> &'static str {
        self.permutation.id(&BUDGET_ALGORITHMS)
    }

    /// The fields a state dict records of this epoch, in its order.
    pub fn values(&self) -> Vec<(&'static str, Value)> {
        saved_values!(self,
            "max_tokens" => Value::Int(self.max_tokens.into()),
            "window" => Value::Int(self.window.into()),
        )
    }

    /// The state dict of this epoch at `resume`.
    pub fn state(&self, resume: &BudgetResume) -> Vec<(&'static str, Value)> {
        let mut fields = self.values();
        fields.extend([
            ("window_index", Value::Int(resume.window_index.into())),
            ("steps", Value::Int(resume.steps.into())),
            ("taken", Value::Str(base64::encode(&resume.taken))),
        ]);
        BUDGET.write(fields)
    }

    /// The epoch and resume point a state dict records, checked as
    /// [`Sharding::from_state`] checks its own ([`BUDGET`]); whether the resume point fits
    /// the plan is [`crate::BudgetStart`]'s to check.
    pub fn from_state(
        state: &[(String, Value)],
        strict: bool,
    ) -> Result<(BudgetEpoch, BudgetResume), Error> {
        let saved = BUDGET.read(state, strict)?;
        let algorithm = saved.text("algorithm");
        let epoch = BudgetEpoch::new(BudgetEpoch {
            n: saved.int("n")?,
            num_replicas: saved.int("num_replicas")?,
            seed: saved.int("seed")?,
            epoch: saved.int("epoch")?,
            shuffle: saved.flag("shuffle"),
            drop_last: saved.flag("drop_last"),
            permutation: Version::of_order(algorithm).unwrap_or(Version::DEFAULT),
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

/// Standard base64 with padding (RFC 4648 §4), as Python's `base64.b64encode` writes it:
/// the token budget's taken bits travel in a state dict as text.
mod base64 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let word = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// The bytes of `text`, or `None` unless it is padded base64 of this alphabet (what
    /// Python's `b64decode(validate=True)` accepts).
    pub fn decode(text: &str) -> Option<Vec<u8>> {
        let text = text.as_bytes();
        if text.len() % 4 != 0 {
            return None;
        }
        let mut out = Vec::with_capacity(text.len() / 4 * 3);
        for (k, quad) in text.chunks(4).enumerate() {
            let last = k + 1 == text.len() / 4;
            let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
            if pad > 2 || (pad > 0 && !last) {
                return None;
            }
            let mut word = 0u32;
            for &c in &quad[..4 - pad] {
                let v = ALPHABET.iter().position(|&a| a == c)? as u32;
                word = word << 6 | v;
            }
            word <<= 6 * pad as u32;
            let bytes = [(word >> 16) as u8, (word >> 8) as u8, word as u8];
            out.extend_from_slice(&bytes[..3 - pad]);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(state: Vec<(&'static str, Value)>) -> Vec<(String, Value)> {
        state.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn sharding() -> Sharding {
        Sharding::new(1000, 4, 3, 2, true, false, 0, 0).unwrap()
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
        let unshuffled = Sharding::new(10, 2, 0, 0, false, false, 0, 0).unwrap();
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
            err.contains("missing ['consumed'] of a ShardConfig"),
            "{err}"
        );
    }

    #[test]
    fn a_resume_needs_the_same_order() {
        let other = Sharding::new(1000, 8, 4, 0, true, false, 0, 0).unwrap();
        let err = sharding().check_resumable(&other).unwrap_err().to_string();
        assert!(
            err.contains("state_dict has seed=4 but this sampler has seed=3"),
            "{err}"
        );
        let v1 = sharding().with_permutation(Version::V1);
        let err = sharding().check_resumable(&v1).unwrap_err().to_string();
        assert!(
            err.contains("'perm-v1', this sampler runs 'perm-v2'"),
            "{err}"
        );
        assert!(sharding()
            .check_resumable(&Sharding {
                epoch: 9,
                num_replicas: 2,
                ..sharding()
            })
            .is_ok());
    }

    fn budget() -> BudgetEpoch {
        BudgetEpoch::new(BudgetEpoch {
            n: 100,
            num_replicas: 2,
            seed: 1,
            epoch: 0,
            shuffle: true,
            drop_last: false,
            permutation: Version::V2,
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
        assert_eq!(
            Sharding::from_state(&state, true)
                .err()
                .map(|e| e.to_string().contains("missing")),
            Some(true)
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
    fn base64_matches_the_standard() {
        // RFC 4648 §10's vectors.
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, coded) in vectors {
            assert_eq!(base64::encode(plain.as_bytes()), coded);
            assert_eq!(base64::decode(coded).unwrap(), plain.as_bytes());
        }
        for bad in ["Zg=", "Z===", "Zg==Zg==", "Zm9v!A==", "===="] {
            assert_eq!(base64::decode(bad), None, "{bad}");
        }
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(base64::decode(&base64::encode(&bytes)).unwrap(), bytes);
    }
}
