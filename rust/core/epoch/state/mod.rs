//! What a state dict of an epoch holds, in one place: the keys of every family of epoch
//! ([`Sharding`]'s round-robin and step samplers, [`BudgetEpoch`]'s token budget), their
//! types, the keys of earlier releases (added since, or retired), writing a state and
//! reading one back checked (strict or not), and whether it resumes under another epoch.
//!
//! A binding hands a state over as `(key, Value)` pairs and gets the same back: it keeps
//! no list of keys.

use crate::error::Error;

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
    /// A list of lists of integers (a run's history, a row per segment).
    Rows(Vec<Vec<i128>>),
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
    Rows,
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
    /// The samplers whose state dicts these are, as the user knows them.
    saved_by: &'static str,
    keys: &'static [Key],
    /// The saved fields that decide the order, beside `algorithm`, `n` and `seed`: named
    /// when a state's algorithm does not follow from them.
    order_keys: &'static [&'static str],
}

/// The state of a [`Sharding`](crate::Sharding): the epoch, its blocks, the global
/// positions consumed and the excluded ids. 0.1 wrote no block fields.
pub const SHARD: Schema = Schema {
    name: "ShardConfig",
    saved_by: "ShardedSampler (or a ShardedBatchSampler or StepBatchSampler)",
    keys: epoch_keys![
        key("kind", Kind::Str, Presence::WhenNotEmpty),
        key("block_size", Kind::Int, Presence::Since(0)),
        key("window_blocks", Kind::Int, Presence::Since(0)),
        key("consumed", Kind::Int, Presence::Always),
        key("exclude", Kind::Ids, Presence::WhenNotEmpty),
        key("weight_changes", Kind::Int, Presence::Since(0)),
        key("history", Kind::Rows, Presence::WhenNotEmpty),
    ],
    order_keys: &["shuffle", "drop_last", "block_size", "window_blocks"],
};

/// The state of a [`BudgetEpoch`]: the epoch, its budget, and the resume point (the
/// window being planned, its steps done, its samples taken before, as base64 bits). 0.3
/// wrote the block fields of a sharded epoch, always 0.
pub const BUDGET: Schema = Schema {
    name: "BudgetConfig",
    saved_by: "TokenBudgetBatchSampler",
    keys: epoch_keys![
        key("kind", Kind::Str, Presence::WhenNotEmpty),
        key("max_tokens", Kind::Int, Presence::Always),
        key("window", Kind::Int, Presence::Always),
        key("window_index", Kind::Int, Presence::Always),
        key("steps", Kind::Int, Presence::Always),
        key("taken", Kind::Str, Presence::Always),
        key("history", Kind::Rows, Presence::WhenNotEmpty),
        key("history_taken", Kind::Str, Presence::WhenNotEmpty),
        key("block_size", Kind::Int, Presence::Retired(0)),
        key("window_blocks", Kind::Int, Presence::Retired(0)),
    ],
    order_keys: &["shuffle", "drop_last", "max_tokens", "window"],
};

/// One layer of an iterable's state: a run before a resume ([`crate::Layer`]).
pub const LAYER: Schema = Schema {
    name: "ShardedIterable layer",
    saved_by: "ShardedIterable",
    keys: &[
        key("dealt", Kind::Str, Presence::Always),
        key("ranks", Kind::Int, Presence::Always),
        key("workers", Kind::Int, Presence::Always),
        key("batch_size", Kind::Int, Presence::Always),
        key("batches", Kind::Int, Presence::Always),
    ],
    order_keys: &[],
};

/// What a weighted stream adds to its sharded epoch's state ([`crate::Weights`]): the
/// draws' id, the weights' digest, their number and `replacement`.
pub const DRAWS: Schema = Schema {
    name: "WeightedShardedSampler",
    saved_by: "WeightedShardedSampler",
    keys: &[
        key("draws", Kind::Str, Presence::Always),
        key("weights", Kind::Str, Presence::Always),
        key("num_weights", Kind::Int, Presence::Always),
        key("replacement", Kind::Bool, Presence::Always),
    ],
    order_keys: &[],
};

