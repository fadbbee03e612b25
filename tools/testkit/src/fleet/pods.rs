//! The fleet's pods: what they answer against the corpus's checks, their reload counts, and
//! killing, unregistering and registering one.

use super::Fleet;
use crate::peers::PeerError;
use crate::pod::Pod;

impl Fleet {
    /// What each pod answers that differs from what `tests/corpus/renders/README.md` lists for
    /// the corpus render `render` (for a rejected render: the last passed one's answers).
    ///
    /// # Errors
    /// Every wrong answer, `pod: check -> got (want ...)`, joined by `; `.
    ///
    /// # Cancel safety
    /// Cancel safe (requests only).
    pub async fn pods_answer(&self, render: &str) -> Result<(), String> {
        let all: Vec<String> = self.pods.iter().map(|p| p.name.clone()).collect();
        self.pods_answer_of(render, &all).await
    }

    /// [`Fleet::pods_answer`] for the pods named `names` only (the live ones, when the test
    /// killed some).
    ///
    /// # Errors
    /// As [`Fleet::pods_answer`].
    ///
    /// # Cancel safety
    /// Cancel safe (requests only).
    pub async fn pods_answer_of(&self, render: &str, names: &[String]) -> Result<(), String> {
        let checks = crate::render::checks(render);
        let mut wrong = Vec::new();
        let pods: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| names.contains(&p.name))
            .collect();
        for pod in pods {
            for c in &checks {
                let body = haptic_tools::sandbox::pods::demo::run_check(pod, c).await;
                if !haptic_tools::sandbox::pods::demo::matches(c, &body) {
                    wrong.push(format!(
                        "{}: {} -> {body:?} (want {:?})",
                        pod.name, c.what, c.expect
                    ));
                }
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        }
    }

    /// Successful reloads of every pod, in pod order.
    ///
    /// # Panics
    /// When a pod does not answer.
    ///
    /// # Cancel safety
    /// Cancel safe (reads).
    pub async fn reload_counts(&self) -> Vec<usize> {
        futures::future::join_all(self.pods.iter().map(Pod::reload_count)).await
    }

    /// The fleet's pod `name`, for the action `verb` (named in the error).
    fn pod_to(&self, verb: &str, name: &str) -> Result<&Pod, PeerError> {
        self.pods
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| PeerError::Control {
                what: format!("{verb} {name}"),
                message: "no such pod".into(),
            })
    }

    /// Kills the pod `name` the way `POST /_sandbox/kill` does (processes gone, Pod object
    /// deleted).
    ///
    /// # Errors
    /// [`PeerError`] from the pod's control path.
    ///
    /// # Cancel safety
    /// As [`crate::Faults::call`].
    pub async fn kill_pod(&self, name: &str) -> Result<(), PeerError> {
        let pod = self.pod_to("kill", name)?;
        pod.faults()
            .call(reqwest::Method::POST, "kill", None)
            .await
            .map(drop)
    }

    /// Deletes the Pod object of `name` (gracePeriodSeconds 0), keeping its HAProxy running:
    /// the pod leaves discovery (as if it were rescheduled) until [`Fleet::register_pod`] lists
    /// it again.
    ///
    /// # Errors
    /// [`PeerError::Control`] when the real API server refuses the delete.
    ///
    /// # Cancel safety
    /// Cancel safe (one request).
    pub async fn unregister_pod(&self, name: &str) -> Result<(), PeerError> {
        if let Some(r) = &self.real {
            return crate::real::setup::delete_pod(&r.admin, &self.namespace, name)
                .await
                .map_err(|e| PeerError::Control {
                    what: format!("unregister {name}"),
                    message: format!("{e:#}"),
                });
        }
        let kube = self.kube_rest("unregister a Pod object")?;
        kube.delete_pod(name).await;
        Ok(())
    }

    /// Registers the Pod object of the fleet's pod `name` again (Running, Ready, with its pod
    /// IP), as the kubelet would report a pod that (re)appeared.
    ///
    /// # Errors
    /// [`PeerError::Control`] for an unknown pod or a refused registration.
    ///
    /// # Cancel safety
    /// Cancel safe before the first request returns; otherwise the object may exist.
    pub async fn register_pod(&self, name: &str) -> Result<(), PeerError> {
        let pod = self.pod_to("register", name)?;
        let control = |e: anyhow::Error| PeerError::Control {
            what: format!("register {name}"),
            message: format!("{e:#}"),
        };
        if let Some(r) = &self.real {
            return crate::real::setup::register_pod(&r.admin, &self.namespace, &pod.info)
                .await
                .map_err(control);
        }
        let kube = self.kube_rest("register a Pod object")?;
        kube.register_pod(&pod.info).await.map_err(control)
    }

    fn kube_rest(
        &self,
        what: &'static str,
    ) -> Result<haptic_tools::sandbox::cluster::Kube, PeerError> {
        let e = self
            .emulator
            .as_ref()
            .ok_or_else(|| PeerError::Unsupported {
                peer: "the API server".to_owned(),
                what,
            })?;
        Ok(haptic_tools::sandbox::cluster::Kube::new(
            e.api.url(),
            self.namespace.clone(),
        ))
    }
}
