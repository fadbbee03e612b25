//! The end-to-end scenarios on the real peers (issue 18): etcd and the unmodified kube-apiserver
//! v1.37.2 built by `tests/peers/build.sh`, with RBAC and admission on, the controller on
//! exactly deploy/'s Role (a ServiceAccount token, not admin), and the sandbox's HAProxy pods
//! registered as Pod objects (the real dataplaneapi cannot be built here: the Go module proxy
//! refuses it, tests/peers/README.md). `cargo test --workspace --all-features real_peers` runs
//! them alone; without the binaries they fail naming `bash tests/peers/build.sh`.
//!
//! Every entry point runs the same body as its emulator twin (named the same, in `e2e::` or
//! `deployer::`). Emulator-only, because they need the emulator's faults API or watch-history
//! compaction, which a real API server does not have: `publisher::*` (faults, outages, fences by
//! scripted 409s), `runtime::{lease, discovery, configmap_source, ingest}` relist and fault
//! cases, `telemetry::*` fault counters, and the deployer scenarios that script Dataplane faults
//! on pods only (they touch no API server: `deployer::{faults, timeout, drift, ...}`).
//!
//! Also the `manifests` scenarios (`kubectl get hpcfg` printer columns, a full status read back
//! equal: no pruning, `kubectl apply --server-side -f deploy/`), and:
//!
//! - `rbac`: the RBAC test against the real authorizer;
//! - `chart`: `deploy/` and the Helm chart applied server-side to a real kube-apiserver (issue 16;
//!   still on its stop-gap harness `crate::peers`, not yet the kit's `Peers::Real`).

mod chart;
mod rbac;

use crate::e2e::on_peers;

on_peers!(
    Real,
    render_stream_reaches_every_pod_and_is_published => crate::e2e::stream::render_stream,
    sigkill_mid_stream_resumes_from_the_journal => crate::e2e::restart::sigkill_mid_stream,
    after_a_graceful_restart_with_an_unchanged_render_drift_is_still_repaired =>
        crate::e2e::restart::graceful_restart_drift,
    after_a_graceful_restart_a_new_pod_and_a_rejected_render_get_the_last_passed_one =>
        crate::e2e::restart::graceful_restart_new_pod,
    the_follower_takes_over_when_the_leader_dies => crate::e2e::replicas::follower_takes_over,
    a_frozen_leader_writes_nothing_after_it_thaws => crate::e2e::replicas::frozen_leader,
    configmap_source_carries_the_stream => crate::e2e::sources::configmap_stream,
    ingest_carries_the_stream_and_a_202_survives_sigkill => crate::e2e::sources::ingest_stream,
    metrics_and_health_of_the_real_binary => crate::e2e::telemetry::metrics_and_health,
    a_damaged_journal_is_refused_then_rebuilt => crate::e2e::startup::damaged_journal,
    drift_event_names_the_edited_pod_and_file_and_idle_rounds_write_none =>
        crate::deployer::drift_event::drift_event,
    plan_says_what_the_deployment_then_does_and_only_reads =>
        crate::deployer::plan::plan_then_deploy,
    a_rollback_holds_the_fleet_on_an_earlier_render_across_a_sigkill_until_the_annotation_goes =>
        crate::e2e::rollback::rollback,
    a_full_status_of_each_kind_reads_back_unpruned => crate::manifests::full_status_read_back,
    kubectl_get_hpcfg_prints_our_columns => crate::manifests::kubectl_get_hpcfg,
    kubectl_apply_server_side_of_deploy_crds_passes => crate::manifests::kubectl_apply_crds,
    kubectl_apply_server_side_of_deploy_passes => crate::manifests::kubectl_apply_deploy,
);
