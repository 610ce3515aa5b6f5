//! A part's rows in blocks that never move: growing allocates a block and
//! never copies the rows before it.
//!
//! A rollup split into 256 parts grows each part on its own. In `Vec`s,
//! each doubling copied the part's rows and left the old buffer behind in
//! the allocator, unused by the other parts (all growing past it): a
//! 1.5M-group summary held ~200 MB more resident memory than its rows
//! (the `rollup_memory` example). Here the first block grows like a `Vec`
//! up to [`BLOCK_ROWS`] rows (a small rollup stays small); every later block
//! is allocated at [`BLOCK_ROWS`] rows and never moves. Row `r` is in block
//! `r / BLOCK_ROWS`: one more load (the block's address, in cache) than a
//! `Vec`.

/// Rows per block.
pub(crate) const BLOCK_ROWS: usize = 1 << BLOCK_BITS;
const BLOCK_BITS: u32 = 8;

/// Rows of `width` items each, in blocks of [`BLOCK_ROWS`] rows.
#[derive(Debug, Clone)]
pub(crate) struct Rows<T> {
    width: usize,
    blocks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Rows<T> {
    /// No rows, each to hold `width` items.
    pub(crate) fn new(width: usize) -> Self {
        Self {
            width,
            blocks: Vec::new(),
            len: 0,
        }
    }

    /// Items per row.
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// The number of rows.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Row `row`'s items.
    ///
    /// # Panics
    ///
    /// If `row >= self.len()`.
    #[inline]
    pub(crate) fn row(&self, row: usize) -> &[T] {
        assert!(row < self.len, "row {row} of {}", self.len);
        let at = (row & (BLOCK_ROWS - 1)) * self.width;
        &self.blocks[row >> BLOCK_BITS][at..at + self.width]
    }

    /// Row `row`'s items, to change.
    ///
    /// # Panics
    ///
    /// If `row >= self.len()`.
    #[inline]
    pub(crate) fn row_mut(&mut self, row: usize) -> &mut [T] {
        assert!(row < self.len, "row {row} of {}", self.len);
        let at = (row & (BLOCK_ROWS - 1)) * self.width;
        &mut self.blocks[row >> BLOCK_BITS][at..at + self.width]
    }

    /// Item `item` of row `row`, to change: [`Rows::row_mut`]`(row)[item]`
    /// with two bounds checks instead of five, for callers that touch one
    /// item of many rows and checked `item < self.width()` once for all of
    /// them ([`crate::AggregateStates`]). An `item` past the width would
    /// be an item of the next row (checked in debug builds), never one out
    /// of the blocks.
    ///
    /// # Panics
    ///
    /// If there is no such row.
    #[inline]
    pub(crate) fn item_mut(&mut self, row: usize, item: usize) -> &mut T {
        debug_assert!(item < self.width, "item {item} of {}", self.width);
        // A block holds only its rows' items: a row past the last is out
        // of its block's bounds, or of the blocks'.
        &mut self.blocks[row >> BLOCK_BITS][(row & (BLOCK_ROWS - 1)) * self.width + item]
    }

    /// Item `item` of every row, to change one row's at a time
    /// ([`ItemsMut::at`]): [`Rows::item_mut`] with the blocks and the
    /// width held by the caller's loop, not loaded per row.
    ///
    /// # Panics
    ///
    /// If `item >= self.width()`.
    #[inline]
    pub(crate) fn items_mut(&mut self, item: usize) -> ItemsMut<'_, T> {
        assert!(item < self.width, "item {item} of {}", self.width);
        ItemsMut {
            blocks: &mut self.blocks,
            width: self.width,
            item,
        }
    }

