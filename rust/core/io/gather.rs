//! Gathers of a batch out of a memory map: fixed-size records, and token windows cast to
//! int64 in the same pass.
//!
//! A random gather waits on memory, not on arithmetic: each record is a cache (and often
//! a TLB) miss. The loops below ask for the records a few ahead of the one they copy, so
//! several misses are in flight at once, and split a large batch over threads.

use crate::error::Error;

/// Records (or windows) asked for ahead of the one being copied.
const AHEAD: usize = 16;

/// Output bytes below which one thread does the whole batch (a thread costs more).
const THREADED_MIN_BYTES: usize = 4 << 20;

/// The element type of a token file: width in bytes, signedness, byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenType {
    /// 1, 2, 4 or 8.
    pub bytes: usize,
    /// Two's complement when `true`.
    pub signed: bool,
    /// Big-endian when `true` (little-endian otherwise).
    pub big_endian: bool,
}

impl TokenType {
    /// Checks the width.
    pub fn new(bytes: usize, signed: bool, big_endian: bool) -> Result<Self, Error> {
        if !matches!(bytes, 1 | 2 | 4 | 8) {
            return Err(Error::Invalid(format!(
                "token ids of {bytes} bytes cannot be read: expected 1, 2, 4 or 8"
            )));
        }
        Ok(TokenType {
            bytes,
            signed,
            big_endian,
        })
    }

    /// The token at `raw` (exactly `self.bytes` bytes) as int64 (as numpy's `astype`: a
    /// uint64 above 2^63 - 1 wraps).
    #[inline(always)]
    fn decode(self, raw: &[u8]) -> i64 {
        let mut word = [0u8; 8];
        let value = if self.big_endian {
            word[8 - self.bytes..].copy_from_slice(raw);
            u64::from_be_bytes(word)
        } else {
            word[..self.bytes].copy_from_slice(raw);
            u64::from_le_bytes(word)
        };
        let unused = 64 - 8 * self.bytes as u32;
        if self.signed {
            ((value << unused) as i64) >> unused
        } else {
            value as i64
        }
    }
}

/// Index `i` of a sequence of `len` items, counted from the end when negative (numpy's
/// rule), or [`Error::IndexOutOfRange`].
#[inline]
fn resolve(what: &'static str, index: i64, len: u64) -> Result<u64, Error> {
    let resolved = if index < 0 {
        len.checked_sub(index.unsigned_abs())
    } else {
        Some(index as u64).filter(|&i| i < len)
    };
    resolved.ok_or(Error::IndexOutOfRange { what, index, len })
}

/// Hints the CPU to start loading the cache lines of `bytes` (up to `lines` of them).
#[inline(always)]
fn prefetch(bytes: &[u8], lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64).take(lines) {
        // SAFETY: a prefetch is a hint; it never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, lines);
}

/// Runs `work(first_item, items, out_part)` over `out` split into parts of whole items
/// (`item_len` elements each): one part, or one per thread when the batch is large.
fn split<T: Send>(
    out: &mut [T],
    item_len: usize,
    threads: usize,
    work: impl Fn(usize, &mut [T]) -> Result<(), Error> + Sync,
) -> Result<(), Error> {
    let items = out.len().checked_div(item_len).unwrap_or(0);
    let bytes = std::mem::size_of_val(out);
    let threads = if bytes < THREADED_MIN_BYTES {
        1
    } else {
        crate::pool::worker_threads(threads, items as u64)
    };
    if threads <= 1 {
        return work(0, out);
    }
    let per = items.div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = out
            .chunks_mut(per * item_len)
            .enumerate()
            .map(|(k, part)| {
                let work = &work;
                scope.spawn(move || work(k * per, part))
            })
            .collect();
        // Every part's error in order: the first failing index, whatever the threads.
        parts
            .into_iter()
            .try_for_each(|p| p.join().expect("a gather thread panicked"))
    })
}

/// `out[i]` (a record of `record_bytes` bytes) = record `indices[i]` of `source`, a
/// whole number of records; negative indices count from the end. `threads`: `0` for all
/// cores (used only for large batches).
pub fn gather_records(
    source: &[u8],
    record_bytes: usize,
    indices: &[i64],
    out: &mut [u8],
    threads: usize,
) -> Result<(), Error> {
    if record_bytes == 0 || source.len() % record_bytes != 0 {
        return Err(Error::Invalid(format!(
            "a source of {} bytes is not a whole number of {record_bytes}-byte records",
            source.len()
        )));
    }
    if out.len() != indices.len() * record_bytes {
        return Err(Error::Invalid(format!(
            "the batch holds {} bytes, not {} records of {record_bytes} bytes",
            out.len(),
            indices.len()
        )));
    }
    let records = (source.len() / record_bytes) as u64;
    let at = |i: usize| -> Result<&[u8], Error> {
        let r = resolve("row", indices[i], records)? as usize * record_bytes;
        Ok(&source[r..r + record_bytes])
    };
    split(out, record_bytes, threads, |first, part| {
        let count = part.len() / record_bytes;
        for k in 0..count.min(AHEAD) {
            prefetch(at(first + k)?, 4);
        }
        for (k, row) in part.chunks_exact_mut(record_bytes).enumerate() {
            if k + AHEAD < count {
                prefetch(at(first + k + AHEAD)?, 4);
            }
            row.copy_from_slice(at(first + k)?);
        }
        Ok(())
    })
}

