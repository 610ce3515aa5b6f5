//! The floor of the Kafka source's reading: the same consumer settings and
//! poll loop as `source/kafka.rs` (messages copied into per-partition
//! batches), with nothing folded. bench/kafka/run.sh runs it beside
//! `cardinal serve --kafka` and Kafka's own ConsumerPerformance.
//!
//! ```sh
//! cargo run --release -p cardinal-server --example kafka_read_floor -- BROKERS TOPIC MESSAGES
//! ```

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, brokers, topic, messages] = args.as_slice() else {
        return Err("usage: kafka_read_floor BROKERS TOPIC MESSAGES".into());
    };
    let want: u64 = messages.parse()?;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "cardinal-read-floor")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        .set("fetch.queue.backoff.ms", "1")
        .set("queued.max.messages.kbytes", (32 << 10).to_string())
        .set("fetch.max.bytes", (16 << 20).to_string())
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions = metadata.topics()[0].partitions().len();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, i32::try_from(p)?, Offset::Beginning)?;
    }
    consumer.assign(&list)?;
    let mut batches: Vec<Vec<u8>> = vec![Vec::with_capacity(1 << 20); partitions];
    let (mut n, mut bytes, mut handed) = (0u64, 0u64, 0u64);
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    if std::env::var("FLOOR_BATCH").is_ok() {
        use rdkafka::bindings as rd;
        // SAFETY: the consumer's own queue, kept alive by `consumer`;
        // every message taken is destroyed once read.
        unsafe {
            let queue = rd::rd_kafka_queue_get_consumer(consumer.client().native_ptr());
            let mut out: Vec<*mut rd::rd_kafka_message_t> = vec![std::ptr::null_mut(); 4096];
            while n < want && Instant::now() < deadline {
                let got = rd::rd_kafka_consume_batch_queue(queue, 25, out.as_mut_ptr(), out.len());
                let got = usize::try_from(got)?;
                if got > 0 {
                    first.get_or_insert_with(Instant::now);
                }
                for &m in &out[..got] {
                    let message = &*m;
                    if message.err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                        let batch = &mut batches[usize::try_from(message.partition)?];
                        let payload =
                            std::slice::from_raw_parts(message.payload as *const u8, message.len);
                        batch.extend_from_slice(payload);
                        batch.push(b'\n');
                        bytes += payload.len() as u64;
                        if batch.len() >= 1 << 20 {
                            handed += 1;
                            batch.clear();
                        }
                        n += 1;
                    }
                    rd::rd_kafka_message_destroy(m);
                }
            }
            rd::rd_kafka_queue_destroy(queue);
        }
    }
    while n < want && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(25)) {
            Some(Ok(message)) => {
                first.get_or_insert_with(Instant::now);
                let batch = &mut batches[usize::try_from(message.partition())?];
                if let Some(payload) = message.payload() {
                    batch.extend_from_slice(payload);
                    batch.push(b'\n');
                    bytes += payload.len() as u64;
                }
                if batch.len() >= 1 << 20 {
                    // Handed over: what the engine would take.
                    handed += 1;
                    batch.clear();
                }
                n += 1;
            }
            Some(Err(error)) => return Err(error.into()),
            None => {}
        }
    }
    let seconds = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    println!(
        "messages={n} bytes={bytes} batches={handed} seconds={seconds:.3} messages_per_s={:.0}",
        n as f64 / seconds
    );
    Ok(())
}
