//! The arrays of a Megatron `.idx`, checked in one pass over their bytes.
//!
//! An `.idx` stores, after a 34-byte header, `int32` sequence lengths, `int64` byte
//! pointers and `int64` document indices, all little-endian and none aligned to its
//! width; the checks read them as bytes, so nothing is copied or realigned.

use crate::error::Error;

fn i64_at(bytes: &[u8], i: usize) -> i64 {
    i64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

/// Checks that the sequences lie end to end from byte 0: `pointers[0] == 0` and
/// `pointers[i + 1] == pointers[i] + lengths[i] * itemsize`, every length `>= 0`. Returns
/// the byte where the last sequence ends (the `.bin`'s size).
///
/// `lengths` holds `k` little-endian `i32`, `pointers` `k` little-endian `i64`.
pub fn check_sequence_layout(lengths: &[u8], pointers: &[u8], itemsize: u64) -> Result<u64, Error> {
    if lengths.len() % 4 != 0 || pointers.len() != 2 * lengths.len() {
        return Err(Error::Invalid(format!(
            "{} bytes of lengths and {} bytes of pointers do not describe the same sequences",
            lengths.len(),
            pointers.len()
        )));
    }
    let mut expected: i64 = 0;
    let pairs = lengths.chunks_exact(4).zip(pointers.chunks_exact(8));
    for (i, (length, pointer)) in pairs.enumerate() {
        let length = i32::from_le_bytes(length.try_into().expect("4 bytes"));
        let pointer = i64::from_le_bytes(pointer.try_into().expect("8 bytes"));
        if length < 0 || pointer != expected {
            return Err(if length < 0 {
                Error::Invalid(format!("sequence {i} has a negative length {length}"))
            } else {
                Error::Invalid(format!(
                    "sequence {i} starts at byte {pointer}, not {expected} (sequences must lie end to end in the .bin)"
                ))
            });
        }
        expected += length as i64 * itemsize as i64;
    }
    Ok(expected as u64)
}

/// Checks document indices (`count` little-endian `i64`): from 0 to `sequences`, never
/// decreasing.
pub fn check_document_indices(indices: &[u8], sequences: u64) -> Result<(), Error> {
    let count = indices.len() / 8;
    if indices.len() % 8 != 0 || count == 0 {
        return Err(Error::Invalid("there are no document indices".into()));
    }
    let (first, last) = (i64_at(indices, 0), i64_at(indices, count - 1));
    if first != 0 || last != sequences as i64 {
        return Err(Error::Invalid(format!(
            "document indices run from {first} to {last}, not from 0 to the {sequences} sequences"
        )));
    }
    let mut previous = 0i64;
    for (i, d) in indices.chunks_exact(8).enumerate().skip(1) {
        let d = i64::from_le_bytes(d.try_into().expect("8 bytes"));
        if d < previous {
            return Err(Error::Invalid(format!(
                "document index {i} is {d}, below the one before it ({previous})"
            )));
        }
        previous = d;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_i32(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn bytes_i64(v: &[i64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_layout_end_to_end_gives_the_bin_size() {
        let lengths = bytes_i32(&[3, 0, 5]);
        let pointers = bytes_i64(&[0, 6, 6]);
        assert_eq!(check_sequence_layout(&lengths, &pointers, 2), Ok(16));
        assert_eq!(check_sequence_layout(&[], &[], 2), Ok(0));
    }

    #[test]
    fn gaps_overlaps_and_negative_lengths_are_named() {
        let lengths = bytes_i32(&[3, 4]);
        let err = check_sequence_layout(&lengths, &bytes_i64(&[0, 7]), 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "sequence 1 starts at byte 7, not 6 (sequences must lie end to end in the .bin)"
        );
        let err = check_sequence_layout(&bytes_i32(&[2, -1]), &bytes_i64(&[0, 4]), 2).unwrap_err();
        assert_eq!(err.to_string(), "sequence 1 has a negative length -1");
        assert!(check_sequence_layout(&lengths, &bytes_i64(&[0]), 2).is_err());
    }

    #[test]
    fn document_indices_run_from_zero_to_the_sequences() {
        assert_eq!(check_document_indices(&bytes_i64(&[0, 2, 2, 5]), 5), Ok(()));
        let err = check_document_indices(&bytes_i64(&[0, 3, 2, 5]), 5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "document index 2 is 2, below the one before it (3)"
        );
        let err = check_document_indices(&bytes_i64(&[0, 4]), 5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "document indices run from 0 to 4, not from 0 to the 5 sequences"
        );
        assert!(check_document_indices(&[], 0).is_err());
    }
}
