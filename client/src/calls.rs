//! The callers' inbox of a session task: what callers submit, pushed into a vector under a
//! lock, taken by the session task a batch at a time.
//!
//! Under concurrency every call crosses this inbox once. A channel with a node per message
//! (the futures crate's unbounded channel, used before) cost each call an allocation, a free
//! and a pop of its own; here a submit is a push into a vector whose capacity the next batches
//! reuse (the taken batch's emptied buffer goes back as the queue), and the session task takes
//! everything queued with one swap under the lock.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::mem;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

/// Above this capacity, an emptied buffer is not given back: a burst of calls does not keep
/// its memory for the client's life.
const KEPT_CAPACITY: usize = 4096;

/// What the two ends share.
struct Queue<T> {
    queued: Vec<T>,
    /// The session task, while it waits for a call.
    waker: Option<Waker>,
    /// The session task is gone: nothing more is taken.
    closed: bool,
}

/// The callers' end: cloned into every handle of a lane.
pub(crate) struct CallsTx<T>(Arc<Mutex<Queue<T>>>, Unapplied);

/// How many calls were sent into the inbox and not yet applied by the session task (taken
/// from the inbox is not enough: the session task takes a call before it locks the hub to
/// apply it). A call made while one is counted must go through the inbox too, behind it: a
/// task whose first call found the hub busy and went to the inbox, and whose second found it
/// free, would have its calls written in reverse.
#[derive(Clone, Debug, Default)]
pub(crate) struct Unapplied(Arc<AtomicUsize>);

impl Unapplied {
    /// Whether a call sent into the inbox waits to be applied.
    pub(crate) fn any(&self) -> bool {
        self.0.load(SeqCst) != 0
    }

    /// A call taken from the inbox was applied, under the hub.
    pub(crate) fn applied(&self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// The session task's end, with the batch it took last.
pub(crate) struct CallsRx<T> {
    queue: Arc<Mutex<Queue<T>>>,
    taken: VecDeque<T>,
}

/// A new inbox, and its count of calls not yet applied.
pub(crate) fn inbox<T>() -> (CallsTx<T>, CallsRx<T>, Unapplied) {
    let queue = Arc::new(Mutex::new(Queue {
        queued: Vec::new(),
        waker: None,
        closed: false,
    }));
    let rx = CallsRx {
        queue: Arc::clone(&queue),
        taken: VecDeque::new(),
    };
    let unapplied = Unapplied::default();
    (CallsTx(queue, unapplied.clone()), rx, unapplied)
}

/// Every critical section is a push or a swap, which cannot panic halfway: a poisoned lock
/// still guards a whole queue.
fn lock<T>(queue: &Mutex<Queue<T>>) -> MutexGuard<'_, Queue<T>> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T> Clone for CallsTx<T> {
    fn clone(&self) -> Self {
        CallsTx(Arc::clone(&self.0), self.1.clone())
    }
}

impl<T> CallsTx<T> {
    /// Queues `msg`, counted until the session task applies it ([`Unapplied`]), waking the
    /// session task if it waits; gives `msg` back when the task has ended.
    pub(crate) fn send(&self, msg: T) -> Result<(), T> {
        let mut queue = lock(&self.0);
        if queue.closed {
            return Err(msg);
        }
        self.1 .0.fetch_add(1, SeqCst);
        queue.queued.push(msg);
        let waker = queue.waker.take();
        drop(queue);
        // Woken outside the lock: the task's first act is to take it.
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }
}

impl<T> CallsRx<T> {
    /// The next call, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<T> {
        if self.taken.is_empty() {
            let mut queue = lock(&self.queue);
            take(&mut self.taken, &mut queue);
        }
        self.taken.pop_front()
    }

