//! Weighted sampling without replacement by exponential keys (Efraimidis–Spirakis): item
//! `i` gets key `E_i / w_i` with `E_i = -ln U_i`; the items in increasing key order are
//! distributed as successive draws, each proportional to its weight among those left.

use crate::splitmix::splitmix64;

/// The `k` items of smallest key (ties by index), in increasing key order, for the
/// uniforms keyed by `key`; zero weights are never chosen. One pass over the weights,
/// O(k) memory. `k` must not exceed the number of positive weights.
pub fn smallest_keys(weights: &[f64], key: u64, k: u64) -> Vec<u64> {
    let k = k as usize;
    let mut kept: Vec<(f64, u64)> = Vec::with_capacity(2 * k.min(weights.len()));
    let mut bound = f64::INFINITY; // the k-th smallest key so far, once k are kept
    let by_key = |a: &(f64, u64), b: &(f64, u64)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    for (i, &w) in weights.iter().enumerate() {
        if w <= 0.0 {
            continue;
        }
        let u = uniform(splitmix64(key ^ splitmix64(i as u64)));
        // -ln u >= 1 - u: a key whose lower bound is already past the k-th is out, and
        // its logarithm is never computed (the common case once k keys are kept).
        if kept.len() >= k && (1.0 - u) / w >= bound {
            continue;
        }
        let item_key = -ln(u) / w;
        // Equal to the bound: a later index, so it sorts after the k-th (ties by index).
        if item_key < bound || kept.len() < k {
            kept.push((item_key, i as u64));
            if kept.len() == 2 * k {
                kept.select_nth_unstable_by(k - 1, by_key);
                kept.truncate(k);
                bound = kept.iter().map(|x| x.0).fold(f64::NEG_INFINITY, f64::max);
            }
        }
    }
    kept.sort_unstable_by(by_key);
    kept.truncate(k);
    kept.into_iter().map(|(_, i)| i).collect()
}

/// `U = (h >> 11 + 1/2) / 2^53` in `(0, 1)`.
pub fn uniform(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) * (1.0 / 9_007_199_254_740_992.0)
}

/// The natural logarithm of a positive normal `x`, with IEEE `+ - * /` only (so the same
/// bits on every machine): `x = m · 2^e` with `m` in `(√2/2, √2]`, and
/// `ln m = 2·atanh(s) = 2s(1 + s²/3 + … + s²⁴/25)` for `s = (m − 1)/(m + 1)`, `|s| < 0.172`,
/// by Horner's rule.
pub fn ln(x: f64) -> f64 {
    const LN_2: f64 = std::f64::consts::LN_2;
    const SQRT_2: f64 = std::f64::consts::SQRT_2;
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    // Horner's rule from the highest term: multiplies and adds only (no division per term).
    const ODD_RECIPROCALS: [f64; 12] = [
        1.0 / 23.0,
        1.0 / 21.0,
        1.0 / 19.0,
        1.0 / 17.0,
        1.0 / 15.0,
        1.0 / 13.0,
        1.0 / 11.0,
        1.0 / 9.0,
        1.0 / 7.0,
        1.0 / 5.0,
        1.0 / 3.0,
        1.0,
    ];
    let sum = ODD_RECIPROCALS
        .iter()
        .fold(1.0 / 25.0, |sum, &r| sum * s2 + r);
    2.0 * (s * sum) + e as f64 * LN_2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-ln U` for the `U` of [`uniform`]: an exponential variate.
    fn exponential(h: u64) -> f64 {
        -ln(uniform(h))
    }

    #[test]
    fn ln_agrees_with_the_platforms() {
        for &x in &[
            1e-16,
            1.1e-16,
            0.001,
            0.25,
            0.5,
            0.70,
            0.9999999,
            1.0 - 1e-16,
        ] {
            assert!(
                (ln(x) - x.ln()).abs() <= 4.0 * f64::EPSILON * x.ln().abs().max(1.0),
                "{x}"
            );
        }
    }

    #[test]
    fn the_smallest_keys_match_a_full_sort() {
        let weights: Vec<f64> = (0..5000).map(|i| ((i * 37) % 11) as f64 * 0.5).collect();
        let key = 99;
        let mut all: Vec<(f64, u64)> = (0..weights.len())
            .filter(|&i| weights[i] > 0.0)
            .map(|i| {
                (
                    exponential(splitmix64(key ^ splitmix64(i as u64))) / weights[i],
                    i as u64,
                )
            })
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for k in [1, 2, 7, 100, 1000, all.len()] {
            let expected: Vec<u64> = all[..k].iter().map(|x| x.1).collect();
            assert_eq!(smallest_keys(&weights, key, k as u64), expected, "k={k}");
        }
    }
}
