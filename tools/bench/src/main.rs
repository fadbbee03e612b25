//! `haptic-bench`: see the library docs ([`haptic_bench`]).

fn main() -> std::process::ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv
        .get(1)
        .is_some_and(|a| a == haptic_bench::CONTROLLER_ARG)
    {
        // `haptic-bench __controller run ...` is `haptic run ...` (figure 3's controller).
        use clap::Parser as _;
        let mut argv = argv;
        argv.remove(1);
        argv[0] = "haptic".into();
        let cli = haptic::cli::Cli::parse_from(argv);
        let runtime = match haptic::cli::tokio_runtime() {
            Ok(r) => r,
            Err(code) => return code,
        };
        return match runtime.block_on(haptic::run(cli)) {
            Ok(outcome) => outcome.exit_code(),
            Err(e) => {
                eprintln!("error: {}", haptic::core::error::chain(&e));
                std::process::ExitCode::FAILURE
            }
        };
    }
    match haptic_bench::run(std::env::args()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::FAILURE
        }
    }
}