/// The kinds of run a state dict names in its `"kind"` (0.7 on; a state of 0.1-0.6 names
/// none): an item, batch or step sampler's, a weighted stream's, a token budget's, a torchft
/// loader's committed reads.
pub const KINDS: [&str; 4] = ["sharded", "weighted", "budget", "committed"];

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

    /// The kind of run the state names, one of `allowed` (of [`KINDS`]); `None` for a state
    /// of 0.1-0.6, which names none.
    pub fn kind(&self, allowed: &[&str]) -> Result<Option<&str>, Error> {
        match self.get("kind") {
            None => Ok(None),
            Some(Value::Str(kind)) if allowed.contains(&kind.as_str()) => Ok(Some(kind)),
            Some(other) => Err(Error::Invalid(format!(
                "state_dict['kind'] is {}, not {}: a state of another kind of run; load it \
                 where a {} state loads",
                repr(other),
                allowed
                    .iter()
                    .map(|k| py_str(k))
                    .collect::<Vec<_>>()
                    .join(" or "),
                match other {
                    Value::Str(k) => k.as_str(),
                    _ => "sampler's",
                }
            ))),
        }
    }

    /// The string at `name`.
    pub fn text(&self, name: &str) -> &str {
        match self.get(name) {
            Some(Value::Str(s)) => s,
            _ => "",
        }
    }

    /// The rows at `name` (none when absent).
    pub fn rows(&self, name: &str) -> &[Vec<i128>] {
        match self.get(name) {
            Some(Value::Rows(rows)) => rows,
            _ => &[],
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
        let missing = self.missing(state);
        if !missing.is_empty() {
            if let Some(other) = [&SHARD, &BUDGET]
                .into_iter()
                .find(|other| other.name != self.name && other.missing(state).is_empty())
            {
                return Err(Error::Invalid(format!(
                    "state_dict is a state of another kind of sampler: it was saved by a {}, \
                     not by a {} (it lacks {} of a {}). Load it into a {}",
                    other.saved_by,
                    self.saved_by,
                    py_list(&missing),
                    self.name,
                    other.saved_by
                )));
            }
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
                // An empty list is both no ids and no rows: a binding cannot tell them apart.
                (Some(Value::Ids(ids)), _) if ids.is_empty() && key.kind == Kind::Rows => {
                    Value::Rows(Vec::new())
                }
                (Some(v), _) => v.clone(),
            };
            check_kind(key, &value)?;
            values.push((key.name, value));
        }
        Ok(Saved { values })
    }

    /// The keys every state of this release holds that `state` lacks, in this schema's order.
    pub fn missing(&self, state: &[(String, Value)]) -> Vec<&'static str> {
        self.keys
            .iter()
            .filter(|k| matches!(k.presence, Presence::Always))
            .filter(|k| !state.iter().any(|(name, _)| name == k.name))
            .map(|k| k.name)
            .collect()
    }

    /// Whether `name` is one of this schema's keys.
    pub fn has(&self, name: &str) -> bool {
        self.keys.iter().any(|k| k.name == name)
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
            | (Kind::Rows, Value::Rows(_))
    );
    if ok {
        return Ok(());
    }
    let wanted = match key.kind {
        Kind::Int => "an integer",
        Kind::Bool => "a bool",
        Kind::Str => "a str",
        Kind::Ids => "a list of int sample ids",
        Kind::Rows => "a list of lists of int (a history, as state_dict() writes it)",
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
        Value::Rows(rows) => format!(
            "[{}]",
            rows.iter()
                .map(|row| repr(&Value::Ids(row.clone())))
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
        Value::Ids(_) | Value::Rows(_) => "list",
        Value::Other { type_name, .. } => type_name,
    };
    format!("{type_name} {}", repr(value))
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
            // The first field that differs is why the algorithm does; else the permutation.
            let (fix, why) = match differ.next() {
                Some((k, saved, now)) => (
                    format!("{k}={}", repr(saved)),
                    format!(
                        "state_dict has {k}={}, this sampler {k}={}",
                        repr(saved),
                        repr(now)
                    ),
                ),
                None => match &saved_algorithm {
                    Value::Str(id) => match crate::algorithm::Version::of_order(id) {
                        Some(version) => (
                            format!("algorithm={}", py_str(version.algorithm())),
                            "it is built on another permutation".to_string(),
                        ),
                        None => ("the same fields".to_string(), "another order".to_string()),
                    },
                    _ => ("the same fields".to_string(), "another order".to_string()),
                },
            };
            return Err(Error::Invalid(format!(
                "state_dict was saved by a sampler of algorithm {}, this one runs {} ({why}): \
                 the saved order cannot be reproduced. Build the sampler with {fix} to resume",
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

pub(crate) mod base64;
mod budget;
mod sharding;
mod weighted;

pub use budget::{BudgetEpoch, BudgetResume};
