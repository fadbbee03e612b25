//! The runtime side of a pod: what HAProxy has loaded, and changes applied without a reload.
//!
//! The API's runtime API is the admin stats socket of its configuration (as in the observed
//! set-up): without one (`stats socket ... level admin` in `global`), every runtime update fails
//! and the API reloads instead. A real-HAProxy pod is reached through its master CLI, `@1 <cmd>`
//! forwarded to the current worker (after a failed reload, the old worker: the one still
//! serving). A stand-in pod has no HAProxy: it keeps [`Loaded`], the files as of its last
//! successful reload plus the certificates applied at runtime, and answers from that.

mod servers;
mod views;

use std::collections::{BTreeMap, BTreeSet};

use axum::Router;

use super::PodCore;
use super::config::text::read_sections;
use crate::sandbox::pods::haproxy::{self, View};

pub(crate) use servers::{RuntimeServers, server_commands};

/// A stand-in's view of what HAProxy loaded.
#[derive(Debug, Default, Clone)]
pub(crate) struct Loaded {
    /// The configuration (body) of the last successful reload.
    pub(crate) config: String,
    /// Files under `/etc/haproxy/{maps,ssl,general}` as loaded, by pod path.
    pub(crate) files: BTreeMap<String, Vec<u8>>,
    /// Certificates added or replaced at runtime since (pod paths).
    pub(crate) runtime_certs: BTreeSet<String>,
}

