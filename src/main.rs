//! The `haptic` binary: parse arguments, build the runtime, call [`haptic::run`].
//!
//! Errors are printed as one line with their causes (`error: outer: inner`), exit code 1.

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = match haptic::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // `haptic plan` gives exit code 2 the meaning "some pod would change" (a CI gate
            // reads it so): its usage errors exit 1. Help and version exit 0, as clap does.
            let plan = std::env::args().nth(1).as_deref() == Some("plan");
            return match e.exit_code() {
                0 => std::process::ExitCode::SUCCESS,
                2 if plan => std::process::ExitCode::FAILURE,
                code => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
            };
        }
    };
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
