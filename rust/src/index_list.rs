//! Doubly-linked lists threaded through the elements of a slab (a `Vec`), by index.
//!
//! Push, unlink and move-to-back are O(1) and allocate nothing, and an element can sit in
//! several lists at once: it holds one [`Link`] per list, and each list is told apart by a tag
//! type (`IndexList<Lru>` cannot be handed the sibling links of an element). The list itself
//! is two indices, so it can live anywhere, even inside an element of the slab it threads
//! (a tree node's list of children): it is `Copy`, taken out and put back around an update.

use std::fmt;
use std::marker::PhantomData;

/// The index that means "none".
const NIL: u32 = u32::MAX;

/// An element's place in one list: the indices of its neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    prev: u32,
    next: u32,
}

impl Link {
    /// Not in any list.
    pub const fn new() -> Self {
        Link {
            prev: NIL,
            next: NIL,
        }
    }

    /// The element before this one, if any.
    pub fn prev(&self) -> Option<u32> {
        (self.prev != NIL).then_some(self.prev)
    }

    /// The element after this one, if any.
    pub fn next(&self) -> Option<u32> {
        (self.next != NIL).then_some(self.next)
    }
}

impl Default for Link {
    fn default() -> Self {
        Link::new()
    }
}

/// An element with a [`Link`] for the lists tagged `Tag`.
pub trait Linked<Tag> {
    /// The element's link in that list.
    fn link(&self) -> &Link;
    /// The element's link in that list, to update.
    fn link_mut(&mut self) -> &mut Link;
}

/// `linked!(Type, Tag, field)`: `Type` is [`Linked`]`<Tag>` through its `field: Link`.
macro_rules! linked {
    ($ty:ty, $tag:ty, $field:ident) => {
        impl $crate::index_list::Linked<$tag> for $ty {
            fn link(&self) -> &$crate::index_list::Link {
                &self.$field
            }
            fn link_mut(&mut self) -> &mut $crate::index_list::Link {
                &mut self.$field
            }
        }
    };
}
pub(crate) use linked;

/// A doubly-linked list of slab indices, front (oldest pushed) to back.
pub struct IndexList<Tag> {
    head: u32,
    tail: u32,
    tag: PhantomData<fn() -> Tag>,
}

impl<Tag> Clone for IndexList<Tag> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Tag> Copy for IndexList<Tag> {}

impl<Tag> Default for IndexList<Tag> {
    fn default() -> Self {
        IndexList::new()
    }
}

impl<Tag> fmt::Debug for IndexList<Tag> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexList")
            .field("front", &self.front())
            .field("back", &self.back())
            .finish()
    }
}

impl<Tag> IndexList<Tag> {
    /// An empty list.
    pub const fn new() -> Self {
        IndexList {
            head: NIL,
            tail: NIL,
            tag: PhantomData,
        }
    }

    /// Whether the list holds no element.
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// The first element, if any.
    pub fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// The last element, if any.
    pub fn back(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// Append element `i` of `slab`, which must not be in this list.
    pub fn push_back<T: Linked<Tag>>(&mut self, slab: &mut [T], i: u32) {
        debug_assert!(i != NIL, "index {i} is reserved");
        *slab[i as usize].link_mut() = Link {
            prev: self.tail,
            next: NIL,
        };
        match self.tail {
            NIL => self.head = i,
            t => slab[t as usize].link_mut().next = i,
        }
        self.tail = i;
    }

    /// Take element `i` of `slab` out of this list (which must hold it).
    pub fn unlink<T: Linked<Tag>>(&mut self, slab: &mut [T], i: u32) {
        let Link { prev, next } = *slab[i as usize].link();
        match prev {
            NIL => self.head = next,
            p => slab[p as usize].link_mut().next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => slab[n as usize].link_mut().prev = prev,
        }
        *slab[i as usize].link_mut() = Link::new();
    }

    /// Move element `i` (in this list) to the back.
    pub fn move_to_back<T: Linked<Tag>>(&mut self, slab: &mut [T], i: u32) {
        self.unlink(slab, i);
        self.push_back(slab, i);
    }

    /// The elements, front to back.
    pub fn iter<'a, T: Linked<Tag>>(&self, slab: &'a [T]) -> Iter<'a, T, Tag> {
        Iter {
            slab,
            at: self.head,
            forward: true,
            tag: PhantomData,
        }
    }

    /// The elements, back to front.
    pub fn iter_rev<'a, T: Linked<Tag>>(&self, slab: &'a [T]) -> Iter<'a, T, Tag> {
        Iter {
            slab,
            at: self.tail,
            forward: false,
            tag: PhantomData,
        }
    }
}

