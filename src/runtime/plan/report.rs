//! The plan's two outputs: text (one line per pod, then one per operation) and `--json` (one
//! object per pod with its operations, files written and deleted, raw push, reloads).

use serde_json::{Value, json};

use super::Target;
use crate::components::deployer::decide::{FileReason, ReloadReason};
use crate::components::deployer::structure::ConfigChange;
use crate::components::deployer::{Operation, PodPlan};
use crate::core::render::JournaledRender;
use crate::dataplane::StorageKind;

/// The storage's name in the API (`maps`, `general`, `ssl_certificates`, `ssl_ca_files`).
fn storage_name(kind: StorageKind) -> &'static str {
    kind.segments().last().copied().unwrap_or("general")
}

fn reason_text(reason: &FileReason) -> String {
    match reason {
        FileReason::Missing => "missing on the pod".to_owned(),
        FileReason::ContentDiffers => "content differs".to_owned(),
        FileReason::SizeDiffers { stored, wanted } => {
            format!("size differs: {stored} bytes on the pod, {wanted} in the render")
        }
        FileReason::SerialDiffers => "certificate serial differs".to_owned(),
        FileReason::IssuersDiffer => "certificate issuers differ".to_owned(),
        FileReason::FingerprintDiffers => "certificate fingerprint differs".to_owned(),
        FileReason::CaEntriesDiffer => "CA certificates differ".to_owned(),
        FileReason::NoIdentity => "the pod reports nothing to compare it by".to_owned(),
        FileReason::Unparsable => "the render's PEM does not parse".to_owned(),
        FileReason::Unread => "listed, not read".to_owned(),
    }
}

fn change_text(c: &ConfigChange) -> String {
    let verb = match c {
        ConfigChange::CreateSection { .. } | ConfigChange::CreateChild { .. } => "create",
        ConfigChange::ReplaceSection { .. } | ConfigChange::ReplaceChild { .. } => "replace",
        _ => "delete",
    };
    format!("{verb} {}", c.describe())
}

/// One operation as a line of the text report.
fn operation_text(op: &Operation) -> String {
    match op {
        Operation::UploadFile {
            kind,
            path,
            reason,
            skip_reload,
            ..
        }
        | Operation::ReplaceFile {
            kind,
            path,
            reason,
            skip_reload,
            ..
        } => {
            let verb = if matches!(op, Operation::UploadFile { .. }) {
                "upload"
            } else {
                "replace"
            };
            let skip = if *skip_reload { ", skip_reload" } else { "" };
            format!(
                "{verb} file {path} in {} ({}{skip})",
                storage_name(*kind),
                reason_text(reason)
            )
        }
        Operation::PushRawConfig { version, mode } => {
            format!("raw push of haproxy.cfg at configuration version {version} ({mode})")
        }
        Operation::UpdateServer {
            backend,
            name,
            changed_fields,
            ..
        } => format!(
            "runtime update of server {backend}/{name} ({}; no reload)",
            changed_fields.join(", ")
        ),
        Operation::Transaction {
            version,
            changes,
            mode,
        } => {
            let what: Vec<String> = changes.iter().map(change_text).collect();
            format!(
                "transaction at configuration version {version} ({mode}), {} operation(s): {}",
                changes.len(),
                what.join(", ")
            )
        }
        Operation::Reload {
            reason,
            unless_reloaded,
            ..
        } => {
            let why = match reason {
                ReloadReason::FilesWritten => "files written".to_owned(),
                ReloadReason::StoredNotLoaded { paths } => {
                    format!("not known loaded: {}", paths.join(", "))
                }
            };
            let cond = if *unless_reloaded {
                " unless the last write reloaded"
            } else {
                ""
            };
            format!("reload ({why}){cond}")
        }
        Operation::DeleteFile { kind, name } => {
            format!("delete file {name} from {}", storage_name(*kind))
        }
    }
}

