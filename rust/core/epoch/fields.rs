//! The fields of each family of epoch, once: their names, kinds, defaults and help. The
//! Python configurations, the command line's flags and the consensus record are built
//! from these tables, and a test holds the Python classes to them.

/// What values a field takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// An integer in `[0, 2^64 - 1]`.
    Count,
    /// An integer in `[1, 2^64 - 1]`.
    Positive,
    /// A flag.
    Flag,
    /// One of [`Field::choices`].
    Choice,
    /// Sample ids (a file of them on the command line).
    Ids,
}

/// A field's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldDefault {
    /// None: the field must be given.
    Required,
    /// An integer.
    Int(u64),
    /// A flag's value.
    Flag(bool),
    /// A choice.
    Str(&'static str),
    /// No value (no ids).
    Nothing,
}

/// One field of an epoch's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Its name, as Python spells the argument.
    pub name: &'static str,
    /// What values it takes.
    pub kind: FieldKind,
    /// Its default.
    pub default: FieldDefault,
    /// One line for `--help` and the docs.
    pub help: &'static str,
    /// Its command-line flags (empty: `--name-with-dashes`).
    pub flags: &'static [&'static str],
    /// The placeholder of its value in `--help` (empty: the default's).
    pub metavar: &'static str,
    /// The values a [`FieldKind::Choice`] takes.
    pub choices: &'static [&'static str],
    /// How a pass is dealt, not what it holds: agreed by the ranks and named by
    /// certificates, but not written in state dicts (a resume may deal otherwise).
    pub dealing: bool,
    /// The name users pass it by, where it is not [`Field::name`] (messages name it).
    pub argument: &'static str,
}

impl Field {
    /// The name users pass the field by: what messages name.
    pub fn argument(&self) -> &'static str {
        if self.argument.is_empty() {
            self.name
        } else {
            self.argument
        }
    }
}

const fn field(
    name: &'static str,
    kind: FieldKind,
    default: FieldDefault,
    help: &'static str,
) -> Field {
    Field {
        name,
        kind,
        default,
        help,
        flags: &[],
        metavar: "",
        choices: &[],
        dealing: false,
        argument: "",
    }
}

/// The fields every epoch has ([`crate::EpochSpec`]), in order.
pub const EPOCH_FIELDS: [Field; 7] = [
    Field {
        flags: &["-n"],
        ..field(
            "n",
            FieldKind::Positive,
            FieldDefault::Required,
            "dataset length N (1e9 works)",
        )
    },
    Field {
        flags: &["-w", "--world"],
        metavar: "W",
        ..field(
            "num_replicas",
            FieldKind::Positive,
            FieldDefault::Required,
            "number of ranks W",
        )
    },
    field(
        "seed",
        FieldKind::Count,
        FieldDefault::Int(0),
        "key of the order (default 0)",
    ),
    field(
        "epoch",
        FieldKind::Count,
        FieldDefault::Int(0),
        "epoch (default 0)",
    ),
    Field {
        flags: &["--no-shuffle"],
        ..field(
            "shuffle",
            FieldKind::Flag,
            FieldDefault::Flag(true),
            "identity order (DistributedSampler shuffle=False)",
        )
    },
    field(
        "drop_last",
        FieldKind::Flag,
        FieldDefault::Flag(false),
        "drop the tail instead of padding",
    ),
    Field {
        flags: &["--algorithm"],
        choices: &["perm-v2", "perm-v1"],
        argument: "algorithm",
        ..field(
            "permutation",
            FieldKind::Choice,
            FieldDefault::Str("perm-v2"),
            "the keyed permutation of a shuffle (default perm-v2; perm-v1: the order up to 0.3)",
        )
    },
];

/// The fields a round-robin or step epoch ([`crate::Sharding`]) adds, in order.
pub const SHARD_FIELDS: [Field; 6] = [
    field(
        "block_size",
        FieldKind::Count,
        FieldDefault::Int(0),
        "the block order: blocks of this many samples (default 0: none)",
    ),
    field(
        "window_blocks",
        FieldKind::Count,
        FieldDefault::Int(0),
        "the block order: blocks shuffled together",
    ),
    Field {
        choices: &["round-robin", "step"],
        dealing: true,
        ..field(
            "dealing",
            FieldKind::Choice,
            FieldDefault::Str("round-robin"),
            "round-robin: DistributedSampler's (default); step: accelerate's whole batches (StepBatchSampler)",
        )
    },
    Field {
        dealing: true,
        ..field(
            "batch_size",
            FieldKind::Count,
            FieldDefault::Int(0),
            "per-rank batch size (needed for --dealing step)",
        )
    },
    Field {
        dealing: true,
        ..field(
            "drop_last_batch",
            FieldKind::Flag,
            FieldDefault::Flag(false),
            "the batch sampler drops its last partial batch",
        )
    },
    Field {
        metavar: "FILE",
        ..field(
            "exclude",
            FieldKind::Ids,
            FieldDefault::Nothing,
            "sample ids never to read: a text file of ids (one per line) or a .npy",
        )
    },
];

/// The fields a token-budget epoch ([`crate::BudgetEpoch`]) adds, in order.
pub const BUDGET_FIELDS: [Field; 2] = [
    field(
        "max_tokens",
        FieldKind::Positive,
        FieldDefault::Required,
        "the padded token budget of a batch",
    ),
    field(
        "window",
        FieldKind::Positive,
        FieldDefault::Int(1 << 16),
        "positions planned together, >= num_replicas",
    ),
];

/// Every field of a family, `"shard"` or `"budget"`, in order: [`EPOCH_FIELDS`], then
/// its own; `None` for another name.
pub fn fields_of(family: &str) -> Option<Vec<Field>> {
    let own: &[Field] = match family {
        "shard" => &SHARD_FIELDS,
        "budget" => &BUDGET_FIELDS,
        _ => return None,
    };
    Some(EPOCH_FIELDS.iter().chain(own).copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_lists_the_epochs_fields_first_and_no_name_twice() {
        for family in ["shard", "budget"] {
            let fields = fields_of(family).unwrap();
            assert_eq!(&fields[..EPOCH_FIELDS.len()], &EPOCH_FIELDS[..]);
            let mut names: Vec<&str> = fields.iter().map(|f| f.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), fields.len(), "{family}");
            for f in &fields {
                assert_eq!(
                    f.kind == FieldKind::Choice,
                    !f.choices.is_empty(),
                    "{}",
                    f.name
                );
                if let FieldDefault::Str(default) = f.default {
                    assert!(f.choices.contains(&default), "{}", f.name);
                }
            }
        }
        assert!(fields_of("other").is_none());
    }
}
