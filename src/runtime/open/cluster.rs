//! The cluster at start-up: the Kubernetes client, the first read of the Dataplane credentials
//! and the config identity (with the HAProxyCfg's owner, DESIGN.md section 1).

use haptic_journal::ConfigIdentity;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource as _;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::components::deployer::basic_auth;
use crate::dataplane::BasicAuth;
use crate::k8s::credentials::CredentialsReceiver;
use crate::runtime::args::{RunArgs, SourceKind};
use crate::runtime::{RuntimeError, Settings};

/// Builds the kube client (retry layer off, DESIGN.md section 2; each request bounded by
/// `--kube-request-timeout`): from `--kubeconfig`, else the in-cluster service account.
pub(super) async fn kube_client(
    args: &RunArgs,
    identity: &str,
) -> Result<kube::Client, RuntimeError> {
    let config = match &args.kubeconfig {
        Some(path) => crate::k8s::client::load_kubeconfig(path)
            .await
            .map_err(|e| RuntimeError::Kube(Box::new(e)))?,
        None => kube::Config::incluster().map_err(|e| RuntimeError::Kube(Box::new(e)))?,
    };
    crate::k8s::client::build(
        config,
        &crate::k8s::client::user_agent(identity),
        args.kube_request_timeout,
    )
    .map_err(|e| RuntimeError::Kube(Box::new(e)))
}

/// Waits until the watched credentials Secret was read once (the watcher logs what is missing)
/// or `cancel` fires (`None`).
pub(super) async fn wait_for_credentials(
    rx: &mut CredentialsReceiver,
    cancel: &CancellationToken,
) -> Option<BasicAuth> {
    tokio::select! {
        () = cancel.cancelled() => None,
        r = rx.wait_for(Option::is_some) => r.ok().and_then(|c| c.as_ref().map(basic_auth)),
    }
}

/// The config identity and the owner reference of the HAProxyCfg (the source ConfigMap, when it
/// exists; DESIGN.md section 1).
pub(in crate::runtime) async fn identity_and_owner(
    client: &kube::Client,
    settings: &Settings,
    namespace: &str,
) -> (ConfigIdentity, Option<OwnerReference>) {
    let mut identity = ConfigIdentity {
        name: settings.config_name.as_str().into(),
        namespace: namespace.into(),
        source_uid: None,
        source_generation: None,
    };
    let mut owner = None;
    if let (SourceKind::Configmap, Some(name)) = (settings.args.source, &settings.args.configmap) {
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(Some(cm)) => {
                if let Some(uid) = cm.metadata.uid.clone() {
                    identity.source_uid = Some(uid.as_str().into());
                }
                owner = cm.controller_owner_ref(&()).map(|mut o| {
                    o.controller = Some(false);
                    o
                });
            }
            Ok(None) => warn!(configmap = %name, "the render ConfigMap does not exist yet"),
            Err(error) => warn!(configmap = %name, %error, "cannot read the render ConfigMap"),
        }
    }
    (identity, owner)
}
