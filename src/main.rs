//! The `haptic` binary: parse arguments, build the runtime, call [`haptic::run`].
//!
//! Errors are printed as one line with their causes (`error: outer: inner`), exit code 1.

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = haptic::cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot build the tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(haptic::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {:#}", anyhow::Error::from(e));
            std::process::ExitCode::FAILURE
        }
    }
}
