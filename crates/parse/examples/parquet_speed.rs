//! Parquet read throughput per core: one file, the named columns only,
//! every value read through `Record::value` as the engine's routing does,
//! on one thread.
//!
//! ```sh
//! cargo run --release -p cardinal-parse --example parquet_speed -- \
//!     FILE.parquet name:TYPE [name:TYPE ...] [--reps N]
//! # the W3 impressions columns the three summaries read:
//! cargo run --release -p cardinal-parse --example parquet_speed -- \
//!     bench/.work/engine/data/impressions-2000000.parquet \
//!     ts:timestamp user_id:bigint kind:text state:text site:text provider:text revenue:double
//! ```
//!
//! Each run is timed by the thread's CPU clock and the wall clock; the
//! best of `--reps` (3) is printed. This is the reader alone, without the
//! routing and folding `cardinal run` adds.

use std::hint::black_box;
use std::time::Instant;

use cardinal_event::{Column, ColumnType, Record, Schema, Value};
use cardinal_parse::ParquetFile;

fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: parquet_speed FILE name:TYPE ...")?;
    let mut columns = Vec::new();
    let mut reps = 3;
    while let Some(arg) = args.next() {
        if arg == "--reps" {
            reps = args.next().ok_or("--reps N")?.parse()?;
            continue;
        }
        let (name, ty) = arg.split_once(':').ok_or("columns are name:TYPE")?;
        columns.push(Column {
            name: name.into(),
            ty: ColumnType::parse(ty)?,
            path: vec![name.into()],
        });
    }
    let schema = Schema { columns };
    let reads: Vec<usize> = (0..schema.columns.len()).collect();
    let (mut cpu_best, mut wall_best, mut rows) = (f64::MAX, f64::MAX, 0u64);
    for _ in 0..reps {
        let (cpu, wall) = (thread_cpu_secs(), Instant::now());
        let file = ParquetFile::open(path.as_ref(), path.as_str().into(), &schema, &reads)?;
        let mut reader = file.read(0..file.row_groups())?;
        let mut nulls = 0u64;
        rows = 0;
        while let Some(batch) = reader.next_batch()? {
            for i in 0..batch.len() {
                let record = batch.record(i);
                for (c, column) in schema.columns.iter().enumerate() {
                    if matches!(black_box(record.value(c, column.ty)), Ok(Value::Null)) {
                        nulls += 1;
                    }
                }
            }
            rows += batch.len() as u64;
        }
        black_box(nulls);
        cpu_best = cpu_best.min(thread_cpu_secs() - cpu);
        wall_best = wall_best.min(wall.elapsed().as_secs_f64());
    }
    println!(
        "{path}: {rows} rows, {} columns: {cpu_best:.3} CPU-s, {wall_best:.3} s wall, {:.2} M rows/CPU-s",
        schema.columns.len(),
        rows as f64 / cpu_best / 1e6
    );
    Ok(())
}
