//! A mixture's weights as exact integers.

use crate::error::Error;

/// The weights' total when they must be scaled (they do not share a 63-bit scale).
const SCALED_TOTAL: f64 = (1u64 << 62) as f64;

/// Exact integer weights proportional to `weights` (see the module docs); `stage` names
/// the weights in messages (empty for a mixture's only weights).
pub(super) fn integer_weights(weights: &[f64], stage: &str) -> Result<Vec<u64>, Error> {
    if let Some((s, w)) = weights
        .iter()
        .enumerate()
        .find(|(_, w)| !w.is_finite() || **w < 0.0)
    {
        return Err(Error::Invalid(format!(
            "weights must be finite and >= 0, got weights[{s}] = {w}{stage}"
        )));
    }
    if weights.iter().all(|&w| w == 0.0) {
        return Err(Error::Invalid(format!(
            "all weights are 0{stage}: give at least one source a positive weight"
        )));
    }
    // w = mantissa · 2^exponent, exactly.
    let parts: Vec<(u64, i32)> = weights
        .iter()
        .map(|&w| {
            if w == 0.0 {
                return (0, 0);
            }
            let bits = w.to_bits();
            let exponent = ((bits >> 52) & 0x7ff) as i32;
            let fraction = bits & ((1 << 52) - 1);
            if exponent == 0 {
                (fraction, -1074) // subnormal
            } else {
                (fraction | (1 << 52), exponent - 1075)
            }
        })
        .collect();
    let low = parts
        .iter()
        .filter(|(m, _)| *m > 0)
        .map(|(m, e)| e + m.trailing_zeros() as i32)
        .min()
        .unwrap_or(0);
    let exact: Option<Vec<u64>> = parts
        .iter()
        .map(|&(m, e)| {
            if m == 0 {
                return Some(0);
            }
            let shift = e - low; // >= -trailing_zeros(m): exact
            let m = if shift >= 0 {
                m.checked_shl(shift as u32)
                    .filter(|v| v >> shift == m && shift < 64)?
            } else {
                m >> (-shift)
            };
            Some(m)
        })
        .collect();
    if let Some(q) = exact {
        if q.iter()
            .try_fold(0u64, |acc, &v| acc.checked_add(v))
            .is_some_and(|t| t < 1 << 63)
        {
            return Ok(q);
        }
    }
    let total: f64 = weights.iter().sum();
    Ok(weights
        .iter()
        .map(|&w| (w / total * SCALED_TOTAL) as u64)
        .collect())
}
