use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::IntCounter;

use super::{Queue, Writer};

/// Writes into a shared list; holds its first record until told to go,
/// so that the queue behind it fills.
struct Held {
    holding: Option<Sender<()>>,
    go: Receiver<()>,
    held: bool,
    batch: Vec<u32>,
    written: Arc<Mutex<Vec<u32>>>,
    finished: Sender<()>,
}

impl Writer<u32> for Held {
    fn take(&mut self, record: u32) -> bool {
        if !self.held {
            self.held = true;
            if let Some(holding) = self.holding.take() {
                holding.send(()).unwrap();
            }
            self.go.recv().unwrap();
        }
        self.batch.push(record);
        self.batch.len() >= 4
    }

    fn flush(&mut self) {
        self.written.lock().unwrap().append(&mut self.batch);
    }

    fn finish(&mut self) {
        let _ = self.finished.send(());
    }
}

#[test]
fn a_full_queue_drops_and_counts_and_finish_writes_what_was_queued() {
    let (go, wait) = std::sync::mpsc::channel();
    let (finished, ended) = std::sync::mpsc::channel();
    let written = Arc::new(Mutex::new(Vec::new()));
    let dropped = IntCounter::new("dropped", "dropped").unwrap();
    let (holding, held) = std::sync::mpsc::channel();
    let writer = Held {
        holding: Some(holding),
        go: wait,
        held: false,
        batch: Vec::new(),
        written: written.clone(),
        finished,
    };
    let queue = Queue::start("queue-test", 8, dropped.clone(), 2, writer).unwrap();
    // The writer takes the first record and holds it; 8 more fill the queue.
    queue.offer(0);
    held.recv_timeout(Duration::from_secs(10)).unwrap();
    let mut queued = 0;
    while queue.sender.try_send(1).is_ok() {
        queued += 1;
        assert!(queued <= 8, "the queue holds more than its capacity");
    }
    assert_eq!(queued, 8);
    for i in 0..5 {
        queue.offer(100 + i);
    }
    assert_eq!(dropped.get(), 5 * 2, "each drop counts its weight");
    go.send(()).unwrap();
    assert!(queue.finish(Duration::from_secs(10)), "the writer ended");
    ended
        .recv_timeout(Duration::from_secs(1))
        .expect("the output was finished");
    let written = written.lock().unwrap();
    assert_eq!(written.len(), 1 + queued, "everything queued was written");
    assert!(
        written.iter().all(|r| *r < 100),
        "no dropped record was written"
    );
}

#[test]
fn the_writer_ends_when_the_last_sender_is_gone() {
    let (finished, ended) = std::sync::mpsc::channel();
    let (go, wait) = std::sync::mpsc::channel();
    go.send(()).unwrap();
    let written = Arc::new(Mutex::new(Vec::new()));
    let writer = Held {
        holding: None,
        go: wait,
        held: false,
        batch: Vec::new(),
        written: written.clone(),
        finished,
    };
    let queue = Queue::start(
        "queue-test",
        8,
        IntCounter::new("d", "d").unwrap(),
        1,
        writer,
    )
    .unwrap();
    queue.offer(7);
    drop(queue);
    ended
        .recv_timeout(Duration::from_secs(10))
        .expect("the writer ended and finished its output");
    assert_eq!(*written.lock().unwrap(), vec![7]);
}