    /// The next call; waits for one.
    pub(crate) async fn recv(&mut self) -> T {
        poll_fn(|cx| {
            if let Some(msg) = self.taken.pop_front() {
                return Poll::Ready(msg);
            }
            let mut queue = lock(&self.queue);
            take(&mut self.taken, &mut queue);
            match self.taken.pop_front() {
                Some(msg) => Poll::Ready(msg),
                None => {
                    match &mut queue.waker {
                        Some(waker) if waker.will_wake(cx.waker()) => {}
                        slot => *slot = Some(cx.waker().clone()),
                    }
                    Poll::Pending
                }
            }
        })
        .await
    }
}

/// Takes what is queued into `taken` (empty), giving the emptied buffer of the last batch back
/// as the queue.
fn take<T>(taken: &mut VecDeque<T>, queue: &mut Queue<T>) {
    // Empty, so the conversion moves nothing; the capacity stays.
    let mut spare = Vec::from(mem::take(taken));
    if spare.capacity() > KEPT_CAPACITY {
        spare = Vec::new();
    }
    mem::swap(&mut queue.queued, &mut spare);
    *taken = VecDeque::from(spare);
}

impl<T> Drop for CallsRx<T> {
    fn drop(&mut self) {
        let queued = {
            let mut queue = lock(&self.queue);
            queue.closed = true;
            queue.waker = None;
            mem::take(&mut queue.queued)
        };
        // Dropped outside the lock: dropping a call tells its caller, who may send again.
        drop(queued);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake};

    use super::*;
    use futures_lite::future;

    #[test]
    fn calls_come_out_in_order_across_batches() {
        let (tx, mut rx, _) = inbox();
        for n in 0..3 {
            tx.send(n).unwrap();
        }
        assert_eq!(rx.try_recv(), Some(0));
        tx.send(3).unwrap();
        assert_eq!(
            (rx.try_recv(), rx.try_recv(), rx.try_recv()),
            (Some(1), Some(2), Some(3))
        );
        assert_eq!(rx.try_recv(), None);
        tx.send(4).unwrap();
        assert_eq!(future::block_on(rx.recv()), 4);
    }

    /// Counts its wakes.
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_send_wakes_the_waiting_task_once() {
        let (tx, mut rx, _) = inbox();
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let mut recv = Box::pin(rx.recv());
        assert_eq!(recv.as_mut().poll(&mut cx), Poll::Pending);
        tx.send(7).unwrap();
        // The second send finds the task already woken, not yet back: no second wake.
        tx.send(8).unwrap();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert_eq!(recv.as_mut().poll(&mut cx), Poll::Ready(7));
        drop(recv);
        assert_eq!(rx.try_recv(), Some(8));
    }

    #[test]
    fn an_ended_task_gives_calls_back_and_drops_the_queued() {
        let (tx, rx, _) = inbox();
        let queued = Arc::new(());
        tx.send(Arc::clone(&queued)).unwrap();
        drop(rx);
        assert_eq!(Arc::strong_count(&queued), 1, "the queued call was dropped");
        let refused = tx.send(Arc::clone(&queued)).unwrap_err();
        assert!(Arc::ptr_eq(&refused, &queued));
    }

    #[test]
    fn a_call_counts_from_its_send_until_it_is_applied() {
        let (tx, mut rx, unapplied) = inbox();
        assert!(!unapplied.any());
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        // Taken is not applied: the session task takes a call before it locks the hub.
        assert_eq!(rx.try_recv(), Some(1));
        assert!(unapplied.any());
        unapplied.applied();
        assert!(unapplied.any(), "the second call is still to apply");
        assert_eq!(rx.try_recv(), Some(2));
        unapplied.applied();
        assert!(!unapplied.any());
        // A call the ended task refuses is not counted.
        drop(rx);
        assert_eq!(tx.send(3), Err(3));
        assert!(!unapplied.any());
    }

    #[test]
    fn a_batch_buffer_is_reused() {
        let (tx, mut rx, _) = inbox();
        for n in 0..64 {
            tx.send(n).unwrap();
        }
        while rx.try_recv().is_some() {}
        // The next batch is queued into the buffer the last one was taken in.
        assert!(lock(&tx.0).queued.capacity() >= 64);
    }
}
