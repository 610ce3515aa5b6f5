//! The text parser of a stream's format ([`Parser`]), chosen once per
//! worker or engine. A leaf: it names nothing else of the crate.

use anyhow::{Result, bail};
use cardinal_parse::{Batch, CsvConfig, CsvParser, NdjsonParser};
use cardinal_route::Format;

/// A stream's text parser: delimited text or JSON lines.
pub(crate) enum Parser {
    Csv(CsvParser),
    Json(NdjsonParser),
}

impl Parser {
    /// A parser for `stream` that splits only the columns in `reads`
    /// (delimited text: the others are not split, and read as absent), or
    /// every column when `reads` is `None`.
    pub(crate) fn new(stream: &cardinal_route::Stream, reads: Option<&[usize]>) -> Result<Self> {
        Ok(match stream.format {
            Format::Csv | Format::Amplab => {
                let config = match stream.format {
                    Format::Amplab => CsvConfig::amplab(),
                    _ => CsvConfig {
                        delimiter: stream.delimiter,
                        header: stream.header,
                        ..CsvConfig::default()
                    },
                };
                let mut parser = CsvParser::new(&stream.schema, config)?;
                if let Some(reads) = reads {
                    parser.project(reads);
                }
                Parser::Csv(parser)
            }
            Format::Json => Parser::Json(NdjsonParser::new(&stream.schema)?),
            Format::Parquet => bail!("Parquet jobs are read by read_parquet, not parsed"),
        })
    }

    /// Parses the batch's next records into it.
    pub(crate) fn parse(&mut self, batch: &mut Batch) -> Result<()> {
        match self {
            Parser::Csv(p) => p.parse(batch)?,
            Parser::Json(p) => p.parse(batch),
        }
        Ok(())
    }
}
