//! The `haptic` binary: parse arguments, build the runtime, call [`haptic::run`].
//!
//! Errors are printed as one line with their causes (`error: outer: inner`), exit code 1.

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = haptic::cli::Cli::parse();
    let runtime = match haptic::cli::tokio_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(haptic::run(cli)) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("error: {:#}", anyhow::Error::from(e));
            std::process::ExitCode::FAILURE
        }
    }
}
