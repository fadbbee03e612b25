//! One pod of a fleet ([`Pod`]: where its Dataplane API and traffic are, the product's Dataplane
//! client for it, its reload count) and a peer's sandbox control paths ([`Faults`]: scripted
//! faults, the request log, out-of-band edits), which the real peers lack.

use std::time::Duration;

use haptic::dataplane::{BasicAuth, ClientSettings, Dataplane, DataplaneClient, Endpoint};
use haptic_tools::sandbox::control::RequestRecord;
use haptic_tools::sandbox::pods::PodInfo;

use crate::peers::PeerError;

/// One HAProxy pod of a fleet: where its Dataplane API and its traffic are, and its credentials.
///
/// Derefs to the sandbox's [`PodInfo`] (name, `dataplane_url`, `traffic_address`,
/// `port_offset`, ...), which the real peers fill the same way.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Where the pod is.
    pub info: PodInfo,
    /// Dataplane basic-auth user.
    pub username: String,
    /// Dataplane basic-auth password.
    pub password: String,
    /// Whether the endpoint has the sandbox control paths (`/_sandbox/...`).
    pub sandbox: bool,
}

impl std::ops::Deref for Pod {
    type Target = PodInfo;
    fn deref(&self) -> &PodInfo {
        &self.info
    }
}

impl Pod {
    /// The product's Dataplane client for this pod (default settings, the pod's credentials).
    ///
    /// # Panics
    /// When the URL does not parse or the client cannot be built (a broken fleet).
    #[must_use]
    pub fn dataplane(&self) -> DataplaneClient {
        let url = reqwest::Url::parse(&self.dataplane_url).expect("a pod's dataplane URL parses");
        Dataplane::new(&ClientSettings::default())
            .expect("the Dataplane client builds")
            .client(Endpoint::new(url, Some(self.credentials())))
    }

    /// The pod's Dataplane credentials.
    #[must_use]
    pub fn credentials(&self) -> BasicAuth {
        BasicAuth {
            username: self.username.clone(),
            password: self.password.clone(),
        }
    }

    /// Successful reloads of this pod's HAProxy so far (`GET .../reloads` through the product's
    /// client; the sandbox keeps every reload of the endpoint's life).
    ///
    /// # Panics
    /// When the pod does not answer.
    ///
    /// # Cancel safety
    /// Cancel safe (a read).
    pub async fn reload_count(&self) -> usize {
        self.try_reload_count()
            .await
            .unwrap_or_else(|e| panic!("{}: reloads: {e}", self.name))
    }

    /// [`Pod::reload_count`] returning the error.
    ///
    /// # Errors
    /// The Dataplane client's error when the pod does not answer.
    ///
    /// # Cancel safety
    /// Cancel safe (a read).
    pub async fn try_reload_count(&self) -> Result<usize, haptic::dataplane::DataplaneError> {
        Ok(self
            .dataplane()
            .reloads()
            .await?
            .iter()
            .filter(|r| r.status == haptic::dataplane::ReloadStatus::Succeeded)
            .count())
    }

    /// This pod as the journal names a deployment target, its Pod object in `namespace`.
    #[must_use]
    pub fn endpoint(&self, namespace: &str) -> haptic_journal::Endpoint {
        haptic_journal::Endpoint {
            url: haptic_journal::EndpointUrl::new(self.dataplane_url.clone()),
            pod: haptic_journal::PodRef {
                namespace: namespace.into(),
                name: self.name.clone().into(),
            },
            detected_version: None,
        }
    }

    /// The pod's faults API and request log.
    #[must_use]
    pub fn faults(&self) -> Faults {
        Faults {
            peer: self.name.clone(),
            base: self.sandbox.then(|| self.dataplane_url.clone()),
        }
    }
}

/// A peer's sandbox control paths: scripted faults, the request log, and the other
/// `/_sandbox/...` hooks. On a peer without them every call answers [`PeerError::Unsupported`].
#[derive(Debug, Clone)]
pub struct Faults {
    pub(crate) peer: String,
    pub(crate) base: Option<String>,
}

/// A loopback-only HTTP client (no proxy) with a per-request bound of 20 s.
///
/// # Panics
/// When reqwest cannot build a client (no TLS backend is needed for plain HTTP).
#[must_use]
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("an HTTP client builds")
}

impl Faults {
    fn base(&self, what: &'static str) -> Result<&str, PeerError> {
        self.base.as_deref().ok_or_else(|| PeerError::Unsupported {
            peer: self.peer.clone(),
            what,
        })
    }