fn operation_json(op: &Operation) -> Value {
    match op {
        Operation::UploadFile {
            kind,
            name,
            path,
            reason,
            skip_reload,
        }
        | Operation::ReplaceFile {
            kind,
            name,
            path,
            reason,
            skip_reload,
        } => json!({
            "op": if matches!(op, Operation::UploadFile { .. }) { "upload_file" } else { "replace_file" },
            "storage": storage_name(*kind),
            "name": name,
            "path": path,
            "reason": reason_text(reason),
            "skip_reload": skip_reload,
            "reloads": op.reloads(),
        }),
        Operation::PushRawConfig { version, mode } => json!({
            "op": "push_raw_configuration",
            "version": version.0,
            "mode": mode.to_string(),
            "reloads": true,
        }),
        Operation::UpdateServer {
            backend,
            name,
            changed_fields,
            ..
        } => json!({
            "op": "update_server",
            "backend": backend,
            "name": name,
            "changed_fields": changed_fields,
            "reloads": false,
        }),
        Operation::Transaction {
            version,
            changes,
            mode,
        } => json!({
            "op": "transaction",
            "version": version.0,
            "mode": mode.to_string(),
            "changes": changes.iter().map(change_text).collect::<Vec<_>>(),
            "reloads": true,
        }),
        Operation::Reload {
            version,
            unless_reloaded,
            ..
        } => json!({
            "op": "reload",
            "version": version.0,
            "unless_reloaded": unless_reloaded,
            "description": operation_text(op),
        }),
        Operation::DeleteFile { kind, name } => json!({
            "op": "delete_file",
            "storage": storage_name(*kind),
            "name": name,
            "reloads": false,
        }),
    }
}

/// Render-relative paths the operations write, and stored names they delete.
fn files_touched(plan: &PodPlan) -> (Vec<String>, Vec<String>) {
    let mut written = Vec::new();
    let mut deleted = Vec::new();
    for op in &plan.operations {
        match op {
            Operation::UploadFile { path, .. } | Operation::ReplaceFile { path, .. } => {
                written.push(path.clone());
            }
            Operation::DeleteFile { kind, name } => {
                deleted.push(format!("{}/{name}", storage_name(*kind)));
            }
            _ => {}
        }
    }
    (written, deleted)
}

fn raw_push(plan: &PodPlan) -> bool {
    plan.operations
        .iter()
        .any(|o| matches!(o, Operation::PushRawConfig { .. }))
}

/// Why a selected pod is not planned (nor deployed to): the discovery's admission rule.
const NOT_ADMITTED: &str = "skipped: not admitted (not Running, no pod IP, being deleted, or its \
     Dataplane container not ready): a deployment does not reach it either";

pub(super) fn text_report(
    render: &JournaledRender,
    targets: &[Target],
    plans: &[Result<PodPlan, String>],
    skipped: &[String],
) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "render {} ({} files)\n",
        render.checksum,
        render.files.len()
    );
    let (mut changing, mut reloads) = (0, 0);
    for (t, plan) in targets.iter().zip(plans) {
        let name = if t.pod == t.url {
            t.pod.clone()
        } else {
            format!("{} ({})", t.pod, t.url)
        };
        match plan {
            Err(e) => {
                let _ = writeln!(out, "pod {name}: error: {e}");
            }
            Ok(p) if !p.changes() => {
                let _ = writeln!(
                    out,
                    "pod {name}: no change (configuration version {})",
                    p.version
                );
            }
            Ok(p) => {
                changing += 1;
                reloads += p.reloads;
                let reload = match p.reloads {
                    0 => "no reload".to_owned(),
                    1 => "1 reload".to_owned(),
                    n => format!("{n} reloads"),
                };
                let _ = writeln!(
                    out,
                    "pod {name}: {reload}, mode {}, {} operation(s) at configuration version {}",
                    p.mode,
                    p.operations.len(),
                    p.version
                );
                if let Some((attempts, at)) = t.quarantine {
                    let _ = writeln!(
                        out,
                        "  quarantined: the pod rejected this render {attempts} time(s) in a row; the deployer sends it at {} (sooner: a new render, a pod change or the annotation haproxy-haptic.org/retry-rejected), not before",
                        haptic_journal::rfc3339(at)
                    );
                }
                if p.open_transactions > 0 {
                    let _ = writeln!(
                        out,
                        "  delete {} open transaction(s) first",
                        p.open_transactions
                    );
                }
                for op in &p.operations {
                    let _ = writeln!(out, "  {}", operation_text(op));
                }
            }
        }
    }
    for pod in skipped {
        let _ = writeln!(out, "pod {pod}: {NOT_ADMITTED}");
    }
    let _ = writeln!(
        out,
        "plan: {changing} of {} pod(s) would change, {reloads} reload(s) in all",
        targets.len()
    );
    out
}