    /// Row `row`'s items, if there is such a row.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> Option<&[T]> {
        (row < self.len).then(|| self.row(row))
    }

    /// Appends a row of exactly `width` items.
    #[inline]
    pub(crate) fn push(&mut self, items: impl IntoIterator<Item = T>) {
        if self.len >> BLOCK_BITS == self.blocks.len() {
            // The first block grows as a Vec does; later ones are whole.
            let rows = if self.blocks.is_empty() {
                0
            } else {
                BLOCK_ROWS
            };
            self.blocks.push(Vec::with_capacity(rows * self.width));
        }
        let block = self.blocks.last_mut().expect("a block for the row");
        let before = block.len();
        block.extend(items);
        assert_eq!(block.len() - before, self.width, "a row has width items");
        self.len += 1;
    }

    /// The first item of row `row` (the row, for rows of one item), if
    /// there is such a row.
    #[inline]
    pub(crate) fn first_of(&self, row: usize) -> Option<&T> {
        self.get(row).and_then(<[T]>::first)
    }

    /// The first item of every row (every item, for rows of one), in
    /// order.
    pub(crate) fn firsts(&self) -> impl Iterator<Item = &T> {
        self.iter().filter_map(<[T]>::first)
    }

    /// Every row, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[T]> {
        (0..self.len).map(|row| self.row(row))
    }

    /// Every item, row by row, by value.
    pub(crate) fn into_items(self) -> impl Iterator<Item = T> {
        self.blocks.into_iter().flatten()
    }

    /// Block `block`'s items, if there is such a block.
    #[inline]
    pub(crate) fn block(&self, block: usize) -> Option<&[T]> {
        self.blocks.get(block).map(Vec::as_slice)
    }

    /// Every block's items, in order.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = &[T]> {
        self.blocks.iter().map(Vec::as_slice)
    }

    /// Bytes allocated for items and blocks.
    pub(crate) fn heap_bytes(&self) -> usize {
        let items: usize = self.blocks.iter().map(Vec::capacity).sum();
        items * std::mem::size_of::<T>() + self.blocks.capacity() * std::mem::size_of::<Vec<T>>()
    }
}

/// Item `item` of every row of a [`Rows`] ([`Rows::items_mut`]).
#[derive(Debug)]
pub(crate) struct ItemsMut<'r, T> {
    blocks: &'r mut [Vec<T>],
    width: usize,
    /// Below `width`.
    item: usize,
}

impl<T> ItemsMut<'_, T> {
    /// Row `row`'s item.
    ///
    /// # Panics
    ///
    /// If there is no such row.
    #[inline]
    pub(crate) fn at(&mut self, row: usize) -> &mut T {
        // A block holds only its rows' items: a row past the last is out
        // of its block's bounds, or of the blocks'.
        &mut self.blocks[row >> BLOCK_BITS][(row & (BLOCK_ROWS - 1)) * self.width + self.item]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Rows read back as pushed, across block edges, at any width.
        #[test]
        fn rows_read_back_as_pushed(width in 0usize..4, count in 0usize..1200) {
            let mut rows = Rows::new(width);
            let item = |row: usize, i: usize| row * 10 + i;
            for row in 0..count {
                rows.push((0..width).map(|i| item(row, i)));
            }
            proptest::prop_assert_eq!(rows.len(), count);
            for row in 0..count {
                let want: Vec<usize> = (0..width).map(|i| item(row, i)).collect();
                proptest::prop_assert_eq!(rows.row(row), want.as_slice());
                proptest::prop_assert_eq!(rows.get(row), Some(want.as_slice()));
            }
            proptest::prop_assert_eq!(rows.get(count), None);
            for i in 0..width {
                let mut items = rows.clone();
                let mut items = items.items_mut(i);
                for row in 0..count {
                    proptest::prop_assert_eq!(*items.at(row), item(row, i));
                }
                for row in 0..count {
                    proptest::prop_assert_eq!(*rows.item_mut(row, i), item(row, i));
                }
            }
            proptest::prop_assert_eq!(rows.iter().count(), count);
            let items: Vec<usize> = rows.clone().into_items().collect();
            let want: Vec<usize> = (0..count).flat_map(|row| (0..width).map(move |i| item(row, i))).collect();
            proptest::prop_assert_eq!(items, want);
            // Only the first block ever grew.
            for block in rows.blocks.iter().skip(1) {
                proptest::prop_assert_eq!(block.capacity(), BLOCK_ROWS * width);
            }
        }
    }
}
