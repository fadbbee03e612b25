//! `haptic-bench`: see the library docs ([`haptic_bench`]).

fn main() -> anyhow::Result<()> {
    haptic_bench::run(std::env::args())
}
