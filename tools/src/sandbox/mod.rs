//! Protocol-faithful local peers (DESIGN.md §5): [`apiserver`] emulates the Kubernetes API,
//! [`pods`] runs real HAProxy processes behind Dataplane API v3 endpoints.

pub mod apiserver;
pub mod pods;
