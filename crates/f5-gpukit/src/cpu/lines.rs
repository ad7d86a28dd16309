//! Buffers that start on a 64-byte cache line. The kernels read their operands a 512-bit vector
//! at a time; from a buffer the allocator placed 16 bytes past a line (its usual alignment for
//! large blocks), every such load straddles two lines and costs two L1 accesses. Packed filter
//! panels, read over and over by the convolution kernels, live in a [`LineVec`] instead.

/// One cache line of plain bytes: a `Vec` of these is allocated with the line's alignment.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; LINE]);

/// Bytes of a cache line: the alignment of [`LineVec`], of the scratch buffers and of
/// [`LineAligned`](super::line_alloc::LineAligned)'s large blocks.
pub(crate) const LINE: usize = 64;

/// Element types a [`LineVec`] may hold: plain numbers, for which every bit pattern (zero
/// included) is a valid value and whose size divides a line.
///
/// # Safety
/// Implementors have no padding, no invalid bit patterns, and a size that divides [`LINE`].
pub(crate) unsafe trait Plain: Copy {}
// SAFETY: plain integers and floats of 1 to 4 bytes.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for i32 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}

/// `len` values of `T`, zero-initialised, whose first value starts a cache line.
#[derive(Clone)]
pub(crate) struct LineVec<T: Plain> {
    lines: Vec<Line>,
    len: usize,
    _values: std::marker::PhantomData<T>,
}

impl<T: Plain> LineVec<T> {
    /// `len` zero values.
    pub(crate) fn zeroed(len: usize) -> Self {
        let lines = vec![Line([0; LINE]); (len * std::mem::size_of::<T>()).div_ceil(LINE)];
        LineVec { lines, len, _values: std::marker::PhantomData }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: the lines hold at least `len · size_of::<T>()` initialised bytes, aligned for
        // any `T` whose size divides a line, and every bit pattern is a valid `T` (`Plain`).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Plain> std::ops::Deref for LineVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Plain> std::ops::DerefMut for LineVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T: Plain + std::fmt::Debug> std::fmt::Debug for LineVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineVec").field("len", &self.len).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::LineVec;

    #[test]
    fn values_start_on_a_line_and_keep_their_length_through_clones() {
        for len in [0usize, 1, 15, 16, 17, 1000, 70_001] {
            let mut v = LineVec::<u32>::zeroed(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 0));
            v.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
            let c = v.clone();
            for w in [&v, &c] {
                assert_eq!(w.as_ptr() as usize % 64, 0, "len {len}: not on a line");
                assert!(w.iter().enumerate().all(|(i, &x)| x == i as u32));
            }
            let bytes = LineVec::<u8>::zeroed(len);
            assert_eq!((bytes.len(), bytes.as_ptr() as usize % 64), (len, 0));
        }
    }
}
