//! A bounded queue from producers to one consumer, waking a waiting
//! producer only once the queue has drained to half.
//!
//! A queue that wakes its producer at every item taken (as `sync_channel`
//! does when it is full) makes a fast producer and a slower consumer trade
//! a wake-up per item: with 64 KiB batches of W1 that cost the continuous
//! engine 20% of its CPU time (0.77-0.85x of `execute`'s events per
//! CPU-second, against 1.0x with a queue that never filled). Waking the
//! producer at half makes it one wake-up per half a queue of items.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Why an item was not queued; the item comes back.
#[derive(Debug)]
pub(crate) enum PushError<T> {
    /// The queue is full (and the caller would not wait).
    Full(T),
    /// The consumer is gone.
    Gone(T),
}

#[derive(Debug)]
struct State<T> {
    items: VecDeque<T>,
    /// No more items will be pushed: the consumer ends once it has taken
    /// the rest.
    closed: bool,
    /// The consumer has stopped taking items.
    gone: bool,
    /// Producers waiting for room.
    producers_waiting: usize,
    /// Whether the consumer waits for an item.
    consumer_waiting: bool,
}

/// A bounded queue of `T` (see the module doc).
#[derive(Debug)]
pub(crate) struct Queue<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    capacity: usize,
}

impl<T> Queue<T> {
    /// A queue of at most `capacity` items (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            state: Mutex::new(State {
                items: VecDeque::with_capacity(capacity),
                closed: false,
                gone: false,
                producers_waiting: 0,
                consumer_waiting: false,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Items queued now (for metrics: stale as soon as it is read).
    pub(crate) fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// The most items it holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queues `item`, waiting for room if `wait`.
    pub(crate) fn push(&self, item: T, wait: bool) -> Result<(), PushError<T>> {
        let mut state = self.lock();
        loop {
            if state.gone {
                return Err(PushError::Gone(item));
            }
            if state.items.len() < self.capacity {
                state.items.push_back(item);
                if state.consumer_waiting {
                    self.not_empty.notify_one();
                }
                return Ok(());
            }
            if !wait {
                return Err(PushError::Full(item));
            }
            state.producers_waiting += 1;
            state = self
                .not_full
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.producers_waiting -= 1;
        }
    }

    /// The next item, waiting for one; `None` once the queue is closed and
    /// empty.
    pub(crate) fn pop(&self) -> Option<T> {
        let mut state = self.lock();
        loop {
            if let Some(item) = state.items.pop_front() {
                if state.producers_waiting > 0 && state.items.len() <= self.capacity / 2 {
                    self.not_full.notify_all();
                }
                return Some(item);
            }
            if state.closed {
                return None;
            }
            state.consumer_waiting = true;
            state = self
                .not_empty
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.consumer_waiting = false;
        }
    }

    /// No more pushes: the consumer takes what is queued, then ends.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.not_empty.notify_all();
    }

    /// The consumer stops: waiting and later pushes fail with
    /// [`PushError::Gone`].
    pub(crate) fn leave(&self) {
        let mut state = self.lock();
        state.gone = true;
        state.items.clear();
        drop(state);
        self.not_full.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_in_order_and_a_full_queue_refuses() {
        let queue = Queue::new(2);
        queue.push(1, false).expect("room");
        queue.push(2, false).expect("room");
        assert!(matches!(queue.push(3, false), Err(PushError::Full(3))));
        assert_eq!(queue.pop(), Some(1));
        queue.push(3, false).expect("room again");
        queue.close();
        assert_eq!(queue.pop(), Some(2));
        assert_eq!(queue.pop(), Some(3));
        assert_eq!(queue.pop(), None);
    }

    #[test]
    fn a_waiting_producer_wakes_and_nothing_is_lost() {
        let queue = Queue::new(4);
        let total: u64 = std::thread::scope(|scope| {
            let queue = &queue;
            for p in 0..3u64 {
                scope.spawn(move || {
                    for i in 0..1000 {
                        queue.push(p * 1000 + i, true).expect("a consumer");
                    }
                });
            }
            let consumer = scope.spawn(move || {
                let mut sum = 0;
                let mut seen = 0;
                while seen < 3000 {
                    sum += queue.pop().expect("items");
                    seen += 1;
                }
                sum
            });
            consumer.join().expect("consumer")
        });
        assert_eq!(total, (0..3000).sum::<u64>());
    }

    #[test]
    fn a_gone_consumer_releases_waiting_producers() {
        let queue = Queue::new(1);
        queue.push(0, false).expect("room");
        std::thread::scope(|scope| {
            let waiting = scope.spawn(|| queue.push(1, true));
            std::thread::sleep(std::time::Duration::from_millis(20));
            queue.leave();
            assert!(matches!(
                waiting.join().expect("producer"),
                Err(PushError::Gone(1))
            ));
        });
    }
}