/// Where the windows of a dataset of token files lie: file `f` holds windows
/// `[starts[f], starts[f + 1])`, window `w` of it begins at token
/// `bases[f] + shift + (w - starts[f]) * stride` and holds `width` tokens.
#[derive(Clone, Copy, Debug)]
pub struct WindowLayout<'a> {
    /// Cumulative window counts, one more than the files; `starts[0] == 0`.
    pub starts: &'a [u64],
    /// The first token of each file's windows.
    pub bases: &'a [u64],
    /// Tokens added to every window's start (a per-epoch shift).
    pub shift: u64,
    /// Tokens between consecutive windows' starts.
    pub stride: u64,
    /// Tokens per window.
    pub width: usize,
}

impl WindowLayout<'_> {
    /// `(file, first token)` of window `index` (negative: from the end).
    fn locate(&self, index: i64) -> Result<(usize, u64), Error> {
        let total = *self.starts.last().unwrap_or(&0);
        let w = resolve("window", index, total)?;
        // The file whose range holds w: the last start <= w.
        let f = self.starts.partition_point(|&s| s <= w) - 1;
        Ok((
            f,
            self.bases[f] + self.shift + (w - self.starts[f]) * self.stride,
        ))
    }
}

/// `out[i]` = window `indices[i]` of `layout` over `files` (each the bytes of one token
/// file of `token`s), cast to int64: `width` tokens per window, rows of `out`.
pub fn gather_windows(
    files: &[&[u8]],
    token: TokenType,
    layout: WindowLayout<'_>,
    indices: &[i64],
    out: &mut [i64],
    threads: usize,
) -> Result<(), Error> {
    let width = layout.width;
    if layout.starts.len() != files.len() + 1 || layout.bases.len() != files.len() {
        return Err(Error::Invalid(format!(
            "{} files need {} window starts and {} bases, got {} and {}",
            files.len(),
            files.len() + 1,
            files.len(),
            layout.starts.len(),
            layout.bases.len()
        )));
    }
    if width == 0 || out.len() != indices.len() * width {
        return Err(Error::Invalid(format!(
            "the batch holds {} tokens, not {} windows of {width}",
            out.len(),
            indices.len()
        )));
    }
    let at = |i: usize| -> Result<&[u8], Error> {
        let (f, first) = layout.locate(indices[i])?;
        let (begin, end) = (
            first as usize * token.bytes,
            (first as usize + width) * token.bytes,
        );
        files[f].get(begin..end).ok_or_else(|| {
            Error::Invalid(format!(
                "window {} needs tokens [{first}, {}) of file {f}, which holds {}: the layout \
                 does not fit the file",
                indices[i],
                first as usize + width,
                files[f].len() / token.bytes
            ))
        })
    };
    split(out, width, threads, |first, part| {
        let count = part.len() / width;
        for k in 0..count.min(AHEAD) {
            prefetch(at(first + k)?, 2);
        }
        for (k, row) in part.chunks_exact_mut(width).enumerate() {
            if k + AHEAD < count {
                prefetch(at(first + k + AHEAD)?, 2);
            }
            cast(token, at(first + k)?, row);
        }
        Ok(())
    })
}

