//! One value held inline, or a vector: the shape of a request's keys and of a plan's batch,
//! which are one element on almost every call.
//!
//! Why not a general small-vector crate: its inline storage carries a length or capacity word
//! beside the element, which took a request past 128 bytes, the size up to which the compiler
//! moves a value with a few vector registers instead of a call to `memcpy`. A request is moved
//! several times a call (into its batch, its step, its request state), and the calls to
//! `memcpy` cost what the saved allocations had (counted with callgrind, docs/performance.md).
//! This enum takes no more room than its one element: the vector's variant hides in a niche of
//! the element.

use std::fmt;
use std::mem;
use std::ops::{Deref, DerefMut};

/// One value, or any number in a vector (none included).
#[derive(Clone)]
pub(crate) enum OneOrVec<T> {
    One(T),
    Vec(Vec<T>),
}

impl<T> OneOrVec<T> {
    /// No values; allocates nothing.
    pub(crate) const fn new() -> Self {
        OneOrVec::Vec(Vec::new())
    }

    /// Takes a vector's values, holding a lone one inline.
    pub(crate) fn from_vec(mut values: Vec<T>) -> Self {
        match values.len() {
            1 => values.pop().map_or_else(Self::new, OneOrVec::One),
            _ => OneOrVec::Vec(values),
        }
    }

    pub(crate) fn push(&mut self, value: T) {
        match self {
            OneOrVec::Vec(values) if values.is_empty() => *self = OneOrVec::One(value),
            OneOrVec::Vec(values) => values.push(value),
            OneOrVec::One(_) => {
                let OneOrVec::One(first) = mem::take(self) else {
                    return;
                };
                *self = OneOrVec::Vec(vec![first, value]);
            }
        }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            OneOrVec::One(value) => std::slice::from_ref(value),
            OneOrVec::Vec(values) => values,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            OneOrVec::One(value) => std::slice::from_mut(value),
            OneOrVec::Vec(values) => values,
        }
    }

    pub(crate) fn into_vec(self) -> Vec<T> {
        match self {
            OneOrVec::One(value) => vec![value],
            OneOrVec::Vec(values) => values,
        }
    }
}

impl<T> Deref for OneOrVec<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> DerefMut for OneOrVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T: fmt::Debug> fmt::Debug for OneOrVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<T> Default for OneOrVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> FromIterator<T> for OneOrVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let Some(first) = iter.next() else {
            return Self::new();
        };
        match iter.next() {
            None => OneOrVec::One(first),
            Some(second) => {
                let mut values = Vec::with_capacity(2 + iter.size_hint().0);
                values.push(first);
                values.push(second);
                values.extend(iter);
                OneOrVec::Vec(values)
            }
        }
    }
}

impl<T> Extend<T> for OneOrVec<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        let iter = iter.into_iter();
        if let OneOrVec::Vec(values) = self {
            values.reserve(iter.size_hint().0);
        }
        for value in iter {
            self.push(value);
        }
    }
}

impl<T> IntoIterator for OneOrVec<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        match self {
            OneOrVec::One(value) => IntoIter::One(Some(value)),
            OneOrVec::Vec(values) => IntoIter::Vec(values.into_iter()),
        }
    }
}

/// The values of a [`OneOrVec`], by value, in order.
#[derive(Clone)]
pub(crate) enum IntoIter<T> {
    One(Option<T>),
    Vec(std::vec::IntoIter<T>),
}

impl<T> IntoIter<T> {
    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            IntoIter::One(value) => value.as_slice(),
            IntoIter::Vec(values) => values.as_slice(),
        }
    }
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            IntoIter::One(value) => value.take(),
            IntoIter::Vec(values) => values.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.as_slice().len();
        (left, Some(left))
    }
}

impl<T> DoubleEndedIterator for IntoIter<T> {
    fn next_back(&mut self) -> Option<T> {
        match self {
            IntoIter::One(value) => value.take(),
            IntoIter::Vec(values) => values.next_back(),
        }
    }
}

impl<T> ExactSizeIterator for IntoIter<T> {}

#[cfg(test)]
mod tests {
    use super::OneOrVec;

    #[test]
    fn values_keep_their_order_from_none_to_many() {
        let mut values = OneOrVec::new();
        assert!(values.as_slice().is_empty());
        values.push(1);
        assert!(matches!(values, OneOrVec::One(1)));
        values.push(2);
        values.extend([3, 4]);
        assert_eq!(values.as_slice(), [1, 2, 3, 4]);
        assert_eq!(
            values.clone().into_iter().rev().collect::<Vec<_>>(),
            [4, 3, 2, 1]
        );
        assert_eq!(values.into_vec(), [1, 2, 3, 4]);
    }

    #[test]
    fn a_lone_value_is_held_inline_however_it_comes() {
        assert!(matches!(OneOrVec::from_vec(vec![7]), OneOrVec::One(7)));
        assert!(matches!([7].into_iter().collect(), OneOrVec::One(7)));
        assert!(matches!(
            OneOrVec::<u8>::from_vec(Vec::new()),
            OneOrVec::Vec(v) if v.is_empty()
        ));
        let mut one = OneOrVec::One(7).into_iter();
        assert_eq!(one.size_hint(), (1, Some(1)));
        assert_eq!(one.next(), Some(7));
        assert_eq!(one.next(), None);
    }

    #[test]
    fn it_takes_no_more_room_than_a_request_or_a_key() {
        use crate::keys::Key;
        use crate::plan::Step;
        use crate::request::Request;
        use crate::value::Value;
        assert_eq!(
            std::mem::size_of::<OneOrVec<Key>>(),
            std::mem::size_of::<Key>()
        );
        assert_eq!(
            std::mem::size_of::<OneOrVec<Request>>(),
            std::mem::size_of::<Request>()
        );
        // A request, and the step that carries it, move without a call to `memcpy`.
        assert!(std::mem::size_of::<Request>() <= 128);
        assert!(std::mem::size_of::<Step<Value>>() <= 128);
    }
}