/// Walks an [`IndexList`] over a slab, yielding indices. The slab is borrowed, so the list
/// cannot change while it is walked.
pub struct Iter<'a, T, Tag> {
    slab: &'a [T],
    at: u32,
    forward: bool,
    tag: PhantomData<fn() -> Tag>,
}

impl<T: Linked<Tag>, Tag> Iterator for Iter<'_, T, Tag> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.at == NIL {
            return None;
        }
        let i = self.at;
        let link = self.slab[i as usize].link();
        self.at = if self.forward { link.next } else { link.prev };
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    struct A;
    struct B;

    #[derive(Default)]
    struct Item {
        a: Link,
        b: Link,
    }

    linked!(Item, A, a);
    linked!(Item, B, b);

    fn items(n: usize) -> Vec<Item> {
        (0..n).map(|_| Item::default()).collect()
    }

    fn forward(list: &IndexList<A>, slab: &[Item]) -> Vec<u32> {
        list.iter(slab).collect()
    }

    #[test]
    fn push_unlink_and_move_keep_the_order() {
        let mut slab = items(4);
        let mut list = IndexList::<A>::new();
        assert!(list.is_empty() && list.front().is_none() && list.back().is_none());
        for i in 0..4 {
            list.push_back(&mut slab, i);
        }
        assert_eq!(forward(&list, &slab), [0, 1, 2, 3]);
        list.unlink(&mut slab, 0); // the front
        list.unlink(&mut slab, 2); // the middle
        assert_eq!(forward(&list, &slab), [1, 3]);
        assert_eq!(slab[2].a, Link::new());
        list.move_to_back(&mut slab, 1);
        assert_eq!(forward(&list, &slab), [3, 1]);
        assert_eq!(list.iter_rev(&slab).collect::<Vec<_>>(), [1, 3]);
        assert_eq!((list.front(), list.back()), (Some(3), Some(1)));
        assert_eq!((slab[3].a.prev(), slab[3].a.next()), (None, Some(1)));
        list.unlink(&mut slab, 3);
        list.unlink(&mut slab, 1); // the last one
        assert!(list.is_empty());
    }

    #[test]
    fn an_element_sits_in_two_lists_independently() {
        let mut slab = items(3);
        let (mut a, mut b) = (IndexList::<A>::new(), IndexList::<B>::new());
        for i in 0..3 {
            a.push_back(&mut slab, i);
            b.push_back(&mut slab, 2 - i);
        }
        a.unlink(&mut slab, 1);
        assert_eq!(forward(&a, &slab), [0, 2]);
        assert_eq!(b.iter(&slab).collect::<Vec<_>>(), [2, 1, 0]);
    }

    #[test]
    fn a_list_can_live_in_its_own_slab() {
        // A tree node's children: the list head sits in the parent, taken out and put back.
        struct Node {
            children: IndexList<A>,
            sibling: Link,
        }
        linked!(Node, A, sibling);
        let mut nodes: Vec<Node> = (0..3)
            .map(|_| Node {
                children: IndexList::new(),
                sibling: Link::new(),
            })
            .collect();
        for child in [1, 2] {
            let mut kids = nodes[0].children;
            kids.push_back(&mut nodes, child);
            nodes[0].children = kids;
        }
        assert_eq!(nodes[0].children.iter(&nodes).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn matches_a_deque_model_on_random_operations() {
        // A fixed pseudo-random sequence (LCG): push absent elements, unlink or move present
        // ones; after every step the list reads as the model, both ways.
        let n = 16u32;
        let mut slab = items(n as usize);
        let mut list = IndexList::<A>::new();
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..5000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let i = ((state >> 33) % u64::from(n)) as u32;
            let present = model.iter().position(|&x| x == i);
            match (present, (state >> 20) % 2) {
                (None, _) => {
                    list.push_back(&mut slab, i);
                    model.push_back(i);
                }
                (Some(at), 0) => {
                    list.unlink(&mut slab, i);
                    model.remove(at);
                }
                (Some(at), _) => {
                    list.move_to_back(&mut slab, i);
                    model.remove(at);
                    model.push_back(i);
                }
            }
            assert_eq!(
                forward(&list, &slab),
                model.iter().copied().collect::<Vec<_>>()
            );
            let back: Vec<u32> = list.iter_rev(&slab).collect();
            assert_eq!(back, model.iter().rev().copied().collect::<Vec<_>>());
            assert_eq!(
                (list.front(), list.back()),
                (model.front().copied(), model.back().copied())
            );
        }
    }
}
