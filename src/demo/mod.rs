//! `haptic demo`: the main job on its embedded default (README command 1).

/// Errors of the demo.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// Not written yet.
    #[error("`haptic demo` is not implemented yet")]
    NotYet,
}

/// Runs the demo.
///
/// # Errors
/// [`DemoError`].
pub async fn run(_args: crate::cli::DemoArgs) -> Result<(), DemoError> {
    Err(DemoError::NotYet)
}
