//! The `haptic` binary: parse arguments, build the runtime, call [`haptic::run`].

use anyhow::Context as _;
use clap::Parser as _;

fn main() -> anyhow::Result<()> {
    let cli = haptic::cli::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot build the tokio runtime")?;
    runtime.block_on(haptic::run(cli))?;
    Ok(())
}
