//! Loading memory ahead of a sweep over it.
//!
//! A long sequential sweep over data written long before (millions of inter-token gaps
//! summarised at the end of a replay) waits on memory: the hardware prefetcher follows a
//! stream only within a page, so the loop finds each new page cold, and the processor's window
//! runs only a few cache lines ahead. Asking for the lines a few pages ahead keeps the sweep
//! running at memory bandwidth (twice as fast on the summary of the conversation trace).

/// Bytes a sweep asks for ahead of where it reads.
const AHEAD_BYTES: usize = 4096;

/// Bytes of a cache line: a sweep asks once per line.
const LINE_BYTES: usize = 64;

/// Ask for the cache line holding `items[at]` (or where it would be: any index is allowed,
/// past the end too) to be loaded into the cache. Nothing else changes; no effect on
/// processors other than x86-64.
#[inline(always)]
pub fn prefetch<T>(items: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = items.as_ptr().wrapping_add(at);
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and cannot fault,
        // whatever the address, and SSE (which has it) is part of every x86-64 processor.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, at);
}

/// Items of `T` per cache line, and how many items ahead a sweep over `T` asks for.
const fn stride_and_ahead<T>() -> (usize, usize) {
    let size = if std::mem::size_of::<T>() == 0 {
        1
    } else {
        std::mem::size_of::<T>()
    };
    let per_line = if LINE_BYTES / size == 0 {
        1
    } else {
        LINE_BYTES / size
    };
    (per_line, AHEAD_BYTES / size)
}

/// At item `i` of a sweep through `items`: once per cache line, [`prefetch`] the item
/// [`AHEAD_BYTES`] further on.
#[inline(always)]
pub fn ahead<T>(items: &[T], i: usize) {
    let (per_line, ahead) = stride_and_ahead::<T>();
    if i % per_line == 0 {
        prefetch(items, i + ahead);
    }
}

/// [`prefetch`] the first [`AHEAD_BYTES`] of `items`: a sweep about to reach a next part of
/// its data asks for its start (its own asks run ahead only within the part it reads).
#[inline]
pub fn prefetch_start<T>(items: &[T]) {
    let (per_line, ahead) = stride_and_ahead::<T>();
    for at in (0..ahead.min(items.len())).step_by(per_line) {
        prefetch(items, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_follow_the_item_size() {
        // A 16-byte run: 64 / 16 = 4 a line, 4096 / 16 = 256 ahead.
        assert_eq!(stride_and_ahead::<(f64, u64)>(), (4, 256));
        assert_eq!(stride_and_ahead::<f64>(), (8, 512));
        // Larger than a line: one ask per item.
        assert_eq!(stride_and_ahead::<[u8; 100]>(), (1, 40));
        assert_eq!(stride_and_ahead::<()>(), (64, 4096));
    }

    #[test]
    fn asking_past_the_end_reads_nothing() {
        // Far outside the slice (and any mapping): a read there would crash the test.
        let items = [1u64, 2, 3];
        prefetch(&items, 1 << 40);
        prefetch(&items, usize::MAX);
        ahead(&items, 0);
        prefetch_start(&items);
        prefetch_start::<u64>(&[]);
        assert_eq!(items, [1, 2, 3]);
    }
}
