//! Where a real Data Plane API answers differently from its published spec, what pods do wins:
//! each such difference, measured against a real `dataplaneapi`
//! (`shared/reference/dataplaneapi/observed-v3.4.md`), is allowed here by name with its reason,
//! and nothing else is. The checks consult this table at the one point each entry covers
//! (`check.rs`); an allowance used is counted per pod and listed beside the violations
//! (`GET /_sandbox/spec-violations`).
//!
//! Differences that need no entry: HTTP header names are case-insensitive, so the real API's
//! `Reload-Id` is the spec's `Reload-ID`; a queued reload answered `{"status": "in_progress"}`
//! without an `id` is valid (every field of the spec's `reload` is optional); 401 without
//! credentials, 415 for a wrong content type, 500 "failed to parse certificate" and 429 answered
//! where an operation does not list them are errors with the spec's error body, which `default`
//! covers.

use serde::Serialize;

/// One allowed difference between the spec and what a real pod answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Allowance {
    /// Short stable name, as listed.
    pub id: &'static str,
    /// What is allowed, in the spec's terms.
    pub what: &'static str,
    /// Why: the observation it rests on.
    pub reason: &'static str,
}

/// Errors are JSON `{code, message}` also on the operations whose spec declares a `text/plain`
/// error (`postHAProxyConfiguration`, `getHAProxyConfiguration`, ...).
pub const JSON_ERRORS: Allowance = Allowance {
    id: "json-errors",
    what: "an error status answered with application/json matching the spec's `error` schema \
           where the operation declares text/plain for that status",
    reason: "observed-v3.4.md: \"Every answer, errors included ... Errors are JSON {\"code\": N, \
             \"message\": \"...\"}\"; e.g. POST raw with a stale version answers 409 \"version \
             mismatch ...\" as JSON",
};

/// A write inside a transaction answers 202 without `Reload-ID` (nothing is reloaded before the
/// commit).
pub const NO_RELOAD_ID_IN_TRANSACTION: Allowance = Allowance {
    id: "no-reload-id-in-transaction",
    what: "a 202 without the Reload-ID header the spec declares, to a request carrying \
           `transaction_id`",
    reason: "observed-v3.4.md: \"server PUT inside a transaction | 202, no Reload-Id, body the \
             server object\"; the reload happens at the commit, which carries the Reload-ID",
};

/// `POST .../configuration/raw?only_validate=true` answers 202 without `Reload-ID`.
pub const ONLY_VALIDATE_202: Allowance = Allowance {
    id: "only-validate-202",
    what: "postHAProxyConfiguration with only_validate=true answered 202 without the Reload-ID \
           header the spec declares for 202",
    reason: "observed-v3.4.md: \"POST raw with only_validate | 202 (not 200), nothing written\": \
             nothing is reloaded, so there is no reload id",
};

/// Every allowance, as listed.
pub const ALL: &[Allowance] = &[JSON_ERRORS, NO_RELOAD_ID_IN_TRANSACTION, ONLY_VALIDATE_202];