pub(super) fn json_report(
    render: &JournaledRender,
    targets: &[Target],
    plans: &[Result<PodPlan, String>],
    skipped: &[String],
) -> Value {
    let pods: Vec<Value> = targets
        .iter()
        .zip(plans)
        .map(|(t, plan)| match plan {
            Err(e) => json!({"pod": t.pod, "endpoint": t.url, "error": e}),
            Ok(p) => {
                let (written, deleted) = files_touched(p);
                json!({
                    "pod": t.pod,
                    "endpoint": t.url,
                    "version": p.version.0,
                    "changes": p.changes(),
                    "mode": p.mode.to_string(),
                    "reloads": p.reloads,
                    "raw_push": raw_push(p),
                    "open_transactions": p.open_transactions,
                    "config_changes": p.config_changes.as_ref().map(|c| c.iter().map(change_text).collect::<Vec<_>>()),
                    "files_written": written,
                    "files_deleted": deleted,
                    "operations": p.operations.iter().map(operation_json).collect::<Vec<_>>(),
                    "reads": p.reads,
                    "quarantine": t.quarantine.map(|(attempts, at)| json!({
                        "attempts": attempts,
                        "next_retry_at": haptic_journal::rfc3339(at),
                    })),
                })
            }
        })
        .collect();
    json!({
        "render": render.checksum.to_string(),
        "pods": pods,
        "skipped": skipped,
        "would_change": plans.iter().flatten().filter(|p| p.changes()).count(),
        "reloads": plans.iter().flatten().map(|p| p.reloads).sum::<u32>(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use haptic_journal::{SyncMode, UnixMillis};

    use super::*;
    use crate::core::render::RenderContent;
    use crate::dataplane::Endpoint as DpEndpoint;

    /// A pod the journal's scheduler quarantined for the planned render: the plan says when
    /// the deployer sends it (not at once), in text and JSON.
    #[test]
    fn a_quarantined_pod_is_planned_with_its_next_attempt() {
        let render = JournaledRender::of(&RenderContent {
            config: b"global\n".to_vec(),
            files: Vec::new(),
        });
        let url = "http://127.0.0.1:5555";
        let target = |quarantine| Target {
            pod: "ns/haproxy-0".into(),
            url: url.into(),
            endpoint: DpEndpoint::new(reqwest::Url::parse(url).unwrap(), None),
            quarantine,
        };
        let plan = PodPlan {
            version: crate::dataplane::ConfigVersion(3),
            open_transactions: 0,
            operations: vec![Operation::PushRawConfig {
                version: crate::dataplane::ConfigVersion(3),
                mode: SyncMode::RawUnmodelled,
            }],
            mode: SyncMode::RawUnmodelled,
            config_changes: None,
            reloads: 1,
            reads: 4,
        };
        let at = UnixMillis(1_796_400_000_000);
        let targets = [target(Some((2, at)))];
        let plans = [Ok(plan.clone())];
        let text = text_report(&render, &targets, &plans, &[]);
        assert!(
            text.contains(&format!(
                "quarantined: the pod rejected this render 2 time(s) in a row; the deployer sends it at {}",
                haptic_journal::rfc3339(at)
            )),
            "{text}"
        );
        let json = json_report(&render, &targets, &plans, &[]);
        assert_eq!(json["pods"][0]["quarantine"]["attempts"], 2, "{json}");
        let plain = text_report(&render, &[target(None)], &plans, &[]);
        assert!(!plain.contains("quarantined"), "{plain}");
        assert!(
            json_report(&render, &[target(None)], &plans, &[])["pods"][0]["quarantine"].is_null()
        );
    }
}
