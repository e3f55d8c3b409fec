//! Vose's alias method: a table of N columns, each a threshold and an alias, from which one
//! draw costs a column choice and a comparison.

use crate::error::Error;

/// The alias table of N weights: 16 bytes per weight.
#[derive(Clone, Debug)]
pub struct AliasTable {
    /// Column `i` keeps `i` when the second hash is below `threshold[i]` (`prob · 2^64`).
    threshold: Vec<u64>,
    /// Else it gives `alias[i]`.
    alias: Vec<u64>,
}

impl AliasTable {
    /// The table of `weights` (checked by the caller: finite, `>= 0`, a positive, finite sum).
    ///
    /// Built by sweeping (Hübschle-Schneider and Sanders): one cursor over the light
    /// columns (scaled weight below 1), one over the heavy ones; the current heavy column
    /// fills light columns in index order until what is left of it is light, and then its
    /// own column takes the next heavy one as its alias. Both cursors only move forward
    /// and no work list is kept: 16 bytes per weight, read in order.
    pub fn new(weights: &[f64]) -> Result<AliasTable, Error> {
        let n = weights.len();
        let sum: f64 = weights.iter().sum();
        let scale = n as f64 / sum;
        let mut prob: Vec<f64> = try_vec(n)?;
        prob.extend(weights.iter().map(|&w| w * scale));
        let mut alias: Vec<u64> = try_vec(n)?;
        alias.extend(0..n as u64);
        // Light or heavy by the scaled weight as given (a heavy column's entry is rewritten
        // once it turns light, and it must not be filled again).
        let is_light = |k: usize| weights[k] * scale < 1.0;
        let next_light = |from: usize| (from..n).find(|&k| is_light(k)).unwrap_or(n);
        let next_heavy = |from: usize| (from..n).find(|&k| !is_light(k)).unwrap_or(n);
        let mut light = next_light(0);
        let mut heavy = next_heavy(0);
        // The light columns below `light` are done; `heavy`'s column has `left` to give.
        let mut left = if heavy < n { prob[heavy] } else { 0.0 };
        while heavy < n {
            if left > 1.0 {
                if light == n {
                    break;
                }
                alias[light] = heavy as u64;
                left = (left + prob[light]) - 1.0;
                light = next_light(light + 1);
            } else {
                let next = next_heavy(heavy + 1);
                if next == n {
                    break;
                }
                prob[heavy] = left;
                alias[heavy] = next as u64;
                left = (prob[next] + left) - 1.0;
                heavy = next;
            }
        }
        // What rounding leaves over keeps itself (the current heavy, the heavy columns
        // after it, light ones not reached), but a zero weight never does.
        let fallback = weights.iter().position(|&w| w > 0.0).unwrap_or(0) as u64;
        let unfilled = (light..n).filter(|&k| is_light(k)); // the light cursor never got there
        let leftover: Vec<usize> = (heavy..n)
            .filter(|&k| !is_light(k))
            .chain(unfilled)
            .collect();
        for k in leftover {
            if weights[k] > 0.0 {
                prob[k] = 1.0;
                alias[k] = k as u64;
            } else {
                prob[k] = 0.0;
                alias[k] = fallback;
            }
        }
        let threshold = prob.into_iter().map(threshold_of).collect();
        Ok(AliasTable { threshold, alias })
    }

    /// Number of columns (weights).
    pub fn len(&self) -> u64 {
        self.threshold.len() as u64
    }

    /// Always `false`: a table has at least one column.
    pub fn is_empty(&self) -> bool {
        self.threshold.is_empty()
    }

    /// The draw of two independent uniform 64-bit values: `column` picks the column (by
    /// its high bits, `column · N / 2^64`), `coin` keeps it or takes its alias.
    #[inline]
    pub fn draw(&self, column: u64, coin: u64) -> u64 {
        let i = ((u128::from(column) * self.threshold.len() as u128) >> 64) as usize;
        if coin < self.threshold[i] {
            i as u64
        } else {
            self.alias[i]
        }
    }
}

/// `prob · 2^64` as an integer threshold; `prob >= 1` keeps the column always.
fn threshold_of(prob: f64) -> u64 {
    if prob >= 1.0 {
        u64::MAX
    } else {
        (prob * 18_446_744_073_709_551_616.0) as u64 // saturating; 0 for prob <= 0
    }
}

/// An empty vector with room for `n` items, or `OutOfMemory` (never an abort).
fn try_vec<T>(n: usize) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        bytes: n as u128 * std::mem::size_of::<T>() as u128,
        what: "the alias table of the weights",
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probability of each outcome, summed exactly over the table's columns.
    fn probabilities(table: &AliasTable) -> Vec<f64> {
        let n = table.len() as usize;
        let mut p = vec![0.0; n];
        for i in 0..n {
            let keep = table.threshold[i] as f64 / 18_446_744_073_709_551_616.0;
            p[i] += keep / n as f64;
            p[table.alias[i] as usize] += (1.0 - keep) / n as f64;
        }
        p
    }

    #[test]
    fn the_table_holds_the_weights_exactly() {
        for weights in [
            vec![1.0, 2.0, 3.0, 4.0],
            vec![0.0, 5.0, 0.0, 1e-9, 7.5],
            vec![1.0; 17],
            (1..=1000).map(|i| (i * i % 97) as f64).collect::<Vec<_>>(),
            // Random weights, a third of them zero, over 12 orders of magnitude.
            (0..3000u64)
                .map(|i| {
                    let h = crate::splitmix::splitmix64(i);
                    if h % 3 == 0 {
                        0.0
                    } else {
                        10f64.powi((h >> 8) as i32 % 12) * ((h >> 20) % 1000) as f64
                    }
                })
                .collect::<Vec<_>>(),
        ] {
            let sum: f64 = weights.iter().sum();
            let p = probabilities(&AliasTable::new(&weights).unwrap());
            for (i, (&w, &q)) in weights.iter().zip(&p).enumerate() {
                // A column holds 1/n; the sweep's running remainder rounds at each step.
                let tolerance = 1e-9 / weights.len() as f64;
                assert!(
                    (w / sum - q).abs() < tolerance,
                    "weight {i}: {} vs {q}",
                    w / sum
                );
                if w == 0.0 {
                    assert_eq!(q, 0.0);
                }
            }
        }
    }
}
