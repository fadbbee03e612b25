//! The Dataplane API client against an in-test axum server that gives the answers
//! ecosystem.md A documents (409 with `Configuration-Version`, 202 + `Reload-Id`, multipart
//! storage, 404, 500, 429 + Retry-After, slow answers).

mod calls;
mod faults;
mod server;
