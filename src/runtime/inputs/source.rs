//! The render source chosen by `--source` (a directory or a ConfigMap) and the HTTP ingest
//! endpoint (`--ingest-addr`), each feeding the acceptor.

use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{ConfigIdentity, Event, Journal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::dispatch::input::Input;
use crate::runtime::RuntimeError;
use crate::runtime::args::{RunArgs, SourceKind};
use crate::runtime::settings::Settings;
use crate::runtime::wire::Critical;

/// Starts the render source chosen by `--source`. With a ConfigMap source, a recreated ConfigMap
/// (new uid) journals a new `config.validated` with that uid.
#[allow(clippy::too_many_arguments)] // one call site: the runtime's wiring
pub(super) fn start_source(
    critical: &Critical,
    settings: &Settings,
    client: &kube::Client,
    dispatch: &crate::dispatch::DispatchHandle,
    identity: ConfigIdentity,
    last: Option<haptic_journal::Checksum>,
    tx: mpsc::Sender<Input>,
    cancel: &CancellationToken,
) {
    match settings.args.source {
        SourceKind::Dir => {
            let dir = settings.args.render_dir.clone().unwrap_or_default();
            let mut source =
                crate::source::dir::DirSource::new(crate::source::dir::DirSourceConfig::new(dir));
            if let Some(c) = last {
                source.set_last_sent(c);
            }
            critical.spawn("render-source", source.run(tx, cancel.clone()));
        }
        SourceKind::Configmap => {
            let mut cfg = crate::source::configmap::ConfigMapSourceConfig::new(
                identity.namespace.as_str(),
                settings.args.configmap.clone().unwrap_or_default(),
            );
            cfg.secret.clone_from(&settings.args.configmap_secret);
            let mut source = crate::source::configmap::ConfigMapSource::new(client.clone(), cfg);
            if let Some(c) = last {
                source.set_last_sent(c);
            }
            let mut uid = source.source_uid();
            let (dispatch, cancel_uid) = (dispatch.clone(), cancel.clone());
            tokio::spawn(async move {
                let mut current = identity.source_uid.clone();
                loop {
                    tokio::select! {
                        () = cancel_uid.cancelled() => return,
                        r = uid.changed() => if r.is_err() { return },
                    }
                    let seen = uid.borrow_and_update().clone();
                    if seen.is_some() && seen != current {
                        current.clone_from(&seen);
                        let identity = ConfigIdentity {
                            source_uid: seen,
                            ..identity.clone()
                        };
                        info!(uid = ?identity.source_uid, "render ConfigMap (re)created; config identity refreshed");
                        if let Err(error) = dispatch
                            .publish(Event::ConfigValidated {
                                correlation: crate::dispatch::input::chain_start("config"),
                                identity,
                            })
                            .await
                        {
                            warn!(%error, "config identity not journaled");
                            return;
                        }
                    }
                }
            });
            critical.spawn("render-source", source.run(tx, cancel.clone()));
        }
    }
}

/// The newest render the journal holds a `template.rendered` for (so a restarted source does
/// not journal the unchanged render again).
pub(super) fn last_rendered(journal: &Journal) -> Option<haptic_journal::Checksum> {
    let events = journal.events(haptic_journal::Seq(1), usize::MAX).ok()?;
    events.iter().rev().find_map(|(_, _, e)| match e {
        Event::TemplateRendered { render, .. } => Some(*render),
        _ => None,
    })
}

/// How often the ingest token Secret is read again (rotation).
const TOKEN_REFRESH: Duration = Duration::from_secs(10);
/// First delay before the ingest token Secret is read again after a transient failure at
/// start-up (doubling up to [`TOKEN_REFRESH`]).
const TOKEN_RETRY_INITIAL: Duration = Duration::from_millis(500);

/// Starts the HTTP ingest endpoint on `--ingest-addr` when given (leader only answers 202; the
/// token comes from `--ingest-token-secret`, key `token`; renders go to the acceptor behind `sink`,
/// which counts them; while `dispatch`'s journal is not writable it answers 507 and counts the
/// refusal in `metrics`).
#[allow(clippy::too_many_arguments)] // one call site: the runtime's wiring
pub(super) async fn start_ingest(
    critical: &Critical,
    args: &RunArgs,
    client: &kube::Client,
    namespace: &str,
    sink: &crate::dispatch::input::InputSender,
    dispatch: &crate::dispatch::DispatchHandle,
    metrics: &Arc<crate::telemetry::Metrics>,
    cancel: &CancellationToken,
) -> Result<(), RuntimeError> {
    use crate::source::ingest::{IngestConfig, IngestServer, read_token, read_token_retrying};
    let Some(addr) = args.ingest_addr else {
        return Ok(());
    };
    let secret = args.ingest_token_secret.clone().unwrap_or_default();
    // A 429 or 5xx is retried with backoff (the process stays not ready, the log says why);
    // only what needs an operator (absent Secret, RBAC, missing key) stops the start.
    let Some(token) = read_token_retrying(
        client.clone(),
        namespace,
        &secret,
        TOKEN_RETRY_INITIAL,
        TOKEN_REFRESH,
        cancel,
    )
    .await?
    else {
        return Ok(());
    };
    let cfg = IngestConfig::new(Some(token.clone()))
        .lease(client.clone(), namespace, args.lease_name.clone())
        .journal(dispatch.clone(), {
            let m = metrics.clone();
            Arc::new(move || m.input_refused(crate::telemetry::RenderSource::Ingest))
        });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| RuntimeError::Bind {
            what: "--ingest-addr",
            addr,
            source,
        })?;
    info!(addr = %listener.local_addr().map_or_else(|_| addr.to_string(), |a| a.to_string()),
        "ingest endpoint listening (POST /v1/renders)");
    let server = IngestServer::new(cfg, sink.clone(), dispatch.leadership());
    // Token rotation: the Secret is read again every TOKEN_REFRESH; a changed token replaces the
    // old one at once; a read failure keeps the current token (logged).
    {
        let (server, client, namespace, cancel) = (
            server.clone(),
            client.clone(),
            namespace.to_owned(),
            cancel.clone(),
        );
        let mut current = token;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(TOKEN_REFRESH) => {}
                }
                match read_token(client.clone(), &namespace, &secret).await {
                    Ok(t) if t != current => {
                        server.set_token(&t);
                        current = t;
                        info!(secret = %secret, "ingest token rotated");
                    }
                    Ok(_) => {}
                    Err(error) => warn!(error = %crate::core::error::chain(&error),
                        "ingest token Secret not readable; keeping the current token"),
                }
            }
        });
    }
    critical.spawn("ingest", server.run(listener, cancel.clone()));
    Ok(())
}
