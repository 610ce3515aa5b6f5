//! `cardinal demo`: the sketches on generated audiences, next to the truth.

use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Users in the larger audience.
    #[arg(long, default_value_t = 1_000_000)]
    users: u64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

pub fn run(args: &Args) -> Result<()> {
    let _ = args;
    Ok(())
}