/// `out[j]` = token `j` of `raw`, as int64; one loop per type, so each vectorises.
fn cast(token: TokenType, raw: &[u8], out: &mut [i64]) {
    macro_rules! each {
        ($t:ty, $from:ident) => {
            for (o, b) in out
                .iter_mut()
                .zip(raw.chunks_exact(std::mem::size_of::<$t>()))
            {
                *o = <$t>::$from(b.try_into().expect("chunk of the type's width")) as i64;
            }
        };
    }
    match (token.bytes, token.signed, token.big_endian) {
        (1, false, _) => each!(u8, from_le_bytes),
        (1, true, _) => each!(i8, from_le_bytes),
        (2, false, false) => each!(u16, from_le_bytes),
        (2, true, false) => each!(i16, from_le_bytes),
        (4, false, false) => each!(u32, from_le_bytes),
        (4, true, false) => each!(i32, from_le_bytes),
        (8, false, false) => each!(u64, from_le_bytes),
        (8, true, false) => each!(i64, from_le_bytes),
        _ => {
            for (o, b) in out.iter_mut().zip(raw.chunks_exact(token.bytes)) {
                *o = token.decode(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain reference: every record by its resolved index.
    fn records_by_hand(source: &[u8], record: usize, indices: &[i64]) -> Vec<u8> {
        let n = (source.len() / record) as i64;
        indices
            .iter()
            .flat_map(|&i| {
                let r = (if i < 0 { i + n } else { i }) as usize;
                source[r * record..(r + 1) * record].to_vec()
            })
            .collect()
    }

    #[test]
    fn records_are_gathered_as_by_hand_on_one_thread_and_several() {
        let source: Vec<u8> = (0..97u32 * 12).map(|b| (b * 7 % 251) as u8).collect();
        for record in [1usize, 3, 12, 97] {
            let n = (source.len() / record) as i64;
            let indices: Vec<i64> = (0..300).map(|k| (k * 37 % (2 * n)) - n).collect();
            let want = records_by_hand(&source, record, &indices);
            for threads in [1, 3] {
                let mut out = vec![0u8; indices.len() * record];
                gather_records(&source, record, &indices, &mut out, threads).unwrap();
                assert_eq!(out, want, "record {record}, threads {threads}");
            }
        }
        let mut none = [];
        gather_records(&source, 12, &[], &mut none, 0).unwrap();
    }

    #[test]
    fn large_batches_split_over_threads_agree() {
        let source: Vec<u8> = (0..1u32 << 16).map(|b| (b % 253) as u8).collect();
        let indices: Vec<i64> = (0..(THREADED_MIN_BYTES / 64 + 5) as i64)
            .map(|k| k * 7919 % 1024)
            .collect();
        let mut out = vec![0u8; indices.len() * 64];
        gather_records(&source, 64, &indices, &mut out, 2).unwrap();
        assert_eq!(out, records_by_hand(&source, 64, &indices));
    }

    #[test]
    fn bad_records_are_refused_by_name() {
        let source = [0u8; 40];
        let mut out = [0u8; 8];
        for bad in [10i64, -11, i64::MIN, i64::MAX] {
            let err = gather_records(&source, 4, &[0, bad], &mut out, 1).unwrap_err();
            assert!(matches!(err, Error::IndexOutOfRange { index, len: 10, .. } if index == bad));
        }
        assert!(gather_records(&source, 3, &[0], &mut out[..3], 1).is_err());
        assert!(gather_records(&source, 4, &[0], &mut out, 1).is_err());
    }

    fn every_type() -> Vec<TokenType> {
        let mut types = Vec::new();
        for bytes in [1, 2, 4, 8] {
            for signed in [false, true] {
                for big_endian in [false, true] {
                    types.push(TokenType::new(bytes, signed, big_endian).unwrap());
                }
            }
        }
        types
    }

    /// Token `t` of a file of values `values`, written in `token`'s encoding.
    fn encode(token: TokenType, values: &[i64]) -> Vec<u8> {
        values
            .iter()
            .flat_map(|&v| {
                let le = v.to_le_bytes();
                let mut raw = le[..token.bytes].to_vec();
                if token.big_endian {
                    raw.reverse();
                }
                raw
            })
            .collect()
    }

    #[test]
    fn windows_are_cast_exactly_for_every_type_and_byte_order() {
        for token in every_type() {
            let bits = 8 * token.bytes as u32;
            // Values over the type's whole range, extremes included.
            let values: Vec<i64> = (0..200i64)
                .map(|k| {
                    let raw = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits);
                    let raw = if k < 4 {
                        [0, 1, u64::MAX >> (64 - bits), 1 << (bits - 1)][k as usize]
                    } else {
                        raw
                    };
                    if token.signed {
                        ((raw << (64 - bits)) as i64) >> (64 - bits)
                    } else {
                        raw as i64
                    }
                })
                .collect();
            let (a, b) = (encode(token, &values[..120]), encode(token, &values[120..]));
            let layout = WindowLayout {
                starts: &[0, 11, 18],
                bases: &[3, 1],
                shift: 2,
                stride: 10,
                width: 6,
            };
            let indices = [0i64, 10, 11, 17, -1, -18, 5];
            let mut out = vec![0i64; indices.len() * 6];
            gather_windows(&[&a, &b], token, layout, &indices, &mut out, 1).unwrap();
            for (row, &w) in out.chunks(6).zip(&indices) {
                let w = if w < 0 { w + 18 } else { w } as usize;
                let (file, first) = if w < 11 {
                    (0, 3 + 2 + w * 10)
                } else {
                    (120, 1 + 2 + (w - 11) * 10)
                };
                assert_eq!(
                    row,
                    &values[file + first..file + first + 6],
                    "{token:?} window {w}"
                );
            }
        }
    }

    #[test]
    fn windows_out_of_range_or_past_a_file_are_refused() {
        let file = vec![0u8; 2 * 100];
        let token = TokenType::new(2, false, false).unwrap();
        let layout = WindowLayout {
            starts: &[0, 9],
            bases: &[0],
            shift: 0,
            stride: 10,
            width: 11,
        };
        let mut out = vec![0i64; 11];
        let err = gather_windows(&[&file], token, layout, &[9], &mut out, 1).unwrap_err();
        assert!(matches!(
            err,
            Error::IndexOutOfRange {
                index: 9,
                len: 9,
                ..
            }
        ));
        let past = WindowLayout {
            shift: 10,
            ..layout
        };
        let err = gather_windows(&[&file], token, past, &[8], &mut out, 1).unwrap_err();
        assert!(err.to_string().contains("does not fit the file"), "{err}");
        assert!(TokenType::new(3, false, false).is_err());
    }
}
