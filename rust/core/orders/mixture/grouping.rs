//! A batch's slots grouped by (source, pass), so that each pass's permutation maps its
//! slots together.

/// The slots `0..sources.len()` ordered by `(sources[i], passes[i])`: a source's slots
/// keep their order where their passes already increase (consecutive positions).
pub(super) fn by_source_and_pass(
    sources: &[u64],
    passes: &[u64],
    num_sources: usize,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sources.len()).collect();
    if sources.len() <= 4 * num_sources {
        order.sort_unstable_by_key(|&i| (sources[i], passes[i]));
    } else {
        // Many slots: a counting sort by source, stable, so a source's slots keep
        // their order (consecutive positions: passes already increasing).
        counting_sort(&mut order, num_sources, |i| sources[i] as usize);
        for group in order.chunk_by_mut(|&a, &b| sources[a] == sources[b]) {
            if !group.windows(2).all(|w| passes[w[0]] <= passes[w[1]]) {
                sort_by_pass(group, passes); // slots are written back by index
            }
        }
    }
    order
}

/// Sorts the slots `group` by their pass: a counting sort when the passes span a range
/// not much wider than the group (random positions of a mixture that repeats its sources:
/// a few passes each), a comparison sort otherwise.
fn sort_by_pass(group: &mut [usize], passes: &[u64]) {
    let (lo, hi) = group.iter().fold((u64::MAX, 0), |(lo, hi), &i| {
        (lo.min(passes[i]), hi.max(passes[i]))
    });
    let span = hi - lo + 1;
    if span > 4 * group.len() as u64 {
        group.sort_unstable_by_key(|&i| passes[i]);
        return;
    }
    counting_sort(group, span as usize, |i| (passes[i] - lo) as usize);
}

/// Sorts `slots` by `key(slot)` (below `keys`), stably: O(slots + keys).
fn counting_sort(slots: &mut [usize], keys: usize, key: impl Fn(usize) -> usize) {
    let mut next = vec![0usize; keys + 1];
    for &i in slots.iter() {
        next[key(i) + 1] += 1;
    }
    for k in 0..keys {
        next[k + 1] += next[k];
    }
    let mut sorted = vec![0usize; slots.len()];
    for &i in slots.iter() {
        let k = key(i);
        sorted[next[k]] = i;
        next[k] += 1;
    }
    slots.copy_from_slice(&sorted);
}
