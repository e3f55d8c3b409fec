//! Many permutations of one domain, a value through each. A mixture read at random
//! positions meets another pass of a source at almost every slot: one scalar walk per
//! value would leave the vector units idle, so the rounds run over all the values
//! together, each lane with its own permutation's keys.

use super::feistel::{mask, round_fn, round_v2, Feistel, BLOCK, ROUNDS};
use super::{simd, Permutation};
use crate::algorithm::Version;

impl Permutation {
    /// `values[i] = orders[i]`'s π(`values[i]`), for walked permutations (no table) of
    /// one domain (the same `n` and version) and values below `n`: identical to
    /// [`Permutation::forward`] of each, in one batched walk.
    pub(crate) fn map_each(orders: &[&Permutation], values: &mut [u64]) {
        assert_eq!(orders.len(), values.len(), "an order per value");
        for (orders, values) in orders.chunks(BLOCK).zip(values.chunks_mut(BLOCK)) {
            simd::map_each_block(orders, values);
        }
    }

    /// One block of at most `BLOCK` lanes, lane `i` through `orders[i]`: encrypted
    /// together, then the lanes still `>= n` compacted (with their keys) and encrypted
    /// again until none is left, as [`Permutation::map_block_generic`] walks one order.
    #[inline(always)]
    pub(super) fn map_each_block_generic(orders: &[&Permutation], lanes: &mut [u64]) {
        let (n, cipher, len) = (orders[0].n, &orders[0].cipher, lanes.len());
        // Each lane's round keys, round-major (`keys[r * len + lane]`): loaded with the lanes.
        let mut keys = vec![0u64; ROUNDS * len];
        for (lane, order) in orders.iter().enumerate() {
            debug_assert!(order.n == n && order.cipher.version == cipher.version);
            debug_assert!(order.table.is_none(), "a tabled order is read, not walked");
            for (r, &key) in order.cipher.keys.iter().enumerate() {
                keys[r * len + lane] = key;
            }
        }
        encrypt_keyed(cipher, lanes, &keys);
        let mut pending = [0u16; BLOCK];
        let mut count = 0usize;
        for (i, &x) in lanes.iter().enumerate() {
            pending[count] = i as u16;
            count += (x >= n) as usize;
        }
        let (mut walk, mut walk_keys) = (Vec::with_capacity(count), Vec::new());
        while count > 0 {
            walk.clear();
            walk.extend(pending[..count].iter().map(|&i| lanes[i as usize]));
            walk_keys.clear();
            for r in 0..ROUNDS {
                let round = &keys[r * len..(r + 1) * len];
                walk_keys.extend(pending[..count].iter().map(|&i| round[i as usize]));
            }
            encrypt_keyed(cipher, &mut walk, &walk_keys);
            let mut next = 0usize;
            for j in 0..count {
                let i = pending[j] as usize;
                lanes[i] = walk[j];
                pending[next] = i as u16;
                next += (walk[j] >= n) as usize;
            }
            count = next;
        }
    }
}

/// The rounds of `cipher`'s widths and version over `lanes`, lane `i` with its keys
/// `keys[r * lanes.len() + i]`.
#[inline(always)]
fn encrypt_keyed(cipher: &Feistel, lanes: &mut [u64], keys: &[u64]) {
    match cipher.version {
        Version::V1 => rounds(cipher, lanes, keys, round_fn),
        Version::V2 => rounds(cipher, lanes, keys, round_v2),
    }
}

/// Round-major, as [`Permutation::encrypt_block_generic`]: each round runs over all
/// lanes with the same widths, which lets the compiler vectorise the lane loop.
#[inline(always)]
fn rounds(cipher: &Feistel, lanes: &mut [u64], keys: &[u64], f: impl Fn(u64, u64) -> u64) {
    let (mut h, mut l) = (cipher.hi_bits, cipher.lo_bits);
    for round in keys.chunks_exact(lanes.len()) {
        let (mask_h, mask_l) = (mask(h), mask(l));
        for (x, &k) in lanes.iter_mut().zip(round) {
            let lo = *x & mask_l;
            let hi = (*x >> l) ^ (f(lo, k) & mask_h);
            *x = (lo << h) | hi;
        }
        std::mem::swap(&mut h, &mut l);
    }
}

#[cfg(test)]
mod tests {
    use super::super::simd::{available, map_each_block_at};
    use super::*;

    /// Every level's batched walk through many orders agrees with each order's own
    /// forward, for both versions, domains just above a power of two (long walks) and
    /// below one, blocks of one lane to more than a block.
    #[test]
    fn each_value_goes_through_its_own_order() {
        for version in [Version::V1, Version::V2] {
            for n in [(1u64 << 17) + 1, 200_000, 3_000_000_007] {
                let orders: Vec<Permutation> = (0..40u64)
                    .map(|pass| Permutation::of_version(version, n, 7, pass, 3).unwrap())
                    .collect();
                for len in [1usize, 3, 37, BLOCK, BLOCK + 5] {
                    let picks: Vec<&Permutation> =
                        (0..len).map(|i| &orders[(i * 7) % orders.len()]).collect();
                    let values: Vec<u64> = (0..len as u64).map(|i| (i * 7919 + 11) % n).collect();
                    let want: Vec<u64> = (picks.iter().zip(&values))
                        .map(|(order, &v)| order.forward(v).unwrap())
                        .collect();
                    let mut got = values.clone();
                    Permutation::map_each(&picks, &mut got);
                    assert_eq!(got, want, "{version:?} n={n} len={len}");
                    for level in available() {
                        for (lanes, (orders, want)) in
                            (values.chunks(BLOCK)).zip(picks.chunks(BLOCK).zip(want.chunks(BLOCK)))
                        {
                            let mut lanes = lanes.to_vec();
                            map_each_block_at(level, orders, &mut lanes);
                            assert_eq!(lanes, want, "{level:?} {version:?} n={n} len={len}");
                        }
                    }
                }
            }
        }
    }
}