    /// Sends `method` to `/_sandbox/<path>` with a JSON or text body; returns the answer's JSON
    /// (null when it has none).
    ///
    /// # Errors
    /// [`PeerError::Unsupported`] without control paths, [`PeerError::Control`] on a transport
    /// error or a non-success answer.
    ///
    /// # Cancel safety
    /// Cancel safe; a cancelled request may or may not have taken effect.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, PeerError> {
        let url = format!("{}/_sandbox/{path}", self.base("control paths")?);
        let what = format!("{method} {url}");
        let mut req = http().request(method, &url);
        req = match body {
            Some(serde_json::Value::String(s)) => req.body(s),
            Some(v) => req.json(&v),
            None => req,
        };
        let control = |message: String| PeerError::Control {
            what: what.clone(),
            message,
        };
        let resp = req.send().await.map_err(|e| control(e.to_string()))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| control(e.to_string()))?;
        if !status.is_success() {
            return Err(control(format!("{status}: {text}")));
        }
        Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    }

    /// Arms one fault (`POST /_sandbox/faults`, the body as the README's table says).
    ///
    /// # Errors
    /// As [`Faults::call`]; a refused fault answers 400 naming the field.
    ///
    /// # Cancel safety
    /// As [`Faults::call`].
    pub async fn arm(&self, fault: serde_json::Value) -> Result<(), PeerError> {
        self.base("faults API")?;
        self.call(reqwest::Method::POST, "faults", Some(fault))
            .await
            .map(drop)
    }

    /// Clears the armed faults.
    ///
    /// # Errors
    /// As [`Faults::call`].
    ///
    /// # Cancel safety
    /// As [`Faults::call`].
    pub async fn clear(&self) -> Result<(), PeerError> {
        self.base("faults API")?;
        self.call(reqwest::Method::DELETE, "faults", None)
            .await
            .map(drop)
    }

    /// An out-of-band edit of the auxiliary file at `path` on the pod (e.g.
    /// `/etc/haproxy/maps/hosts.map`), without a reload (`POST /_sandbox/edit-file`).
    ///
    /// # Errors
    /// As [`Faults::call`].
    ///
    /// # Cancel safety
    /// As [`Faults::call`].
    pub async fn edit_file(&self, path: &str, content: &str) -> Result<(), PeerError> {
        let hook = format!("edit-file?path={path}");
        let body = serde_json::Value::String(content.to_owned());
        self.call(reqwest::Method::POST, &hook, Some(body))
            .await
            .map(drop)
    }

    /// An out-of-band edit of the pod's configuration, reloaded; with `bump_version` the
    /// configuration version moves too (`POST /_sandbox/edit-config`).
    ///
    /// # Errors
    /// As [`Faults::call`].
    ///
    /// # Cancel safety
    /// As [`Faults::call`].
    pub async fn edit_config(&self, config: &str, bump_version: bool) -> Result<(), PeerError> {
        let hook = if bump_version {
            "edit-config?bump_version=true"
        } else {
            "edit-config"
        };
        let body = serde_json::Value::String(config.to_owned());
        self.call(reqwest::Method::POST, hook, Some(body))
            .await
            .map(drop)
    }

    /// Every request the peer logged since the last clear, oldest first.
    ///
    /// # Errors
    /// As [`Faults::call`], and [`PeerError::Control`] when the log does not parse.
    ///
    /// # Cancel safety
    /// Cancel safe (a read).
    pub async fn requests(&self) -> Result<Vec<RequestRecord>, PeerError> {
        self.base("request log")?;
        let v = self.call(reqwest::Method::GET, "requests", None).await?;
        serde_json::from_value(v).map_err(|e| PeerError::Control {
            what: format!("the request log of {}", self.peer),
            message: e.to_string(),
        })
    }

    /// Empties the request log.
    ///
    /// # Errors
    /// As [`Faults::call`].
    ///
    /// # Cancel safety
    /// As [`Faults::call`].
    pub async fn clear_requests(&self) -> Result<(), PeerError> {
        self.base("request log")?;
        self.call(reqwest::Method::DELETE, "requests", None)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_without_a_sandbox_say_which_facility_is_missing() {
        let faults = Faults {
            peer: "haproxy-0".into(),
            base: None,
        };
        let err = faults.base("faults API").unwrap_err();
        assert_eq!(
            err.to_string(),
            "haproxy-0 has no faults API (only the sandbox's stand-ins do)"
        );
    }
}
