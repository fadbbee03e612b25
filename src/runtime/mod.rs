//! The controller runtime (`haptic run`).

/// Errors of the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Not written yet.
    #[error("`haptic run` is not implemented yet")]
    NotYet,
}

/// Runs the controller until SIGTERM/SIGINT.
///
/// # Errors
/// [`RuntimeError`].
pub async fn run(_args: crate::cli::RunArgs) -> Result<(), RuntimeError> {
    Err(RuntimeError::NotYet)
}
