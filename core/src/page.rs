//! [`Page`]: the one shape of every listing, of the store and of coordination alike, and
//! [`Limit`], the one page size type. A leaf: the store and the coordination plans both build on it.

use crate::error::{ConfigError, Error};

/// The largest page of a listing, and the largest chunk of a multi-key script call: a listing
/// asked for more answers this many, with the cursor of the rest.
pub const MAX_PAGE: usize = 1000;

/// One page of a listing and where the next one starts: every listing of the store and of the
/// coordination types answers in this shape ([`MessagePage`](crate::MessagePage),
/// [`RecordPage`](crate::RecordPage), [`UserDataPage`](crate::UserDataPage),
/// [`SchedulePage`](crate::SchedulePage)).
///
/// Every listing takes the same arguments: its scope (a chat, a user...), then
/// `after: Option<&Cursor>` (the previous page's `next`, `None` for the first page) and a
/// [`Limit`]. A loop over pages reads:
///
/// ```no_run
/// # use botmesh_redis_core::{Error, Executor, Limit, Store};
/// # async fn demo<E: Executor>(store: &Store<E>) -> Result<(), Error> {
/// let mut after = None;
/// loop {
///     let page = store.list_chats(after.as_ref(), Limit::DEFAULT).await?;
///     for chat in &page.items {
///         println!("{} {:?}", chat.id, chat.value);
///     }
///     match page.next {
///         Some(next) => after = Some(next),
///         None => break,
///     }
/// }
/// # Ok(())
/// # }
/// ```
///
/// A page holds at most the limit asked for. An item deleted
/// while the page was read is left out, so a page can be shorter than the limit even when more
/// follow: only `next` says whether the listing goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T, C> {
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

/// How many items a listing page or an outbox claim may hold: at least 1, at most
/// [`MAX_PAGE`]. One type for every listing of the store and of coordination, and for
/// [`Durability::claim`](crate::Durability::claim).
///
/// Why a type and not a bare integer: a zero limit is a mistake (a page of nothing, or a claim
/// that claims nothing, in a loop that never ends), and it is refused once, where the limit is
/// made: at compile time for a constant ([`Limit::of`]), with [`ConfigError::ZeroLimit`] for a
/// value ([`Limit::new`]); a limit above [`MAX_PAGE`] is capped to it (a page
/// is bounded so a script call stays short). `u32`, as the outbox claim always took: a page
/// size is never more than a few thousand.
///
/// ```
/// use botmesh_redis_core::{Limit, MAX_PAGE};
///
/// assert_eq!(Limit::default(), Limit::DEFAULT);
/// assert_eq!(Limit::new(50).unwrap().get(), 50);
/// assert_eq!(Limit::of::<50>(), Limit::new(50).unwrap());
/// assert_eq!(Limit::new(1_000_000).unwrap(), Limit::MAX);
/// assert_eq!(Limit::MAX.get() as usize, MAX_PAGE);
/// assert!(Limit::new(0).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Limit(u32);

impl Limit {
    /// 100: the page size of a listing that names none.
    pub const DEFAULT: Limit = Limit(100);
    /// [`MAX_PAGE`]: the largest page; larger limits are capped to it.
    #[allow(clippy::cast_possible_truncation)]
    pub const MAX: Limit = Limit(MAX_PAGE as u32);
    /// 1: one item at a time.
    pub const ONE: Limit = Limit(1);

    /// A limit of `n` items, capped to [`Limit::MAX`]; [`ConfigError::ZeroLimit`] for 0.
    pub fn new(n: u32) -> Result<Limit, Error> {
        if n == 0 {
            return Err(ConfigError::ZeroLimit { max: Limit::MAX.0 }.into());
        }
        Ok(Limit(n.min(Limit::MAX.0)))
    }

    /// A limit of `N` items known at compile time, capped to [`Limit::MAX`]: `Limit::of::<50>()`.
    /// `Limit::of::<0>()` does not compile.
    ///
    /// ```compile_fail
    /// let nothing = botmesh_redis_core::Limit::of::<0>();
    /// ```
    pub const fn of<const N: u32>() -> Limit {
        const {
            assert!(
                N > 0,
                "a limit of 0: a page or a claim asks for at least 1 item"
            )
        };
        if N > Limit::MAX.0 {
            Limit::MAX
        } else {
            Limit(N)
        }
    }

    /// The number of items, `1..=MAX_PAGE`.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The number of items as a `usize`, for slicing.
    pub(crate) fn items(self) -> usize {
        self.0 as usize
    }
}

impl Default for Limit {
    fn default() -> Self {
        Limit::DEFAULT
    }
}

impl TryFrom<u32> for Limit {
    type Error = Error;

    fn try_from(n: u32) -> Result<Self, Error> {
        Limit::new(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_zero_and_are_capped() {
        assert_eq!(
            Limit::new(0),
            Err(Error::Config(ConfigError::ZeroLimit { max: 1000 }))
        );
        assert_eq!(Limit::new(1), Ok(Limit::ONE));
        assert_eq!(Limit::new(10).map(Limit::get), Ok(10));
        assert_eq!(Limit::new(u32::MAX), Ok(Limit::MAX));
        assert_eq!(Limit::MAX.items(), MAX_PAGE);
    }
}
