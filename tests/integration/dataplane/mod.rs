//! The Dataplane API client against the sandbox's documented-answers endpoint
//! (`haptic_tools::sandbox::documented`: 409 with `Configuration-Version`, 202 + `Reload-Id`,
//! multipart storage, 404, 500, 429 + Retry-After, slow answers).

mod calls;
mod faults;

use std::net::SocketAddr;
use std::time::Duration;

use haptic::dataplane::{BasicAuth, ClientSettings, Dataplane, DataplaneClient, Endpoint};
use haptic_tools::sandbox::documented::{Log, documented_server};

pub fn settings(request_timeout: Duration) -> ClientSettings {
    ClientSettings {
        request_timeout,
        ..ClientSettings::default()
    }
}

pub fn client_for(addr: SocketAddr, timeout: Duration, auth: bool) -> DataplaneClient {
    let credentials = auth.then(|| BasicAuth {
        username: "admin".into(),
        password: "secret".into(),
    });
    Dataplane::new(&settings(timeout))
        .unwrap()
        .client(Endpoint::for_pod(addr.ip(), addr.port(), credentials))
}

pub async fn documented() -> (DataplaneClient, Log) {
    let (addr, log) = documented_server().await;
    (client_for(addr, Duration::from_secs(5), true), log)
}