impl Loaded {
    /// The files of `etc` (the pod's `/etc/haproxy`) and `config`, as a reload loads them.
    pub(crate) fn capture(etc: &std::path::Path, config: &str) -> Loaded {
        let mut files = BTreeMap::new();
        for dir in ["maps", "ssl", "general"] {
            let Ok(rd) = std::fs::read_dir(etc.join(dir)) else {
                continue;
            };
            for e in rd.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue;
                }
                if let Ok(b) = std::fs::read(e.path()) {
                    files.insert(format!("/etc/haproxy/{dir}/{name}"), b);
                }
            }
        }
        Loaded {
            config: config.to_owned(),
            files,
            runtime_certs: BTreeSet::new(),
        }
    }

    /// Whether the loaded configuration (or a crt-list it loads) names `pod_path`.
    pub(crate) fn uses(&self, pod_path: &str) -> bool {
        self.config.contains(pod_path)
            || self.crt_lists().iter().any(|l| {
                self.files
                    .get(l)
                    .is_some_and(|b| String::from_utf8_lossy(b).contains(pod_path))
            })
    }

    /// The crt-lists the loaded configuration names.
    pub(crate) fn crt_lists(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in read_sections(&self.config) {
            for l in &s.lines {
                for p in l.windows(2).filter(|p| p[0] == "crt-list") {
                    out.push(p[1].clone());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// Whether `text` gives the API a runtime API: an admin stats socket in `global`.
pub(crate) fn has_runtime_api(text: &str) -> bool {
    read_sections(text)
        .iter()
        .filter(|s| s.kind == "global")
        .flat_map(|s| &s.lines)
        .any(|l| {
            l.len() >= 3
                && l[0] == "stats"
                && l[1] == "socket"
                && l.windows(2).any(|w| w[0] == "level" && w[1] == "admin")
        })
}

pub(super) fn routes() -> Router<std::sync::Arc<PodCore>> {
    views::routes().merge(servers::routes())
}

impl PodCore {
    /// `@1 <cmd>` through the pod's master CLI: the current worker's answer.
    pub(crate) async fn runtime_cmd(&self, cmd: &str) -> Result<String, String> {
        if self.master.lock().await.is_none() {
            return Err("HAProxy is not running".into());
        }
        haproxy::master_cmd(&self.fs.master_sock(), &format!("@1 {cmd}"))
            .await
            .map_err(|e| format!("{e:#}"))
    }

    /// The path HAProxy knows a pod file by (loopback mode loads the pod's host paths).
    pub(crate) fn live_path(&self, pod_path: &str) -> String {
        match &self.view {
            View::Namespaced { .. } => pod_path.to_owned(),
            View::Loopback { .. } => self
                .fs
                .host_path(pod_path)
                .map_or_else(|| pod_path.to_owned(), |p| p.display().to_string()),
        }
    }

    /// The pod path of a path HAProxy names (the inverse of [`PodCore::live_path`]).
    pub(crate) fn pod_path(&self, live: &str) -> String {
        let etc = format!("{}/", self.fs.etc.display());
        match live.strip_prefix(&etc) {
            Some(rest) => format!("/etc/haproxy/{rest}"),
            None => live.to_owned(),
        }
    }

    /// Applies a certificate at runtime (`new ssl cert` for a new one, `set ssl cert` with the
    /// PEM, `commit ssl cert`), as the real API's storage handler does; `Err` when there is no
    /// runtime API or HAProxy refuses (the caller reloads instead).
    pub(crate) async fn runtime_cert(
        &self,
        pod_path: &str,
        pem: &[u8],
        new: bool,
    ) -> Result<(), String> {
        let mut st = self.cfg.lock().await;
        if !has_runtime_api(&st.memory) {
            return Err("no runtime API (no admin stats socket)".into());
        }
        if self.stand_in {
            st.loaded.files.insert(pod_path.to_owned(), pem.to_vec());
            st.loaded.runtime_certs.insert(pod_path.to_owned());
            return Ok(());
        }
        drop(st);
        let path = self.live_path(pod_path);
        let expect = |out: String, needle: &str| {
            if out.contains(needle) {
                Ok(())
            } else {
                Err(out.trim().to_owned())
            }
        };
        if new {
            let out = self.runtime_cmd(&format!("new ssl cert {path}")).await?;
            expect(out, "New empty certificate store")?;
        }
        let pem = String::from_utf8_lossy(pem);
        let out = self
            .runtime_cmd(&format!("set ssl cert {path} <<\n{}\n", pem.trim_end()))
            .await?;
        expect(out, "Transaction created for certificate")?;
        let out = self.runtime_cmd(&format!("commit ssl cert {path}")).await?;
        expect(out, "Success!")
    }

    /// Replaces a CA file HAProxy has loaded (`set ssl ca-file` with the PEM, `commit ssl
    /// ca-file`); `Err` when it is not loaded or HAProxy refuses.
    pub(crate) async fn runtime_ca_file(&self, pod_path: &str, pem: &[u8]) -> Result<(), String> {
        if self.stand_in {
            let mut st = self.cfg.lock().await;
            if !st.loaded.uses(pod_path) {
                return Err(format!("{pod_path} is not loaded"));
            }
            st.loaded.files.insert(pod_path.to_owned(), pem.to_vec());
            return Ok(());
        }
        let path = self.live_path(pod_path);
        let pem = String::from_utf8_lossy(pem);
        let out = self
            .runtime_cmd(&format!("set ssl ca-file {path} <<\n{}\n", pem.trim_end()))
            .await?;
        if !out.contains("Transaction created") {
            return Err(out.trim().to_owned());
        }
        let out = self
            .runtime_cmd(&format!("commit ssl ca-file {path}"))
            .await?;
        if out.contains("Success!") {
            Ok(())
        } else {
            Err(out.trim().to_owned())
        }
    }

    /// `del ssl cert <name>` as the real API sends it: with the storage name, which HAProxy
    /// does not know a certificate by, so it fails and the API reloads (observed: 202).
    pub(crate) async fn runtime_cert_delete(&self, name: &str) -> Result<(), String> {
        if !has_runtime_api(&self.cfg.lock().await.memory) {
            return Err("no runtime API (no admin stats socket)".into());
        }
        if self.stand_in {
            return Err(format!(
                "Can't remove the certificate: certificate '{name}' doesn't exist!"
            ));
        }
        let out = self.runtime_cmd(&format!("del ssl cert {name}")).await?;
        if out.contains("deleted!") {
            Ok(())
        } else {
            Err(out.trim().to_owned())
        }
    }
}
