//! [`Page`]: the one shape of every listing, of the store and of coordination alike, and the
//! page size limit. A leaf: the store and the coordination plans both build on it.

/// The largest page of a listing, and the largest chunk of a multi-key script call: a listing
/// asked for more answers this many, with the cursor of the rest.
pub const MAX_PAGE: usize = 1000;

/// One page of a listing and where the next one starts: every listing of the store and of the
/// coordination types answers in this shape ([`MessagePage`](crate::MessagePage),
/// [`RecordPage`](crate::RecordPage), [`UserDataPage`](crate::UserDataPage),
/// [`SchedulePage`](crate::SchedulePage)).
///
/// A page holds at most the limit asked for (clamped to `1..=`[`MAX_PAGE`]). An item deleted
/// while the page was read is left out, so a page can be shorter than the limit even when more
/// follow: only `next` says whether the listing goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T, C = String> {
    /// The page's items, in the listing's order.
    pub items: Vec<T>,
    /// Where the next page starts (hand it back as the listing's `after`); `None` after the
    /// last page.
    pub next: Option<C>,
}

impl<T, C> IntoIterator for Page<T, C> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

/// Clamps a page size to `1..=MAX_PAGE`.
pub(crate) fn clamp_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_clamped() {
        assert_eq!(clamp_limit(0), 1);
        assert_eq!(clamp_limit(10), 10);
        assert_eq!(clamp_limit(usize::MAX), MAX_PAGE);
    }
}
