//! The event ring of one execution: numbered NDJSON lines, bounded by a line count (its own)
//! and a byte budget (shared by all executions, enforced by the service). A read that no
//! longer reaches back far enough is a [`Gap`]: a resume answers it with `410`, a connected
//! stream with a lost event naming the range (`Service::stream`), never a silent hole.

use std::collections::VecDeque;
use std::sync::Arc;

/// The ring no longer holds the event a reader wants (`410 Gone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The first sequence number the reader asked for (`after + 1`).
    pub wanted: u64,
    /// The oldest sequence number still held (the next one to come when the ring is empty).
    pub oldest: u64,
}

/// Numbered event lines as `(seq, line)`, oldest first.
pub type Events = Vec<(u64, Arc<str>)>;

/// Numbered event lines (JSON without the newline), oldest first.
#[derive(Debug)]
pub struct Ring {
    events: VecDeque<(u64, Arc<str>)>,
    next_seq: u64,
    bytes: usize,
    max_lines: usize,
}

impl Ring {
    /// An empty ring keeping at most `max_lines` events (at least 1).
    pub fn new(max_lines: usize) -> Self {
        Ring {
            events: VecDeque::new(),
            next_seq: 1,
            bytes: 0,
            max_lines: max_lines.max(1),
        }
    }

    /// Append the event `render(seq)` makes for the next sequence number (1, 2, ...). Returns
    /// its seq and the byte change of the ring (the new line's length minus what the line
    /// bound evicted), for the shared byte budget.
    pub fn push(&mut self, render: impl FnOnce(u64) -> String) -> (u64, isize) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let line: Arc<str> = render(seq).into();
        let mut delta = line.len() as isize;
        self.bytes += line.len();
        self.events.push_back((seq, line));
        while self.events.len() > self.max_lines {
            delta -= self.pop_front() as isize;
        }
        (seq, delta)
    }

    /// Drop the oldest event; returns its length in bytes (0 when empty).
    pub fn pop_front(&mut self) -> usize {
        match self.events.pop_front() {
            Some((_, l)) => {
                self.bytes -= l.len();
                l.len()
            }
            None => 0,
        }
    }

    /// Bytes held (sum of the line lengths).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no event is held.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The oldest seq held (the next seq when empty).
    pub fn first_seq(&self) -> u64 {
        self.events.front().map_or(self.next_seq, |(s, _)| *s)
    }

    /// The last seq given out (0 before the first event).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Up to `max` events with `seq > after`, in order, as `(seq, line)`.
    ///
    /// # Errors
    /// [`Gap`] when events after `after` were evicted already.
    pub fn after(&self, after: u64, max: usize) -> Result<Events, Gap> {
        let oldest = self.first_seq();
        let wanted = after.saturating_add(1);
        if wanted < oldest {
            return Err(Gap { wanted, oldest });
        }
        let skip = (wanted - oldest) as usize;
        Ok(self
            .events
            .iter()
            .skip(skip)
            .take(max)
            .map(|(s, l)| (*s, l.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_bounded_and_gap() {
        let mut r = Ring::new(3);
        for i in 0..5 {
            let (seq, _) = r.push(|s| format!("{{\"seq\":{s},\"i\":{i}}}"));
            assert_eq!(seq, i + 1);
        }
        assert_eq!((r.first_seq(), r.last_seq(), r.len()), (3, 5, 3));
        assert_eq!(
            r.after(0, 10).unwrap_err(),
            Gap {
                wanted: 1,
                oldest: 3
            }
        );
        let got: Vec<u64> = r.after(2, 10).unwrap().iter().map(|e| e.0).collect();
        assert_eq!(got, [3, 4, 5]);
        let got: Vec<u64> = r.after(3, 1).unwrap().iter().map(|e| e.0).collect();
        assert_eq!(got, [4]);
        assert!(r.after(5, 10).unwrap().is_empty());
        assert!(r.after(99, 10).unwrap().is_empty());
        let total: usize = r.after(2, 10).unwrap().iter().map(|e| e.1.len()).sum();
        assert_eq!(r.bytes(), total);
        while r.pop_front() > 0 {}
        assert_eq!(r.bytes(), 0);
        assert_eq!(r.first_seq(), 6);
        assert_eq!(r.after(4, 1).unwrap_err().oldest, 6);
    }
}
