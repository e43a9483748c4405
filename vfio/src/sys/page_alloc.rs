//! Bookkeeping of the 4 KiB pages of one DMA block: first-fit runs of pages with an alignment,
//! freed when the buffer that holds them is dropped. Pure data, no memory behind it.

/// Size of a page handed out, bytes.
pub const PAGE: usize = 4096;

/// Which pages of a block are in use.
#[derive(Debug, Clone)]
pub struct PageMap {
    used: Vec<bool>,
    free: usize,
}

impl PageMap {
    /// A map of `pages` free pages.
    pub fn new(pages: usize) -> PageMap {
        PageMap {
            used: vec![false; pages],
            free: pages,
        }
    }

    /// Pages in the block.
    pub fn pages(&self) -> usize {
        self.used.len()
    }

    /// Free pages.
    pub fn free_pages(&self) -> usize {
        self.free
    }

    /// Takes the first run of `n` free pages whose first page index is a multiple of
    /// `align_pages` (≥ 1); returns that index, or `None` when no run fits.
    pub fn alloc(&mut self, n: usize, align_pages: usize) -> Option<usize> {
        let align = align_pages.max(1);
        if n == 0 || n > self.free {
            return None;
        }
        let mut first = 0;
        while first + n <= self.used.len() {
            match self.used[first..first + n].iter().rposition(|&u| u) {
                None => {
                    self.used[first..first + n]
                        .iter_mut()
                        .for_each(|u| *u = true);
                    self.free -= n;
                    return Some(first);
                }
                Some(busy) => first = (first + busy + 1).div_ceil(align) * align,
            }
        }
        None
    }

    /// Returns pages `first..first+n` (which [`alloc`](Self::alloc) handed out).
    ///
    /// Panics if a page was not in use (a double free is a bug of this crate).
    pub fn free(&mut self, first: usize, n: usize) {
        for u in &mut self.used[first..first + n] {
            assert!(*u, "DMA page {first}+{n} freed twice");
            *u = false;
        }
        self.free += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_with_alignment_and_reuse() {
        let mut m = PageMap::new(512); // one 2 MiB block
        assert_eq!(m.alloc(1, 1), Some(0));
        assert_eq!(m.alloc(3, 1), Some(1));
        assert_eq!(m.alloc(2, 4), Some(4), "aligned to 4 pages (16 KiB)");
        assert_eq!(m.alloc(1, 1), Some(6));
        assert_eq!(m.alloc(16, 16), Some(16));
        assert_eq!(m.free_pages(), 512 - 1 - 3 - 2 - 1 - 16);
        m.free(1, 3);
        assert_eq!(m.alloc(2, 1), Some(1), "freed pages are reused");
        assert_eq!(m.alloc(2, 2), Some(8));
        assert_eq!(m.alloc(512, 1), None);
        assert_eq!(m.alloc(0, 1), None);
        m.free(16, 16);
        m.free(0, 1);
        m.free(1, 2);
        m.free(4, 2);
        m.free(6, 1);
        m.free(8, 2);
        assert_eq!(m.free_pages(), 512);
        assert_eq!(m.alloc(512, 512), Some(0), "whole block again");
        assert_eq!(m.alloc(1, 1), None);
    }

    #[test]
    fn fragmentation_is_handled() {
        let mut m = PageMap::new(8);
        for i in 0..8 {
            assert_eq!(m.alloc(1, 1), Some(i));
        }
        for i in (0..8).step_by(2) {
            m.free(i, 1);
        }
        assert_eq!(m.free_pages(), 4);
        assert_eq!(m.alloc(2, 1), None, "no two adjacent free pages");
        assert_eq!(m.alloc(1, 4), Some(0));
        assert_eq!(m.alloc(1, 4), Some(4));
        assert_eq!(m.alloc(1, 4), None);
        assert_eq!(m.alloc(1, 1), Some(2));
    }

    #[test]
    #[should_panic(expected = "freed twice")]
    fn double_free_panics() {
        let mut m = PageMap::new(4);
        let p = m.alloc(1, 1).unwrap();
        m.free(p, 1);
        m.free(p, 1);
    }
}
